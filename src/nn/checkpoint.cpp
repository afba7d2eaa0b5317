// Module checkpoints: state_dict() through the safetensors format.
#include "tessera/nn/checkpoint.h"

#include "tessera/safetensors.h"

namespace tessera::nn {

void save_checkpoint(const Module& module, const std::filesystem::path& path,
                     const std::map<std::string, std::string>& metadata,
                     bool allow_non_finite) {
  save_safetensors(path, module.state_dict(), metadata, {.allow_non_finite = allow_non_finite});
}

std::map<std::string, std::string> load_checkpoint(Module& module, const std::filesystem::path& path) {
  // Read to host memory first: load_state_dict checks everything against the module
  // before copying each tensor onto its parameter's device.
  SafetensorsFile file = load_safetensors(path, cpu());
  module.load_state_dict(file.tensors);
  return file.metadata;
}

}  // namespace tessera::nn

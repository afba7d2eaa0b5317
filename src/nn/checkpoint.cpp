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
  // Names, shapes and dtypes are matched from the header alone, so a file for another
  // model costs its header, not its data (an unknown 1 GiB tensor is never read). Then the
  // data is read to host memory, and load_state_dict checks it again (the file may have
  // changed) before copying each tensor onto its parameter's device.
  std::map<std::string, Module::TensorLayout> layouts;
  for (const auto& [name, info] : read_safetensors_header(path).tensors) {
    layouts.emplace(name, Module::TensorLayout{info.shape, info.dtype});
  }
  module.check_state_dict(layouts);
  SafetensorsFile file = load_safetensors(path, cpu());
  module.load_state_dict(file.tensors);
  return file.metadata;
}

}  // namespace tessera::nn

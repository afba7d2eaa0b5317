// Module checkpoints: state_dict() through the safetensors format.
#include "tessera/nn/checkpoint.h"

#include <algorithm>

#include "io/safetensors_reader.h"
#include "io/safetensors_writer.h"
#include "nn/file_state_check.h"
#include "tessera/safetensors.h"
#include "tessera/sync_guard.h"

namespace tessera::nn {

void save_checkpoint(const Module& module, const std::filesystem::path& path,
                     const std::map<std::string, std::string>& metadata, bool allow_non_finite) {
  if (allow_non_finite) {
    save_safetensors(path, module.state_dict(), metadata);
  } else {
    io::save_safetensors_refusing_non_finite(
        path, module.state_dict(), metadata,
        {"save_checkpoint", "pass allow_non_finite = true to save them anyway"});
  }
}

std::map<std::string, std::string> load_checkpoint(Module& module,
                                                   const std::filesystem::path& path) {
  // The header is checked, then matched against the module as load_state_dict would (names,
  // shapes, dtypes from the header alone, so a file for another model costs its header, not
  // its data), and only then is the data read, straight into the module's tensors (Note
  // [Reading checkpoints] in src/io/safetensors_reader.cpp): a refused file changes nothing.
  const io::SafetensorsReader file(path);
  // A training state (train/training_state.h) is a checkpoint with the optimizer's and the
  // scaler's state beside the module's under prefixes no module tensor may take: skip them.
  const bool training_state = file.metadata().contains("tessera.training_state");
  auto is_module_tensor = [&](const std::string& name) {
    return !training_state || (name.rfind("optim.", 0) != 0 && name.rfind("scaler.", 0) != 0);
  };
  std::map<std::string, Module::TensorLayout> layouts;
  for (const auto& item : file.items()) {
    if (!is_module_tensor(item.name)) continue;
    layouts.emplace(item.name, Module::TensorLayout{item.shape, item.dtype});
  }
  check_file_state("load_checkpoint", path, module, layouts);
  std::map<std::string, Tensor> own;
  for (auto& [name, t] : module.named_parameters(true, false)) own.emplace(name, t);
  for (auto& [name, t] : module.named_buffers(true, false)) own.emplace(name, t);
  std::vector<Tensor> dsts;
  std::vector<Device> devices;
  for (const auto& item : file.items()) {
    if (!is_module_tensor(item.name)) {
      dsts.emplace_back();  // an undefined destination: read_into skips the item
      continue;
    }
    dsts.push_back(own.at(item.name));
    const Device d = dsts.back().device();
    if (std::find(devices.begin(), devices.end(), d) == devices.end()) devices.push_back(d);
  }
  {
    // Work queued on a logical CPU device may still read or write the tensors about to be
    // overwritten in place: a deliberate wait, once per load.
    AllowSync deliberate;
    for (Device d : devices) {
      if (d.is_cpu()) synchronize(d);
    }
  }
  file.read_into(dsts);
  return file.metadata();
}

}  // namespace tessera::nn

#pragma once
/// Tensors to and from files in the safetensors format (the Hugging Face format PyTorch's
/// ecosystem reads): an 8-byte little-endian header length, a JSON header naming each
/// tensor's dtype, shape and byte range, then the raw little-endian data.
///
///   save_safetensors("model.safetensors", net.state_dict());     // from any device
///   auto file = load_safetensors("model.safetensors", try_gpu()); // onto a chosen device
#include <filesystem>
#include <map>
#include <string>

#include "tessera/device.h"
#include "tessera/tensor.h"

namespace tessera {

/// Writes `tensors` (any devices; each is read to the host once, a deliberate transfer the
/// ledger counts) and string `metadata`. Atomic: the file is written beside `path` under a
/// temporary name, flushed to disk and renamed over `path`, so a crash never leaves a
/// truncated checkpoint where a good one was. Throws IOError naming the path and the
/// system's reason when it cannot write, Error for an empty or "__metadata__" name.
void save_safetensors(const std::filesystem::path& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

struct SafetensorsFile {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;
};

/// Reads every tensor of a safetensors file onto `device`. The whole header is checked
/// before any data is read: a truncated or corrupt file, overlapping or out-of-range byte
/// ranges, sizes that disagree with shapes, or a dtype tessera does not hold (it holds
/// BOOL, U8, I32, I64, F32, F64) throw IOError naming the file and the problem.
SafetensorsFile load_safetensors(const std::filesystem::path& path, Device device = cpu());

}  // namespace tessera

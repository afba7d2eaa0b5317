#pragma once
// save_safetensors for the functions built on it (nn::save_checkpoint, save_training_state):
// a refused non-finite value is reported in the caller's name, with the caller's way to keep
// such values (save_training_state has none: it told users to pass an option it lacks).
#include <filesystem>
#include <map>
#include <string>

#include "tessera/tensor.h"

namespace tessera::io {

struct NonFiniteRefusal {
  const char* op;        // "save_checkpoint"
  const char* keep_fix;  // "pass allow_non_finite = true to save such values anyway", or null
};

void save_safetensors_refusing_non_finite(const std::filesystem::path& path,
                                          const std::map<std::string, Tensor>& tensors,
                                          const std::map<std::string, std::string>& metadata,
                                          const NonFiniteRefusal& refusal);

}  // namespace tessera::io

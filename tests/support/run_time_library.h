#pragma once
// For the tests of libraries the CUDA backend opens at run time (NCCL, cuDNN).
#include <cstdlib>
#include <filesystem>
#include <string>

namespace tessera::testing {

// The file the environment variable `variable` names (scripts/gpu-check points it at
// PyTorch's copy) where it exists, else `toolkit` (the CUDA toolkit's copy, found at
// configure time) where it exists; "" when neither is on this machine.
inline std::string existing_library(const char* variable, const std::string& toolkit) {
  const char* env = std::getenv(variable);
  for (const std::string& path : {std::string(env != nullptr ? env : ""), toolkit}) {
    if (!path.empty() && std::filesystem::exists(path)) return path;
  }
  return "";
}

}  // namespace tessera::testing

#pragma once
// A module matched against the tensors a file holds (a checkpoint or a training state):
// Module::check_state_dict's errors, told as the file's loader's and naming the file.
#include <filesystem>
#include <map>
#include <string>

#include "tessera/nn/module.h"

namespace tessera::nn {

// Throws check_state_dict's error (same type) as `op`'s about `file`, without its advice to
// pass strict=false, which neither loader takes.
void check_file_state(const char* op, const std::filesystem::path& file, const Module& module,
                      const std::map<std::string, Module::TensorLayout>& layouts);

}  // namespace tessera::nn

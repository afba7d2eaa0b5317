#pragma once
// What Module::load_state_dict checks before it changes anything, on names, shapes and
// dtypes alone, so that nn::load_checkpoint can check a file's header against a module
// before reading the data straight into the module's tensors.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tessera/nn/module.h"

namespace tessera::detail {

struct StateEntry {
  Shape shape;
  Dtype dtype;
};

// The module's parameters and buffers (name, tensor) that `state` has entries for, in the
// module's order, after checking each one's shape (ShapeError) and kind of dtype (DtypeError)
// and, with `strict`, that no name is missing or unexpected (Error listing them), with
// load_state_dict's messages.
std::vector<std::pair<std::string, Tensor>> match_state(
    const nn::Module& module, const std::map<std::string, StateEntry>& state, bool strict);

}  // namespace tessera::detail

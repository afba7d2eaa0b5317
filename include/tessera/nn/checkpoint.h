#pragma once
/// A module's parameters and buffers to and from a safetensors file (see
/// tessera/safetensors.h), from and to whatever device they live on: a checkpoint written
/// from a GPU loads on a machine without one.
#include <filesystem>
#include <map>
#include <string>

#include "tessera/export.h"
#include "tessera/nn/module.h"

namespace tessera::nn {

/// Saves module.state_dict() atomically, with optional string metadata (see
/// save_safetensors: modes, symbolic links, UTF-8). Refuses parameters or buffers holding NaN
/// or infinity unless `allow_non_finite`: NonFiniteError naming the tensor, and the file at
/// `path` is left as it was, so a diverged run never overwrites a good checkpoint.
TESSERA_API void save_checkpoint(const Module& module, const std::filesystem::path& path,
                                 const std::map<std::string, std::string>& metadata = {},
                                 bool allow_non_finite = false);

/// Loads a checkpoint into `module`, onto the devices its tensors live on now. The file's
/// header is checked (IOError for a bad file) and matched against the module (names, shapes
/// and kinds of dtype, as load_state_dict does) before any tensor data is read, so a file for
/// another model costs only its header, and before anything changes: on any error the module
/// is left as it was. Then the data is read straight into the module's tensors, in place (no
/// copy through host memory for tensors on CPU devices; waits for work queued on a logical
/// CPU device that holds them). Only a read(2) failing after all of those checks (an I/O
/// error, the file cut short by another program) can leave the module partly loaded: its
/// IOError says so. Returns the file's metadata.
TESSERA_API std::map<std::string, std::string> load_checkpoint(Module& module,
                                                               const std::filesystem::path& path);

}  // namespace tessera::nn

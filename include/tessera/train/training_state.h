#pragma once
/// A resumable training state in one safetensors file: the module's parameters and buffers
/// under their own names (so nn::load_checkpoint and `tessera train --load` read it as a
/// plain checkpoint), the optimizer's state under "optim.", the GradScaler's under "scaler.",
/// and the epochs done in the metadata. See Note [Training state files] in
/// src/train/training_state.cpp.
#include <filesystem>
#include <map>
#include <string>

#include "tessera/export.h"
#include "tessera/nn/module.h"
#include "tessera/optim/grad_scaler.h"
#include "tessera/optim/optimizer.h"

namespace tessera::train {

/// The metadata key marking a training-state file; its value is the format's version, "1".
inline constexpr const char* kTrainingStateKey = "tessera.training_state";
/// The metadata key holding the epochs completed when the state was saved.
inline constexpr const char* kEpochKey = "epoch";

/// Saves module.state_dict(), optimizer.state_dict() ("optim." keys), scaler's state when
/// given ("scaler." keys), `epoch` and `metadata`, atomically as nn::save_checkpoint does;
/// NonFiniteError for a parameter or state holding NaN or infinity (the file is left as it
/// was). Reads every tensor to the host once (a deliberate transfer). Error for a metadata
/// key this format reserves.
TESSERA_API void save_training_state(const std::filesystem::path& path, const nn::Module& module,
                                     const optim::Optimizer& optimizer,
                                     const optim::GradScaler* scaler, int epoch,
                                     const std::map<std::string, std::string>& metadata = {});

/// Loads a file save_training_state wrote into `module`, `optimizer` and `scaler` (on their
/// devices, as their load_state_dict do) and returns its metadata; the epoch is
/// std::stoi(metadata.at(kEpochKey)). Error for a file that is a plain checkpoint (no
/// optimizer state: resume needs one; load it with nn::load_checkpoint), for a scaler's
/// state present with no scaler given or absent with one given; otherwise the errors of the
/// three load_state_dict. On any error module, optimizer and scaler are left as they were.
TESSERA_API std::map<std::string, std::string> load_training_state(
    const std::filesystem::path& path, nn::Module& module, optim::Optimizer& optimizer,
    optim::GradScaler* scaler);

}  // namespace tessera::train

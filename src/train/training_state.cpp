// Training-state files: a module checkpoint with the optimizer's and the scaler's state
// beside it, under prefixes, in one atomically written safetensors file.
#include "tessera/train/training_state.h"

#include <climits>

#include "core/check.h"
#include "io/safetensors_writer.h"
#include "nn/file_state_check.h"
#include "tessera/safetensors.h"
#include "train/state_metadata.h"

namespace tessera::train {
namespace {

constexpr const char* kOptimPrefix = "optim.";
constexpr const char* kScalerPrefix = "scaler.";

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

// Note [Training state files]
// One file rather than a checkpoint plus a sidecar: a resume must never pair parameters with
// the optimizer state of another save, and one atomic rename gives that for free. The module's
// tensors keep their plain names and the others take prefixes, so nn::load_checkpoint (and
// `tessera train --load`) reads the file as a model checkpoint, skipping the prefixed keys
// when the metadata marks a training state. A module whose own names start with "optim." or
// "scaler." is refused when saving, so the split is never ambiguous.

void save_training_state(const std::filesystem::path& path, const nn::Module& module,
                         const optim::Optimizer& optimizer, const optim::GradScaler* scaler,
                         int epoch, const std::map<std::string, std::string>& metadata) {
  TESSERA_CHECK(epoch >= 0, Error, "[save_training_state] epoch is {}; it must be >= 0", epoch);
  std::map<std::string, Tensor> tensors = module.state_dict();
  for (const auto& [name, t] : tensors) {
    TESSERA_CHECK(!starts_with(name, kOptimPrefix) && !starts_with(name, kScalerPrefix), Error,
                  "[save_training_state] the module has a tensor named '{}'; the prefixes "
                  "'{}' and '{}' are kept for the optimizer and the scaler. Rename the submodule",
                  name, kOptimPrefix, kScalerPrefix);
  }
  for (const auto& [key, t] : optimizer.state_dict()) tensors.emplace(kOptimPrefix + key, t);
  if (scaler != nullptr) {
    for (const auto& [key, t] : scaler->state_dict()) tensors.emplace(kScalerPrefix + key, t);
  }
  std::map<std::string, std::string> meta = metadata;
  for (const char* reserved : {kTrainingStateKey, kEpochKey}) {
    TESSERA_CHECK(!meta.contains(reserved), Error,
                  "[save_training_state] metadata key '{}' is reserved: the file's format sets "
                  "it. Use another key",
                  reserved);
  }
  meta.emplace(kTrainingStateKey, std::string("1"));
  meta.emplace(kEpochKey, std::to_string(epoch));
  // No way to keep them: a run resumed from a diverged state would diverge again.
  io::save_safetensors_refusing_non_finite(path, tensors, meta, {"save_training_state", nullptr});
}

std::map<std::string, std::string> load_training_state(const std::filesystem::path& path,
                                                       nn::Module& module,
                                                       optim::Optimizer& optimizer,
                                                       optim::GradScaler* scaler) {
  constexpr const char* kOp = "load_training_state";
  // Read onto the CPU; each load_state_dict then copies onto its own devices explicitly.
  SafetensorsFile file = load_safetensors(path);
  const auto format = file.metadata.find(kTrainingStateKey);
  TESSERA_CHECK(format != file.metadata.end(), Error,
                "[{}] {} is a model checkpoint without optimizer state (no '{}' metadata), so "
                "training cannot resume from it. Load it with nn::load_checkpoint "
                "(`tessera train --load`), or save with save_training_state",
                kOp, path.string(), kTrainingStateKey);
  TESSERA_CHECK(format->second == "1", Error,
                "[{}] {} is a training state of format '{}', and this tessera reads format 1 "
                "only; resume it with the tessera that wrote it",
                kOp, path.string(), format->second);
  // The epochs done, as save_training_state writes them (an int >= 0).
  (void)metadata_count(kOp, path, file.metadata, kEpochKey, INT_MAX);
  nn::StateDict model_state;
  optim::OptimizerState optim_state;
  std::map<std::string, Tensor> scaler_state;
  for (auto& [name, t] : file.tensors) {
    if (starts_with(name, kOptimPrefix)) {
      optim_state.emplace(name.substr(std::string(kOptimPrefix).size()), t);
    } else if (starts_with(name, kScalerPrefix)) {
      scaler_state.emplace(name.substr(std::string(kScalerPrefix).size()), t);
    } else {
      model_state.emplace(name, t);
    }
  }
  const bool wants_scaler = scaler != nullptr && scaler->is_enabled();
  TESSERA_CHECK(
      scaler_state.empty() || wants_scaler, Error,
      "[{}] {} holds a GradScaler's state but no enabled scaler was given to load it "
      "into. Resume with the precision it was saved with: float16 (TrainerOptions::precision = "
      "kFloat16, tessera train --precision fp16)",
      kOp, path.string());
  TESSERA_CHECK(
      !scaler_state.empty() || !wants_scaler, Error,
      "[{}] {} holds no GradScaler state but a scaler was given: the run was saved "
      "without loss scaling (float32 or bfloat16). Resume with the precision it was saved "
      "with (TrainerOptions::precision, tessera train --precision fp32 or bf16)",
      kOp, path.string());
  // Each load checks everything before it changes anything; what loaded before a later one
  // throws is put back, so a refused file changes none of the three.
  nn::check_file_state(kOp, path, module, [&] {
    std::map<std::string, nn::Module::TensorLayout> layouts;
    for (const auto& [name, t] : model_state)
      layouts.emplace(name, nn::Module::TensorLayout{t.shape(), t.dtype()});
    return layouts;
  }());
  const optim::OptimizerState optim_before = optimizer.state_dict();
  const std::map<std::string, Tensor> scaler_before =
      wants_scaler ? scaler->state_dict() : std::map<std::string, Tensor>{};
  optimizer.load_state_dict(optim_state);
  try {
    if (wants_scaler) scaler->load_state_dict(scaler_state);
    module.load_state_dict(model_state);
  } catch (...) {
    optimizer.load_state_dict(optim_before);
    if (wants_scaler) scaler->load_state_dict(scaler_before);  // the scaler stayed loaded
    throw;
  }
  return file.metadata;
}

}  // namespace tessera::train

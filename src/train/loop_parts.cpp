#include "train/loop_parts.h"

#include <fmt/format.h>

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/check.h"
#include "io/atomic_file.h"
#include "io/files.h"
#include "io/printable.h"
#include "tessera/autograd.h"
#include "tessera/factories.h"
#include "tessera/operators.h"
#include "tessera/random.h"
#include "tessera/safetensors.h"
#include "tessera/sync_guard.h"
#include "tessera/train/training_state.h"
#include "train/state_metadata.h"

namespace tessera::train::loop {

// Note [Metrics written whole]
// The metrics file was opened with truncation at the start of fit and appended to after each
// epoch: a run killed in its first epoch left an earlier run's complete file empty, a full
// disk lost lines silently (the stream's failure was never checked) or left half a line,
// which a resumed run then appended to, and a resume rewrote the kept lines in place. Now the
// lines live in memory (a few hundred bytes per epoch) and after each epoch the whole file is
// replaced in one step, as checkpoints are (io::write_file_atomically): any reader, a kill
// or a full disk finds the previous complete file or the new one, and a failed write stops
// the run with an IOError naming the file.

MetricsLog::MetricsLog(const TrainerOptions& options, bool lead) {
  if (options.metrics_path.empty() || !lead) return;
  path_ = options.metrics_path;
  try {
    io::TempFile probe(io::follow_links(path_, "Trainer"), "Trainer");  // never committed
  } catch (const IOError& e) {
    TESSERA_CHECK(false, IOError,
                  "[Trainer] cannot write metrics to '{}': {}. Name a file in a directory that "
                  "exists and that you may write, or leave metrics_path empty",
                  io::printable(path_.string()), io::reason_of(e, "Trainer", path_));
  }
}

void MetricsLog::resume_after(int done) {
  if (!active() || !io::exists(path_, "Trainer")) return;
  std::ifstream in(path_, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::size_t start = 0;
  for (std::size_t end; (end = text.find('\n', start)) != std::string::npos; start = end + 1) {
    std::string line = text.substr(start, end - start);
    int epoch = 0;
    if (std::sscanf(line.c_str(), "{\"epoch\": %d", &epoch) == 1 && epoch > done) continue;
    lines_.push_back(std::move(line));
  }
  // What follows the last newline is a line cut short (an older tessera's full disk): dropped.
}

void MetricsLog::append(const std::string& line) {
  if (!active()) return;
  lines_.push_back(line);
  std::string text;
  for (const std::string& l : lines_) (text += l) += '\n';
  try {
    io::write_file_atomically(path_, text, "Trainer");
  } catch (const IOError& e) {
    lines_.pop_back();
    TESSERA_CHECK(false, IOError,
                  "[Trainer] cannot write the metrics file '{}' ({}); the file keeps the lines "
                  "of the epochs before. Free space or name another file",
                  io::printable(path_.string()), io::reason_of(e, "Trainer", path_));
  }
}

void report_epoch(const EpochMetrics& m, int epochs, bool progress, bool has_val,
                  MetricsLog& metrics, bool show_lr) {
  if (progress) {
    std::fprintf(stderr, "epoch %d/%d: train loss %.4f, train acc %.4f", m.epoch, epochs,
                 m.train_loss, m.train_acc);
    if (has_val) std::fprintf(stderr, ", val loss %.4f, val acc %.4f", m.val_loss, m.val_acc);
    if (show_lr) std::fprintf(stderr, ", lr %.4g", m.lr);
    std::fprintf(stderr, " (%.2f s)\n", m.seconds);
  }
  if (metrics.active()) {
    auto num = [](double v) {
      return std::isfinite(v) ? fmt::format("{:.6g}", v) : std::string("null");
    };
    metrics.append(fmt::format(
        "{{\"epoch\": {}, \"train_loss\": {}, \"train_acc\": {}, \"val_loss\": {}, "
        "\"val_acc\": {}, \"seconds\": {:.3f}, \"train_seconds\": {:.3f}, "
        "\"lr\": {}}}",
        m.epoch, num(m.train_loss), num(m.train_acc), num(m.val_loss), num(m.val_acc), m.seconds,
        m.train_seconds, std::isfinite(m.lr) ? fmt::format("{}", m.lr) : std::string("null")));
  }
  check_finite(m, has_val);
}

// Note [Divergence on the device]: the step losses are summed on the device and read once
// per epoch (Note [Metrics on the device]); a NaN or infinity in any step's loss makes that
// sum non-finite, so one check here sees every step's loss without a host wait per step. On
// several ranks the sum was reduced over all of them first, so every rank throws the same.
void check_finite(const EpochMetrics& m, bool has_val) {
  const bool train_bad = !std::isfinite(m.train_loss);
  TESSERA_CHECK(!train_bad && !(has_val && !std::isfinite(m.val_loss)), NonFiniteError,
                "[Trainer] training diverged in epoch {}: the {} loss is {} (a step's loss became "
                "NaN or infinite). Stopped; the model's parameters are probably not finite. Check "
                "the data first: a label outside [0, classes) or a NaN in the inputs makes the "
                "loss NaN. Otherwise try a lower learning rate (--lr), gradient clipping "
                "(TrainerOptions::gradient_clip_val, --clip), or a smaller batch",
                m.epoch, train_bad ? "mean training" : "validation",
                std::isnan(train_bad ? m.train_loss : m.val_loss) ? "NaN" : "infinite");
}

// Note [Resuming training]
// A run resumed from its state file must continue as if it had never stopped: the same
// values (model, optimizer state, the float16 scaler's scale and counts), the same next
// batches (the loader's shuffle is seeded with seed + epochs begun, so the file keeps the
// training loader's count of epochs begun, which exceeds the epochs done when the loader is
// also the validation loader or began an epoch before fit(), and the resumed loader is set
// to it), and the same random numbers (dropout masks come from the default generator,
// whose seed and position are saved with the state). Every replica loads the same file, so
// replicas and ranks stay identical. The file is written after the epoch's metrics were
// checked, so a diverged epoch never replaces the last good state; the write is atomic
// (nn::save_checkpoint's), so a run killed while writing leaves the previous file.

namespace {

constexpr const char* kRngSeedKey = "rng_seed";
constexpr const char* kRngOffsetKey = "rng_offset";
constexpr const char* kLoaderEpochsKey = "loader_epochs_begun";
// What the run was trained with that a resumed run must repeat to continue it exactly.
constexpr const char* kBatchSizeKey = "batch_size";
constexpr const char* kOptimizerKey = "optimizer";
constexpr const char* kDataOrderKey = "data_order";
constexpr const char* kStepOptionsKey = "step_options";
constexpr const char* kLrScheduleKey = "lr_schedule";
// Module::str(): its layers. Not "model": `tessera train --save` names its model (e.g. "mlp")
// there, so --load took a state's listing for another model, and --resume a --save file
// for a state of another model.
constexpr const char* kModelKey = "model_layers";
constexpr const char* kLegacyModelKey = "model";  // how states saved the layers before

// The first line where two texts differ, from each (empty past the end of one).
std::pair<std::string, std::string> first_different_line(const std::string& a,
                                                         const std::string& b) {
  std::size_t i = 0, j = 0;
  while (i < a.size() || j < b.size()) {
    const std::size_t ei = std::min(a.find('\n', i), a.size());
    const std::size_t ej = std::min(b.find('\n', j), b.size());
    std::string la = a.substr(i, ei - i), lb = b.substr(j, ej - j);
    if (la != lb) return {std::move(la), std::move(lb)};
    i = ei + 1;
    j = ej + 1;
  }
  return {};
}

// The loader's order as a resumed run must repeat it (its seed decides every later epoch's
// shuffle; a resume without --seed went on with another order, silently).
std::string data_order(const data::DataLoader& train) {
  const data::LoaderOptions& o = train.options();
  return fmt::format("shuffle={}, seed={}, drop_last={}", o.shuffle, o.seed, o.drop_last);
}

// What each step does beyond the optimizer: a resume with other clipping or precision
// trained on silently, no longer continuing the run.
std::string step_options(const TrainerOptions& o) {
  return fmt::format("gradient_clip_val={}, precision={}", o.gradient_clip_val,
                     dtype_name(o.precision));
}

}  // namespace

int resume(const TrainerOptions& options, const std::vector<Task*>& tasks,
           std::vector<optim::GradScaler*> scalers, data::DataLoader& train) {
  if (options.resume_from.empty()) return 0;
  // The epochs first, from the header alone, so that a file with nothing left to train
  // changes nothing; load_training_state refuses files that are not training states.
  const SafetensorsHeader header = read_safetensors_header(options.resume_from);
  // Files from before these were saved lack them and are taken as they are.
  const auto saved = [&](const char* key) {
    const auto it = header.metadata.find(key);
    return it != header.metadata.end() ? std::optional<std::string>(it->second) : std::nullopt;
  };
  if (const auto batch = saved(kBatchSizeKey)) {
    const std::string now = std::to_string(train.options().batch_size);
    TESSERA_CHECK(*batch == now, Error,
                  "[Trainer] {} was trained with batches of {} and this run's are {}: resumed "
                  "so, it would not continue that run. Resume with a batch size of {} "
                  "(--batch-size), or start afresh",
                  io::printable(options.resume_from.string()), io::printable(*batch), now,
                  io::printable(*batch));
  }
  // The model first: another model's file failed on the optimizer's options or a shape.
  std::optional<std::string> layers = saved(kModelKey);
  if (const auto legacy = saved(kLegacyModelKey);
      !layers && legacy && legacy->find('(') != std::string::npos) {
    layers = legacy;  // a listing, not a command-line model name
  }
  if (const auto& model = layers) {
    const std::string now = tasks.front()->model().str();
    const auto [theirs, ours] = first_different_line(*model, now);
    TESSERA_CHECK(*model == now, Error,
                  "[Trainer] {} was trained with another model than this run's (the file's "
                  "layers have '{}' where this run's have '{}'): resumed so, it would not "
                  "continue that run. Resume with the same model (--model), or start afresh",
                  io::printable(options.resume_from.string()), io::printable(theirs), ours);
  }
  if (const auto optimizer = saved(kOptimizerKey)) {
    const std::string now = tasks.front()->optimizer().str();
    TESSERA_CHECK(*optimizer == now, Error,
                  "[Trainer] {} was trained with {} and this run's optimizer is {}: resumed so, "
                  "it would not continue that run. Resume with the same optimizer options (--lr, "
                  "--momentum), or start afresh",
                  io::printable(options.resume_from.string()), io::printable(*optimizer), now);
  }
  {
    // A file written before schedules existed trained at a constant lr.
    const std::string schedule = saved(kLrScheduleKey).value_or(kNoSchedule);
    const std::string now = schedule_description(options);
    TESSERA_CHECK(schedule == now, Error,
                  "[Trainer] {} was trained with the lr schedule {} and this run's is {}: "
                  "resumed so, it would not continue that run. Resume with the same schedule "
                  "(TrainerOptions::lr_schedule; on the command line the same --lr-schedule "
                  "and --warmup-epochs, and for cosine the same --epochs, which sets its "
                  "t_max), or start afresh from its weights (--load)",
                  io::printable(options.resume_from.string()), io::printable(schedule), now);
  }
  if (const auto steps = saved(kStepOptionsKey)) {
    const std::string now = step_options(options);
    TESSERA_CHECK(*steps == now, Error,
                  "[Trainer] {} was trained with {} and this run with {}: resumed so, it would "
                  "not continue that run. Resume with the same clipping and precision (--clip, "
                  "--precision), or start afresh",
                  io::printable(options.resume_from.string()), io::printable(*steps), now);
  }
  if (const auto order = saved(kDataOrderKey)) {
    const std::string now = data_order(train);
    TESSERA_CHECK(*order == now, Error,
                  "[Trainer] {} was trained with the data order {} and this run's is {}: "
                  "resumed so, it would not continue that run. Resume with the same order "
                  "(--seed), or start afresh",
                  io::printable(options.resume_from.string()), io::printable(*order), now);
  }
  if (header.metadata.contains(kEpochKey)) {
    const auto held = static_cast<int>(
        metadata_count("Trainer", options.resume_from, header.metadata, kEpochKey, INT_MAX));
    TESSERA_CHECK(held < options.max_epochs, Error,
                  "[Trainer] {} holds {} epoch(s) of training, and max_epochs is {}: there is "
                  "nothing left to train. Raise max_epochs (--epochs) to train on",
                  io::printable(options.resume_from.string()), held, options.max_epochs);
  }
  const bool scaled = options.precision == kFloat16;
  std::map<std::string, std::string> meta;
  {
    AllowSync deliberate;  // the file's values go to the devices once
    for (std::size_t r = 0; r < tasks.size(); ++r) {
      meta = load_training_state(options.resume_from, tasks[r]->model(), tasks[r]->optimizer(),
                                 scaled ? scalers[r] : nullptr);
    }
  }
  const auto count = [&](const char* key) {
    return metadata_count("Trainer", options.resume_from, meta, key, UINT64_MAX);
  };
  const auto done = static_cast<int>(count(kEpochKey));  // checked <= INT_MAX by the load
  if (meta.contains(kRngSeedKey) && meta.contains(kRngOffsetKey)) {
    set_rng_state({count(kRngSeedKey), count(kRngOffsetKey)});
  }
  // The loader's own count, which is more than the epochs done when it also served as the
  // validation loader or began an epoch before fit(); files from before it was saved hold
  // the epochs done.
  const auto loader_epochs = meta.find(kLoaderEpochsKey);
  train.set_epoch(loader_epochs != meta.end() ? count(kLoaderEpochsKey)
                                              : static_cast<std::uint64_t>(done));
  return done;
}

void check_step_result(const StepResult& r, const char* step) {
  TESSERA_CHECK(r.loss.defined() && r.loss.numel() == 1 && is_floating(r.loss.dtype()), Error,
                "[Trainer] {} must return the batch's mean loss as one floating value "
                "(StepResult::loss), got {}",
                step,
                r.loss.defined() ? fmt::format("a {} tensor of shape {}",
                                               dtype_name(r.loss.dtype()), r.loss.shape().str())
                                 : std::string("an undefined tensor"));
  TESSERA_CHECK(
      !r.correct.defined() ||
          (r.correct.numel() == 1 && !is_floating(r.correct.dtype()) && r.correct.dtype() != kBool),
      Error,
      "[Trainer] {} must return the count of correct predictions as one integer "
      "(StepResult::correct, e.g. (argmax(logits, 1) == y).sum()), or none; got a {} "
      "tensor of shape {}",
      step, r.correct.defined() ? dtype_name(r.correct.dtype()) : "",
      r.correct.defined() ? r.correct.shape().str() : "");
}

int epochs_to_resume(const TrainerOptions& options) {
  if (options.resume_from.empty()) return 0;
  const SafetensorsHeader header = read_safetensors_header(options.resume_from);
  if (!header.metadata.contains(kEpochKey)) return 0;
  return static_cast<int>(
      metadata_count("Trainer", options.resume_from, header.metadata, kEpochKey, INT_MAX));
}

std::uint64_t resume_file_digest(const TrainerOptions& options) {
  if (options.resume_from.empty()) return 0;
  errno = 0;
  std::ifstream file(options.resume_from, std::ios::binary);
  TESSERA_CHECK(file.good(), IOError,
                "[Trainer] cannot read the training state '{}' to resume from: {}",
                options.resume_from.string(),
                errno != 0 ? std::strerror(errno) : "the file could not be opened");
  // FNV-1a over 8-byte words (and the tail's bytes): one multiply per word, so a
  // checkpoint of 100 MB costs a few tens of milliseconds once, at the start of a fit.
  std::uint64_t digest = 1469598103934665603ULL;
  const auto mix = [&digest](std::uint64_t word) { digest = (digest ^ word) * 1099511628211ULL; };
  std::vector<char> chunk(std::size_t{1} << 20);
  while (file) {
    file.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    const auto got = static_cast<std::size_t>(file.gcount());
    std::size_t at = 0;
    for (; at + 8 <= got; at += 8) {
      std::uint64_t word = 0;
      std::memcpy(&word, chunk.data() + at, 8);
      mix(word);
    }
    for (; at < got; ++at) mix(static_cast<unsigned char>(chunk[at]));
  }
  TESSERA_CHECK(file.eof(), IOError, "[Trainer] reading the training state '{}' failed: {}",
                options.resume_from.string(), std::strerror(errno));
  return digest;
}

void save_state(const TrainerOptions& options, Task& task, const optim::GradScaler& scaler,
                const data::DataLoader& train, int epoch, bool lead, const std::string& optimizer) {
  if (options.state_path.empty() || !lead) return;
  const RngState rng = rng_state();
  AllowSync deliberate;  // one read of the state per epoch
  try {
    save_training_state(options.state_path, task.model(), task.optimizer(),
                        options.precision == kFloat16 ? &scaler : nullptr, epoch,
                        {{kRngSeedKey, std::to_string(rng.seed)},
                         {kRngOffsetKey, std::to_string(rng.offset)},
                         {kLoaderEpochsKey, std::to_string(train.epochs_begun())},
                         {kBatchSizeKey, std::to_string(train.options().batch_size)},
                         {kOptimizerKey, optimizer},
                         {kLrScheduleKey, schedule_description(options)},
                         {kModelKey, task.model().str()},
                         {kDataOrderKey, data_order(train)},
                         {kStepOptionsKey, step_options(options)}});
  } catch (const IOError& e) {
    // A full disk said only "[save_safetensors] 'path': write failed": not that training
    // stopped, after which epoch, nor that the file before was kept.
    TESSERA_CHECK(false, IOError,
                  "[Trainer] training stopped after epoch {}: its state could not be saved "
                  "(state_path, --save-state); the file keeps the state it had. {}",
                  epoch, e.what());
  }
}

}  // namespace tessera::train::loop

namespace tessera::train::loop {

// Note [Scheduled learning rates] in loop_parts.h.
ScheduledLr::ScheduledLr(const std::shared_ptr<const optim::LrSchedule>& schedule,
                         std::vector<optim::Optimizer*> optimizers)
    : schedule_(schedule),
      optimizers_(std::move(optimizers)),
      base_description_(optimizers_.front()->str()) {
  for (const optim::Optimizer* opt : optimizers_) before_.push_back(opt->lr());
}

ScheduledLr::~ScheduledLr() {
  for (std::size_t i = 0; i < optimizers_.size(); ++i) optimizers_[i]->set_lr(before_[i]);
}

bool ScheduledLr::begin_epoch(int epoch) {
  if (schedule_ == nullptr) return false;
  const double lr = schedule_->lr(before_.front(), epoch - 1);
  const bool changed = lr != optimizers_.front()->lr();
  for (optim::Optimizer* opt : optimizers_) opt->set_lr(lr);
  return changed;
}

std::string schedule_description(const TrainerOptions& options) {
  return options.lr_schedule != nullptr ? options.lr_schedule->str() : std::string(kNoSchedule);
}

}  // namespace tessera::train::loop

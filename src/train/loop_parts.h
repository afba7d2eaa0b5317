#pragma once
// Parts of the training loop shared by the one-device and the data-parallel fit: the
// progress bar, resuming, the per-epoch report and the metrics file (the metrics kept on the
// device are train/step_record.h's).
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tessera/autocast.h"
#include "tessera/optim/grad_scaler.h"
#include "tessera/optim/lr_schedule.h"
#include "tessera/train/trainer.h"

namespace tessera::train::loop {

// Note [Resuming training]: TrainerOptions::resume_from loaded into every replica's task
// (tasks[r], with scalers[r]), the random generator and `train`'s epoch; returns the epochs
// the file holds (0 when there is no file to resume from).
int resume(const TrainerOptions& options, const std::vector<Task*>& tasks,
           std::vector<optim::GradScaler*> scalers, data::DataLoader& train);
// The epochs TrainerOptions::resume_from holds, from its header alone (0 without a file, or
// for a file that does not say): what resume() would return, before it changes anything.
int epochs_to_resume(const TrainerOptions& options);
// A fingerprint of TrainerOptions::resume_from's bytes (0 without a file): two ranks that
// resume from different files of the same epoch count learn it before either loads one.
// IOError when the file cannot be read.
std::uint64_t resume_file_digest(const TrainerOptions& options);
// Writes TrainerOptions::state_path after `epoch` (when set and `lead`), with `train`'s
// count of epochs begun: a deliberate read of every parameter and state tensor. `optimizer`
// is the task's optimizer described with its base lr (ScheduledLr::base_description), which
// a resumed run's optimizer must match.
void save_state(const TrainerOptions& options, Task& task, const optim::GradScaler& scaler,
                const data::DataLoader& train, int epoch, bool lead, const std::string& optimizer);

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The autocast scope of TrainerOptions::precision on `device`'s kind (off for float32).
inline AutocastGuard precision_scope(Device device, Dtype precision) {
  return AutocastGuard(device.kind(), is_half(precision) ? precision : kBFloat16,
                       is_half(precision));
}

// The gradient scaler of TrainerOptions::precision: on for float16, whose gradients fall
// below its range unscaled; a pass-through otherwise (bfloat16 has float32's range).
inline optim::GradScaler scaler_for(Dtype precision) {
  return optim::GradScaler({.enabled = precision == kFloat16});
}

// A progress bar on a terminal: "epoch 3/10 [=====>      ] 120/235  2.1s  ETA 1.9s".
class Progress {
 public:
  Progress(bool enabled, int epoch, int epochs, std::int64_t total)
      : enabled_(enabled && ::isatty(STDERR_FILENO)),
        epoch_(epoch),
        epochs_(epochs),
        total_(total),
        start_(Clock::now()) {}
  void update(std::int64_t done) {
    if (!enabled_ || total_ == 0) return;
    const double elapsed = seconds_since(start_);
    const int width = 30, filled = static_cast<int>(width * done / total_);
    const double eta =
        done > 0 ? elapsed / static_cast<double>(done) * static_cast<double>(total_ - done) : 0;
    std::fprintf(stderr, "\repoch %d/%d [%s%s] %lld/%lld  %.1fs  ETA %.1fs ", epoch_, epochs_,
                 std::string(static_cast<std::size_t>(filled), '=').c_str(),
                 std::string(static_cast<std::size_t>(width - filled), ' ').c_str(),
                 static_cast<long long>(done), static_cast<long long>(total_), elapsed, eta);
    std::fflush(stderr);
  }
  void finish() {
    if (enabled_) std::fprintf(stderr, "\r%*s\r", 80, "");
  }

 private:
  bool enabled_;
  int epoch_, epochs_;
  std::int64_t total_;
  Clock::time_point start_;
};

// Refuses a StepResult that breaks Task's contract (a loss that is not one floating value, a
// correct count that is not one integer), naming the step (`step`: "training_step" or
// "validation_step"): the errors came from the Trainer's own ops ("[add_] ...").
void check_step_result(const StepResult& r, const char* step);

// Makes an optimizer capturable for one fit when `on` (TrainerOptions::graph), and gives it
// back as it was.
class CapturableFor {
 public:
  CapturableFor(optim::Optimizer& opt, bool on) : opt_(opt), before_(opt.capturable()) {
    if (on) opt_.set_capturable(true);
  }
  ~CapturableFor() {
    try {
      opt_.set_capturable(before_);
    } catch (...) {  // a failed device read while unwinding: the counts stay on the device
    }
  }
  CapturableFor(const CapturableFor&) = delete;
  CapturableFor& operator=(const CapturableFor&) = delete;

 private:
  optim::Optimizer& opt_;
  bool before_;
};

// Note [Scheduled learning rates]
// TrainerOptions::lr_schedule sets every replica's lr before each epoch from the base lr (the
// task's optimizer's when fit starts: what the program made it with), never from the lr of
// the epoch before (Note [Schedules as functions of the epoch] in src/optim/lr_schedule.cpp).
// Optimizer::str() includes the lr, and a resume compares it with the saved run's: the
// state file keeps the optimizer described with its base lr, so the resumed run, whose
// optimizer is made with the base lr again, matches, and the schedule's own str() is saved
// beside it and compared too (a run resumed under another schedule would not continue the
// run; load the weights with --load to start one). A recorded step (TrainerOptions::graph)
// has the lr fixed into its kernels' arguments (Optimizer::set_capturable), so an epoch whose
// lr differs from the last drops the recording and records again at its first full batch:
// one recording per lr change (per epoch at most), each costing about one eager step of host
// work, against a device-side lr that every optimizer kernel would have to read. When fit
// ends (or throws) each optimizer gets its lr from before back, so a second fit starts the
// schedule from the same base.
class ScheduledLr {
 public:
  // `optimizers`: every replica's; the first one's lr is the base.
  ScheduledLr(const std::shared_ptr<const optim::LrSchedule>& schedule,
              std::vector<optim::Optimizer*> optimizers);
  ~ScheduledLr();
  ScheduledLr(const ScheduledLr&) = delete;
  ScheduledLr& operator=(const ScheduledLr&) = delete;
  // Sets every optimizer's lr for `epoch` (1-based) when there is a schedule; true when
  // the lr is not the one of the epoch before (a recorded step must be recorded again).
  bool begin_epoch(int epoch);
  // The lr every optimizer has now.
  double lr() const { return optimizers_.front()->lr(); }
  // The first optimizer's str() with its base lr, as a resumed run's optimizer describes
  // itself.
  const std::string& base_description() const { return base_description_; }

 private:
  std::shared_ptr<const optim::LrSchedule> schedule_;
  std::vector<optim::Optimizer*> optimizers_;
  std::vector<double> before_;  // each optimizer's lr when fit started
  std::string base_description_;
};

// What a state file keeps for a run without a schedule (and what a file from before schedules
// is taken to have had).
inline constexpr const char* kNoSchedule = "none";
// The schedule as a state file keeps it: its str(), or kNoSchedule.
std::string schedule_description(const TrainerOptions& options);

// The metrics file (TrainerOptions::metrics_path), when set and `lead`: one JSON line per
// epoch, the whole file replaced in one step after each epoch (Note [Metrics written whole]).
class MetricsLog {
 public:
  // Checks at once that the file can be written (IOError naming the reason); writes nothing
  // yet, so a run stopped before its first epoch leaves an earlier run's file as it was.
  MetricsLog(const TrainerOptions& options, bool lead);
  // Resuming after `done` epochs: keeps the file's lines of epochs up to `done`. A run that
  // diverged (its last line is written, its state is not) or was killed between the two
  // wrote later ones, and the resumed run trains those epochs again and writes them anew.
  void resume_after(int done);
  // Adds one line (without its newline) and replaces the file with every line so far.
  void append(const std::string& line);
  bool active() const { return !path_.empty(); }

 private:
  std::filesystem::path path_;
  std::vector<std::string> lines_;
};

// Prints the epoch's line (when progress is on) and appends its JSON line to the metrics
// file (when open), then throws NonFiniteError naming the epoch when its training loss (or
// its validation loss, with validation) is NaN or infinite (check_finite).
void check_finite(const EpochMetrics& m, bool has_val);
// With `show_lr` (a schedule is set) the line shows the epoch's lr.
void report_epoch(const EpochMetrics& m, int epochs, bool progress, bool has_val,
                  MetricsLog& metrics, bool show_lr = false);

}  // namespace tessera::train::loop

// Trainer: the training loop with metrics kept on the device. See Note [Metrics on the
// device].
#include "tessera/train/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>

#include "core/check.h"
#include "core/device_registry.h"
#include "tessera/autograd.h"
#include "tessera/factories.h"
#include "tessera/nn/loss.h"
#include "tessera/ops.h"
#include "tessera/operators.h"
#include "tessera/optim/clip.h"
#include "tessera/sync_guard.h"

// Note [Metrics on the device]
// Reading a loss with item() makes the host wait for the device, which starves a GPU of
// queued work every step. The trainer instead adds each step's loss (times its batch size)
// and correct count into 0-dim device tensors, and copies each step's loss into slot `step`
// of a preallocated device log. All of these are queued ops; the sums are read once per
// epoch and the log once per fit, inside AllowSync scopes (the deliberate reads). The
// progress bar therefore shows batches and time, not the running loss.

namespace tessera::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

StepResult classify(nn::Module& model, const data::Batch& b) {
  const Tensor logits = model(b.x);
  const Tensor loss = nn::cross_entropy(logits, b.y);
  NoGradGuard no_grad;
  return {loss, sum(eq(argmax(logits.detach(), 1), b.y))};
}

// A progress bar on a terminal: "epoch 3/10 [=====>      ] 120/235  2.1s  ETA 1.9s".
class Progress {
 public:
  Progress(bool enabled, int epoch, int epochs, std::int64_t total)
      : enabled_(enabled && ::isatty(STDERR_FILENO)), epoch_(epoch), epochs_(epochs),
        total_(total), start_(Clock::now()) {}
  void update(std::int64_t done) {
    if (!enabled_ || total_ == 0) return;
    const double elapsed = seconds_since(start_);
    const int width = 30, filled = static_cast<int>(width * done / total_);
    const double eta = done > 0 ? elapsed / static_cast<double>(done) * static_cast<double>(total_ - done) : 0;
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

// Running sums on the device for one pass over a loader.
struct DeviceSums {
  Tensor loss, correct;
  std::int64_t examples = 0;
  bool has_correct = false;
  explicit DeviceSums(Device d) : loss(zeros({}, d)), correct(zeros({}, {kInt64, d})) {}
  void add(const StepResult& r, std::int64_t batch_size) {
    NoGradGuard no_grad;
    loss.add_(r.loss.detach().to(kFloat32) * static_cast<double>(batch_size));
    if (r.correct.defined()) {
      correct.add_(r.correct);
      has_correct = true;
    }
    examples += batch_size;
  }
  // The one read of a pass.
  std::pair<double, double> read() const {
    AllowSync deliberate;
    const double n = static_cast<double>(std::max<std::int64_t>(examples, 1));
    return {loss.item<double>() / n,
            has_correct ? static_cast<double>(correct.item<std::int64_t>()) / n
                        : std::numeric_limits<double>::quiet_NaN()};
  }
};

}  // namespace

StepResult Task::training_step(const data::Batch& batch) { return classify(model(), batch); }

StepResult Task::validation_step(const data::Batch& batch) {
  NoGradGuard no_grad;
  return classify(model(), batch);
}

Trainer::Trainer(TrainerOptions options) : options_(std::move(options)) {
  TESSERA_CHECK(options_.max_epochs >= 0 && options_.num_gpus >= 0 &&
                    options_.gradient_clip_val >= 0,
                Error,
                "[Trainer] max_epochs ({}), num_gpus ({}) and gradient_clip_val ({}) must not be "
                "negative",
                options_.max_epochs, options_.num_gpus, options_.gradient_clip_val);
  const int available = num_gpus();
  const int used = std::min(options_.num_gpus, available);
  for (int i = 0; i < used; ++i) devices_.push_back(gpu(i));
  if (options_.num_gpus > available) {
    std::cerr << "Trainer: asked for " << options_.num_gpus << " GPU(s), this machine has "
              << available << "; "
              << (used > 0 ? "using " + std::to_string(used) : std::string("training on the CPU"))
              << "\n";
  }
  if (used > 1) {
    std::cerr << "Trainer: tessera trains on one GPU (no data-parallel training across GPUs "
                 "yet); "
                 "training on "
              << devices_.front() << "\n";
  }
  if (options_.device) {
    detail::check_device(*options_.device, "Trainer");
    devices_ = {*options_.device};
  }
  if (devices_.empty()) devices_.push_back(cpu());
}

void Trainer::prepare_model(nn::Module& model) const {
  // A one-time move the user asked for by choosing the device: waiting for a queued logical
  // CPU device that built the parameters is deliberate, not a per-step stall.
  AllowSync deliberate;
  model.to(device());
}

data::Batch Trainer::prepare_batch(const data::Batch& batch) const {
  return data::to_device(batch, device());
}

EpochMetrics Trainer::evaluate(Task& task, data::DataLoader& loader) {
  nn::Module& model = task.model();
  model.eval();
  DeviceSums sums(device());
  for (const data::Batch& b : loader) {
    const data::Batch on_device = prepare_batch(b);
    sums.add(task.validation_step(on_device), b.y.size(0));
  }
  model.train();
  EpochMetrics m;
  std::tie(m.val_loss, m.val_acc) = sums.read();
  return m;
}

std::vector<EpochMetrics> Trainer::fit(Task& task, data::DataLoader& train, data::DataLoader* val) {
  nn::Module& model = task.model();
  optim::Optimizer& opt = task.optimizer();
  prepare_model(model);
  const std::vector<Tensor> params = model.parameters();
  const std::int64_t steps = static_cast<std::int64_t>(options_.max_epochs) * train.batches();
  Tensor log = zeros({steps}, device());
  std::ofstream metrics_file;
  if (!options_.metrics_path.empty()) {
    metrics_file.open(options_.metrics_path);
    TESSERA_CHECK(metrics_file.good(), IOError, "[Trainer] cannot write metrics to '{}'",
                  options_.metrics_path.string());
  }
  std::vector<EpochMetrics> history;
  std::int64_t step = 0;
  for (int epoch = 1; epoch <= options_.max_epochs; ++epoch) {
    const auto start = Clock::now();
    model.train();
    DeviceSums sums(device());
    Progress progress(options_.progress, epoch, options_.max_epochs, train.batches());
    std::int64_t done = 0;
    for (const data::Batch& b : train) {
      const data::Batch batch = prepare_batch(b);
      opt.zero_grad();
      const StepResult r = task.training_step(batch);
      r.loss.backward();
      if (options_.gradient_clip_val > 0) optim::clip_grad_norm_(params, options_.gradient_clip_val);
      opt.step();
      sums.add(r, b.y.size(0));
      {
        NoGradGuard no_grad;
        log.narrow(0, step, 1).copy_(r.loss.detach().to(kFloat32).reshape({1}));
      }
      ++step;
      progress.update(++done);
    }
    progress.finish();
    EpochMetrics m;
    m.epoch = epoch;
    std::tie(m.train_loss, m.train_acc) = sums.read();
    m.val_loss = m.val_acc = std::numeric_limits<double>::quiet_NaN();
    if (val != nullptr) {
      const EpochMetrics v = evaluate(task, *val);
      m.val_loss = v.val_loss;
      m.val_acc = v.val_acc;
    }
    m.seconds = seconds_since(start);
    history.push_back(m);
    if (options_.progress) {
      std::fprintf(stderr, "epoch %d/%d: train loss %.4f, train acc %.4f", epoch,
                   options_.max_epochs, m.train_loss, m.train_acc);
      if (val != nullptr) std::fprintf(stderr, ", val loss %.4f, val acc %.4f", m.val_loss, m.val_acc);
      std::fprintf(stderr, " (%.2f s)\n", m.seconds);
    }
    if (metrics_file.is_open()) {
      auto num = [](double v) { return std::isnan(v) ? std::string("null") : fmt::format("{:.6g}", v); };
      metrics_file << fmt::format(
          "{{\"epoch\": {}, \"train_loss\": {}, \"train_acc\": {}, \"val_loss\": {}, "
          "\"val_acc\": {}, \"seconds\": {:.3f}}}\n",
          m.epoch, num(m.train_loss), num(m.train_acc), num(m.val_loss), num(m.val_acc), m.seconds);
      metrics_file.flush();
    }
  }
  AllowSync deliberate;  // the log, moved in one piece
  step_losses_ = log.narrow(0, 0, step).cpu();
  return history;
}

}  // namespace tessera::train

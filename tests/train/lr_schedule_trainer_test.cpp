// TrainerOptions::lr_schedule (Note [Scheduled learning rates]): the lr every training step
// sees follows the schedule epoch by epoch, on one device and on every data-parallel replica;
// recorded steps (TrainerOptions::graph) end where eager steps end; a run resumed after an
// epoch ends where the run not interrupted ends; and a resume under another schedule is
// refused.
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "support/device_test.h"
#include "support/random_images.h"
#include "support/temp_dir.h"
#include "tessera/safetensors.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing::DeviceTest;
using testing::expect_throw_with;
using testing::random_images;
using testing::TempDir;

// Every training step's lr, one list per replica (replica 0: the task fit was given).
struct LrLog {
  std::vector<std::vector<double>> per_replica;
};

// A classifier (an MLP, SGD with momentum) that notes its optimizer's lr at every training
// step; its replicas note theirs in the same log.
class LrRecordingTask : public train::Task {
 public:
  LrRecordingTask(std::shared_ptr<LrLog> log, double lr)
      : log_(std::move(log)),
        replica_(log_->per_replica.size()),
        lr_(lr),
        model_(std::make_shared<nn::Sequential>(nn::Flatten(), nn::Linear(64, 16), nn::ReLU(),
                                                nn::Linear(16, 4))),
        optimizer_(std::make_unique<optim::SGD>(model_->parameters(),
                                                optim::SgdOptions{.lr = lr, .momentum = 0.9})) {
    log_->per_replica.emplace_back();
  }
  nn::Module& model() override { return *model_; }
  optim::Optimizer& optimizer() override { return *optimizer_; }
  train::StepResult training_step(const data::Batch& batch) override {
    log_->per_replica[replica_].push_back(optimizer_->lr());
    return Task::training_step(batch);
  }
  std::unique_ptr<train::Task> replicate() override {
    return std::make_unique<LrRecordingTask>(log_, lr_);
  }

 private:
  std::shared_ptr<LrLog> log_;
  std::size_t replica_;
  double lr_;
  std::shared_ptr<nn::Sequential> model_;
  std::unique_ptr<optim::Optimizer> optimizer_;
};

struct FitResult {
  std::vector<train::EpochMetrics> history;
  std::vector<std::vector<double>> params;
  LrLog log;
  double lr_after = 0;  // the optimizer's lr after fit
};

// Epochs up to `epochs` on `devices` (several: data-parallel) from seed 3, 24 images in
// batches of 8 (three full batches an epoch), base lr `lr`.
FitResult fit(const std::vector<Device>& devices, std::shared_ptr<const optim::LrSchedule> schedule,
              int epochs, bool graph = false, const fs::path& state = {},
              const fs::path& resume = {}, double lr = 0.2, const fs::path& metrics = {}) {
  const auto [images, labels] = random_images(24);
  data::DataLoader loader(images, labels, {.batch_size = 8, .seed = 5});
  manual_seed(3);
  auto log = std::make_shared<LrLog>();
  LrRecordingTask task(log, lr);
  train::TrainerOptions o{.max_epochs = epochs, .progress = false};
  if (devices.size() == 1) {
    o.device = devices[0];
  } else {
    o.devices = devices;
  }
  o.graph = graph;
  o.metrics_path = metrics;
  o.state_path = state;
  o.resume_from = resume;
  o.lr_schedule = std::move(schedule);
  train::Trainer trainer(o);
  FitResult run;
  run.history = trainer.fit(task, loader);
  run.lr_after = task.optimizer().lr();
  AllowSync deliberate;  // the test's own read
  for (const Tensor& p : task.model().parameters()) run.params.push_back(p.to_vector<double>());
  run.log = *log;
  return run;
}

void expect_same_params(const FitResult& a, const FitResult& b, double tol,
                        const std::string& what) {
  ASSERT_EQ(a.params.size(), b.params.size()) << what;
  for (std::size_t i = 0; i < a.params.size(); ++i) {
    testing::expect_close(a.params[i], b.params[i], tol, tol,
                          what + " parameter " + std::to_string(i));
  }
}

class LrScheduleTrainer : public DeviceTest {
 protected:
  // This device alone, and two of its kind when there are (data-parallel).
  std::vector<std::vector<Device>> placements() const {
    std::vector<std::vector<Device>> out{{device()}};
    const std::vector<Device> g = same_kind_devices();
    if (g.size() >= 2) out.push_back({g[0], g[1]});
    return out;
  }
};

// A warm-up epoch, then halving every epoch: from base 0.2, epochs 1-4 train at 0.1, 0.2,
// 0.1, 0.05.
std::shared_ptr<const optim::LrSchedule> warm_then_halve() {
  return optim::with_linear_warmup(1, std::make_shared<optim::StepLR>(1, 0.5));
}

TEST_P(LrScheduleTrainer, EveryStepOfEveryReplicaTrainsAtItsEpochsLr) {
  const std::vector<double> per_epoch{0.1, 0.2, 0.1, 0.05};
  for (const std::vector<Device>& devices : placements()) {
    SCOPED_TRACE(fmt::format("{} device(s)", devices.size()));
    const TempDir dir("lr_schedule");
    const FitResult run = fit(devices, warm_then_halve(), 4, false, {}, {}, 0.2, dir / "m.jsonl");
    std::vector<double> expected;
    for (const double lr : per_epoch) expected.insert(expected.end(), 3, lr);
    ASSERT_EQ(run.log.per_replica.size(), devices.size());
    for (std::size_t r = 0; r < devices.size(); ++r) {
      ASSERT_EQ(run.log.per_replica[r].size(), expected.size()) << "replica " << r;
      for (std::size_t i = 0; i < expected.size(); ++i) {
        EXPECT_NEAR(run.log.per_replica[r][i], expected[i], 1e-15)
            << "replica " << r << ", step " << i;
      }
    }
    ASSERT_EQ(run.history.size(), 4u);
    for (std::size_t e = 0; e < 4; ++e) EXPECT_NEAR(run.history[e].lr, per_epoch[e], 1e-15) << e;
    EXPECT_EQ(run.lr_after, 0.2) << "fit gives the optimizer its base lr back";
    std::ifstream in(dir / "m.jsonl");
    std::string line, last;
    while (std::getline(in, line)) last = line;
    EXPECT_NE(last.find("\"epoch\": 4,"), std::string::npos) << last;
    EXPECT_NE(last.find("\"lr\": 0.05}"), std::string::npos) << last;
  }
}

TEST_P(LrScheduleTrainer, RecordedStepsEndWhereEagerStepsEnd) {
  // Each epoch's lr differs from the last: a recording that kept the first epoch's lr (fixed
  // into it) would train on at 0.2.
  for (const std::vector<Device>& devices : placements()) {
    if (devices.size() > 1 && device().is_cuda()) continue;  // a graph holds one GPU
    SCOPED_TRACE(fmt::format("{} device(s)", devices.size()));
    for (const auto& schedule : {std::shared_ptr<const optim::LrSchedule>(warm_then_halve()),
                                 std::shared_ptr<const optim::LrSchedule>(
                                     std::make_shared<optim::CosineAnnealingLR>(3, 0.01))}) {
      SCOPED_TRACE(schedule->str());
      const FitResult eager = fit(devices, schedule, 4, false);
      const FitResult recorded = fit(devices, schedule, 4, true);
      expect_same_params(recorded, eager, 1e-6, "recorded against eager");
      // The schedule changed the result: a constant lr ends elsewhere.
      const FitResult constant = fit(devices, nullptr, 4, true);
      EXPECT_GT(std::abs(constant.params[0][0] - eager.params[0][0]) +
                    std::abs(constant.params[0][1] - eager.params[0][1]),
                1e-6);
    }
  }
}

TEST_P(LrScheduleTrainer, AResumedRunEndsWhereTheRunNotInterruptedEnds) {
  for (const std::vector<Device>& devices : placements()) {
    SCOPED_TRACE(fmt::format("{} device(s)", devices.size()));
    const TempDir dir("lr_schedule_resume");
    const fs::path state = dir / "state.safetensors";
    const FitResult straight = fit(devices, warm_then_halve(), 5);
    fit(devices, warm_then_halve(), 3, false, state);
    const FitResult resumed = fit(devices, warm_then_halve(), 5, false, {}, state);
    expect_same_params(resumed, straight, 1e-6, "resumed against straight");
    ASSERT_EQ(resumed.history.size(), 2u);
    EXPECT_EQ(resumed.history[0].epoch, 4);
    EXPECT_NEAR(resumed.history[0].lr, 0.05, 1e-15);
    EXPECT_NEAR(resumed.history[1].lr, 0.025, 1e-15);
    // The file describes the optimizer with its base lr, not epoch 3's 0.1: another base lr
    // is refused as before, naming 0.2.
    expect_throw_with<Error>(
        [&] { fit(devices, warm_then_halve(), 5, false, {}, state, 0.3); },
        {"was trained with SGD(lr=0.2, momentum=0.9", "this run's optimizer is SGD(lr=0.3,"});
    // Another schedule, or none, would not continue the run.
    expect_throw_with<Error>(
        [&] { fit(devices, std::make_shared<optim::ExponentialLR>(0.5), 5, false, {}, state); },
        {"was trained with the lr schedule SequentialLR(schedules=[LinearLR(start_factor=0.5, "
         "end_factor=1, total_iters=1), StepLR(step_size=1, gamma=0.5)], milestones=[1]) and "
         "this run's is ExponentialLR(gamma=0.5)",
         "Resume with the same schedule (TrainerOptions::lr_schedule; on the command line "
         "the same --lr-schedule and --warmup-epochs, and for cosine the same --epochs, which "
         "sets its t_max), or start afresh from its weights (--load)"});
    expect_throw_with<Error>([&] { fit(devices, nullptr, 5, false, {}, state); },
                             {"and this run's is none"});
  }
  // A run saved without a schedule is not resumed with one either.
  const TempDir dir("lr_schedule_resume_none");
  fit({device()}, nullptr, 1, false, dir / "state.safetensors");
  expect_throw_with<Error>(
      [&] { fit({device()}, warm_then_halve(), 3, false, {}, dir / "state.safetensors"); },
      {"was trained with the lr schedule none and this run's is SequentialLR("});
  // Nor is a file written before schedules existed (no "lr_schedule" in its metadata): it
  // trained at a constant lr.
  SafetensorsFile old = load_safetensors(dir / "state.safetensors");
  ASSERT_EQ(old.metadata.erase("lr_schedule"), 1u);
  save_safetensors(dir / "old.safetensors", old.tensors, old.metadata);
  expect_throw_with<Error>(
      [&] { fit({device()}, warm_then_halve(), 3, false, {}, dir / "old.safetensors"); },
      {"was trained with the lr schedule none and this run's is SequentialLR("});
  EXPECT_NO_THROW(fit({device()}, nullptr, 2, false, {}, dir / "old.safetensors"));
}

TESSERA_INSTANTIATE_DEVICE_SUITE(LrScheduleTrainer);

}  // namespace
}  // namespace tessera

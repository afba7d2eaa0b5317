// TrainerOptions::state_path and resume_from (Note [Resuming training]): a run stopped after
// an epoch and resumed in fresh objects ends where the run not interrupted ends, on one
// device (with dropout, so the random generator must be restored too, and in float16 with
// its gradient scaler) and on several (every replica loads the state); the metrics file goes
// on; and a file with nothing left to train is refused before anything changes.
#include <filesystem>
#include <fstream>
#include <string>

#include "support/device_test.h"
#include "support/temp_dir.h"
#include "tessera/nn/checkpoint.h"
#include "tessera/nn/dropout.h"
#include "tessera/optim/adam.h"
#include "tessera/optim/sgd.h"
#include "tessera/random.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing::DeviceTest;
using testing::expect_throw_with;
using testing::TempDir;

// Images whose label is which quarter of the image is bright, with noise.
std::pair<Tensor, Tensor> noisy_quadrant_images(std::int64_t n) {
  std::vector<std::uint8_t> pixels(static_cast<std::size_t>(n * 8 * 8), 0);
  std::vector<std::int64_t> labels(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    labels[static_cast<std::size_t>(i)] = i % 4;
    const int r0 = static_cast<int>((i % 4) / 2 * 4), c0 = static_cast<int>((i % 4) % 2 * 4);
    for (int r = 0; r < 8; ++r) {
      for (int c = 0; c < 8; ++c) {
        const bool bright = r >= r0 && r < r0 + 4 && c >= c0 && c < c0 + 4;
        pixels[static_cast<std::size_t>((i * 8 + r) * 8 + c)] =
            static_cast<std::uint8_t>((bright ? 150 : 0) + (i * 37 + r * 11 + c * 5) % 60);
      }
    }
  }
  return {from_vector(pixels, {n, 8, 8}), from_vector(labels, {n})};
}

class Resume : public DeviceTest {
 protected:
  // A classifier with dropout, built by factories so that replicas can be made; the same
  // initial values for the same seed.
  static std::unique_ptr<train::Classifier> make_task(Device device, bool adam, double lr = 0.2) {
    return std::make_unique<train::Classifier>(
        [device] {
          return std::make_shared<nn::Sequential>(nn::Flatten(), nn::Linear(64, 16, true, device),
                                                  nn::ReLU(), nn::Dropout(0.25),
                                                  nn::Linear(16, 4, true, device));
        },
        [adam, lr](const std::vector<Tensor>& params) -> std::unique_ptr<optim::Optimizer> {
          if (adam) return std::make_unique<optim::Adam>(params, optim::AdamOptions{.lr = 0.01});
          return std::make_unique<optim::SGD>(params, optim::SgdOptions{.lr = lr, .momentum = 0.9});
        });
  }

  struct Run {
    std::vector<train::EpochMetrics> history;
    std::vector<std::vector<double>> params;
  };

  // Epochs up to `epochs` of a fresh task from seed 7; resumed from `resume` when given.
  // With `watch_train`, the training loader begins more epochs than fit() trains: one batch is
  // looked at before fit(), and the loader also serves as the validation loader.
  static Run fit(train::TrainerOptions options, bool adam, int epochs, const fs::path& state = {},
                 const fs::path& resume = {}, bool watch_train = false) {
    const auto [images, labels] = noisy_quadrant_images(200);
    data::DataLoader train_data(images, labels, {.batch_size = 32, .seed = 1});
    if (watch_train) EXPECT_EQ(train_data.begin()->x.size(0), 32);
    manual_seed(7);
    const Device first = options.devices.empty() ? *options.device : options.devices.front();
    auto task = make_task(first, adam);
    options.max_epochs = epochs;
    options.progress = false;
    options.state_path = state;
    options.resume_from = resume;
    train::Trainer trainer(options);
    Run run;
    run.history = trainer.fit(*task, train_data, watch_train ? &train_data : nullptr);
    AllowSync deliberate;
    for (const Tensor& p : task->model().parameters()) run.params.push_back(p.to_vector<double>());
    return run;
  }

  static void expect_same_end(const Run& straight, const Run& resumed, double tol) {
    ASSERT_EQ(straight.params.size(), resumed.params.size());
    for (std::size_t i = 0; i < straight.params.size(); ++i) {
      testing::expect_close(resumed.params[i], straight.params[i], tol, tol,
                            "parameter " + std::to_string(i));
    }
    ASSERT_EQ(resumed.history.size(), 2u);
    for (std::size_t e = 0; e < 2; ++e) {
      EXPECT_EQ(resumed.history[e].epoch, straight.history[e + 1].epoch);
      EXPECT_NEAR(resumed.history[e].train_loss, straight.history[e + 1].train_loss, tol);
    }
  }
};

TEST_P(Resume, AResumedRunEndsWhereTheRunNotInterruptedEnds) {
  const TempDir dir("resume");
  for (const bool adam : {false, true}) {
    SCOPED_TRACE(adam ? "Adam" : "SGD with momentum");
    const train::TrainerOptions options{.device = device()};
    const Run straight = fit(options, adam, 3);
    const fs::path state = dir.path() / "state.safetensors";
    const Run first = fit(options, adam, 1, state);
    ASSERT_EQ(first.history.size(), 1u);
    ASSERT_TRUE(fs::exists(state));
    const Run resumed = fit(options, adam, 3, {}, state);
    expect_same_end(straight, resumed, 1e-5);
  }
}

TEST_P(Resume, TheLoaderGoesOnFromTheEpochsItBegunNotTheEpochsTrained) {
  // The shuffle of each epoch is seeded with the epochs the loader has begun; a loader that
  // also validates, or gave a batch before fit(), has begun more than fit() trained.
  const TempDir dir("resume_loader");
  const train::TrainerOptions options{.device = device()};
  const Run straight = fit(options, false, 3, {}, {}, true);
  const fs::path state = dir.path() / "state.safetensors";
  fit(options, false, 1, state, {}, true);
  const Run resumed = fit(options, false, 3, {}, state, true);
  expect_same_end(straight, resumed, 1e-5);
}

TEST_P(Resume, Float16ResumesWithItsGradientScaler) {
  const TempDir dir("resume16");
  train::TrainerOptions options{.device = device()};
  options.precision = kFloat16;
  const Run straight = fit(options, false, 3);
  const fs::path state = dir.path() / "state.safetensors";
  fit(options, false, 1, state);
  const Run resumed = fit(options, false, 3, {}, state);
  expect_same_end(straight, resumed, 1e-4);
  // A float32 run cannot continue it: the saved run's precision is named (before it was,
  // files keep the step's options, the file's scaler had no place to go).
  expect_throw_with<Error>([&] { fit({.device = device()}, false, 3, {}, state); },
                           {"precision=float16 and this run with", "precision=float32"});
}

TEST_P(Resume, EveryReplicaLoadsTheState) {
  const std::vector<Device> devices = same_kind_devices();
  if (devices.size() < 2) GTEST_SKIP() << "needs two devices of one kind";
  const TempDir dir("resume_dp");
  const train::TrainerOptions options{.devices = {devices[0], devices[1]}};
  const Run straight = fit(options, false, 3);
  const fs::path state = dir.path() / "state.safetensors";
  fit(options, false, 1, state);
  const Run resumed = fit(options, false, 3, {}, state);
  expect_same_end(straight, resumed, 1e-5);
}

TEST_P(Resume, TheMetricsFileGoesOn) {
  const TempDir dir("resume_metrics");
  const fs::path state = dir.path() / "state.safetensors", metrics = dir.path() / "m.jsonl";
  train::TrainerOptions options{.device = device()};
  options.metrics_path = metrics;
  fit(options, false, 1, state);
  fit(options, false, 3, {}, state);
  std::ifstream in(metrics);
  std::string line;
  std::vector<std::string> epochs;
  while (std::getline(in, line)) epochs.push_back(line.substr(0, line.find(',')));
  EXPECT_EQ(epochs, (std::vector<std::string>{"{\"epoch\": 1", "{\"epoch\": 2", "{\"epoch\": 3"}));
}

TEST_P(Resume, NothingLeftToTrainIsRefusedBeforeAnythingChanges) {
  const TempDir dir("resume_done");
  const fs::path state = dir.path() / "state.safetensors";
  const train::TrainerOptions options{.device = device()};
  fit(options, false, 2, state);
  const auto [images, labels] = noisy_quadrant_images(200);
  data::DataLoader train_data(images, labels, {.batch_size = 32, .seed = 1});
  manual_seed(7);
  auto task = make_task(device(), false);
  AllowSync deliberate;
  const std::vector<double> before = task->model().parameters()[0].to_vector<double>();
  train::Trainer trainer({.max_epochs = 2, .progress = false, .device = device()});
  train::TrainerOptions again = trainer.options();
  again.resume_from = state;
  train::Trainer resuming(again);
  expect_throw_with<Error>(
      [&] { resuming.fit(*task, train_data); },
      {"holds 2 epoch(s) of training", "max_epochs is 2", "Raise max_epochs (--epochs)"});
  EXPECT_EQ(task->model().parameters()[0].to_vector<double>(), before) << "nothing loaded";
  // A plain checkpoint is not a run to continue.
  const fs::path plain = dir.path() / "plain.safetensors";
  nn::save_checkpoint(task->model(), plain);
  again.resume_from = plain;
  train::Trainer from_plain(again);
  expect_throw_with<Error>([&] { from_plain.fit(*task, train_data); }, {"without optimizer state"});
  // Another batch size or other optimizer options would not continue the run (the help
  // said they must match; they were taken silently).
  again.max_epochs = 3;
  again.resume_from = state;
  data::DataLoader other_batches(images, labels, {.batch_size = 16, .seed = 1});
  expect_throw_with<Error>(
      [&] { train::Trainer(again).fit(*task, other_batches); },
      {"was trained with batches of 32 and this run's are 16", "batch size of 32 (--batch-size)"});
  // Nor would another data order (a resume without --seed shuffled otherwise, silently).
  data::DataLoader other_seed(images, labels, {.batch_size = 32, .seed = 2});
  expect_throw_with<Error>(
      [&] { train::Trainer(again).fit(*task, other_seed); },
      {"was trained with the data order shuffle=true, seed=1, drop_last=false and this run's "
       "is shuffle=true, seed=2, drop_last=false",
       "(--seed)"});
  auto other_lr = make_task(device(), false, 0.3);
  expect_throw_with<Error>(
      [&] { train::Trainer(again).fit(*other_lr, train_data); },
      {"was trained with SGD(lr=0.2, momentum=0.9, dampening=0, weight_decay=0, nesterov=false) "
       "and this run's optimizer is SGD(lr=0.3,",
       "same optimizer options (--lr, --momentum)"});
  // Another model is named as such (it failed on the optimizer's options or on a shape).
  const Device d = device();
  train::Classifier sigmoid(
      [d] {
        return std::make_shared<nn::Sequential>(nn::Flatten(), nn::Linear(64, 16, true, d),
                                                nn::Sigmoid(), nn::Dropout(0.25),
                                                nn::Linear(16, 4, true, d));
      },
      [](const std::vector<Tensor>& p) {
        return std::make_unique<optim::SGD>(p, optim::SgdOptions{.lr = 0.2, .momentum = 0.9});
      });
  expect_throw_with<Error>([&] { train::Trainer(again).fit(sigmoid, train_data); },
                           {"was trained with another model than this run's (the file's layers "
                            "have '  (2): ReLU()' where this run's have '  (2): Sigmoid()')",
                            "same model (--model)"});
  EXPECT_EQ(task->model().parameters()[0].to_vector<double>(), before) << "nothing loaded";
}

TESSERA_INSTANTIATE_DEVICE_SUITE(Resume);

}  // namespace
}  // namespace tessera

// The trainer on every device: it learns, keeps its metrics on the device (no host wait
// and no transfer per step besides the batch), and says when it gets fewer GPUs than asked.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "support/device_test.h"

namespace tessera {
namespace {

using testing::DeviceTest;

// Images whose label is which quarter of the image is bright.
std::pair<Tensor, Tensor> quadrant_images(std::int64_t n) {
  std::vector<std::uint8_t> pixels(n * 8 * 8, 0);
  std::vector<std::int64_t> labels(n);
  for (std::int64_t i = 0; i < n; ++i) {
    labels[i] = i % 4;
    const int r0 = (i % 4) / 2 * 4, c0 = (i % 4) % 2 * 4;
    for (int r = r0; r < r0 + 4; ++r)
      for (int c = c0; c < c0 + 4; ++c) pixels[(i * 8 + r) * 8 + c] = 200;
  }
  return {from_vector(pixels, {n, 8, 8}), from_vector(labels, {n})};
}

class TrainerOnDevice : public DeviceTest {};

TEST_P(TrainerOnDevice, LearnsWithMetricsOnTheDevice) {
  const auto [images, labels] = quadrant_images(256);
  data::DataLoader train_data(images, labels, {.batch_size = 32, .seed = 1});
  data::DataLoader val_data(images, labels, {.batch_size = 64, .shuffle = false});
  manual_seed(0);
  nn::Sequential net(nn::Flatten(), nn::Linear(64, 16), nn::ReLU(), nn::Linear(16, 4));
  optim::SGD opt(net.parameters(), {.lr = 0.5});
  train::Classifier task(net, opt);
  train::Trainer trainer(
      {.max_epochs = 3, .gradient_clip_val = 5, .progress = false, .device = device()});
  std::vector<train::EpochMetrics> history;
  {
    SyncGuard strict(SyncMode::kError);  // an implicit host wait anywhere in fit() throws
    history = trainer.fit(task, train_data, &val_data);
  }
  EXPECT_EQ(net.device(), device()) << "prepare_model moved the model";
  ASSERT_EQ(history.size(), 3u);
  EXPECT_LT(history.back().train_loss, history.front().train_loss);
  EXPECT_GT(history.back().val_acc, 0.9);
  for (const train::EpochMetrics& m : history) {
    EXPECT_GT(m.train_seconds, 0.0);
    EXPECT_LE(m.train_seconds, m.seconds);  // the validation pass comes after
  }
  EXPECT_EQ(trainer.step_losses().numel(), 3 * train_data.batches());
  EXPECT_EQ(trainer.step_losses().device(), cpu());
  EXPECT_NEAR(trainer.step_losses().to_vector<double>().back(), history.back().train_loss, 0.5);
}

// The book's models are lazy (nn.LazyLinear): the Trainer builds them on the first batch
// before the first step, so a Classifier made by factories trains them exactly as the same
// model given its sizes; an optimizer made before the layers had parameters is refused (it
// would never have trained them, silently).
TEST_P(TrainerOnDevice, LazyLayersAreBuiltBeforeTheFirstStep) {
  const auto [images, labels] = quadrant_images(64);
  const auto fit = [&](bool lazy) {
    data::DataLoader loader(images, labels, {.batch_size = 16, .seed = 1});
    manual_seed(0);
    const Device d = device();
    train::Classifier task(
        [lazy, d]() -> std::shared_ptr<nn::Module> {
          if (lazy) {
            return std::make_shared<nn::Sequential>(nn::Flatten(), nn::LazyLinear(16), nn::ReLU(),
                                                    nn::LazyLinear(4));
          }
          // Made in order (arguments are evaluated in any order), as the lazy ones build.
          nn::Linear first(64, 16, true, d);
          nn::Linear second(16, 4, true, d);
          return std::make_shared<nn::Sequential>(nn::Flatten(), std::move(first), nn::ReLU(),
                                                  std::move(second));
        },
        [](const std::vector<Tensor>& p) {
          return std::make_unique<optim::SGD>(p, optim::SgdOptions{.lr = 0.5, .momentum = 0.9});
        });
    train::Trainer({.max_epochs = 2, .progress = false, .device = device()}).fit(task, loader);
    std::vector<std::vector<double>> values;
    for (const Tensor& p : task.model().parameters()) values.push_back(p.to_vector<double>());
    return values;
  };
  const auto sized = fit(false);
  const auto lazy = fit(true);
  ASSERT_EQ(lazy.size(), 4U);
  for (std::size_t p = 0; p < sized.size(); ++p) {
    ASSERT_EQ(lazy[p].size(), sized[p].size());
    for (std::size_t i = 0; i < sized[p].size(); ++i) {
      EXPECT_NEAR(lazy[p][i], sized[p][i], 1e-5) << "parameter " << p << ", value " << i;
    }
  }
  // A factory-made Classifier has no optimizer until its lazy layers are built.
  train::Classifier unbuilt(
      [] { return std::make_shared<nn::Sequential>(nn::Flatten(), nn::LazyLinear(4)); },
      [](const std::vector<Tensor>& p) {
        return std::make_unique<optim::SGD>(p, optim::SgdOptions{.lr = 0.1});
      });
  testing::expect_throw_with<Error>([&] { unbuilt.optimizer(); },
                                    {"[Classifier] the model has lazy layers without parameters "
                                     "yet",
                                     "call build(batch) first"});
  // An optimizer made before the first call holds only the sized layer's parameters.
  const auto [x, y] = quadrant_images(16);
  data::DataLoader loader(x, y, {.batch_size = 16});
  nn::Sequential net(nn::Flatten(), nn::LazyLinear(8), nn::ReLU(), nn::Linear(8, 4));
  optim::SGD early(net.parameters(), {.lr = 0.1});
  train::Classifier task(net, early);
  testing::expect_throw_with<Error>(
      [&] {
        train::Trainer({.max_epochs = 1, .progress = false, .device = device()}).fit(task, loader);
      },
      {"[Trainer] the model's parameter '1.weight' was made by its lazy layer at the first call, "
       "after the optimizer was made from model.parameters()",
       "train::Classifier(make_model, make_optimizer)"});
}

// TrainerOptions::precision: the steps under autocast, still without a host wait or a
// transfer per step, the weights float32, and about float32's accuracy.
TEST_P(TrainerOnDevice, TrainsUnderAutocastInBfloat16AndFloat16) {
  const auto [images, labels] = quadrant_images(256);
  for (Dtype precision : {kBFloat16, kFloat16}) {
    data::DataLoader train_data(images, labels, {.batch_size = 32, .seed = 1});
    data::DataLoader val_data(images, labels, {.batch_size = 64, .shuffle = false});
    manual_seed(0);
    nn::Sequential net(nn::Flatten(), nn::Linear(64, 16), nn::ReLU(), nn::Linear(16, 4));
    optim::SGD opt(net.parameters(), {.lr = 0.5});
    train::Classifier task(net, opt);
    train::TrainerOptions options{.max_epochs = 3, .progress = false, .device = device()};
    options.precision = precision;
    train::Trainer trainer(options);
    std::vector<train::EpochMetrics> history;
    {
      SyncGuard strict(SyncMode::kError);
      history = trainer.fit(task, train_data, &val_data);
    }
    ASSERT_EQ(history.size(), 3u);
    EXPECT_LT(history.back().train_loss, history.front().train_loss) << dtype_name(precision);
    EXPECT_GT(history.back().val_acc, 0.9) << dtype_name(precision);
    for (const Tensor& p : net.parameters()) EXPECT_EQ(p.dtype(), kFloat32);
  }
  train::TrainerOptions bad{.progress = false, .device = device()};
  bad.precision = kInt32;
  testing::expect_throw_with<DtypeError>(
      [&] { train::Trainer t(bad); },
      {"[Trainer] precision must be float32, bfloat16 or float16, got int32"});
}

// Float16 training scales the loss (GradScaler): a loss so small that its gradients fall
// below float16's range (about 6e-8) when unscaled still trains every layer.
TEST_P(TrainerOnDevice, Float16KeepsGradientsBelowItsRange) {
  struct TinyLoss : train::Classifier {
    using Classifier::Classifier;
    train::StepResult training_step(const data::Batch& batch) override {
      train::StepResult r = Classifier::training_step(batch);
      r.loss = r.loss * 1e-7;  // dloss/dlogits about 1e-9: zero in float16
      return r;
    }
  };
  const auto [images, labels] = quadrant_images(64);
  data::DataLoader train_data(images, labels, {.batch_size = 32, .seed = 1});
  manual_seed(0);
  nn::Sequential net(nn::Flatten(), nn::Linear(64, 16), nn::ReLU(), nn::Linear(16, 4));
  optim::SGD opt(net.parameters(), {.lr = 1e5});
  TinyLoss task(net, opt);
  train::TrainerOptions options{.max_epochs = 1, .progress = false, .device = device()};
  options.precision = kFloat16;
  std::vector<std::vector<double>> before;
  for (const Tensor& p : net.parameters()) before.push_back(p.to_vector<double>());
  train::Trainer(options).fit(task, train_data);
  const std::vector<Tensor> after = net.parameters();
  for (std::size_t i = 0; i < after.size(); ++i) {
    double moved = 0;
    const std::vector<double> now = after[i].to_vector<double>();
    for (std::size_t j = 0; j < now.size(); ++j)
      moved = std::max(moved, std::abs(now[j] - before[i][j]));
    EXPECT_GT(moved, 1e-4) << "parameter " << i << " did not train";
  }
}

// Note [Divergence on the device]: a run whose loss becomes NaN stops at the end of that
// epoch with NonFiniteError, still without a host wait per step.
TEST_P(TrainerOnDevice, StopsWhenTheLossDiverges) {
  const auto [images, labels] = quadrant_images(128);
  data::DataLoader train_data(images, labels, {.batch_size = 32, .seed = 1});
  manual_seed(0);
  nn::Sequential net(nn::Flatten(), nn::Linear(64, 16), nn::ReLU(), nn::Linear(16, 4));
  optim::SGD opt(net.parameters(), {.lr = 1e300});  // infinite in float32: NaN in one step
  train::Classifier task(net, opt);
  // A billion epochs: the step log grows an epoch at a time, so nothing near the 16 GB a
  // log for every epoch would take is asked for (the limit turns a regression into an
  // OutOfMemoryError instead of a machine filling its memory).
  train::Trainer trainer({.max_epochs = 1'000'000'000, .progress = false, .device = device()});
  synchronize(device());
  set_memory_limit(device(), memory_stats(device()).in_use + (std::size_t{64} << 20));
  {
    SyncGuard strict(SyncMode::kError);
    testing::expect_throw_with<NonFiniteError>(
        [&] { trainer.fit(task, train_data); },
        {"[Trainer] training diverged in epoch 1: the mean training loss is NaN",
         "a label outside [0, classes) or a NaN in the inputs",
         "lower learning rate (--lr), gradient clipping (TrainerOptions::gradient_clip_val"});
  }
  set_memory_limit(device(), SIZE_MAX);
  // The diverged run's step losses are kept (not the last good fit's, nor none): one per step
  // of its epoch, the first finite (lr takes effect after it), a later one not.
  ASSERT_TRUE(trainer.step_losses().defined());
  const std::vector<float> steps = trainer.step_losses().to_vector<float>();
  ASSERT_EQ(steps.size(), 4u);
  EXPECT_TRUE(std::isfinite(steps[0]));
  EXPECT_FALSE(std::isfinite(steps[3]));
}

// A Task's StepResult is checked where the step returns it: a float count of correct
// predictions was refused by "[add_] the result is float32 but self is int64", an op the user
// never called; a loss of shape [1] (which backward() takes) failed the same way.
class CountingInFloats : public train::Classifier {
 public:
  using Classifier::Classifier;
  bool float_count = false;
  train::StepResult training_step(const data::Batch& batch) override {
    train::StepResult r = Classifier::training_step(batch);
    r.loss = r.loss.reshape({1});
    if (float_count) r.correct = r.correct.to(kFloat32);
    return r;
  }
};

TEST_P(TrainerOnDevice, AStepResultBreakingTheContractNamesTheStep) {
  const auto [images, labels] = quadrant_images(32);
  data::DataLoader loader(images, labels, {.batch_size = 16, .seed = 1});
  nn::Sequential net(nn::Flatten(), nn::Linear(64, 4));
  optim::SGD opt(net.parameters(), {.lr = 0.1});
  CountingInFloats task(net, opt);
  train::Trainer trainer({.max_epochs = 1, .progress = false, .device = device()});
  EXPECT_NO_THROW(trainer.fit(task, loader)) << "a one-element loss of shape [1] is a loss";
  task.float_count = true;
  testing::expect_throw_with<Error>(
      [&] { trainer.fit(task, loader); },
      {"[Trainer] training_step must return the count of correct predictions as one integer",
       "got a float32 tensor of shape []"});
}

TEST_P(TrainerOnDevice, AStepCostsItsBatchCopiesAndNothingElse) {
  const auto [images, labels] = quadrant_images(128);
  auto stats_for = [&, images = images, labels = labels](std::int64_t batch) {
    data::DataLoader loader(images, labels, {.batch_size = batch, .seed = 3});
    manual_seed(0);
    nn::Sequential net(nn::Flatten(), nn::Linear(64, 4, true, device()));
    optim::SGD opt(net.parameters(), {.lr = 0.1});
    train::Classifier task(net, opt);
    train::Trainer trainer({.max_epochs = 1, .progress = false, .device = device()});
    synchronize();
    reset_transfer_stats();
    trainer.fit(task, loader);
    return transfer_stats();
  };
  const TransferStats few = stats_for(64), many = stats_for(8);  // 2 steps, 16 steps
  EXPECT_EQ(few.host_waits, many.host_waits) << "host waits must not grow with steps";
  // Each step copies its batch (x and y) to the device, unless batches are made there.
  EXPECT_EQ(many.copies() - few.copies(), device() == cpu() ? 0u : 2u * (16 - 2))
      << "few: " << few << "\nmany: " << many;
}

// Note [Run-ahead memory]: every step the host queues ahead of a device holds its
// activations until it runs, and the allocator's cache keeps whatever that peak took. The
// queue's bound keeps the host about a step ahead, so a loop of steps holds little more
// than one step does (it once held 12 steps, and the cache 10x the working set).
// A host that queues steps faster than the device runs them holds a bounded number of steps'
// memory (Note [Run-ahead memory]): 60 steps queued at once take no more than 20 did, and a
// host feeding one device runs about a step ahead of it.
TEST_P(TrainerOnDevice, RunningAheadHoldsABoundedNumberOfSteps) {
  manual_seed(0);
  nn::Sequential net(nn::Linear(256, 256, true, device()), nn::ReLU(),
                     nn::Linear(256, 256, true, device()), nn::ReLU(),
                     nn::Linear(256, 10, true, device()));
  optim::SGD opt(net.parameters(), {.lr = 0.01, .momentum = 0.9});
  const Tensor x = randn({512, 256}, device());
  const Tensor y = zeros({512}, {kInt64, device()});
  auto step = [&] {
    opt.zero_grad();
    nn::cross_entropy(net(x), y).backward();
    opt.step();
  };
  // Gradients and momentum exist from here on, and this thread has fed this device alone
  // long enough to be held to a step's lead (other tests fed other devices before).
  for (int i = 0; i < 40; ++i) step();
  synchronize(device());
  const std::size_t base = memory_stats(device()).in_use;
  const auto peak_of = [&](int steps) {
    reset_peak_memory(device());
    for (int i = 0; i < steps; ++i) step();
    synchronize(device());
    return memory_stats(device()).peak - base;
  };
  const std::size_t one = peak_of(1), twenty = peak_of(20), sixty = peak_of(60);
  EXPECT_LE(sixty, twenty + one) << "one step takes " << format_bytes(one) << " above the model; "
                                 << "20 steps queued at once took " << format_bytes(twenty)
                                 << ", 60 took " << format_bytes(sixty);
  EXPECT_LE(twenty, 3 * one) << "20 steps queued at once took " << format_bytes(twenty);
}

TEST(Trainer, SaysOnceWhenAskedForMoreGpusThanExist) {
  ::testing::internal::CaptureStderr();
  train::Trainer trainer({.num_gpus = num_gpus() + 2, .progress = false});
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("asked for " + std::to_string(num_gpus() + 2) + " GPU(s)"), std::string::npos)
      << err;
  if (num_gpus() == 0) EXPECT_EQ(trainer.device(), cpu());
  testing::expect_throw_with<Error>([] { train::Trainer({.max_epochs = -1}); },
                                    {"[Trainer] max_epochs (-1)", "must not be negative"});
  testing::expect_throw_with<DeviceError>([] { train::Trainer({.device = cpu(7)}); }, {"Trainer"});
}

// A loader that gives no batches would make an epoch of no steps, reported as a loss of 0.
TEST(Trainer, RefusesDataThatGivesNoBatches) {
  const auto [images, labels] = quadrant_images(8);
  data::DataLoader none(images, labels, {.batch_size = 32, .drop_last = true});
  data::DataLoader some(images, labels, {.batch_size = 4});
  nn::Sequential net(nn::Flatten(), nn::Linear(64, 4));
  optim::SGD opt(net.parameters(), {.lr = 0.1});
  train::Classifier task(net, opt);
  train::Trainer trainer({.max_epochs = 1, .progress = false});
  testing::expect_throw_with<Error>(
      [&] { trainer.fit(task, none); },
      {"[Trainer] the training data gives no batches: 8 examples, batch_size 32 and drop_last "
       "drops them all"});
  testing::expect_throw_with<Error>([&] { trainer.fit(task, some, &none); },
                                    {"[Trainer] the validation data gives no batches"});
  testing::expect_throw_with<Error>([&] { trainer.evaluate(task, none); },
                                    {"[Trainer] the evaluation data gives no batches"});
}

TEST(Trainer, WritesMetricsAsJsonLines) {
  const auto [images, labels] = quadrant_images(64);
  data::DataLoader loader(images, labels, {.batch_size = 32});
  nn::Sequential net(nn::Flatten(), nn::Linear(64, 4));
  optim::SGD opt(net.parameters(), {.lr = 0.1});
  train::Classifier task(net, opt);
  // Per process: CTest runs this binary in several configurations at once.
  const auto path = std::filesystem::temp_directory_path() /
                    ("tessera_metrics_test_" + std::to_string(getpid()) + ".jsonl");
  train::Trainer trainer({.max_epochs = 2, .progress = false, .metrics_path = path});
  trainer.fit(task, loader);
  std::ifstream in(path);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    ++lines;
    EXPECT_NE(line.find("\"epoch\": " + std::to_string(lines)), std::string::npos) << line;
    EXPECT_NE(line.find("\"val_acc\": null"), std::string::npos) << line;
  }
  EXPECT_EQ(lines, 2);
  std::filesystem::remove(path);
}

// A task whose losses the test spoils: validation losses made infinite, or the training loss
// made NaN from step `nan_from` on (counted over the task's life).
struct SpoiledTask : train::Classifier {
  using Classifier::Classifier;
  bool infinite_validation = false;
  int nan_from = -1;
  int steps = 0;
  train::StepResult training_step(const data::Batch& batch) override {
    train::StepResult r = Classifier::training_step(batch);
    if (nan_from >= 0 && ++steps >= nan_from) r.loss = r.loss * std::nan("");
    return r;
  }
  train::StepResult validation_step(const data::Batch& batch) override {
    train::StepResult r = Classifier::validation_step(batch);
    if (infinite_validation) r.loss = r.loss * INFINITY;
    return r;
  }
};

TEST(Trainer, AnInfiniteValidationLossStopsTheRun) {
  const auto [images, labels] = quadrant_images(32);
  data::DataLoader loader(images, labels, {.batch_size = 16});
  nn::Sequential net(nn::Flatten(), nn::Linear(64, 4));
  optim::SGD opt(net.parameters(), {.lr = 0.1});
  SpoiledTask task(net, opt);
  task.infinite_validation = true;
  train::Trainer trainer({.max_epochs = 2, .progress = false});
  testing::expect_throw_with<NonFiniteError>(
      [&] { trainer.fit(task, loader, &loader); },
      {"[Trainer] training diverged in epoch 1: the validation loss is infinite"});
}

// evaluate() between fits, or on a model in eval mode, leaves the model's mode as it was,
// also when a validation step throws: dropout stays off in an eval-mode model.
TEST(Trainer, EvaluateLeavesTheModelInItsMode) {
  const auto [images, labels] = quadrant_images(32);
  data::DataLoader loader(images, labels, {.batch_size = 16});
  nn::Sequential net(nn::Flatten(), nn::Dropout(0.5), nn::Linear(64, 4));
  optim::SGD opt(net.parameters(), {.lr = 0.1});
  SpoiledTask task(net, opt);
  train::Trainer trainer({.max_epochs = 1, .progress = false});
  net.eval();
  trainer.evaluate(task, loader);
  EXPECT_FALSE(net.is_training());
  net.train();
  trainer.evaluate(task, loader);
  EXPECT_TRUE(net.is_training());
  net.eval();
  struct Throwing : SpoiledTask {
    using SpoiledTask::SpoiledTask;
    train::StepResult validation_step(const data::Batch&) override {
      throw Error("a validation step failed");
    }
  } throwing(net, opt);
  EXPECT_THROW(trainer.evaluate(throwing, loader), Error);
  EXPECT_FALSE(net.is_training());
}

// A run that diverged wrote its last epoch's line but saved no state for it; resumed, that
// epoch is trained again, and the metrics file has each epoch once.
TEST(Trainer, AResumedRunWritesEachEpochOnce) {
  const auto [images, labels] = quadrant_images(64);
  data::DataLoader loader(images, labels, {.batch_size = 16});  // 4 steps an epoch
  nn::Sequential net(nn::Flatten(), nn::Linear(64, 4));
  optim::SGD opt(net.parameters(), {.lr = 0.1});
  SpoiledTask task(net, opt);
  task.nan_from = 10;  // in epoch 3
  const auto dir = std::filesystem::temp_directory_path();
  const std::string tag = std::to_string(getpid());
  train::TrainerOptions options{.max_epochs = 4, .progress = false};
  options.metrics_path = dir / ("tessera_resume_metrics_" + tag + ".jsonl");
  options.state_path = dir / ("tessera_resume_metrics_" + tag + ".safetensors");
  testing::expect_throw_with<NonFiniteError>([&] { train::Trainer(options).fit(task, loader); },
                                             {"diverged in epoch 3"});
  task.nan_from = -1;
  options.resume_from = options.state_path;
  train::Trainer(options).fit(task, loader);
  std::ifstream in(options.metrics_path);
  std::vector<int> epochs;
  for (std::string line; std::getline(in, line);) {
    int epoch = 0;
    ASSERT_EQ(std::sscanf(line.c_str(), "{\"epoch\": %d", &epoch), 1) << line;
    EXPECT_EQ(line.find("\"train_loss\": null"), std::string::npos)
        << "the diverged line stayed: " << line;
    epochs.push_back(epoch);
  }
  EXPECT_EQ(epochs, (std::vector<int>{1, 2, 3, 4}));
  std::filesystem::remove(options.metrics_path);
  std::filesystem::remove(options.state_path);
}

// A resume with other clipping or precision than the saved run's is refused, naming both (it
// trained on silently, no longer continuing that run).
TEST(Trainer, AResumeWithOtherStepOptionsIsRefused) {
  const auto [images, labels] = quadrant_images(32);
  data::DataLoader loader(images, labels, {.batch_size = 16});
  nn::Sequential net(nn::Flatten(), nn::Linear(64, 4));
  optim::SGD opt(net.parameters(), {.lr = 0.1});
  train::Classifier task(net, opt);
  train::TrainerOptions options{.max_epochs = 1, .gradient_clip_val = 0.5, .progress = false};
  options.state_path = std::filesystem::temp_directory_path() /
                       ("tessera_step_options_" + std::to_string(getpid()) + ".safetensors");
  train::Trainer(options).fit(task, loader);
  options.resume_from = options.state_path;
  options.state_path.clear();
  options.max_epochs = 2;
  options.gradient_clip_val = 1.0;
  testing::expect_throw_with<Error>(
      [&] { train::Trainer(options).fit(task, loader); },
      {"was trained with gradient_clip_val=0.5, precision=float32 and this run with "
       "gradient_clip_val=1, precision=float32",
       "--clip, --precision"});
  options.gradient_clip_val = 0.5;
  options.precision = kBFloat16;
  testing::expect_throw_with<Error>([&] { train::Trainer(options).fit(task, loader); },
                                    {"this run with gradient_clip_val=0.5, precision=bfloat16"});
  options.precision = kFloat32;
  train::Trainer(options).fit(task, loader);  // the same options: resumed
  std::filesystem::remove(options.resume_from);
}

// A state that cannot be saved stops the run saying so, after which epoch, and that the
// file before is kept (a full disk said only "[save_safetensors] ... write failed").
TEST(Trainer, AStateThatCannotBeSavedSaysTrainingStopped) {
  const auto [images, labels] = quadrant_images(16);
  data::DataLoader loader(images, labels, {.batch_size = 16});
  nn::Sequential net(nn::Flatten(), nn::Linear(64, 4));
  optim::SGD opt(net.parameters(), {.lr = 0.1});
  train::Classifier task(net, opt);
  train::TrainerOptions options{.max_epochs = 2, .progress = false};
  options.state_path = std::filesystem::temp_directory_path();  // a directory
  testing::expect_throw_with<IOError>(
      [&] { train::Trainer(options).fit(task, loader); },
      {"[Trainer] training stopped after epoch 1: its state could not be saved", "--save-state",
       "is a directory"});
}

TEST(Trainer, AMetricsFileThatCannotBeWrittenSaysWhy) {
  const auto [images, labels] = quadrant_images(16);
  data::DataLoader loader(images, labels, {.batch_size = 16});
  nn::Sequential net(nn::Flatten(), nn::Linear(64, 4));
  optim::SGD opt(net.parameters(), {.lr = 0.1});
  train::Classifier task(net, opt);
  train::TrainerOptions options{.max_epochs = 1, .progress = false};
  options.metrics_path = "/nonexistent-tessera-dir/m.jsonl";
  testing::expect_throw_with<IOError>(
      [&] { train::Trainer(options).fit(task, loader); },
      {"[Trainer] cannot write metrics to '/nonexistent-tessera-dir/m.jsonl'",
       "No such file or directory", "Name a file in a directory that exists"});
}

// Note [Metrics written whole]: an earlier run's complete metrics file stays until this run
// has a line to replace it with (a run stopped in its first epoch emptied it), a resumed run
// drops a line cut short instead of appending to it, and a file that cannot be replaced
// stops the run with the file's name (a full disk lost the lines silently, exit 0).
TEST(Trainer, TheMetricsFileIsReplacedWholeAfterEachEpoch) {
  const auto [images, labels] = quadrant_images(64);
  data::DataLoader loader(images, labels, {.batch_size = 16});  // 4 steps an epoch
  nn::Sequential net(nn::Flatten(), nn::Linear(64, 4));
  optim::SGD opt(net.parameters(), {.lr = 0.1});
  struct Stopping : train::Classifier {
    using Classifier::Classifier;
    int steps = 0, stop_at = -1;
    std::function<void()> at_step;
    train::StepResult training_step(const data::Batch& batch) override {
      if (++steps == stop_at) at_step();
      return Classifier::training_step(batch);
    }
  } task(net, opt);
  const auto dir = std::filesystem::temp_directory_path();
  const std::string tag = std::to_string(getpid());
  train::TrainerOptions options{.max_epochs = 2, .progress = false};
  options.metrics_path = dir / ("tessera_whole_metrics_" + tag + ".jsonl");
  options.state_path = dir / ("tessera_whole_metrics_" + tag + ".safetensors");
  const auto read = [&] {
    std::ifstream in(options.metrics_path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  train::Trainer(options).fit(task, loader);
  const std::string complete = read();
  ASSERT_EQ(std::count(complete.begin(), complete.end(), '\n'), 2);
  // A new run that stops in its first epoch: the earlier file is untouched.
  task.steps = 0;
  task.stop_at = 2;
  task.at_step = [] { throw Error("stopped"); };
  EXPECT_THROW(train::Trainer(options).fit(task, loader), Error);
  EXPECT_EQ(read(), complete);
  // Resumed from epoch 1 with a line cut short after epoch 2's: dropped, not appended to.
  task.stop_at = -1;
  options.max_epochs = 1;
  train::Trainer(options).fit(task, loader);  // the state after epoch 1
  {
    std::ofstream out(options.metrics_path, std::ios::app);
    out << "{\"epoch\": 2, \"train_lo";
  }
  options.max_epochs = 2;
  options.resume_from = options.state_path;
  train::Trainer(options).fit(task, loader);
  const std::string resumed = read();
  EXPECT_EQ(std::count(resumed.begin(), resumed.end(), '\n'), 2) << resumed;
  EXPECT_EQ(resumed.find("train_lo{"), std::string::npos) << resumed;
  EXPECT_NE(resumed.find("{\"epoch\": 2, \"train_loss\": "), std::string::npos) << resumed;
  // The file cannot be replaced in epoch 2 (a directory took its name): the run stops, naming it.
  options.resume_from.clear();
  task.steps = 0;
  task.stop_at = 6;
  task.at_step = [&] {
    std::filesystem::remove(options.metrics_path);
    std::filesystem::create_directory(options.metrics_path);
  };
  testing::expect_throw_with<IOError>(
      [&] { train::Trainer(options).fit(task, loader); },
      {"[Trainer] cannot write the metrics file '" + options.metrics_path.string() + "'",
       "is a directory"});
  std::filesystem::remove(options.metrics_path);
  std::filesystem::remove(options.state_path);
}

TEST(Trainer, RefusesAClipValueThatIsNoNorm) {
  for (const double clip : {std::nan(""), static_cast<double>(INFINITY), -1.0}) {
    testing::expect_throw_with<Error>(
        [&] { train::Trainer({.gradient_clip_val = clip}); },
        {"[Trainer] gradient_clip_val (", "must be a finite norm >= 0 (0 turns clipping off)"});
  }
}

TESSERA_INSTANTIATE_DEVICE_SUITE(TrainerOnDevice);

}  // namespace
}  // namespace tessera

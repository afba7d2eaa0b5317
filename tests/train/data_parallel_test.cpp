// Data-parallel training on the test device and one more of its kind (logical CPU devices
// under TESSERA_CPU_DEVICES=2 or more; GPUs when there are several): 2 replicas with batch B end
// with the parameters of one device with batch B, stay identical, make no host wait per
// step, move exactly the all-reduce's bytes, and refuse what cannot work. With
// TrainerOptions::graph, recorded and replayed steps end where eager steps end, on one
// device and on several.
#include <fmt/format.h>

#include "support/device_test.h"
#include "support/random_images.h"

namespace tessera {
namespace {

using testing::DeviceTest;
using testing::expect_throw_with;
using testing::random_images;

class DataParallel : public DeviceTest {
 protected:
  // Two devices: the data sets and batches here are sized for two replicas (a short last
  // batch of 2 cannot be split over 3), so with 3 or more devices the tests still run.
  std::vector<Device> group() const {
    std::vector<Device> g = same_kind_devices();
    if (g.size() > 2) g.resize(2);
    return g;
  }
};

// conv: a small LeNet-like net; wide: an MLP whose first weight (64 x 1024 float32) is large
// enough to be all-reduced in place (Note [Gradients reduced in place]).
std::shared_ptr<nn::Module> make_net(bool conv, bool wide = false) {
  if (wide) {
    return std::make_shared<nn::Sequential>(nn::Flatten(), nn::Linear(64, 1024), nn::ReLU(),
                                            nn::Linear(1024, 4));
  }
  if (conv) {
    return std::make_shared<nn::Sequential>(nn::Conv2d(1, 3, 3, {.padding = {1, 1}}), nn::Sigmoid(),
                                            nn::AvgPool2d(2), nn::Flatten(), nn::Linear(48, 4));
  }
  return std::make_shared<nn::Sequential>(nn::Flatten(), nn::Linear(64, 16), nn::ReLU(),
                                          nn::Linear(16, 4));
}

train::OptimizerFactory make_opt(bool adam) {
  return [adam](const std::vector<Tensor>& p) -> std::unique_ptr<optim::Optimizer> {
    if (adam) return std::make_unique<optim::Adam>(p, optim::AdamOptions{.lr = 0.01});
    return std::make_unique<optim::SGD>(p, optim::SgdOptions{.lr = 0.2, .momentum = 0.9});
  };
}

// Trains on `devices`: one is plain training on it, several data-parallel.
void place(train::TrainerOptions& o, const std::vector<Device>& devices) {
  if (devices.size() == 1) {
    o.device = devices[0];
  } else {
    o.devices = devices;
  }
}

// The parameters after `epochs` epochs on `devices` (one: plain training) from seed 0.
std::vector<std::vector<double>> train_on(const std::vector<Device>& devices, bool conv, bool adam,
                                          double clip, int epochs,
                                          std::vector<std::shared_ptr<nn::Module>>* made = nullptr,
                                          bool graph = false, Tensor* step_losses = nullptr,
                                          Dtype precision = kFloat32, bool wide = false) {
  const auto [images, labels] = random_images(23);
  data::DataLoader loader(images, labels, {.batch_size = 7, .seed = 5});  // 7, 7, 7, 2
  manual_seed(0);
  std::vector<std::shared_ptr<nn::Module>> local;
  auto& models = made ? *made : local;
  train::Classifier task(
      [&models, conv, wide] {
        models.push_back(make_net(conv, wide));
        return models.back();
      },
      make_opt(adam));
  train::TrainerOptions o{.max_epochs = epochs, .gradient_clip_val = clip, .progress = false};
  o.graph = graph;
  o.precision = precision;
  place(o, devices);
  train::Trainer trainer(o);
  trainer.fit(task, loader);
  if (step_losses != nullptr) *step_losses = trainer.step_losses();
  AllowSync deliberate;  // the test's own read
  std::vector<std::vector<double>> out;
  for (const Tensor& p : task.model().parameters()) out.push_back(p.to_vector<double>());
  return out;
}

TEST_P(DataParallel, ReplicasEndWhereOneDeviceEnds) {
  const auto g = group();
  if (g.size() < 2) GTEST_SKIP() << "needs two devices of one kind (TESSERA_CPU_DEVICES=2)";
  for (bool conv : {false, true}) {
    for (bool adam : {false, true}) {
      for (double clip : {0.0, 0.05}) {
        const std::string what = fmt::format("conv={} adam={} clip={}", conv, adam, clip);
        const auto one = train_on({device()}, conv, adam, clip, 1);
        const auto many = train_on(g, conv, adam, clip, 1);
        ASSERT_EQ(one.size(), many.size());
        for (std::size_t i = 0; i < one.size(); ++i) {
          testing::expect_close(many[i], one[i], 1e-4, 1e-5,
                                what + " parameter " + std::to_string(i));
        }
      }
    }
  }
}

// fit on several devices moves the random generator as fit on one device does: the
// replicas' own initial values (replaced by replica 0's) were drawn from it, once per
// replica and fit, so dropout masks after fit depended on the device count and on how
// epochs were split into fits. Lazy layers too: replica 0 draws as one device does (and a
// second fit of a lazy model, whose fresh replicas are lazy again, was refused).
TEST_P(DataParallel, FitDrawsAsOneDeviceDoes) {
  const auto g = group();
  if (g.size() < 2) GTEST_SKIP() << "needs two devices of one kind (TESSERA_CPU_DEVICES=2)";
  const auto [images, labels] = random_images(16);
  data::DataLoader loader(images, labels, {.batch_size = 8, .seed = 5});
  for (const bool lazy : {false, true}) {
    std::vector<std::uint64_t> offsets;
    for (const std::vector<Device>& devices : {std::vector<Device>{device()}, g}) {
      manual_seed(0);
      train::Classifier task(
          [lazy]() -> std::shared_ptr<nn::Module> {
            if (lazy) return std::make_shared<nn::Sequential>(nn::Flatten(), nn::LazyLinear(4));
            return std::make_shared<nn::Sequential>(nn::Flatten(), nn::Linear(64, 4));
          },
          make_opt(false));
      train::TrainerOptions o{.max_epochs = 1, .progress = false};
      place(o, devices);
      train::Trainer trainer(o);
      trainer.fit(task, loader);
      trainer.fit(task, loader);
      offsets.push_back(rng_state().offset);
    }
    EXPECT_EQ(offsets[1], offsets[0]) << (lazy ? "lazy" : "built");
  }
}

// A layer whose gradient is summed in place, eager and recorded, with clipping and Adam.
TEST_P(DataParallel, AWideLayerEndsWhereOneDeviceEnds) {
  const auto g = group();
  if (g.size() < 2) GTEST_SKIP() << "needs two devices of one kind (TESSERA_CPU_DEVICES=2)";
  for (const bool graph : {false, true}) {
    if (graph && device().is_cuda()) continue;  // a graph holds one GPU
    for (const bool adam : {false, true}) {
      const std::string what = fmt::format("graph={} adam={}", graph, adam);
      const auto one = train_on({device()}, false, adam, 0.5, 2, nullptr, graph, nullptr, kFloat32,
                                /*wide=*/true);
      const auto many =
          train_on(g, false, adam, 0.5, 2, nullptr, graph, nullptr, kFloat32, /*wide=*/true);
      ASSERT_EQ(one.size(), many.size());
      for (std::size_t i = 0; i < one.size(); ++i) {
        testing::expect_close(many[i], one[i], 1e-4, 1e-5,
                              what + " parameter " + std::to_string(i));
      }
    }
  }
}

TEST_P(DataParallel, ReplicasStayIdenticalWithoutAHostWaitPerStep) {
  const auto g = group();
  if (g.size() < 2) GTEST_SKIP() << "needs two devices of one kind (TESSERA_CPU_DEVICES=2)";
  std::vector<std::shared_ptr<nn::Module>> made;
  {
    SyncGuard strict(SyncMode::kError);  // any implicit host wait in fit() throws
    reset_transfer_stats();
    train_on(g, false, true, 1.0, 3, &made);
  }
  ASSERT_EQ(made.size(), g.size());
  AllowSync deliberate;
  for (std::size_t r = 1; r < made.size(); ++r) {
    EXPECT_EQ(made[r]->device(), g[r]);
    const auto a = made[0]->parameters(), b = made[r]->parameters();
    for (std::size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].to_vector<double>(), b[i].to_vector<double>()) << "replica " << r;
    }
  }
}

// Each replica's running statistics follow its own shard; at the end of every epoch every
// replica takes the first one's (Note [Buffers across replicas]), eager and recorded.
TEST_P(DataParallel, ReplicasTakeTheFirstOnesBuffersAtEachEpochsEnd) {
  const auto g = group();
  if (g.size() < 2) GTEST_SKIP() << "needs two devices of one kind (TESSERA_CPU_DEVICES=2)";
  const auto [images, labels] = random_images(32);
  for (const bool graph :
       g[0].is_cpu() ? std::vector<bool>{false, true} : std::vector<bool>{false}) {
    SCOPED_TRACE(graph ? "recorded steps" : "eager steps");
    data::DataLoader loader(images, labels, {.batch_size = 8, .seed = 1});
    std::vector<std::shared_ptr<nn::Module>> models;
    train::Classifier task(
        [&models] {
          models.push_back(std::make_shared<nn::Sequential>(
              nn::Flatten(), nn::Linear(64, 6), nn::BatchNorm1d(6), nn::ReLU(), nn::Linear(6, 4)));
          return models.back();
        },
        make_opt(false));
    train::Trainer trainer({.max_epochs = 2, .progress = false, .devices = g, .graph = graph});
    const auto history = trainer.fit(task, loader, &loader);
    ASSERT_EQ(models.size(), g.size());
    AllowSync deliberate;  // the test's reads
    const auto first = models[0]->tensor("2.running_mean").to_vector<double>();
    EXPECT_NE(first, std::vector<double>(6, 0.0)) << "the statistics moved";
    for (std::size_t r = 1; r < models.size(); ++r) {
      EXPECT_EQ(models[r]->tensor("2.running_mean").to_vector<double>(), first) << "replica " << r;
      EXPECT_EQ(models[r]->tensor("2.running_var").to_vector<double>(),
                models[0]->tensor("2.running_var").to_vector<double>())
          << "replica " << r;
    }
    for (const auto& m : history) EXPECT_TRUE(std::isfinite(m.val_loss));
  }
}

TEST_P(DataParallel, TheLedgerShowsTheAllReduceBytes) {
  const auto g = group();
  if (g.size() != 2) GTEST_SKIP() << "counts bytes for two devices";
  const auto [images, labels] = random_images(32);
  // Recorded steps too where a graph may hold several devices (not GPUs).
  for (const bool graph :
       g[0].is_cpu() ? std::vector<bool>{false, true} : std::vector<bool>{false}) {
    SCOPED_TRACE(graph ? "recorded steps" : "eager steps");
    data::DataLoader loader(images, labels, {.batch_size = 8, .seed = 1});  // 4 steps
    train::Classifier task([] { return make_net(false); }, make_opt(false));
    train::Trainer trainer({.max_epochs = 1, .progress = false, .devices = g, .graph = graph});
    synchronize(g[0]);
    reset_transfer_stats();
    trainer.fit(task, loader);
    std::int64_t numel = 0;
    for (const Tensor& p : task.model().parameters()) numel += p.numel();
    // Into the first device: per step the all-reduce of one float32 bucket (for two devices,
    // (k - 1) * c + (n - c) = n elements). Logical CPU devices also count what the GPU
    // counts as h2d and d2h: where the first device is not cpu:0, the model's one move from
    // cpu:0. No batch crosses between logical devices: each replica's piece is gathered in
    // its device's memory (DataLoader::split), and a recorded step copies it within that
    // device. A recorded step's all-reduce counts at each replay (the second step, recorded
    // then replayed, the third and the fourth), not when it is recorded (Note [Graphs in
    // the ledger]).
    const auto n = static_cast<std::uint64_t>(numel);
    std::uint64_t expected = 4 * n * 4;
    if (g[0].is_cpu() && g[0] != cpu(0)) expected += n * 4;
    EXPECT_EQ(transfer_stats(g[0]).d2d_bytes, expected) << transfer_stats(g[0]);
    // Onto the host, once per epoch, each replica's losses (float64) and correct counts
    // (int64) of its 4 steps; from it, on logical devices, step_losses() onto cpu:0 (4
    // float32). Nothing else: no batch.
    EXPECT_EQ(transfer_stats().d2h_bytes, 2u * (4 * 8 + 4 * 8)) << transfer_stats();
    if (g[0].is_cpu()) EXPECT_EQ(transfer_stats().h2d_bytes, 4u * 4) << transfer_stats();
  }
}

TEST_P(DataParallel, RefusesWhatCannotWork) {
  const auto g = group();
  expect_throw_with<Error>([&] { train::Trainer({.device = device(), .devices = {device()}}); },
                           {"[Trainer] got both device", "devices"});
  expect_throw_with<DeviceError>(
      [&] {
        train::Trainer({.devices = {device(), device()}});
      },
      {"[Trainer] devices lists " + device().str() + " twice"});
  if (g.size() < 2) return;
  const auto [images, labels] = random_images(5);
  data::DataLoader loader(images, labels, {.batch_size = 4, .shuffle = false});  // 4, then 1
  train::Trainer trainer({.max_epochs = 1, .progress = false, .devices = g});
  train::Classifier good([] { return make_net(false); }, make_opt(false));
  const std::vector<double> before = good.model().parameters().front().to_vector<double>();
  expect_throw_with<Error>(
      [&] { trainer.fit(good, loader); },
      {"[Trainer] a batch of 1 example(s) cannot be split over 2 devices", "drop_last"});
  // Refused before the first step, not after an epoch's worth of full batches.
  EXPECT_EQ(good.model().parameters().front().to_vector<double>(), before);
  nn::Sequential net(nn::Flatten(), nn::Linear(64, 4));
  optim::SGD opt(net.parameters(), {.lr = 0.1});
  train::Classifier by_reference(net, opt);
  expect_throw_with<Error>(
      [&] { trainer.fit(by_reference, loader); },
      {"needs a replica of the task", "Classifier(make_model, make_optimizer)"});
  bool first = true;
  train::Classifier differs(
      [&first]() -> std::shared_ptr<nn::Module> {
        const bool wide = first;
        first = false;
        return std::make_shared<nn::Sequential>(nn::Flatten(), nn::Linear(64, wide ? 5 : 4));
      },
      make_opt(false));
  expect_throw_with<Error>(
      [&] { trainer.fit(differs, loader); },
      {"[Trainer] replica 1's parameter 0 is '1.weight' float32 [4, 64]", "[5, 64]"});
}

// Batches of 7, 7, 7, 2 per epoch: the first full batch runs eagerly, the next two replay
// the recorded step, the short one runs eagerly; over two epochs, with both optimizers
// (Adam's step counts then live on the device), with and without clipping. In float16 the
// recorded step also holds the gradient scaler's unscaling, skip and scale update.
void expect_recorded_equals_eager(const std::vector<Device>& devices, Dtype precision = kFloat32) {
  for (bool conv : {false, true}) {
    for (bool adam : {false, true}) {
      for (double clip : {0.0, 0.05}) {
        const std::string what =
            fmt::format("{} device(s) conv={} adam={} clip={} {}", devices.size(), conv, adam, clip,
                        dtype_name(precision));
        Tensor eager_losses, recorded_losses;
        const auto eager =
            train_on(devices, conv, adam, clip, 2, nullptr, false, &eager_losses, precision);
        const auto recorded =
            train_on(devices, conv, adam, clip, 2, nullptr, true, &recorded_losses, precision);
        ASSERT_EQ(eager.size(), recorded.size());
        for (std::size_t i = 0; i < eager.size(); ++i) {
          testing::expect_close(recorded[i], eager[i], 1e-5, 1e-6,
                                what + " parameter " + std::to_string(i));
        }
        testing::expect_close(recorded_losses, eager_losses.to_vector<double>(), 1e-5, 1e-6,
                              what + " step losses");
      }
    }
  }
}

TEST_P(DataParallel, RecordedStepsEndWhereEagerStepsEnd) {
  expect_recorded_equals_eager({device()});
}

TEST_P(DataParallel, RecordedReplicaStepsEndWhereEagerStepsEnd) {
  const auto g = group();
  if (g.size() < 2) GTEST_SKIP() << "needs two devices of one kind (TESSERA_CPU_DEVICES=2)";
  if (device().is_cuda()) GTEST_SKIP() << "a graph holds one GPU";
  expect_recorded_equals_eager(g);
}

TEST_P(DataParallel, RecordedFloat16StepsEndWhereEagerStepsEnd) {
  expect_recorded_equals_eager({device()}, kFloat16);
  const auto g = group();
  if (g.size() < 2 || device().is_cuda()) return;  // a graph holds one GPU
  expect_recorded_equals_eager(g, kFloat16);
}

// Float16 replicas: each scales its own loss and skips the same steps, as their summed
// gradients are equal.
TEST_P(DataParallel, Float16ReplicasStayIdenticalWithoutAHostWaitPerStep) {
  const auto g = group();
  if (g.size() < 2) GTEST_SKIP() << "needs two devices of one kind (TESSERA_CPU_DEVICES=2)";
  std::vector<std::shared_ptr<nn::Module>> made;
  {
    SyncGuard strict(SyncMode::kError);
    train_on(g, true, true, 1.0, 2, &made, false, nullptr, kFloat16);
  }
  ASSERT_EQ(made.size(), g.size());
  AllowSync deliberate;
  const auto a = made[0]->parameters(), b = made[1]->parameters();
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].to_vector<double>(), b[i].to_vector<double>()) << "parameter " << i;
  }
}

TEST_P(DataParallel, RecordedStepsMakeNoHostWait) {
  const auto g = device().is_cuda() ? std::vector<Device>{device()} : group();
  SyncGuard strict(SyncMode::kError);  // any implicit host wait in fit() throws
  train_on(g, true, true, 1.0, 2, nullptr, /*graph=*/true);
}

TEST_P(DataParallel, AStepThatDrawsRandomNumbersIsNotRecorded) {
  const auto [images, labels] = random_images(16);
  data::DataLoader loader(images, labels, {.batch_size = 4, .seed = 1});
  auto net = std::make_shared<nn::Sequential>(nn::Flatten(), nn::Dropout(0.5), nn::Linear(64, 4));
  optim::SGD sgd(net->parameters(), {.lr = 0.1});
  train::Classifier task(*net, sgd);
  train::Trainer trainer({.max_epochs = 1, .progress = false, .device = device(), .graph = true});
  expect_throw_with<GraphCaptureError>([&] { trainer.fit(task, loader); },
                                       {"[Trainer] the training step cannot be recorded as a graph",
                                        "[Dropout] Sequential[1] draws a new mask at every call",
                                        "model.eval()", "without the graph option"});
  // Nothing is left capturing: the device trains eagerly as before.
  train::Trainer eager({.max_epochs = 1, .progress = false, .device = device()});
  EXPECT_EQ(eager.fit(task, loader).size(), 1u);
}

// A prefetching loader's thread gathered pieces into devices the Trainer was recording the
// step on, and was refused at random (a third of the fits of this deep model). Pieces for
// devices are now gathered in iteration; recorded steps end where eager ones do.
TEST_P(DataParallel, RecordedStepsWithAPrefetchingLoader) {
  const auto g = group();
  if (g.size() < 2) GTEST_SKIP() << "needs two devices of one kind (TESSERA_CPU_DEVICES=2)";
  manual_seed(42);
  const Tensor x = randn({320, 12});
  const Tensor y = argmax(matmul(x, randn({12, 3})), 1);
  const auto run = [&](bool graph, std::int64_t prefetch) {
    data::DataLoader loader({x, y}, {.batch_size = 32, .seed = 3, .prefetch = prefetch});
    train::Classifier task(
        [] {
          manual_seed(7);
          auto net = std::make_shared<nn::Sequential>();
          for (int i = 0; i < 30; ++i) {
            net->push_back(nn::Linear(12, 12));
            net->push_back(nn::ReLU());
          }
          net->push_back(nn::Linear(12, 3));
          return net;
        },
        make_opt(false));
    train::TrainerOptions o{.max_epochs = 1, .progress = false, .devices = g};
    o.graph = graph;
    train::Trainer trainer(o);
    trainer.fit(task, loader);
    return trainer.step_losses().to_vector<double>();
  };
  const std::vector<double> eager = run(false, 0);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(run(true, 2), eager) << "fit " << i;
}

// A second fit() on several devices goes on from the task's optimizer state on every
// replica: the replicas' optimizers started empty (no momentum, no Adam moments), replica 1
// stepped otherwise, and the result differed from one fit of as many epochs.
TEST_P(DataParallel, ASecondFitGoesOnFromTheOptimizersState) {
  const auto g = group();
  if (g.size() < 2) GTEST_SKIP() << "needs two devices of one kind (TESSERA_CPU_DEVICES=2)";
  const auto [images, labels] = random_images(32);
  for (const bool adam : {false, true}) {
    const auto run = [&](int fits, int epochs) {
      data::DataLoader loader(images, labels, {.batch_size = 8, .shuffle = false});
      manual_seed(0);
      train::Classifier task([] { return make_net(false); }, make_opt(adam));
      train::TrainerOptions o{.max_epochs = epochs, .progress = false, .devices = g};
      for (int i = 0; i < fits; ++i) train::Trainer(o).fit(task, loader);
      AllowSync deliberate;
      std::vector<std::vector<double>> out;
      for (const Tensor& p : task.model().parameters()) out.push_back(p.to_vector<double>());
      return out;
    };
    const auto once = run(1, 2);
    const auto twice = run(2, 1);
    for (std::size_t i = 0; i < once.size(); ++i) {
      testing::expect_close(twice[i], once[i], 1e-5, 1e-6,
                            fmt::format("adam={} parameter {}", adam, i));
    }
  }
}

// One epoch of `task` on `devices` (one: plain training; several: data-parallel), and the
// parameters it ends with.
std::vector<std::vector<double>> fit_one_epoch(train::Task& task, data::DataLoader& loader,
                                               const std::vector<Device>& devices) {
  train::TrainerOptions o{.max_epochs = 1, .progress = false};
  place(o, devices);
  train::Trainer(o).fit(task, loader);
  AllowSync deliberate;  // the test's own read
  std::vector<std::vector<double>> out;
  for (const Tensor& p : task.model().parameters()) out.push_back(p.to_vector<double>());
  return out;
}

// A linear model with a parameter the loss never reaches (an unused head).
struct WithSpare : nn::Module {
  nn::Parameter w, spare;
  WithSpare() : nn::Module("WithSpare") {
    w = register_parameter("w", randn({64, 4}) * 0.1);
    spare = register_parameter("spare", ones({3}));
  }
  Tensor forward(const Tensor& x) override { return matmul(x.reshape({x.size(0), 64}), w); }
};

// Parameters that get no gradient on one device, because the loss never reaches them or
// they are frozen, get none on several either: weight decay shrank an unused one (a zero
// grad), and a frozen one made fit() throw about set_grad_ready_hook.
TEST_P(DataParallel, UnusedAndFrozenParametersAreLeftAsOnOneDevice) {
  const auto g = group();
  if (g.size() < 2) GTEST_SKIP() << "needs two devices of one kind (TESSERA_CPU_DEVICES=2)";
  const auto [images, labels] = random_images(23);
  for (const bool adamw : {false, true}) {
    const auto opt = [adamw](const std::vector<Tensor>& p) -> std::unique_ptr<optim::Optimizer> {
      if (adamw) return std::make_unique<optim::AdamW>(p, optim::AdamWOptions{.lr = 0.01});
      return std::make_unique<optim::SGD>(p, optim::SgdOptions{.lr = 0.5, .weight_decay = 0.1});
    };
    for (const bool frozen : {false, true}) {
      const auto train = [&](const std::vector<Device>& devices) {
        data::DataLoader loader(images, labels, {.batch_size = 8, .seed = 5});
        manual_seed(0);
        train::Classifier task(
            [frozen]() -> std::shared_ptr<nn::Module> {
              if (!frozen) return std::make_shared<WithSpare>();
              auto net = std::make_shared<nn::Sequential>(nn::Flatten(), nn::Linear(64, 16),
                                                          nn::ReLU(), nn::Linear(16, 4));
              net->at<nn::Linear>(1).weight.requires_grad_(false);
              return net;
            },
            opt);
        return fit_one_epoch(task, loader, devices);
      };
      const std::string what = fmt::format("adamw={} frozen={}", adamw, frozen);
      const auto one = train({device()});
      const auto many = train(g);
      ASSERT_EQ(one.size(), many.size()) << what;
      for (std::size_t i = 0; i < one.size(); ++i) {
        testing::expect_close(many[i], one[i], 1e-4, 1e-5,
                              what + " parameter " + std::to_string(i));
      }
      if (!frozen) EXPECT_EQ(many[1], (std::vector<double>{1, 1, 1})) << what << ": the spare";
    }
  }
}

// A parameter frozen on the task's model after the factory made it: the replicas, fresh from
// the factory, are frozen alike (each replica's own mask made the reducer index past its
// buckets: a segfault).
TEST_P(DataParallel, AParameterFrozenOnTheTasksModelIsFrozenOnEveryReplica) {
  const auto g = group();
  if (g.size() < 2) GTEST_SKIP() << "needs two devices of one kind (TESSERA_CPU_DEVICES=2)";
  const auto [images, labels] = random_images(16);
  const auto train = [&](const std::vector<Device>& devices) {
    data::DataLoader loader(images, labels, {.batch_size = 8, .seed = 5});
    manual_seed(0);
    train::Classifier task([] { return make_net(false); }, make_opt(false));
    task.model().parameters()[0].requires_grad_(false);
    return fit_one_epoch(task, loader, devices);
  };
  manual_seed(0);
  const std::vector<double> before = make_net(false)->parameters()[0].to_vector<double>();
  const auto one = train({device()});
  const auto many = train(g);
  EXPECT_EQ(many[0], before) << "the frozen weight";
  for (std::size_t i = 0; i < one.size(); ++i) {
    testing::expect_close(many[i], one[i], 1e-4, 1e-5, "parameter " + std::to_string(i));
  }
}

// A model whose parameters and buffers are bfloat16 or float16 trains on several devices:
// its gradients are summed in its own dtype (Note [Half collectives]), so it ends within a
// few of that dtype's roundings of one device's parameters (each replica's gradient is
// rounded before the sum, one device's once), with replicas bit for bit alike. With batch
// normalization (statistics of each replica's shard, so not one device's) the replicas'
// parameters and half buffers stay alike too.
TEST_P(DataParallel, HalfModelsEndNearOneDeviceWithIdenticalReplicas) {
  const auto g = group();
  if (g.size() < 2) GTEST_SKIP() << "needs two devices of one kind (TESSERA_CPU_DEVICES=2)";
  const auto [images, labels] = random_images(32);
  for (const Dtype dtype : {kBFloat16, kFloat16}) {
    for (const bool norm : {false, true}) {
      const std::string what = fmt::format("{}{}", dtype_name(dtype), norm ? " batch norm" : "");
      const auto train = [&](const std::vector<Device>& devices,
                             std::vector<std::shared_ptr<nn::Module>>& models) {
        data::DataLoader loader(std::vector<Tensor>{images.to(dtype), labels},
                                {.batch_size = 8, .seed = 1});
        manual_seed(0);
        train::Classifier task(
            [&models, dtype, norm] {
              auto net = std::make_shared<nn::Sequential>(nn::Flatten(), nn::Linear(64, 12));
              if (norm) net->push_back(nn::BatchNorm1d(12));
              net->push_back(nn::ReLU());
              net->push_back(nn::Linear(12, 4));
              net->to(dtype);
              models.push_back(net);
              return net;
            },
            make_opt(false));
        train::TrainerOptions o{.max_epochs = 2, .gradient_clip_val = 1.0, .progress = false};
        place(o, devices);
        train::Trainer(o).fit(task, loader, &loader);
        return task.model().parameters();
      };
      std::vector<std::shared_ptr<nn::Module>> alone, replicas;
      const std::vector<Tensor> many = train(g, replicas);
      ASSERT_EQ(replicas.size(), g.size());
      AllowSync deliberate;  // the test's reads
      for (std::size_t r = 1; r < replicas.size(); ++r) {
        auto names = replicas[0]->named_parameters();
        const auto buffers = replicas[0]->named_buffers();
        names.insert(names.end(), buffers.begin(), buffers.end());
        for (const auto& [name, t] : names) {
          if (is_floating(t.dtype())) EXPECT_EQ(t.dtype(), dtype) << what << " " << name;
          EXPECT_EQ(replicas[r]->tensor(name).to_vector<double>(), t.to_vector<double>())
              << what << " replica " << r << " " << name;
        }
      }
      if (norm) continue;
      const std::vector<Tensor> one = train({device()}, alone);
      // One rounding of a parameter is 2^-8 (bfloat16) or 2^-11 (float16) of it; a handful
      // of steps of differently rounded gradients moves it by a few of those.
      const double ulp = dtype == kBFloat16 ? 0x1p-8 : 0x1p-11;
      double worst = 0;
      for (std::size_t i = 0; i < one.size(); ++i) {
        const auto a = one[i].to_vector<double>(), b = many[i].to_vector<double>();
        for (std::size_t e = 0; e < a.size(); ++e) {
          worst = std::max(worst, std::abs(a[e] - b[e]) / (std::abs(a[e]) + 0.05));
        }
      }
      EXPECT_LT(worst, 16 * ulp) << what << ": the largest difference, relative";
    }
  }
}

TESSERA_INSTANTIATE_DEVICE_SUITE(DataParallel);

}  // namespace
}  // namespace tessera

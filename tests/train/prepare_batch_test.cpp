// Batches of any number of tensors (the book's later chapters carry four), the DataLoader
// that makes them, and Trainer::prepare_batch overridden: fit() and evaluate() call it for
// every batch, on one device, with a recorded step, and for each replica's share.
#include <set>

#include "support/device_test.h"

namespace tessera {
namespace {

using testing::DeviceTest;
using testing::expect_close;
using testing::expect_throw_with;

// n examples of a regression: x [n, 2], y [n, 1] = x (2, -3)^T + 1, a weight [n] per
// example (1) and each example's index [n] (int64).
std::vector<Tensor> regression_data(std::int64_t n) {
  std::vector<float> xs, ys, ws;
  std::vector<std::int64_t> index;
  for (std::int64_t i = 0; i < n; ++i) {
    const float x0 = static_cast<float>(i % 7) / 7.0f - 0.5f;
    const float x1 = static_cast<float>(i % 5) / 5.0f - 0.4f;
    xs.insert(xs.end(), {x0, x1});
    ys.push_back(2 * x0 - 3 * x1 + 1);
    ws.push_back(1);
    index.push_back(i);
  }
  return {from_vector(xs, {n, 2}), from_vector(ys, {n, 1}), from_vector(ws, {n}),
          from_vector(index, {n})};
}

TEST(Batches, ALoaderOfFourTensorsGathersTheSameExamplesOfEach) {
  const std::vector<Tensor> data = regression_data(12);
  data::DataLoader loader(data, {.batch_size = 5, .seed = 3});
  EXPECT_EQ(loader.size(), 12);
  EXPECT_EQ(loader.batches(), 3);
  const std::vector<float> xs = data[0].to_vector<float>(), ys = data[1].to_vector<float>();
  std::multiset<std::int64_t> seen;
  std::vector<std::int64_t> sizes;
  for (const data::Batch& b : loader) {
    ASSERT_EQ(b.size(), 4u);
    ASSERT_EQ(b.more.size(), 2u);
    EXPECT_EQ(b[3].dtype(), kInt64);
    EXPECT_EQ(b.x.dtype(), kFloat32);
    sizes.push_back(b.examples());
    const std::vector<std::int64_t> index = b[3].to_vector<std::int64_t>();
    const std::vector<float> x = b.x.to_vector<float>(), y = b.y.to_vector<float>();
    const std::vector<float> w = b[2].to_vector<float>();
    for (std::size_t k = 0; k < index.size(); ++k) {
      const auto e = static_cast<std::size_t>(index[k]);
      EXPECT_EQ(x[2 * k], xs[2 * e]);
      EXPECT_EQ(x[2 * k + 1], xs[2 * e + 1]);
      EXPECT_EQ(y[k], ys[e]);
      EXPECT_EQ(w[k], 1.0f);
      seen.insert(index[k]);
    }
  }
  EXPECT_EQ(sizes, (std::vector<std::int64_t>{5, 5, 2}));
  EXPECT_EQ(seen.size(), 12u);
  EXPECT_EQ(std::set<std::int64_t>(seen.begin(), seen.end()).size(), 12u) << "each example once";
  // Shuffled: the first batch is not examples 0-4.
  const std::vector<std::int64_t> first = (*loader.begin())[3].to_vector<std::int64_t>();
  EXPECT_NE(first, (std::vector<std::int64_t>{0, 1, 2, 3, 4}));
}

TEST(Batches, WhatALoaderOrABatchCannotTakeIsRefused) {
  std::vector<Tensor> data = regression_data(6);
  data[2] = ones({5});
  expect_throw_with<ShapeError>([&] { data::DataLoader loader(data); },
                                {"[DataLoader] every tensor holds the examples along dim 0",
                                 "tensors[0] is [6, 2]", "tensors[2] is [5]"});
  expect_throw_with<Error>([] { data::DataLoader loader(std::vector<Tensor>{}); },
                           {"[DataLoader] needs at least one tensor"});
  expect_throw_with<ShapeError>(
      [] {
        data::DataLoader loader(std::vector<Tensor>{zeros({0, 3})});
      },
      {"[DataLoader] the data set is empty"});
  const data::Batch one = data::Batch::of({ones({3, 2})});
  EXPECT_EQ(one.size(), 2u);
  EXPECT_FALSE(one.y.defined());
  EXPECT_EQ(one.examples(), 3);
  const data::Batch four = data::Batch::of(regression_data(3));
  EXPECT_EQ(four.tensors().size(), 4u);
  EXPECT_TRUE(four[2].is_same(four.more[0]));
  expect_throw_with<Error>([&] { (void)four[4]; },
                           {"[Batch] there is no tensor 4 in a batch of 4 (x, y and 2 in more)"});
  expect_throw_with<Error>([] { (void)data::Batch::of({}); }, {"[Batch::of]"});
}

class Batches : public DeviceTest {};

TEST_P(Batches, ToDeviceMovesEveryTensor) {
  data::DataLoader loader(regression_data(8), {.batch_size = 8, .shuffle = false});
  const data::Batch b = loader.batch(0);
  const data::Batch moved = data::to_device(b, device());
  ASSERT_EQ(moved.size(), 4u);
  for (std::size_t i = 0; i < moved.size(); ++i) {
    EXPECT_EQ(moved[i].device(), device()) << "tensor " << i;
    EXPECT_EQ(moved[i].to_vector<double>(), b[i].to_vector<double>()) << "tensor " << i;
  }
}

// A regression on all four tensors of a batch: the mean of each example's squared error
// times its weight (batch.more[0]).
class WeightedRegression : public train::Task {
 public:
  WeightedRegression()
      : model_(std::make_shared<nn::Linear>(2, 1)), opt_(model_->parameters(), {.lr = 0.2}) {}
  nn::Module& model() override { return *model_; }
  optim::Optimizer& optimizer() override { return opt_; }
  train::StepResult training_step(const data::Batch& b) override { return step(b); }
  train::StepResult validation_step(const data::Batch& b) override {
    NoGradGuard no_grad;
    return step(b);
  }
  std::unique_ptr<train::Task> replicate() override {
    return std::make_unique<WeightedRegression>();
  }

 private:
  train::StepResult step(const data::Batch& b) {
    EXPECT_EQ(b.size(), 4u);
    const Tensor err = (*model_)(b.x) - b.y;
    return {mean(sum(err * err, {1}) * b.more[0]), Tensor()};
  }
  std::shared_ptr<nn::Linear> model_;
  optim::SGD opt_;
};

// Scales every example's weight by `scale` after the usual move, and notes each call.
class WeightingTrainer : public train::Trainer {
 public:
  WeightingTrainer(train::TrainerOptions options, double scale)
      : Trainer(std::move(options)), scale_(scale) {}
  using Trainer::prepare_batch;
  data::Batch prepare_batch(const data::Batch& batch, Device device) const override {
    devices.push_back(device);
    examples.push_back(batch.examples());
    data::Batch b = Trainer::prepare_batch(batch, device);
    b.more[0] = b.more[0] * scale_;
    return b;
  }
  mutable std::vector<Device> devices;
  mutable std::vector<std::int64_t> examples;

 private:
  double scale_;
};

std::vector<std::vector<double>> values(nn::Module& m) {
  std::vector<std::vector<double>> out;
  for (const Tensor& p : m.parameters()) out.push_back(p.to_vector<double>());
  return out;
}

TEST_P(Batches, AnOverriddenPrepareBatchFeedsEveryStep) {
  data::DataLoader loader(regression_data(24), {.batch_size = 8, .seed = 1});
  for (bool graph : {false, true}) {
    SCOPED_TRACE(graph ? "recorded step" : "eager steps");
    manual_seed(0);
    WeightedRegression task;
    const auto before = values(task.model());
    // Weights of 0: no step may change the model, so every step took this prepare_batch.
    WeightingTrainer zero({.max_epochs = 2, .progress = false, .device = device(), .graph = graph},
                          0.0);
    zero.fit(task, loader);
    EXPECT_EQ(values(task.model()), before);
    EXPECT_EQ(zero.devices, std::vector<Device>(6, device()));
    zero.evaluate(task, loader);
    EXPECT_EQ(zero.devices.size(), 9u) << "evaluate prepares its batches too";
    // The same with weights of 1 learns.
    WeightingTrainer one({.max_epochs = 4, .progress = false, .device = device(), .graph = graph},
                         1.0);
    const auto history = one.fit(task, loader);
    EXPECT_NE(values(task.model()), before);
    EXPECT_LT(history.back().train_loss, history.front().train_loss);
  }
}

TEST_P(Batches, EveryReplicaGetsItsShareOfEveryTensor) {
  const std::vector<Device> group = same_kind_devices();
  if (group.size() < 2) GTEST_SKIP() << "needs two devices of one kind (TESSERA_CPU_DEVICES=2)";
  data::DataLoader loader(regression_data(24), {.batch_size = 8, .seed = 1});
  for (bool graph : {false, true}) {
    SCOPED_TRACE(graph ? "recorded step" : "eager steps");
    manual_seed(0);
    WeightedRegression task;
    const auto before = values(task.model());
    train::TrainerOptions options{.max_epochs = 1, .progress = false, .graph = graph};
    options.devices = {group[0], group[1]};
    WeightingTrainer zero(options, 0.0);
    zero.fit(task, loader);
    EXPECT_EQ(values(task.model()), before);
    EXPECT_EQ(zero.devices,
              (std::vector<Device>{group[0], group[1], group[0], group[1], group[0], group[1]}));
    EXPECT_EQ(zero.examples, std::vector<std::int64_t>(6, 4));
    WeightingTrainer one(options, 1.0);
    one.fit(task, loader);
    EXPECT_NE(values(task.model()), before);
  }
}

TESSERA_INSTANTIATE_DEVICE_SUITE(Batches);

}  // namespace
}  // namespace tessera

// The Trainer across ranks (run under mpirun -np 2, see tests/CMakeLists.txt): 2 ranks each
// with a share of batch B end with the parameters of one process with batch B, for SGD with
// momentum and Adam, with and without clipping, on the plain CPU or on both logical CPU
// devices of each rank; only rank 0 writes the metrics file; ranks that would train
// different things are refused on every rank.
#include <unistd.h>

#include <fmt/format.h>

#include <filesystem>

#include "support/device_test.h"
#include "support/random_images.h"

namespace tessera {
namespace {

using testing::expect_throw_with;
using testing::random_images;

struct TrainRun {
  bool conv = false, adam = false;
  double clip = 0;
  std::int64_t batch = 7;
  int hidden = 16;
  std::vector<Device> devices;  // empty: cpu()
  const ProcessGroup* group = nullptr;
  std::filesystem::path metrics;
  bool graph = false;  // TrainerOptions::graph
  double lr = 0.2;     // SGD's
  std::uint64_t seed = 5;
  bool relu = true;      // else Sigmoid: the same parameters, another model
  bool dropout = false;  // Dropout(0.3) after the activation: draws random numbers
  int epochs = 3;
  std::filesystem::path state, resume;
  std::int64_t examples = 25;
  int frozen = -1;  // the index of a parameter to freeze (requires_grad off), or none
};

std::vector<std::vector<double>> train(const TrainRun& run) {
  const auto [images, labels] =
      random_images(run.examples);  // 25: batches of 7, 7, 7, 4: uneven over 2 or 4 devices
  data::DataLoader loader(images, labels, {.batch_size = run.batch, .seed = run.seed});
  manual_seed(0);
  train::Classifier task(
      [&run]() -> std::shared_ptr<nn::Module> {
        if (run.conv) {
          return std::make_shared<nn::Sequential>(nn::Conv2d(1, 3, 3, {.padding = {1, 1}}),
                                                  nn::Sigmoid(), nn::AvgPool2d(2), nn::Flatten(),
                                                  nn::Linear(48, 4));
        }
        auto mlp = std::make_shared<nn::Sequential>(nn::Flatten(), nn::Linear(64, run.hidden));
        if (run.relu) {
          mlp->push_back(nn::ReLU());
        } else {
          mlp->push_back(nn::Sigmoid());
        }
        if (run.dropout) mlp->push_back(nn::Dropout(0.3));
        mlp->push_back(nn::Linear(run.hidden, 4));
        return mlp;
      },
      [&run](const std::vector<Tensor>& p) -> std::unique_ptr<optim::Optimizer> {
        if (run.adam) return std::make_unique<optim::Adam>(p, optim::AdamOptions{.lr = 0.01});
        return std::make_unique<optim::SGD>(p, optim::SgdOptions{.lr = run.lr, .momentum = 0.9});
      });
  if (run.frozen >= 0) task.model().parameters()[run.frozen].requires_grad_(false);
  train::TrainerOptions o{.max_epochs = run.epochs,
                          .gradient_clip_val = run.clip,
                          .progress = false,
                          .metrics_path = run.metrics};
  o.devices = run.devices;
  o.process_group = run.group;
  o.graph = run.graph;
  o.state_path = run.state;
  o.resume_from = run.resume;
  train::Trainer(o).fit(task, loader);
  AllowSync deliberate;  // the test's own read
  std::vector<std::vector<double>> out;
  for (const Tensor& p : task.model().parameters()) out.push_back(p.to_vector<double>());
  return out;
}

void expect_same(const std::vector<std::vector<double>>& got,
                 const std::vector<std::vector<double>>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t p = 0; p < got.size(); ++p) {
    ASSERT_EQ(got[p].size(), want[p].size());
    for (std::size_t i = 0; i < got[p].size(); ++i) {
      EXPECT_NEAR(got[p][i], want[p][i], 2e-4 * (1 + std::abs(want[p][i]))) << "param " << p;
    }
  }
}

class TrainerRanks : public ::testing::Test {
 protected:
  static const ProcessGroup& group() { return ProcessGroup::init(); }
  // Both logical CPU devices of this rank when there are two, else the plain CPU.
  static std::vector<Device> local_devices() {
    if (num_cpu_devices() >= 2) return {cpu(0), cpu(1)};
    return {};
  }
};

TEST_F(TrainerRanks, RanksEndWhereOneProcessEnds) {
  ASSERT_EQ(group().size(), 2) << "run under mpirun -np 2";
  for (const bool conv : {false, true}) {
    for (const bool adam : {false, true}) {
      for (const double clip : {0.0, 0.05}) {
        SCOPED_TRACE(fmt::format("conv {} adam {} clip {}", conv, adam, clip));
        const TrainRun alone{.conv = conv, .adam = adam, .clip = clip};
        TrainRun ranks = alone;
        ranks.group = &group();
        ranks.devices = local_devices();
        expect_same(train(ranks), train(alone));
      }
    }
  }
}

// Each rank records its step with the all-reduce across the ranks inside, and replays it.
TEST_F(TrainerRanks, RecordedStepsEndWhereOneEagerProcessEnds) {
  ASSERT_EQ(group().size(), 2) << "run under mpirun -np 2";
  for (const bool conv : {false, true}) {
    for (const bool adam : {false, true}) {
      SCOPED_TRACE(fmt::format("conv {} adam {}", conv, adam));
      const TrainRun alone{.conv = conv, .adam = adam, .clip = 0.05};
      TrainRun ranks = alone;
      ranks.group = &group();
      ranks.devices = local_devices();
      ranks.graph = true;
      expect_same(train(ranks), train(alone));
    }
  }
}

// A parameter the loss reaches only for an odd number of rows: with batches of 9 split 5 and
// 4, rank 0 uses it and rank 1 does not. The ranks agree it was used (its grad is the sum),
// also in recorded steps: when the recording skipped the agreement, rank 1 recorded a step
// that left it without a grad, and the two ranks' copies drifted apart.
struct OddRowsExtra : nn::Module {
  nn::Parameter w, extra;
  OddRowsExtra() : nn::Module("OddRowsExtra") {
    w = register_parameter("w", randn({64, 4}) * 0.1);
    extra = register_parameter("extra", zeros({4}));
  }
  Tensor forward(const Tensor& x) override {
    Tensor out = matmul(x.reshape({x.size(0), 64}), w);
    return x.size(0) % 2 == 1 ? out + extra : out;
  }
};

TEST_F(TrainerRanks, ARankDependentUseKeepsTheRanksAlikeWhenRecorded) {
  ASSERT_EQ(group().size(), 2) << "run under mpirun -np 2";
  for (const bool graph : {false, true}) {
    const auto [images, labels] = random_images(25);  // batches of 9, 9, 7
    data::DataLoader loader(images, labels, {.batch_size = 9, .seed = 5});
    manual_seed(0);
    train::Classifier task([] { return std::make_shared<OddRowsExtra>(); },
                           [](const std::vector<Tensor>& p) -> std::unique_ptr<optim::Optimizer> {
                             return std::make_unique<optim::SGD>(p, optim::SgdOptions{.lr = 0.5});
                           });
    train::TrainerOptions o{.max_epochs = 2, .progress = false};
    o.process_group = &group();
    o.graph = graph;
    train::Trainer(o).fit(task, loader);
    AllowSync deliberate;  // the test's own read
    const Tensor extra = task.model().parameters()[1];
    const std::vector<double> both = group().all_gather(extra).to_vector<double>();
    const std::vector<double> mine(both.begin(), both.begin() + 4);
    EXPECT_EQ(std::vector<double>(both.begin() + 4, both.end()), mine) << "graph " << graph;
    EXPECT_NE(mine, std::vector<double>(4, 0.0)) << "graph " << graph << ": extra trained";
  }
}

// Each rank draws its own random numbers (Note [Each rank's random numbers] in
// data_parallel.cpp): before, every rank took rank 0's generator and the ranks' shards got
// the same dropout masks. A task that draws one number per step shows the streams.
class DrawingClassifier : public train::Classifier {
 public:
  using Classifier::Classifier;
  std::vector<double> draws;
  train::StepResult training_step(const data::Batch& batch) override {
    AllowSync deliberate;  // the test's own read
    draws.push_back(rand({1}, {kFloat64}).item<double>());
    return Classifier::training_step(batch);
  }
};

TEST_F(TrainerRanks, EachRankDrawsItsOwnRandomNumbers) {
  ASSERT_EQ(group().size(), 2) << "run under mpirun -np 2";
  const auto [images, labels] = random_images(25);  // batches of 7, 7, 7, 4
  data::DataLoader loader(images, labels, {.batch_size = 7, .seed = 5});
  manual_seed(group().rank() == 0 ? 3 : 11);  // rank 0's generator is the run's
  DrawingClassifier task(
      [] { return std::make_shared<nn::Sequential>(nn::Flatten(), nn::Linear(64, 4)); },
      [](const std::vector<Tensor>& p) -> std::unique_ptr<optim::Optimizer> {
        return std::make_unique<optim::SGD>(p, optim::SgdOptions{.lr = 0.1});
      });
  train::TrainerOptions o{.max_epochs = 3, .progress = false};
  o.process_group = &group();
  train::Trainer(o).fit(task, loader);
  const RngState mine = rng_state();
  AllowSync deliberate;
  ASSERT_EQ(task.draws.size(), 12u);  // 4 steps in each of 3 epochs
  const std::vector<double> both =
      group().all_gather(from_vector(task.draws, {12})).to_vector<double>();
  const std::vector<double> rank0(both.begin(), both.begin() + 12);
  const std::vector<double> rank1(both.begin() + 12, both.end());
  for (std::size_t i = 0; i < 12; ++i) {
    EXPECT_NE(rank0[i], rank1[i]) << "step " << i << ": both ranks drew the same number";
    for (std::size_t j = 0; j < i; ++j) {
      EXPECT_NE(rank1[i], rank1[j]) << "rank 1 drew step " << j << "'s number again at " << i;
    }
  }
  // After fit every rank holds rank 0's generator state.
  const std::vector<std::int64_t> states = group().exchange(
      {static_cast<std::int64_t>(mine.seed), static_cast<std::int64_t>(mine.offset)});
  EXPECT_EQ(states[0], states[2]);
  EXPECT_EQ(states[1], states[3]);
}

// A loader that began another count of epochs on one rank (rank 0 looked at a batch before
// fit) shuffled with another seed there, and the ranks' shards overlapped: every rank now
// walks rank 0's shuffle, so the run equals one process whose loader began the same epochs.
TEST_F(TrainerRanks, EveryRankWalksRankZerosShuffle) {
  ASSERT_EQ(group().size(), 2) << "run under mpirun -np 2";
  const auto run = [&](const ProcessGroup* g, bool peek) {
    const auto [images, labels] = random_images(24);
    data::DataLoader loader(images, labels, {.batch_size = 8, .seed = 3});
    if (peek) (void)*loader.begin();  // begins epoch 0
    manual_seed(0);
    train::Classifier task(
        [] { return std::make_shared<nn::Sequential>(nn::Flatten(), nn::Linear(64, 4)); },
        [](const std::vector<Tensor>& p) -> std::unique_ptr<optim::Optimizer> {
          return std::make_unique<optim::SGD>(p, optim::SgdOptions{.lr = 0.3});
        });
    train::TrainerOptions o{.max_epochs = 2, .progress = false};
    o.process_group = g;
    train::Trainer(o).fit(task, loader);
    AllowSync deliberate;
    std::vector<std::vector<double>> out;
    for (const Tensor& p : task.model().parameters()) out.push_back(p.to_vector<double>());
    return out;
  };
  expect_same(run(&group(), group().rank() == 0), run(nullptr, true));
}

// Each rank's running statistics follow its own shard; at each epoch's end every rank takes
// rank 0's (Note [Buffers across replicas]), so the validation pass and the models the ranks
// hold after fit agree.
TEST_F(TrainerRanks, EveryRankEndsWithRankZerosRunningStatistics) {
  ASSERT_EQ(group().size(), 2) << "run under mpirun -np 2";
  const auto [images, labels] = random_images(24);
  data::DataLoader loader(images, labels, {.batch_size = 8, .seed = 3});
  manual_seed(0);
  train::Classifier task(
      [] {
        return std::make_shared<nn::Sequential>(nn::Flatten(), nn::Linear(64, 6),
                                                nn::BatchNorm1d(6), nn::ReLU(), nn::Linear(6, 4));
      },
      [](const std::vector<Tensor>& p) -> std::unique_ptr<optim::Optimizer> {
        return std::make_unique<optim::SGD>(p, optim::SgdOptions{.lr = 0.3});
      });
  train::TrainerOptions o{.max_epochs = 2, .progress = false};
  o.process_group = &group();
  o.devices = local_devices();
  const auto history = train::Trainer(o).fit(task, loader, &loader);
  AllowSync deliberate;  // the test's own reads
  for (const char* name : {"2.running_mean", "2.running_var", "2.weight"}) {
    const std::vector<double> both =
        group().all_gather(task.model().tensor(name).reshape({1, 6})).to_vector<double>();
    EXPECT_EQ(std::vector<double>(both.begin(), both.begin() + 6),
              std::vector<double>(both.begin() + 6, both.end()))
        << name;
  }
  const std::vector<double> val =
      group()
          .all_gather(from_vector(std::vector<double>{history.back().val_loss}, {1}))
          .to_vector<double>();
  EXPECT_EQ(val[0], val[1]) << "both ranks validated the same model";
}

TEST_F(TrainerRanks, OnlyRankZeroWritesTheMetricsFile) {
  const auto dir = std::filesystem::temp_directory_path() /
                   fmt::format("tessera_ranks_{}", getppid());  // mpirun's pid: shared
  std::filesystem::create_directories(dir);
  const auto mine = dir / fmt::format("metrics_rank{}.jsonl", group().rank());
  std::filesystem::remove(mine);
  train({.group = &group(), .metrics = mine});
  EXPECT_EQ(std::filesystem::exists(mine), group().rank() == 0);
  group().barrier();  // every rank has looked before the directory goes
  if (group().rank() == 0) std::filesystem::remove_all(dir);
}

TEST_F(TrainerRanks, RanksThatWouldTrainDifferentThingsAreRefusedOnEveryRank) {
  const int rank = group().rank();
  expect_throw_with<Error>(
      [&] { train({.batch = rank == 0 ? 7 : 8, .group = &group()}); },
      {"[Trainer] rank 1's batch size is 8 but rank 0's is 7", "same training"});
  expect_throw_with<Error>(
      [&] { train({.hidden = rank == 0 ? 16 : 12, .group = &group()}); },
      {"[Trainer] rank 1's parameter 0 differs in name, dtype, shape or requires_grad from "
       "rank 0's",
       rank == 0 ? "(on rank 0 it is '1.weight' float32 [16, 64], trained)"
                 : "(on rank 1 it is '1.weight' float32 [12, 64], trained)",
       "same model"});
  // Another parameter frozen on each rank: the gradient buckets held different parameters
  // in the same places, and each rank added the other's bias gradient to its own weight's.
  expect_throw_with<Error>(
      [&] { train({.group = &group(), .frozen = rank == 0 ? 1 : 0}); },
      {"[Trainer] rank 1's parameter 0 differs in name, dtype, shape or requires_grad",
       rank == 0 ? "'1.weight' float32 [16, 64], trained)"
                 : "'1.weight' float32 [16, 64], frozen (requires_grad off))",
       "freeze the same parameters"});
  // As many batches from other data sets: each rank's last batch was cut differently.
  expect_throw_with<Error>(
      [&] { train({.group = &group(), .examples = rank == 0 ? 25 : 26}); },
      {"[Trainer] rank 1's count of training examples is 26 but rank 0's is 25"});
  // The same parameters, another training: each was trained silently (or hung).
  const auto refused = [&](const TrainRun& mine, const char* what, const std::string& here) {
    expect_throw_with<Error>(
        [&] { train(mine); },
        {fmt::format("[Trainer] rank 1's {} differs from rank 0's (on rank {}: ", what, rank), here,
         "same training"});
  };
  const double lr = rank == 0 ? 0.2 : 0.3;
  refused({.group = &group(), .lr = lr}, "optimizer",
          fmt::format("SGD(lr={}, momentum=0.9, dampening=0, weight_decay=0, nesterov=false)", lr));
  refused({.group = &group(), .seed = static_cast<std::uint64_t>(rank)}, "data order",
          fmt::format("shuffle=true, seed={}, drop_last=false", rank));
  refused({.group = &group(), .graph = rank == 1}, "recording of steps (graph)",
          rank == 1 ? "on" : "off");
  refused({.group = &group(), .relu = rank == 0}, "model", rank == 0 ? "ReLU()" : "Sigmoid()");
  if (num_cpu_devices() >= 2) {
    const std::vector<Device> mine =
        rank == 0 ? std::vector<Device>{cpu(0), cpu(1)} : std::vector<Device>{cpu(1), cpu(0)};
    refused({.devices = mine, .group = &group()}, "devices",
            rank == 0 ? "cpu:0,cpu:1" : "cpu:1,cpu:0");
  }
}

TEST_F(TrainerRanks, OneRankResumingAloneIsRefusedOnEveryRank) {
  const auto dir = std::filesystem::temp_directory_path() /
                   fmt::format("tessera_ranks_resume_{}", getppid());  // mpirun's pid: shared
  if (group().rank() == 0) std::filesystem::create_directories(dir);
  group().barrier();
  const auto state = dir / "state.safetensors";
  train({.group = &group(), .epochs = 1, .state = state});  // rank 0 writes it
  group().barrier();
  const bool resumes = group().rank() == 0;
  expect_throw_with<Error>(
      [&] { train({.group = &group(), .resume = resumes ? state : std::filesystem::path()}); },
      {"[Trainer] rank 1 starts afresh but rank 0 resumes after epoch 1",
       "the same training state"});
  // Every rank resuming from it trains on.
  const auto resumed = train({.group = &group(), .resume = state});
  group().barrier();
  // A rank resuming from another file of the same epoch (a stale copy on one host) trained
  // on with its own parameters. Refused, before any rank loads: a retry from the same file
  // then trains as every rank resuming from it does.
  const auto other = dir / "other.safetensors";
  if (group().rank() == 0) {
    // Alone, on other data: other values, and the same model, optimizer and data order.
    train({.epochs = 1, .state = other, .examples = 24});
  }
  group().barrier();
  expect_throw_with<Error>(
      [&] { train({.group = &group(), .resume = group().rank() == 1 ? other : state}); },
      {"[Trainer] rank 1 resumes after epoch 1 as rank 0 does, but from another training "
       "state file (its bytes differ from rank 0's)",
       "same file to resume from"});
  EXPECT_EQ(train({.group = &group(), .resume = state}), resumed);
  group().barrier();
  if (group().rank() == 0) std::filesystem::remove_all(dir);
}

// Shards of 4 and 3 rows draw different counts of dropout numbers; a run resumed from rank
// 0's file (its generator) continued rank 1 with other masks than the run it resumed. Every
// rank now goes on from rank 0's generator after each epoch, so the two runs agree.
TEST_F(TrainerRanks, AResumedRunWithDropoutEqualsTheRunItContinues) {
  ASSERT_EQ(group().size(), 2) << "run under mpirun -np 2";
  const auto dir = std::filesystem::temp_directory_path() /
                   fmt::format("tessera_ranks_dropout_{}", getppid());  // mpirun's pid: shared
  if (group().rank() == 0) std::filesystem::create_directories(dir);
  group().barrier();
  const auto state = dir / "state.safetensors";
  const TrainRun base{.group = &group(), .relu = true, .dropout = true};
  TrainRun first = base;
  first.epochs = 1;
  first.state = state;
  (void)train(first);
  group().barrier();
  TrainRun resumed = base;
  resumed.resume = state;
  const auto straight = train(base);
  expect_same(train(resumed), straight);
  group().barrier();
  if (group().rank() == 0) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera

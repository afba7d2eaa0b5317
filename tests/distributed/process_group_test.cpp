// Process groups on every device of this process: over MPI on the CPU devices (the plain
// CPU, or cpu:0 and cpu:1 with TESSERA_CPU_DEVICES=2), over NCCL on a GPU. CTest runs this
// binary alone (a world of one) and under `mpirun -np 2`; scripts/gpu-check runs it alone on
// the GPU machine (NCCL's one-rank group). Values against a float64 reference built from
// every rank's seeded inputs, the ledger, the Trainer on the group, and every error. Each
// rank must run the same tests in the same order.
#include <chrono>
#include <thread>

#include "support/device_test.h"
#include "support/random_images.h"

namespace tessera {
namespace {

using testing::DeviceTest;
using testing::expect_close;
using testing::expect_throw_with;

// First in this file, so it runs before any test makes the group.
TEST(ProcessGroupBeforeInit, WorldSaysToCallInit) {
  expect_throw_with<Error>([] { ProcessGroup::world(); },
                           {"[ProcessGroup::world] there is no mpi process group yet; call "
                            "ProcessGroup::init() first"});
}

TEST(ProcessGroupBeforeInit, NcclWithoutAGpuIsRefused) {
  if (num_gpus() > 0) GTEST_SKIP() << "this process sees a GPU";
  expect_throw_with<DeviceError>([] { ProcessGroup::init(ProcessBackend::kNccl); },
                                 {"[ProcessGroup::init] the NCCL backend moves GPU tensors, but "
                                  "this process sees no GPU (",
                                  "use ProcessGroup::init() (MPI)"});
}

class ProcessGroupTest : public DeviceTest {
 protected:
  void SetUp() override {
    // MPI moves CPU tensors, NCCL GPU tensors (one GPU per rank).
    pg_ = &ProcessGroup::init(device().is_cuda() ? ProcessBackend::kNccl : ProcessBackend::kMpi);
  }
  const ProcessGroup& pg() const { return *pg_; }
  // Rank r's values for a test: seeded by the test's seed and r, so every rank knows all.
  std::vector<double> values_of(int r, std::size_t n, std::uint64_t seed, Dtype dtype) const {
    std::vector<double> v = testing::random_values(n, seed * 100 + r, -50, 50);
    return from_vector(v, {static_cast<std::int64_t>(n)}, {dtype}).to_vector<double>();
  }
  const ProcessGroup* pg_ = nullptr;
};

TEST_P(ProcessGroupTest, RankAndSizeMatchTheLauncher) {
  const char* launched = std::getenv("OMPI_COMM_WORLD_SIZE");
  EXPECT_EQ(pg().size(), launched != nullptr ? std::atoi(launched) : 1);
  EXPECT_GE(pg().rank(), 0);
  EXPECT_LT(pg().rank(), pg().size());
  EXPECT_EQ(&ProcessGroup::world(pg().backend()), &pg());
  EXPECT_EQ(&ProcessGroup::init(pg().backend()), &pg());
}

TEST_P(ProcessGroupTest, AllReduceSumAndMeanMatchAFloat64Reference) {
  const std::size_t n = 1001;  // odd: uneven chunks
  for (Dtype dtype : {kFloat32, kFloat64, kInt64, kInt32, kBFloat16, kFloat16}) {
    for (ReduceKind op : {ReduceKind::kSum, ReduceKind::kMean}) {
      const std::uint64_t seed = 1 + static_cast<int>(dtype) * 2 + static_cast<int>(op);
      if (op == ReduceKind::kMean && !is_floating(dtype)) {
        // Rounded, and its sum would overflow in the element type first: refused.
        Tensor t = zeros({4}, {dtype, device()});
        testing::expect_throw_with<DtypeError>([&] { pg().all_reduce(t, op); },
                                               {"[ProcessGroup::all_reduce]", "mean of"});
        continue;
      }
      std::vector<double> expected(n, 0.0);
      for (int r = 0; r < pg().size(); ++r) {
        const std::vector<double> v = values_of(r, n, seed, dtype);
        for (std::size_t i = 0; i < n; ++i) expected[i] += v[i];
      }
      if (op == ReduceKind::kMean) {
        for (double& e : expected) e /= pg().size();
      }
      Tensor t =
          from_vector(values_of(pg().rank(), n, seed, dtype), {7, 11, 13}, {dtype, device()});
      const TransferStats before = transfer_stats(device());
      pg().all_reduce(t, op);
      const TransferStats after = transfer_stats(device());
      EXPECT_EQ(after.host_waits, before.host_waits) << "queued, not waited for";
      // In ring terms: the other ranks' parts of this rank's chunk, then the other chunks.
      const std::size_t k = pg().size(), r = pg().rank(), c = n / k + (r < n % k ? 1 : 0);
      EXPECT_EQ(after.d2d_bytes - before.d2d_bytes, ((k - 1) * c + (n - c)) * itemsize(dtype));
      // A sum over more than 2 ranks rounds more than once, and half sums round after each
      // addition: up to a rounding of the partial sums (values up to 50 a rank) per rank.
      const double half_ulp = dtype == kBFloat16 ? 0x1p-8 : 0x1p-11;
      const double rtol = dtype == kFloat32 ? 1e-6
                          : is_half(dtype)  ? static_cast<double>(pg().size()) * half_ulp
                                            : 1e-12;
      const double unit = dtype == kFloat32 ? 0x1p-24 : is_half(dtype) ? 2 * half_ulp : 0x1p-53;
      const double atol = pg().size() > 2 || is_half(dtype) ? unit * 50 * pg().size() : 0;
      expect_close(t.reshape({static_cast<std::int64_t>(n)}), expected, rtol, atol,
                   std::string(dtype_name(dtype)));
    }
  }
}

// A half mean is the float32 sum's, divided and rounded once (Note [Half collectives]):
// float16's largest value on every rank stays itself (dividing each rank's value first gave
// infinity on 3 ranks), and its smallest subnormal too (dividing first gave 0). Their sum
// rounds in float16: infinity from 2 ranks on.
TEST_P(ProcessGroupTest, HalfMeansKeepTheRangeOfTheirDtype) {
  for (const double v : {65504.0, 0x1p-24}) {
    Tensor t = full({5}, v, {kFloat16, device()});
    pg().all_reduce(t, ReduceKind::kMean);
    expect_close(t, std::vector<double>(5, v), 0, 0, "mean of " + std::to_string(v));
  }
  Tensor big = full({3}, 65504.0, {kFloat16, device()});
  pg().all_reduce(big);
  AllowSync deliberate;  // the test's read
  EXPECT_EQ(std::isinf(big.to_vector<double>()[0]), pg().size() > 1);
}

TEST_P(ProcessGroupTest, BroadcastCopiesTheRootsTensorFromEveryRoot) {
  for (int root = 0; root < pg().size(); ++root) {
    Tensor t = from_vector(values_of(pg().rank(), 300, 20 + root, kFloat32), {30, 10},
                           {kFloat32, device()});
    pg().broadcast(t, root);
    expect_close(t.reshape({300}), values_of(root, 300, 20 + root, kFloat32), 0, 0);
  }
}

TEST_P(ProcessGroupTest, AllGatherStacksEveryRanksRowsInRankOrder) {
  for (Dtype dtype : {kFloat64, kUInt8, kBool}) {
    Tensor t = from_vector(values_of(pg().rank(), 12, 30, kFloat64), {4, 3}, {dtype, device()});
    Tensor all = pg().all_gather(t);
    EXPECT_EQ(all.shape(), Shape({4 * pg().size(), 3}));
    EXPECT_EQ(all.device(), device());
    std::vector<double> expected;
    for (int r = 0; r < pg().size(); ++r) {
      const std::vector<double> v =
          from_vector(values_of(r, 12, 30, kFloat64), {dtype}).to_vector<double>();
      expected.insert(expected.end(), v.begin(), v.end());
    }
    expect_close(all.reshape({12 * pg().size()}), expected, 0, 0, std::string(dtype_name(dtype)));
  }
}

TEST_P(ProcessGroupTest, AllReduceUnderASideStreamGuardIsOrderedWithIt) {
  // Made on the default stream, doubled on a side stream, reduced there, then read on the
  // default stream: each step sees the one before (the collective itself goes through the
  // device's default stream, so one thread per device calls MPI).
  const std::vector<double> mine = values_of(pg().rank(), 257, 40, kFloat64);
  const Tensor t = from_vector(mine, {257}, {kFloat64, device()});
  std::vector<double> expected(257, 0.0);
  for (int r = 0; r < pg().size(); ++r) {
    const std::vector<double> v = values_of(r, 257, 40, kFloat64);
    for (std::size_t i = 0; i < v.size(); ++i) expected[i] += 2 * v[i] + 1;
  }
  Tensor sum;
  {
    StreamGuard guard(new_stream(device()));
    sum = t * 2.0;
    pg().all_reduce(sum);
    sum.add_(static_cast<double>(pg().size()));  // after the reduction
  }
  expect_close(sum, expected, 1e-12, 1e-9);
}

TEST_P(ProcessGroupTest, BarrierHoldsEveryRankUntilTheLastArrives) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  if (pg().rank() == pg().size() - 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  pg().barrier();
  const auto waited = Clock::now() - start;
  if (pg().size() > 1) EXPECT_GE(waited, std::chrono::milliseconds(250)) << "rank " << pg().rank();
  pg().barrier();  // again, with nobody late
}

// Host values, rank after rank; a rank passing another length is refused on every rank.
TEST_P(ProcessGroupTest, ExchangeGivesEveryRanksValues) {
  const std::int64_t r = pg().rank();
  const std::vector<std::int64_t> all = pg().exchange({r, 10 * r});
  ASSERT_EQ(all.size(), 2 * static_cast<std::size_t>(pg().size()));
  for (int i = 0; i < pg().size(); ++i) {
    EXPECT_EQ(all[2 * static_cast<std::size_t>(i)], i);
    EXPECT_EQ(all[2 * static_cast<std::size_t>(i) + 1], 10 * i);
  }
  if (pg().size() < 2) return;
  std::vector<std::int64_t> uneven(static_cast<std::size_t>(r) + 1, 0);
  expect_throw_with<Error>([&] { (void)pg().exchange(uneven); },
                           {"[ProcessGroup::exchange] rank 1 exchanges 2 value(s) but rank 0 "
                            "exchanges 1"});
}

TEST_P(ProcessGroupTest, RefusesWhatItCannotMoveWithTheFix) {
  expect_throw_with<DtypeError>(
      [&] {
        pg().all_reduce(ones({3}, {kBool, device()}));
      },
      {"[ProcessGroup::all_reduce] bool tensors cannot be summed"});
  expect_throw_with<ShapeError>([&] { pg().all_gather(ones({}, {device()})); },
                                {"[ProcessGroup::all_gather] needs a tensor with at least one "
                                 "dim",
                                 ".reshape({1})"});
  expect_throw_with<Error>([&] { pg().broadcast(ones({3}, {device()}), pg().size()); },
                           {"[ProcessGroup::broadcast] root", "is not a rank of this world"});
  expect_throw_with<Error>(
      [&] {
        pg().all_reduce(ones({3, 4}, {device()}).transpose(0, 1));
      },
      {"[ProcessGroup::all_reduce] the tensor is not contiguous"});
  expect_throw_with<Error>([&] { pg().all_reduce(Tensor()); }, {"[ProcessGroup::all_reduce]"});
  // Nothing above reached the other ranks: the group still works.
  Tensor t = ones({5}, {device()});
  pg().all_reduce(t);
  expect_close(t, std::vector<double>(5, pg().size()), 0, 0);
}

TEST_P(ProcessGroupTest, AGpuTensorIsRefusedNamingNccl) {
  if (num_gpus() == 0) GTEST_SKIP() << "needs a GPU tensor";
  const ProcessGroup& mpi = ProcessGroup::init();
  expect_throw_with<DeviceError>([&] { mpi.all_reduce(ones({3}, {gpu()})); },
                                 {"[ProcessGroup::all_reduce] the tensor is on cuda:0, but this "
                                  "process group's backend is MPI, which moves CPU tensors only",
                                  "ProcessBackend::kNccl"});
}

TEST_P(ProcessGroupTest, ACpuTensorIsRefusedByTheNcclGroup) {
  if (num_gpus() == 0) GTEST_SKIP() << "without a GPU the NCCL group itself is refused";
  const ProcessGroup& nccl = ProcessGroup::init(ProcessBackend::kNccl);
  EXPECT_EQ(nccl.rank(), pg().rank());
  expect_throw_with<DeviceError>(
      [&] { nccl.all_reduce(ones({3}, {cpu()})); },
      {"backend is NCCL, which moves GPU tensors only", "ProcessGroup::init() (MPI)"});
}

TEST_P(ProcessGroupTest, RanksThatDisagreeAllGetTheSameError) {
  if (pg().size() == 1) GTEST_SKIP() << "needs two ranks (CTest runs this under mpirun -np 2)";
  const std::int64_t rows = 2 + (pg().rank() == 1 ? 1 : 0);
  expect_throw_with<ShapeError>(
      [&] {
        pg().all_reduce(ones({rows, 3}, {device()}));
      },
      {"[ProcessGroup::all_reduce] rank 1 passed shape [3, 3] but rank "
       "0 passed [2, 3]; every rank must pass the same shape"});
  const Dtype dtype = pg().rank() == 1 ? kFloat64 : kFloat32;
  expect_throw_with<DtypeError>(
      [&] {
        pg().all_gather(ones({2}, {dtype, device()}));
      },
      {"rank 1 passed a float64 tensor but rank 0 passed float32",
       "convert with .to(kFloat32) first"});
  expect_throw_with<Error>([&] { pg().broadcast(ones({2}, {device()}), pg().rank() == 1); },
                           {"rank 1 broadcasts from root 1 but rank 0 from root 0"});
  expect_throw_with<Error>(
      [&] {
        Tensor t = ones({2}, {device()});
        if (pg().rank() == 0)
          pg().all_reduce(t);
        else
          pg().broadcast(t, 0);
      },
      {"rank 1 called broadcast while rank 0 called all_reduce"});
  // A sum on one rank and a mean on the other: each got its own result, silently.
  expect_throw_with<Error>(
      [&] {
        Tensor t = ones({2}, {device()});
        pg().all_reduce(t, pg().rank() == 1 ? ReduceKind::kMean : ReduceKind::kSum);
      },
      {"[ProcessGroup::all_reduce] rank 1 reduces with ReduceKind::kMean but rank 0 with "
       "ReduceKind::kSum"});
  // A barrier met by another rank's collective: each used to wait for the other forever.
  expect_throw_with<Error>(
      [&] {
        Tensor t = ones({2}, {device()});
        if (pg().rank() == 0)
          pg().barrier();
        else
          pg().all_reduce(t);
      },
      {"rank 1 called all_reduce while rank 0 called barrier"});
  // A call only one rank refuses on its own throws on every rank (the other used to wait).
  const Tensor square = ones({2, 2}, {device()});
  const Tensor mine = pg().rank() == 1 ? square.t() : square;
  if (pg().rank() == 1) {
    expect_throw_with<Error>([&] { pg().all_reduce(mine); },
                             {"[ProcessGroup::all_reduce] the tensor is not contiguous"});
  } else {
    expect_throw_with<Error>([&] { pg().all_reduce(mine); },
                             {"[ProcessGroup::all_reduce] rank 1 refused its all_reduce (its own "
                              "error says why), so every rank stops at this collective"});
  }
  Tensor t = full({4}, pg().rank() + 1.0, {device()});
  pg().all_reduce(t);  // and the group goes on
  expect_close(t, std::vector<double>(4, 3), 0, 0);
  pg().barrier();
}

// Open MPI's vectorized sum saturated uint8 in 32-byte blocks: 200 + 200 gave 255.
TEST_P(ProcessGroupTest, Uint8SumsWrapAsAdditionDoes) {
  for (const std::int64_t n : {8, 31, 32, 100}) {
    Tensor t = full({n}, 200, {kUInt8, device()});
    pg().all_reduce(t);
    const int expected = (200 * pg().size()) % 256;
    EXPECT_EQ(t.to(kInt64).to_vector<std::int64_t>(), std::vector<std::int64_t>(n, expected)) << n;
  }
}

// Collectives pair up across ranks by device index: cpu:0 here and cpu:1 there gave both the
// other collective's values (or hung).
TEST(ProcessGroupDevices, RanksOnDifferentDevicesAreRefused) {
  if (num_cpu_devices() < 2) GTEST_SKIP() << "needs two CPU devices";
  const ProcessGroup& pg = ProcessGroup::init();
  if (pg.size() == 1) GTEST_SKIP() << "needs two ranks";
  const Device mine = pg.rank() == 0 ? cpu(0) : cpu(1);
  expect_throw_with<DeviceError>([&] { pg.all_reduce(ones({4}, {mine})); },
                                 {"[ProcessGroup::all_reduce] rank 1 passed a tensor on cpu:1 but "
                                  "rank 0 one on cpu:0",
                                  "every rank must use the same device"});
}

// Trained on the group, every rank on its part of each batch, the model ends where one
// process alone ends: across two ranks, and with a group of one (whose collectives leave the
// values as they are; on a GPU that is NCCL's one-rank communicator, in eager and recorded
// steps).
TEST_P(ProcessGroupTest, TrainingOnTheGroupEndsWhereOneProcessEnds) {
  const auto [images, labels] = testing::random_images(25);  // batches of 7, 7, 7, 4
  const auto train = [&](const ProcessGroup* group, bool graph, Dtype dtype = kFloat32) {
    data::DataLoader loader(std::vector<Tensor>{images.to(dtype), labels},
                            {.batch_size = 7, .seed = 3});
    manual_seed(0);
    train::Classifier task(
        [dtype] {
          auto net = std::make_shared<nn::Sequential>(nn::Flatten(), nn::Linear(64, 16), nn::ReLU(),
                                                      nn::Linear(16, 4));
          net->to(dtype);
          return net;
        },
        [](const std::vector<Tensor>& p) {
          return std::make_unique<optim::SGD>(p, optim::SgdOptions{.lr = 0.2, .momentum = 0.9});
        });
    // Half models train one epoch: their roundings drift apart with every step.
    train::TrainerOptions o{
        .max_epochs = is_half(dtype) ? 1 : 3, .gradient_clip_val = 0.5, .progress = false};
    o.device = device();
    o.process_group = group;
    o.graph = graph;
    train::Trainer trainer(o);
    trainer.fit(task, loader);
    AllowSync deliberate;  // the test's own read
    std::vector<std::vector<double>> values;
    for (const Tensor& p : task.model().parameters()) {
      EXPECT_EQ(p.device(), device());
      values.push_back(p.to_vector<double>());
    }
    values.push_back(trainer.step_losses().to_vector<double>());
    return values;
  };
  const std::vector<std::vector<double>> alone = train(nullptr, false);
  // Half models: their gradients are summed in their dtype, each rank's rounded before the
  // sum (Note [Half collectives]), so after one epoch the parameters end within a few
  // roundings (1.3 of bfloat16's and 1.7 of float16's when this was written).
  for (const Dtype dtype : {kBFloat16, kFloat16}) {
    const auto half_alone = train(nullptr, false, dtype);
    const auto half_group = train(&pg(), false, dtype);
    ASSERT_EQ(half_group.size(), half_alone.size());
    const double ulp = dtype == kBFloat16 ? 0x1p-8 : 0x1p-11;
    for (std::size_t p = 0; p < half_alone.size(); ++p) {
      ASSERT_EQ(half_group[p].size(), half_alone[p].size());
      for (std::size_t i = 0; i < half_alone[p].size(); ++i) {
        EXPECT_NEAR(half_group[p][i], half_alone[p][i],
                    8 * ulp * (std::abs(half_alone[p][i]) + 0.05))
            << dtype_name(dtype) << " tensor " << p << " (the last: the step losses), value " << i;
      }
    }
  }
  for (const bool graph : {false, true}) {
    SCOPED_TRACE(graph ? "recorded steps" : "eager steps");
    const std::vector<std::vector<double>> on_group = train(&pg(), graph);
    ASSERT_EQ(on_group.size(), alone.size());
    for (std::size_t p = 0; p < alone.size(); ++p) {
      ASSERT_EQ(on_group[p].size(), alone[p].size());
      for (std::size_t i = 0; i < alone[p].size(); ++i) {
        EXPECT_NEAR(on_group[p][i], alone[p][i], 2e-4 * (1 + std::abs(alone[p][i])))
            << "tensor " << p << " (the last: the step losses), value " << i;
      }
    }
  }
}

TESSERA_INSTANTIATE_DEVICE_SUITE(ProcessGroupTest);

// Collectives queued on two devices' queues, interleaved, each device in program order: they
// must pair up across ranks device by device (Note [MPI communicators]).
TEST(ProcessGroupDevices, InterleavedCollectivesOnTwoDevicesPairUpPerDevice) {
  std::vector<Device> cpus;
  for (Device d : available_devices()) {
    if (d.is_cpu()) cpus.push_back(d);
  }
  if (cpus.size() < 2) GTEST_SKIP() << "needs two CPU devices; CTest sets TESSERA_CPU_DEVICES=2";
  const ProcessGroup& pg = ProcessGroup::init();
  const Device a = cpus[0], b = cpus[1];
  std::vector<Tensor> ta, tb;
  for (int i = 0; i < 8; ++i) {
    ta.push_back(full({1000}, (pg.rank() + 1) * (i + 1), {a}));
    tb.push_back(full({10 + i}, (pg.rank() + 1) * -(i + 1), {b}));
    pg.all_reduce(ta.back());
    pg.all_reduce(tb.back(), ReduceKind::kMean);
  }
  const double ranks_sum = pg.size() * (pg.size() + 1) / 2.0;
  for (int i = 0; i < 8; ++i) {
    expect_close(ta[i], std::vector<double>(1000, ranks_sum * (i + 1)), 0, 0);
    expect_close(tb[i], std::vector<double>(10 + i, -ranks_sum * (i + 1) / pg.size()), 1e-6, 0);
  }
}

}  // namespace
}  // namespace tessera

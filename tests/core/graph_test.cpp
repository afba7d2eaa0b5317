// Graph capture on every device: a recorded loop replays to the eager results, and
// everything a graph cannot record is refused with a message that names it, leaving the
// device usable. Several logical CPU devices record one graph with collectives among them.
#include <array>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "core/tensor_impl.h"
#include "support/device_test.h"

namespace tessera {
namespace {

using testing::DeviceTest;
using testing::expect_throw_with;

class Graphs : public DeviceTest {};

// The seed's exercise 3: norms of 100x100 products logged into a device tensor.
TEST_P(Graphs, ReplayGivesTheEagerResults) {
  manual_seed(3);
  const Tensor x = randn({100, 100}, device()) * 0.1;
  Tensor w = randn({100, 100}, device()) * 0.1;
  constexpr int kSteps = 50;
  Tensor eager = zeros({kSteps}, device());
  for (int i = 0; i < kSteps; ++i)
    eager.narrow(0, i, 1).copy_(norm(matmul(x, w) * (i + 1.0)).reshape({1}));
  Tensor log = zeros({kSteps}, device());
  reset_transfer_stats();
  Graph graph = Graph::capture(device(), [&] {
    for (int i = 0; i < kSteps; ++i)
      log.narrow(0, i, 1).copy_(norm(matmul(x, w) * (i + 1.0)).reshape({1}));
  });
  EXPECT_EQ(transfer_stats(device()), TransferStats{}) << "capturing neither copies nor waits";
  EXPECT_GE(graph.node_count(), static_cast<std::size_t>(2 * kSteps));
  EXPECT_EQ(graph.device(), device());
  EXPECT_DOUBLE_EQ(max(abs(log)).item<double>(), 0.0) << "recording does not run the work";
  graph.replay();
  testing::expect_close(log, eager.to_vector<double>(), 1e-6, 0, "first replay");
  // Replays read the current values of the tensors the recording used.
  w.mul_(2.0);
  log.fill_(0.0);
  graph.replay();
  graph.replay();
  std::vector<double> doubled = eager.to_vector<double>();
  for (double& v : doubled) v *= 2.0;
  testing::expect_close(log, doubled, 1e-6, 0, "after w *= 2");
}

// A reduction big enough to be split over blocks on a GPU (a second pass over partial sums
// in stream-ordered scratch, cudaMallocAsync/cudaFreeAsync, which a graph records as memory
// nodes) replays to the eager results, twice, with new inputs.
TEST_P(Graphs, ALargeSplitReductionReplays) {
  manual_seed(5);
  Tensor x = rand({1 << 22}, device());
  const double eager = sum(x).item<double>();
  Tensor total = zeros({}, device());
  Graph graph = Graph::capture(device(), [&] { total.copy_(sum(x)); });
  graph.replay();
  EXPECT_NEAR(total.item<double>(), eager, 1e-6 * eager) << "first replay";
  x.mul_(2.0);
  graph.replay();
  graph.replay();
  EXPECT_NEAR(total.item<double>(), 2 * eager, 2e-6 * eager) << "after x *= 2";
}

TEST_P(Graphs, TensorsMadeDuringCaptureHoldTheLatestReplay) {
  Tensor x = full({4096}, 1.0, device());
  Tensor y;
  Graph graph = Graph::capture(device(), [&] {
    Tensor t = x * 2.0;  // freed inside the capture: its block is the graph's
    y = t + 1.0;         // outlives the capture
  });
  graph.replay();
  EXPECT_DOUBLE_EQ(max(y).item<double>(), 3.0);
  x.fill_(5.0);
  graph.replay();
  EXPECT_DOUBLE_EQ(min(y).item<double>(), 11.0);
  // Memory made outside keeps working while the graph lives and after it is gone.
  Tensor other = full({4096}, 7.0, device());
  graph.replay();
  EXPECT_DOUBLE_EQ(sum(other).item<double>(), 7.0 * 4096);
  { Graph gone = std::move(graph); }
  EXPECT_DOUBLE_EQ(max(y).item<double>(), 11.0);
  EXPECT_THROW(graph.replay(), GraphCaptureError);  // moved from
  expect_throw_with<GraphCaptureError>([&] { (void)graph.device(); },
                                       {"[Graph::device] this graph was moved from"});
}

// Note [Memory of CPU graphs] (and the CUDA pool): a temporary the capture made and dropped
// gives its block to the next one, as eager steps do, instead of every temporary of the
// recorded work being held at once.
TEST_P(Graphs, TemporariesDroppedDuringCaptureLendTheirMemoryToLaterOnes) {
  constexpr int kSteps = 40;
  constexpr std::int64_t kNumel = std::int64_t{1} << 18;  // 1 MiB of float32
  manual_seed(7);
  const Tensor x = rand({kNumel}, device());
  Tensor eager = x;
  for (int i = 0; i < kSteps; ++i) eager = eager * 0.5 + 1.0;
  Tensor y;
  synchronize(device());
  const std::size_t before = memory_stats(device()).reserved;
  Graph graph = Graph::capture(device(), [&] {
    Tensor t = x;
    for (int i = 0; i < kSteps; ++i) t = t * 0.5 + 1.0;  // two temporaries per step
    y = t;
  });
  const std::size_t grown = memory_stats(device()).reserved - before;
  EXPECT_LT(grown, std::size_t{16} << 20)
      << "the capture held " << grown / (1 << 20) << " MiB for " << 2 * kSteps
      << " temporaries of 1 MiB, of which at most a few are alive at once";
  graph.replay();
  testing::expect_close(y, eager.to_vector<double>(), 1e-6, 1e-6, "replay");
}

// What a replay writes stays its own after the host lets go of it, and on CPU devices what
// it reads too (a GPU graph needs the tensors from before its capture kept alive: graph.h).
TEST_P(Graphs, MemoryTheHostDroppedAfterCaptureIsNotGivenToOthers) {
  constexpr std::int64_t kNumel = 4096;
  Tensor x = full({kNumel}, 3.0, device());
  Tensor y, z;
  Graph graph = Graph::capture(device(), [&] {
    y = x * 2.0;
    z = y + 1.0;
  });
  if (device().is_cpu()) x = Tensor();  // the graph still reads its memory
  y = Tensor();                         // and writes this
  std::vector<Tensor> others;
  for (int i = 0; i < 8; ++i) others.push_back(full({kNumel}, 9.0, device()));
  graph.replay();
  EXPECT_DOUBLE_EQ(min(z).item<double>(), 7.0);
  EXPECT_DOUBLE_EQ(max(z).item<double>(), 7.0);
  for (const Tensor& o : others) {
    EXPECT_DOUBLE_EQ(min(o).item<double>(), 9.0);
    EXPECT_DOUBLE_EQ(max(o).item<double>(), 9.0);
  }
}

// Only the recording thread's tensors come from the graph's pool: memory another thread
// allocates meanwhile (a loader's batch) is never a block the replays write.
TEST_P(Graphs, AnotherThreadsTensorMadeDuringCaptureIsNotTheGraphs) {
  constexpr std::int64_t kNumel = 4096;
  const Tensor x = full({kNumel}, 3.0, device());
  Tensor y, other;
  Graph graph = Graph::capture(device(), [&] {
    { Tensor dropped = x * 2.0; }  // its block waits in the pool for the next request
    std::thread([&] { other = empty({kNumel}, device()); }).join();
    y = x + 1.0;
  });
  other.fill_(9.0);
  graph.replay();
  graph.replay();
  EXPECT_DOUBLE_EQ(min(y).item<double>(), 4.0);
  EXPECT_DOUBLE_EQ(min(other).item<double>(), 9.0) << "a replay wrote the other thread's tensor";
  EXPECT_DOUBLE_EQ(max(other).item<double>(), 9.0) << "a replay wrote the other thread's tensor";
}

// Note [Captures and other threads]: another thread's work on a CPU device being recorded
// went into the capturing thread's graph (its result never computed, then rewritten at every
// replay), raced the capture's end (SIGSEGV) and its host reads were refused in the name of
// the capture. Now it runs as usual; a second capture on the device is refused.
TEST_P(Graphs, AnotherThreadsWorkDuringACaptureRunsAsUsual) {
  if (!device().is_cpu()) GTEST_SKIP() << "a GPU records its stream, whoever issues on it";
  const Tensor x = full({4}, 3.0, device());
  std::atomic<int> phase{0};
  Tensor y, c;
  double read = 0;
  std::exception_ptr error;
  std::thread other([&] {
    while (phase.load() != 1) std::this_thread::yield();
    try {
      c = full({4}, 5.0, device()) + 1.0;
      read = c[0].item<double>();  // a host read: refused only inside the capturing thread
      (void)Graph::capture(device(), [] {});
    } catch (...) {
      error = std::current_exception();
    }
    phase.store(2);
  });
  Graph graph = Graph::capture(device(), [&] {
    y = x * 2.0;
    phase.store(1);
    while (phase.load() != 2) std::this_thread::yield();
  });
  other.join();
  EXPECT_EQ(graph.node_count(), 1u) << "the other thread's work was recorded";
  ASSERT_TRUE(error);
  expect_throw_with<GraphCaptureError>(
      [&] { std::rethrow_exception(error); },
      {fmt::format("[Graph::capture] {} is already capturing a graph on another thread",
                   device().str())});
  EXPECT_EQ(read, 6.0);
  c.fill_(0.0);
  graph.replay();
  EXPECT_EQ(c.to_vector<double>(), std::vector<double>(4, 0.0)) << "a replay wrote c";
  EXPECT_EQ(y.to_vector<double>(), std::vector<double>(4, 6.0));
}

// Two threads beginning captures on one device at once both passed the check and then
// overwrote each other's recording (SIGSEGV at the end of one). One claims the device; the
// other's capture is refused, and every capture that began replays its own work.
TEST_P(Graphs, CapturesBegunOnTwoThreadsAtOnceAreOneAtATime) {
  if (!device().is_cpu()) GTEST_SKIP() << "a GPU records its stream, whoever issues on it";
  const Tensor x = full({8}, 1.0, device());
  std::array<int, 2> made{}, refused{}, wrong{};
  std::array<std::thread, 2> threads;
  for (std::size_t t = 0; t < threads.size(); ++t) {
    threads[t] = std::thread([&, t] {
      for (int i = 0; i < 300; ++i) {
        try {
          Tensor y;
          Graph g = Graph::capture(device(), [&] { y = x * 2.0 + static_cast<double>(t); });
          g.replay();
          ++made[t];
          wrong[t] += y.to_vector<double>() != std::vector<double>(8, 2.0 + t);
        } catch (const GraphCaptureError& e) {
          ++refused[t];
          EXPECT_NE(std::string(e.what()).find("already capturing a graph"), std::string::npos)
              << e.what();
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(made[0] + refused[0], 300);
  EXPECT_EQ(made[1] + refused[1], 300);
  EXPECT_EQ(wrong[0] + wrong[1], 0);
}

// A recorded matmul's product that becomes a weight's gradient is the gradient itself, not a
// copy: the recording borrows it, so autograd sees nobody else holding it.
TEST_P(Graphs, AWeightsGradientIsTheRecordedProductNotACopy) {
  manual_seed(5);
  const Tensor x = randn({6, 5}, device());
  Tensor w = randn({5, 4}, device());
  w.requires_grad_();
  Graph graph = Graph::capture(device(), [&] { matmul(x, w).sum().backward(); });
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(detail::impl_of(w.grad()).storage.use_count(), 1)
      << "the recorded kernels hold w.grad()'s memory: autograd would have copied it";
  graph.replay();
  // d/dw sum(x @ w) = x^T @ ones: each row i of the gradient is the sum of column i of x.
  const std::vector<double> xs = x.to_vector<double>();
  std::vector<double> expected(20, 0.0);
  for (int i = 0; i < 5; ++i) {
    for (int r = 0; r < 6; ++r) {
      for (int j = 0; j < 4; ++j) expected[static_cast<std::size_t>(i * 4 + j)] += xs[r * 5 + i];
    }
  }
  testing::expect_close(w.grad(), expected, 1e-5, 1e-5, "replayed gradient");
}

TEST_P(Graphs, RefusesWhatItCannotRecordAndStaysUsable) {
  const Tensor x = ones({8}, device());
  expect_throw_with<GraphCaptureError>(
      [&] { Graph::capture(device(), [&] { (void)sum(x).item<double>(); }); },
      {"is capturing a graph", "outside the captured code"});
  expect_throw_with<GraphCaptureError>(
      [&] { Graph::capture(device(), [&] { (void)x.to_vector<float>(); }); },
      {"is capturing a graph", "outside the captured code"});
  if (device().is_cuda()) {
    expect_throw_with<GraphCaptureError>(
        [&] { Graph::capture(device(), [&] {
                (void)tensor({1.0, 2.0}).to(device());
              }); },
        {"[to]", "a copy from the host"});
  } else {
    expect_throw_with<GraphCaptureError>(
        [&] {
          Graph::capture(device(), [&] {
            (void)from_vector(std::vector<float>{1, 2}, {2}, device());
          });
        },
        {"[from_vector]", "a copy from the host"});
    expect_throw_with<GraphCaptureError>(
        [&] { Graph::capture(device(), [&] {
                (void)tensor({1.0, 2.0}, device());
              }); },
        {"[tensor]", "a copy from the host"});
    expect_throw_with<GraphCaptureError>(
        [&] { Graph::capture(device(), [&] { (void)x.data<float>(); }); },
        {"is capturing a graph"});
  }
  expect_throw_with<GraphCaptureError>(
      [&] { Graph::capture(device(), [&] { (void)rand({4}, device()); }); },
      {"[rand]", "drawing random numbers"});
  expect_throw_with<GraphCaptureError>(
      [&] { Graph::capture(device(), [&] { synchronize(device()); }); },
      {"[synchronize]", "a host wait"});
  expect_throw_with<GraphCaptureError>(
      [&] { Graph::capture(device(), [&] { Graph::capture(device(), [] {}); }); },
      {"already capturing", "do not nest"});
  expect_throw_with<GraphCaptureError>(
      [&] { Graph::capture(device(), [&] { StreamGuard g(new_stream(device())); }); },
      {"[StreamGuard]", "outside Graph::capture"});
  // A user exception inside the recording propagates and leaves no capture behind.
  EXPECT_THROW(Graph::capture(device(), [] { throw ShapeError("mine"); }), ShapeError);
  // After all that the device computes, reads and captures as before.
  EXPECT_DOUBLE_EQ(sum(x * 3.0).item<double>(), 24.0);
  Tensor y;
  Graph ok = Graph::capture(device(), [&] { y = x + 1.0; });
  ok.replay();
  EXPECT_DOUBLE_EQ(sum(y).item<double>(), 16.0);
}

TEST_P(Graphs, CopiesBetweenTwoQueuesAreRefused) {
  const std::vector<Device> group = same_kind_devices();
  if (group.size() < 2 || !device().is_cpu()) GTEST_SKIP() << "needs two logical CPU devices";
  const Tensor a = ones({4}, group[1]);
  Tensor b = zeros({4}, device());
  const char* async = std::getenv("TESSERA_CPU_ASYNC");
  const bool queued = async == nullptr || std::string(async) != "0";
  auto record = [&] { b.copy_(a); };
  if (!queued) {
    // Without queues the copy runs in the host's order, which a replay keeps.
    Graph g = Graph::capture(std::vector<Device>{device(), group[1]}, record);
    g.replay();
    EXPECT_DOUBLE_EQ(sum(b).item<double>(), 4.0);
    return;
  }
  // Refused by the backend, which alone knows the queues; named after the user's call.
  expect_throw_with<GraphCaptureError>([&] { Graph::capture(device(), record); },
                                       {"[copy_] ", "a copy between two queued devices"});
  expect_throw_with<GraphCaptureError>(
      [&] { Graph::capture(device(), [&] { (void)a.to(device()); }); },
      {"[to] " + device().str() + " is capturing a graph, and a copy between two queued devices"});
  EXPECT_DOUBLE_EQ(sum(b).item<double>(), 0.0);
}

TEST_P(Graphs, ACopyOutOfTheCapturingDeviceCopiesWhatTheReplayWrote) {
  const std::vector<Device> group = same_kind_devices();
  if (group.size() < 2 || !device().is_cpu()) GTEST_SKIP() << "needs two logical CPU devices";
  const Device other = group[0] == device() ? group[1] : group[0];
  Tensor x = ones({4}, device());
  Tensor y;
  const auto record = [&] { y = (x * 2.0).to(other); };
  const char* async = std::getenv("TESSERA_CPU_ASYNC");
  if (async == nullptr || std::string(async) != "0") {  // queued: refused, as any such copy
    expect_throw_with<GraphCaptureError>([&] { Graph::capture(device(), record); },
                                         {"a copy between two queued devices"});
    return;
  }
  // Without queues it is recorded on the source's graph: at capture time x * 2 holds nothing
  // yet, so a copy run then would copy garbage.
  Graph g = Graph::capture(device(), record);
  x.fill_(5.0);
  g.replay();
  EXPECT_EQ(y.to_vector<float>(), std::vector<float>(4, 10.0f));
}

TEST_P(Graphs, WorkOnDevicesNotAllCapturingIsRefused) {
  // A collective (or a graph of several devices) runs on all its devices together: recording
  // some of them would leave the others waiting for their part forever.
  const std::vector<Device> group = same_kind_devices();
  if (group.size() < 2 || !device().is_cpu()) GTEST_SKIP() << "needs two logical CPU devices";
  std::vector<Tensor> pair{ones({4}, group[0]), full({4}, 2.0, group[1])};
  for (const Device capturing : {group[0], group[1]}) {
    expect_throw_with<GraphCaptureError>(
        [&] { Graph::capture(capturing, [&] { all_reduce(pair); }); },
        {"[all_reduce]", "is capturing a graph but", "is not", "a collective"});
  }
  Graph both = Graph::capture(std::vector<Device>{group[0], group[1]}, [&] { all_reduce(pair); });
  expect_throw_with<GraphCaptureError>([&] { Graph::capture(group[0], [&] { both.replay(); }); },
                                       {"[Graph::replay]", "a graph of several devices"});
  // Nothing is left waiting: both devices answer, and a replay outside runs whole.
  EXPECT_EQ(pair[1].to_vector<float>(), std::vector<float>(4, 2.0f));
  both.replay();
  EXPECT_EQ(pair[0].to_vector<float>(), std::vector<float>(4, 3.0f));
  EXPECT_EQ(pair[1].to_vector<float>(), std::vector<float>(4, 3.0f));
}

// A data-parallel pattern: each device computes, an all-reduce sums, each device updates;
// recorded once across the group and replayed many times.
TEST_P(Graphs, SeveralCpuDevicesReplayACollective) {
  const std::vector<Device> group = same_kind_devices();
  if (group.size() < 2 || !device().is_cpu()) GTEST_SKIP() << "needs two logical CPU devices";
  std::vector<Tensor> w, eager_w, x;
  for (std::size_t i = 0; i < group.size(); ++i) {
    x.push_back(full({64, 32}, 0.01 * static_cast<double>(i + 1), group[i]));
    w.push_back(full({32, 8}, 0.5, group[i]));
    eager_w.push_back(full({32, 8}, 0.5, group[i]));
  }
  const auto step = [&](std::vector<Tensor>& weights) {
    std::vector<Tensor> grads;
    for (std::size_t i = 0; i < group.size(); ++i) {
      grads.push_back(matmul(x[i].t(), matmul(x[i], weights[i])) * 0.01);
    }
    all_reduce(grads);
    for (std::size_t i = 0; i < group.size(); ++i) weights[i].sub_(grads[i]);
  };
  constexpr int kSteps = 20;
  for (int s = 0; s < kSteps; ++s) step(eager_w);
  Graph graph = Graph::capture(group, [&] { step(w); });
  EXPECT_EQ(graph.devices(), group);
  for (int s = 0; s < kSteps; ++s) graph.replay();
  for (std::size_t i = 0; i < group.size(); ++i) {
    testing::expect_close(w[i], eager_w[i].to_vector<double>(), 1e-6, 0,
                          "replica " + std::to_string(i));
  }
}

TEST_P(Graphs, EachReplayCountsWhatItMovesInTheLedger) {
  // Note [Graphs in the ledger]: a recorded all-reduce moves nothing when recorded and its
  // bytes at every replay, as the eager one does each time.
  const std::vector<Device> group = same_kind_devices();
  if (group.size() < 2 || !device().is_cpu()) GTEST_SKIP() << "needs two logical CPU devices";
  std::vector<Tensor> pair{ones({256}, group[0]), ones({256}, group[1])};
  synchronize(group[0]);
  reset_transfer_stats();
  all_reduce(pair);
  const std::uint64_t eager = transfer_stats(group[0]).d2d_bytes;
  ASSERT_GT(eager, 0u);
  reset_transfer_stats();
  const Graph g = Graph::capture(group, [&] { all_reduce(pair); });
  EXPECT_EQ(transfer_stats(group[0]).d2d_bytes, 0u) << "recording moved nothing";
  for (int i = 0; i < 3; ++i) g.replay();
  EXPECT_EQ(transfer_stats(group[0]).d2d_bytes, 3 * eager);
  EXPECT_EQ(transfer_stats(group[0]).d2d_count, 3u);
}

TEST_P(Graphs, GroupsAreChecked) {
  expect_throw_with<DeviceError>([&] { Graph::capture(std::vector<Device>{}, [] {}); },
                                 {"[Graph::capture]", "no devices"});
  expect_throw_with<DeviceError>(
      [&] {
        Graph::capture(std::vector<Device>{device(), device()}, [] {});
      },
      {"[Graph::capture]", "twice"});
  const std::vector<Device> group = same_kind_devices();
  if (device().is_cuda() && group.size() > 1) {
    expect_throw_with<DeviceError>([&] { Graph::capture(group, [] {}); },
                                   {"[Graph::capture]", "at most 1"});
  }
}

TEST_P(Graphs, ReplayOnASideStream) {
  Tensor x = full({1000}, 2.0, device());
  Graph graph = Graph::capture(device(), [&] { x.mul_(3.0); });
  {
    StreamGuard g(new_stream(device()));
    graph.replay();
  }
  EXPECT_DOUBLE_EQ(max(x).item<double>(), 6.0);  // queued after the guard: sees the replay
}

// A recorded backward() into a gradient that exists adds to it at every replay, as eager
// backward() calls do (the sum was once a new tensor, so each replay gave old + g again).
TEST_P(Graphs, ReplayedBackwardAccumulatesIntoAnExistingGradient) {
  const Tensor x = full({3}, 2.0, device());
  Tensor w = ones({3}, device()).requires_grad_();
  (w * x).sum().backward();  // grad = 2
  Graph graph = Graph::capture(device(), [&] { (w * x).sum().backward(); });
  for (int i = 0; i < 3; ++i) graph.replay();
  EXPECT_EQ(w.grad().to_vector<double>(), (std::vector<double>{8, 8, 8}));
  // A gradient the capture makes is the recording's: each replay sets it afresh.
  Tensor v = ones({3}, device()).requires_grad_();
  Graph fresh = Graph::capture(device(), [&] { (v * x).sum().backward(); });
  for (int i = 0; i < 3; ++i) fresh.replay();
  EXPECT_EQ(v.grad().to_vector<double>(), (std::vector<double>{2, 2, 2}));
}

// State an optimizer or a scaler makes on its first step would be made again by every
// replay (Adam's moments back to zero, the scale back to its start): refused, and the refused
// capture leaves them as they were, so the eager steps after it equal steps without it.
// Note [A refused capture's host state]: backward()'s first gradient of a leaf, recorded
// and never computed, stayed the leaf's grad() after a capture that threw; the next eager
// backward added to whatever that memory held (12345 + 2 where 2 was right).
TEST_P(Graphs, ARefusedCaptureLeavesNoGradientItNeverComputed) {
  const Tensor x = full({3}, 2.0, device());
  Tensor w = ones({3}, device()).requires_grad_();
  optim::Adam adam({w}, {.lr = 0.1});
  adam.step();  // no gradient: nothing moves, and the state exists
  { const Tensor junk = full({3}, 12345.0, device()); }  // memory the capture may take
  expect_throw_with<GraphCaptureError>(
      [&] {
        Graph::capture(device(), [&] {
          (w * x).sum().backward();
          adam.step();  // not capturable: refused after the backward was recorded
        });
      },
      {"[Adam.step]"});
  EXPECT_FALSE(w.grad().defined()) << "a gradient the refused recording never computed";
  (w * x).sum().backward();
  EXPECT_EQ(w.grad().to_vector<double>(), (std::vector<double>{2, 2, 2}));
}

TEST_P(Graphs, FirstStepStateAndHostStepCountsAreRefused) {
  const Tensor x = full({4}, 0.5, device());
  const auto run = [&](bool try_captures) {
    Tensor w = ones({4}, device()).requires_grad_();
    optim::Adam adam({w}, {.lr = 0.1});
    const auto step = [&] {
      adam.zero_grad();
      (w * x).sum().backward();
      adam.step();
    };
    if (try_captures) {
      adam.set_capturable(true);
      expect_throw_with<GraphCaptureError>([&] { Graph::capture(device(), step); },
                                           {"[Adam.step] parameter 0 has no optimizer state yet",
                                            "Take one step before Graph::capture"});
      adam.set_capturable(false);
    }
    step();
    if (try_captures) {
      expect_throw_with<GraphCaptureError>([&] { Graph::capture(device(), step); },
                                           {"[Adam.step]", "keeps its step counts on the host",
                                            "repeat step 2", "set_capturable(true)"});
      EXPECT_EQ(adam.step_count(0), 1);
    }
    step();
    return w.to_vector<double>();
  };
  EXPECT_EQ(run(true), run(false));

  Tensor u = ones({4}, device()).requires_grad_();
  optim::SGD sgd({u}, {.lr = 0.1, .momentum = 0.9});
  expect_throw_with<GraphCaptureError>(
      [&] {
        Graph::capture(device(), [&] {
          (u * x).sum().backward();
          sgd.step();
        });
      },
      {"[SGD.step] parameter 0 has no optimizer state yet"});
  // A skippable step would move host counts to the device inside the recording (full(count),
  // made again by every replay): refused like a host-counted step, and so is set_capturable.
  Tensor v = ones({4}, device()).requires_grad_();
  optim::Adam counted({v}, {.lr = 0.1});
  (v * x).sum().backward();
  counted.step();
  const Tensor found = zeros({}, device());
  expect_throw_with<GraphCaptureError>(
      [&] { Graph::capture(device(), [&] { counted.step_unless(found); }); },
      {"[Adam.step_unless]", "keeps its step counts on the host"});
  expect_throw_with<GraphCaptureError>(
      [&] { Graph::capture(device(), [&] { counted.set_capturable(true); }); },
      {"[Adam.set_capturable]", "call set_capturable before Graph::capture"});
  EXPECT_EQ(counted.step_count(0), 1);
  EXPECT_FALSE(counted.capturable());
  // A gradient set to an expanded tensor has no memory of its own to add into.
  Tensor e = ones({3}, device()).requires_grad_();
  e.set_grad(zeros({1}, device()).expand({3}));
  expect_throw_with<GraphCaptureError>(
      [&] { Graph::capture(device(), [&] { (e * 2.0).sum().backward(); }); },
      {"[backward]", "expanded tensor", "set_grad(g.contiguous())"});
  optim::GradScaler scaler;
  expect_throw_with<GraphCaptureError>(
      [&] { Graph::capture(device(), [&] { (void)scaler.scale((u * x).sum()); }); },
      {"[GradScaler.scale] this scaler has not scaled a loss yet", "Take one step"});
  EXPECT_DOUBLE_EQ(scaler.get_scale(), 65536.0);
}

TESSERA_INSTANTIATE_DEVICE_SUITE(Graphs);

}  // namespace
}  // namespace tessera

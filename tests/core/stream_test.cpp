// Streams on every device: CPU devices (the plain CPU, logical CPU devices) and GPUs have
// side streams; work on two of them gives the results of the default stream, memory freed
// while side streams run is never handed out too early, and the refusals while a graph is
// captured hold. tests/backend/cpu_streams_test.cpp drives the CPU's queues directly to pin
// down the ordering and concurrency with kernels that wait.
#include "core/device_registry.h"
#include "support/device_test.h"

namespace tessera {
namespace {

using testing::DeviceTest;
using testing::expect_throw_with;

class Streams : public DeviceTest {};

TEST_P(Streams, DefaultStreamIsCurrentAndPrintable) {
  const Stream s = default_stream(device());
  EXPECT_TRUE(s.is_default());
  EXPECT_EQ(s.device(), device());
  EXPECT_EQ(current_stream(device()), s);
  EXPECT_EQ(s.str(), device().str());
  {
    StreamGuard guard(s);  // entering the default stream is allowed everywhere
    EXPECT_EQ(current_stream(device()), s);
    EXPECT_DOUBLE_EQ(sum(ones({3}, device()) * 2.0).item<double>(), 6.0);
  }
  synchronize(s);
}

TEST_P(Streams, NewStreamGivesDistinctSideStreamsOfTheDevice) {
  const Stream s1 = new_stream(device()), s2 = new_stream(device());
  EXPECT_NE(s1, s2);
  EXPECT_EQ(s1.device(), device());
  EXPECT_FALSE(s1.is_default());
  EXPECT_EQ(s1.str(), device().str() + "/stream " + std::to_string(s1.id()));
  EXPECT_EQ(current_stream(device()), default_stream(device()));  // a handle enters nothing
}

TEST_P(Streams, TwoSideStreamsComputeWhatTheDefaultStreamDoes) {
  const Stream s1 = new_stream(device()), s2 = new_stream(device());
  EXPECT_NE(s1, s2);
  EXPECT_FALSE(s1.is_default());
  EXPECT_NE(s1.str().find("/stream "), std::string::npos) << s1.str();
  manual_seed(1);
  const Tensor a = randn({256, 256}, device()), b = randn({256, 256}, device());
  const Tensor expected1 = matmul(a, b), expected2 = matmul(b, a);
  Tensor c1, c2;
  {
    StreamGuard g(s1);
    EXPECT_EQ(current_stream(device()), s1);
    c1 = matmul(a, b);  // reads a and b made on the default stream
  }
  {
    StreamGuard g(s2);
    c2 = matmul(b, a);
  }
  EXPECT_EQ(current_stream(device()), default_stream(device()));
  // Queued on the default stream after both guards: it sees their results without a wait.
  EXPECT_DOUBLE_EQ(max(abs(c1 - expected1)).item<double>(), 0.0);
  EXPECT_DOUBLE_EQ(max(abs(c2 - expected2)).item<double>(), 0.0);
}

TEST_P(Streams, MemoryFreedUnderGuardsIsNotReusedTooEarly) {
  const Stream s1 = new_stream(device()), s2 = new_stream(device());
  // Each round frees temporaries on one stream while the other may still run; a block
  // handed out too early would be overwritten and show up as a wrong sum.
  Tensor total1 = zeros({1 << 16}, device()), total2 = zeros({1 << 16}, device());
  for (int round = 0; round < 20; ++round) {
    {
      StreamGuard g(s1);
      Tensor t = full({1 << 16}, 1.0, device());
      for (int k = 0; k < 5; ++k) t = t + 1.0;  // 6, through temporaries freed at once
      total1.add_(t);
    }
    {
      StreamGuard g(s2);
      Tensor t = full({1 << 16}, 2.0, device());
      for (int k = 0; k < 5; ++k) t = t * 1.0 + 0.0;
      total2.add_(t);
    }
  }
  EXPECT_DOUBLE_EQ(min(total1).item<double>(), 20 * 6.0);
  EXPECT_DOUBLE_EQ(max(total1).item<double>(), 20 * 6.0);
  EXPECT_DOUBLE_EQ(min(total2).item<double>(), 20 * 2.0);
  EXPECT_DOUBLE_EQ(max(total2).item<double>(), 20 * 2.0);
  synchronize(s1);
  synchronize(device());
}

TEST_P(Streams, NestedGuardsSeeEachOthersWork) {
  const Stream s1 = new_stream(device()), s2 = new_stream(device());
  Tensor x = zeros({1024}, device());
  {
    StreamGuard outer(s1);
    x.add_(1.0);
    {
      StreamGuard inner(s2);
      x.add_(2.0);  // after the outer stream's add
      EXPECT_EQ(current_stream(device()), s2);
    }
    EXPECT_EQ(current_stream(device()), s1);
    x.mul_(10.0);  // after the inner stream's add
  }
  EXPECT_DOUBLE_EQ(min(x).item<double>(), 30.0);
  EXPECT_DOUBLE_EQ(max(x).item<double>(), 30.0);
}

TEST_P(Streams, DefaultStreamInsideASideGuardIsOrderedBothWays) {
  const Stream side = new_stream(device());
  Tensor x = zeros({1024}, device());
  {
    StreamGuard outer(side);
    x.add_(1.0);
    {
      StreamGuard inner(default_stream(device()));
      x.mul_(5.0);  // after the side stream's add
    }
    x.sub_(2.0);  // after the default stream's mul
  }
  EXPECT_DOUBLE_EQ(min(x).item<double>(), 3.0);
  EXPECT_DOUBLE_EQ(max(x).item<double>(), 3.0);
}

TEST_P(Streams, AReadInsideAGuardWaitsForItsStream) {
  const Tensor a = full({512}, 2.0, device());
  StreamGuard guard(new_stream(device()));
  const Tensor b = a * 3.0;
  EXPECT_DOUBLE_EQ(sum(b).item<double>(), 512 * 6.0);  // the side stream's result
  EXPECT_EQ(b.to_vector<float>()[511], 6.0f);
}

TEST_P(Streams, ASideStreamAndTheDefaultStreamWaitWithoutTheHost) {
  // The guard, the work under it and the default stream's work after it wait for nothing on
  // the host: no SyncError, and no host wait in the ledger until the explicit read.
  const Tensor a = full({256, 256}, 0.5, device());
  const std::uint64_t before = transfer_stats(device()).host_waits;
  Tensor c;
  {
    const SyncGuard strict(SyncMode::kError);
    Tensor b;
    {
      StreamGuard guard(new_stream(device()));
      b = matmul(a, a);  // 64 everywhere
    }
    c = b + 1.0;  // the default stream: after the side stream's matmul
  }
  EXPECT_EQ(transfer_stats(device()).host_waits, before);
  EXPECT_DOUBLE_EQ(min(c).item<double>(), 65.0);
  EXPECT_DOUBLE_EQ(max(c).item<double>(), 65.0);
}

// The stream bookkeeping that every device has: entering a stream is refused while a graph
// is being captured (and the device stays usable), a capture is refused inside a guard, a
// guard left by an exception restores the stream before it, and waiting for a stream is a
// counted host wait.
TEST_P(Streams, GuardsAndStreamWaitsAreRefusedWhileCapturing) {
  const Stream s = new_stream(device());
  const Tensor x = ones({8}, device());
  Tensor y;
  expect_throw_with<GraphCaptureError>(
      [&] {
        Graph::capture(device(), [&] {
          y = x + 1.0;
          StreamGuard guard(s);
        });
      },
      {"[StreamGuard] " + device().str() +
       " is capturing a graph, which records one stream; enter the stream outside "
       "Graph::capture"});
  expect_throw_with<GraphCaptureError>(
      [&] { Graph::capture(device(), [&] { StreamGuard guard(default_stream(device())); }); },
      {"[StreamGuard] " + device().str() + " is capturing a graph"});
  expect_throw_with<GraphCaptureError>(
      [&] { Graph::capture(device(), [&] { synchronize(default_stream(device())); }); },
      {"[synchronize]", "a host wait"});
  expect_throw_with<GraphCaptureError>(
      [&] { Graph::capture(device(), [&] { synchronize(s); }); },
      {"[synchronize] " + device().str() + " is capturing a graph", "a host wait"});
  EXPECT_EQ(current_stream(device()), default_stream(device()));
  {
    StreamGuard guard(s);  // allowed again once the capture has ended
    EXPECT_EQ(current_stream(device()), s);
    y = x * 2.0;
    expect_throw_with<GraphCaptureError>(
        [&] { Graph::capture(device(), [&] { y = x * 3.0; }); },
        {"[Graph::capture] this thread is inside a StreamGuard for " + device().str() +
         "; capture on the default stream (outside the guard)"});
  }
  EXPECT_DOUBLE_EQ(sum(y).item<double>(), 16.0);
  Graph graph = Graph::capture(device(), [&] { y = x * 4.0; });  // fine after the guard
  graph.replay();
  EXPECT_DOUBLE_EQ(sum(y).item<double>(), 32.0);
}

// Two guards one after the other run at the same time: a second stream reading what the
// first made needs wait_stream (without it the read got the block's old contents, 19 runs
// in 20). Through the default stream, too: it includes the side streams it has joined.
TEST_P(Streams, WaitStreamOrdersOneSideStreamAfterAnother) {
  const Device d = device();
  const Tensor a = full({96, 96}, 1.0, d);
  for (const bool through_default : {false, true}) {
    for (int run = 0; run < 8; ++run) {
      const Stream s1 = new_stream(d), s2 = new_stream(d);
      Tensor b, c;
      {
        StreamGuard guard(s1);
        b = a;
        for (int i = 0; i < 12; ++i) b = b.matmul(a) * 0.0 + b;  // slow, and still 1
        b = b + 1.0;
      }
      wait_stream(s2, through_default ? default_stream(d) : s1);
      {
        StreamGuard guard(s2);
        c = b * 3.0;
      }
      EXPECT_DOUBLE_EQ(mean(c).item<double>(), 6.0) << "run " << run;
    }
  }
  // The default stream may wait for a side stream too, and a stream for itself (nothing).
  const Stream s = new_stream(d);
  Tensor e;
  {
    StreamGuard guard(s);
    e = a * 5.0;
  }
  wait_stream(default_stream(d), s);
  wait_stream(s, s);
  EXPECT_DOUBLE_EQ(sum(e).item<double>(), 5.0 * 96 * 96);
  expect_throw_with<GraphCaptureError>(
      [&] { Graph::capture(d, [&] { wait_stream(s, default_stream(d)); }); },
      {"[wait_stream] " + d.str() + " is capturing a graph"});
  for (const Device other : available_devices()) {
    if (other == d) continue;
    expect_throw_with<DeviceError>(
        [&] { wait_stream(s, default_stream(other)); },
        {"[wait_stream] the streams are of " + d.str() + " and " + other.str()});
  }
}

TEST_P(Streams, AGuardLeftByAnExceptionRestoresTheStreamBefore) {
  const Stream s = new_stream(device());
  const Tensor x = ones({4}, device());
  EXPECT_THROW(
      {
        StreamGuard guard(s);
        EXPECT_EQ(current_stream(device()), s);
        (void)x.reshape({3});  // a user error under the guard
      },
      ShapeError);
  EXPECT_EQ(current_stream(device()), default_stream(device()));
  EXPECT_DOUBLE_EQ(sum(x).item<double>(), 4.0);
}

TEST_P(Streams, WaitingForAStreamIsACountedHostWait) {
  const Tensor x = ones({1024}, device()) * 3.0;  // queued work to wait for
  const Stream side = new_stream(device());
  Tensor y;
  {
    StreamGuard guard(side);
    y = x * 2.0;
  }
  const std::uint64_t before = transfer_stats(device()).host_waits;
  synchronize(current_stream(device()));
  synchronize(side);
  {
    const SyncGuard strict(SyncMode::kError);  // an explicit wait is always allowed
    synchronize(side);
  }
  // The plain CPU runs work as it is called and counts no waits; every other device does.
  EXPECT_EQ(transfer_stats(device()).host_waits - before, detail::is_host(device()) ? 0u : 3u);
  EXPECT_DOUBLE_EQ(sum(y).item<double>(), 6144.0);
  EXPECT_EQ(Stream(), default_stream(cpu()));  // a default-constructed stream is the CPU's
}

TEST(StreamsOfAbsentDevices, AreRefused) {
  const Device absent = gpu(num_gpus());
  expect_throw_with<DeviceError>([&] { default_stream(absent); },
                                 {"[default_stream] device " + absent.str() + " is not available"});
  expect_throw_with<DeviceError>([&] { new_stream(absent); },
                                 {"[new_stream] device " + absent.str() + " is not available"});
  expect_throw_with<DeviceError>([&] { current_stream(absent); },
                                 {"[current_stream] device " + absent.str() + " is not available"});
}

TESSERA_INSTANTIATE_DEVICE_SUITE(Streams);

}  // namespace
}  // namespace tessera

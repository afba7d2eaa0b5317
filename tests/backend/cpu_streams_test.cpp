// Side streams of CPU devices (Note [CPU side streams]), on every CPU device: the plain CPU,
// logical devices with queues and without (TESSERA_CPU_ASYNC=0). Kernels that wait on a gate
// the test opens make the ordering and the concurrency certain rather than likely: a kernel
// that runs too early sees a closed gate, and one that waits for work that never comes
// gives up after a deadline, so a broken rule fails the test instead of hanging it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <thread>

#include "backend/cpu/cpu_backend.h"
#include "core/device_registry.h"
#include "core/tensor_impl.h"
#include "support/device_test.h"

namespace tessera {
namespace {

using testing::DeviceTest;

constexpr auto kDeadline = std::chrono::seconds(20);

// A flag kernels wait on; a wait past kDeadline gives up and says so.
struct Gate {
  std::atomic<bool> open{false};
  std::atomic<bool> gave_up{false};
  // Waits until opened; false (and gave_up) if kDeadline passed first.
  bool wait() {
    const auto deadline = std::chrono::steady_clock::now() + kDeadline;
    while (!open.load()) {
      if (std::chrono::steady_clock::now() > deadline) {
        gave_up = true;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return true;
  }
};

// Queues `kernel` on this thread's current stream of CPU device `d`, as an op does.
template <typename F>
void queue_kernel(Device d, F kernel) {
  detail::cpu_backend_impl().launch(d.index(), std::move(kernel));
}

float* floats(const Tensor& t) { return reinterpret_cast<float*>(detail::impl_of(t).data()); }

// Whether the default stream of `d` runs on the calling thread (the plain CPU, or
// TESSERA_CPU_ASYNC=0) rather than on a queue of its own.
bool default_stream_runs_here(Device d) {
  return detail::cpu_backend_impl().queue(d.index()) == nullptr;
}

class CpuStreams : public DeviceTest {
 protected:
  void SetUp() override {
    if (!device().is_cpu())
      GTEST_SKIP() << "drives the CPU backend's queues; tests/core/stream_test.cpp covers GPUs";
  }
};

TEST_P(CpuStreams, ASideStreamStartsAfterTheDefaultStreamsEarlierWork) {
  const Tensor x = zeros({1000}, device());
  const auto gate = std::make_shared<Gate>();
  // A default stream with a queue fills x once the gate opens, after the side stream's op
  // is queued; one that runs on this thread fills it now.
  const bool queued = !default_stream_runs_here(device());
  queue_kernel(device(), [x, gate, queued] {
    if (queued) gate->wait();
    std::fill_n(floats(x), 1000, 5.0f);
  });
  Tensor y;
  const auto side_ran = std::make_shared<std::atomic<bool>>(false);
  {
    const SyncGuard strict(SyncMode::kError);
    StreamGuard guard(new_stream(device()));
    y = x * 2.0;  // must read x after the fill
    queue_kernel(device(), [side_ran] { *side_ran = true; });
    if (queued) {
      // The side stream is held behind the closed gate: given time, it still has not run.
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      EXPECT_FALSE(side_ran->load()) << "the side stream ran before the default stream's work";
    }
    gate->open = true;
  }
  EXPECT_DOUBLE_EQ(min(y).item<double>(), 10.0);
  EXPECT_DOUBLE_EQ(max(y).item<double>(), 10.0);
  EXPECT_FALSE(gate->gave_up);
}

TEST_P(CpuStreams, DefaultStreamWorkAfterTheGuardWaitsForTheSideStreamNotTheHost) {
  const Tensor x = zeros({1000}, device());
  const auto gate = std::make_shared<Gate>();
  const std::uint64_t waits = transfer_stats(device()).host_waits;
  Tensor y;
  {
    const SyncGuard strict(SyncMode::kError);
    {
      StreamGuard guard(new_stream(device()));
      queue_kernel(device(), [x, gate] {
        gate->wait();
        std::fill_n(floats(x), 1000, 3.0f);
      });
    }
    if (default_stream_runs_here(device())) {
      // The calling thread is the default stream: its next op starts once the side stream
      // is done, so the gate must be open by then (a test thread opens it).
      std::thread opener([gate] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        gate->open = true;
      });
      y = x + 1.0;
      opener.join();
    } else {
      y = x + 1.0;  // queued behind the side stream; the host went on at once
      gate->open = true;
    }
  }
  EXPECT_EQ(transfer_stats(device()).host_waits, waits);  // no host wait until the read
  EXPECT_DOUBLE_EQ(min(y).item<double>(), 4.0);
  EXPECT_DOUBLE_EQ(max(y).item<double>(), 4.0);
  EXPECT_FALSE(gate->gave_up);
}

TEST_P(CpuStreams, TwoGuardsInARowOnTwoSideStreamsRunConcurrently) {
  // Each kernel waits for the other to start: only two streams running at once finish.
  const auto first_started = std::make_shared<Gate>(), second_started = std::make_shared<Gate>();
  const Stream s1 = new_stream(device()), s2 = new_stream(device());
  {
    StreamGuard guard(s1);
    queue_kernel(device(), [first_started, second_started] {
      first_started->open = true;
      second_started->wait();
    });
  }
  {
    StreamGuard guard(s2);
    queue_kernel(device(), [first_started, second_started] {
      second_started->open = true;
      first_started->wait();
    });
  }
  synchronize(device());
  EXPECT_FALSE(first_started->gave_up || second_started->gave_up)
      << "the two side streams ran one after the other";
}

TEST_P(CpuStreams, SynchronizingOneStreamWaitsForItAlone) {
  const Stream blocked = new_stream(device()), other = new_stream(device());
  const auto gate = std::make_shared<Gate>();
  const auto done = std::make_shared<std::atomic<int>>(0);
  {
    StreamGuard guard(blocked);
    queue_kernel(device(), [gate, done] {
      gate->wait();
      ++*done;
    });
  }
  {
    StreamGuard guard(other);
    queue_kernel(device(), [done] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      *done += 10;
    });
  }
  synchronize(other);  // returns while `blocked` still waits for its gate
  EXPECT_EQ(done->load(), 10);
  gate->open = true;
  synchronize(blocked);
  EXPECT_EQ(done->load(), 11);
  EXPECT_FALSE(gate->gave_up);
}

TEST_P(CpuStreams, SynchronizingTheDefaultStreamOrTheDeviceWaitsForJoinedSideStreams) {
  for (const bool whole_device : {false, true}) {
    const auto done = std::make_shared<std::atomic<bool>>(false);
    {
      StreamGuard guard(new_stream(device()));
      queue_kernel(device(), [done] {
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        *done = true;
      });
    }
    if (whole_device) {
      synchronize(device());
    } else {
      synchronize(default_stream(device()));  // the default stream was ordered after it
    }
    EXPECT_TRUE(done->load()) << (whole_device ? "synchronize(device)" : "synchronize(stream)");
  }
}

TEST_P(CpuStreams, MemoryASideStreamStillReadsIsNotHandedToAnotherStream) {
  constexpr int kN = 1 << 16;
  Tensor x = full({kN}, 1.0, device());
  const Tensor total = zeros({1}, device());
  const void* x_block = floats(x);
  const auto gate = std::make_shared<Gate>();
  {
    StreamGuard guard(new_stream(device()));
    queue_kernel(device(), [x, total, gate] {
      gate->wait();  // reads x only once the test has tried to reuse its memory
      double s = 0;
      for (int i = 0; i < kN; ++i) s += floats(x)[i];
      floats(total)[0] = static_cast<float>(s);
    });
  }
  x = Tensor();  // the host's handle goes; the queued kernel still holds one
  {
    // Another side stream does not wait for the first: memory of the size x had, made
    // and written now, must not be x's.
    StreamGuard guard(new_stream(device()));
    for (int k = 0; k < 4; ++k) {
      const Tensor z = full({kN}, 99.0, device());
      synchronize(current_stream(device()));
      EXPECT_NE(static_cast<const void*>(floats(z)), x_block);
    }
  }
  gate->open = true;
  EXPECT_DOUBLE_EQ(total.item<double>(), kN);
  EXPECT_FALSE(gate->gave_up);
}

TEST_P(CpuStreams, ACopyToAnotherDeviceFromASideStreamWaitsForIt) {
  const std::vector<Device> devices = same_kind_devices();
  if (devices.size() < 2)
    GTEST_SKIP() << "needs two CPU devices; CTest also runs this suite with TESSERA_CPU_DEVICES=2";
  const Device other = devices[1];
  const Tensor x = zeros({1000}, device());
  const auto gate = std::make_shared<Gate>();
  Tensor y;
  {
    StreamGuard guard(new_stream(device()));
    queue_kernel(device(), [x, gate] {
      if (gate->wait()) std::fill_n(floats(x), 1000, 7.0f);
    });
    std::thread opener([gate] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      gate->open = true;
    });
    y = x.to(other);  // after the side stream's fill
    opener.join();
  }
  EXPECT_DOUBLE_EQ(min(y).item<double>(), 7.0);
  EXPECT_DOUBLE_EQ(max(y).item<double>(), 7.0);
}

TEST_P(CpuStreams, AllReduceFromSideStreamsSeesTheirWork) {
  const std::vector<Device> devices = same_kind_devices();
  if (devices.size() < 2)
    GTEST_SKIP() << "needs two CPU devices; CTest also runs this suite with TESSERA_CPU_DEVICES=2";
  std::vector<Tensor> parts;
  for (const Device d : devices) parts.push_back(zeros({512}, d));
  {
    // Each device's part is made on a side stream of its own, the slower one last.
    StreamGuard g0(new_stream(devices[0]));
    StreamGuard g1(new_stream(devices[1]));
    for (std::size_t i = 0; i < parts.size(); ++i) {
      queue_kernel(devices[i], [t = parts[i], i] {
        std::this_thread::sleep_for(std::chrono::milliseconds(10 * static_cast<int>(i)));
        std::fill_n(floats(t), 512, static_cast<float>(i + 1));
      });
    }
    all_reduce(parts);  // on each device's current stream
  }
  const double expected = static_cast<double>(parts.size() * (parts.size() + 1) / 2);
  for (const Tensor& t : parts) {
    EXPECT_DOUBLE_EQ(min(t).item<double>(), expected);
    EXPECT_DOUBLE_EQ(max(t).item<double>(), expected);
  }
}

TEST_P(CpuStreams, AKernelErrorOnASideStreamIsReportedByItsSynchronize) {
  const Stream side = new_stream(device());
  {
    StreamGuard guard(side);
    queue_kernel(device(), [] { throw std::runtime_error("a kernel failed"); });
  }
  EXPECT_THROW(synchronize(side), std::runtime_error);
  EXPECT_NO_THROW(synchronize(side));  // reported once
  EXPECT_NO_THROW(synchronize(device()));
}

TEST_P(CpuStreams, WorkLeftOnASideStreamAtExitIsFinished) {
  if (device() != available_devices().front()) GTEST_SKIP() << "once per run is enough";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        StreamGuard guard(new_stream(device()));
        queue_kernel(device(), [] {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          std::fputs("side stream drained\n", stderr);
        });
        std::exit(0);  // static destructors follow only once the kernel has run
      },
      ::testing::ExitedWithCode(0), "side stream drained");
}

TESSERA_INSTANTIATE_DEVICE_SUITE(CpuStreams);

}  // namespace
}  // namespace tessera

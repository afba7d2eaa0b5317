// Work that spans the queues of several logical CPU devices (a collective, a copy between two
// queued devices, a replay of a graph recorded on several devices), issued by two threads at
// once. Each such operation puts tasks on several queues that wait for one another; if two
// threads' submissions interleave, the queues can hold them in opposite orders and wait for
// each other forever (Note [Cross-device submissions]). The runs go in a child process with a
// watchdog, so a deadlock fails the test (the child exits with kDeadlocked) instead of
// hanging it.
#include <gtest/gtest.h>

#include <unistd.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <thread>
#include <vector>

#include "support/device_test.h"

namespace tessera {
namespace {

using testing::DeviceTest;

constexpr int kDeadlocked = 3;
constexpr auto kDeadline = std::chrono::seconds(30);

// Runs `a` and `b` on two threads `rounds` times each, then waits for every device; exits the
// process with 0 when all is done, with kDeadlocked if the deadline passes first. For use
// inside EXPECT_EXIT.
[[noreturn]] void run_both_or_give_up(const std::function<void()>& a,
                                      const std::function<void()>& b, int rounds) {
  std::thread watchdog([] {
    std::this_thread::sleep_for(kDeadline);
    std::fputs("deadlocked: the queues wait for each other\n", stderr);
    std::_Exit(kDeadlocked);
  });
  watchdog.detach();
  std::thread second([&] {
    for (int i = 0; i < rounds; ++i) b();
  });
  for (int i = 0; i < rounds; ++i) a();
  second.join();
  synchronize();
  std::fflush(nullptr);
  std::_Exit(0);
}

class CrossDeviceOrder : public DeviceTest {
 protected:
  void SetUp() override {
    if (!device().is_cpu())
      GTEST_SKIP() << "drives the CPU backend's queues; NCCL orders GPU collectives itself";
    if (device() != available_devices().front()) GTEST_SKIP() << "once per run is enough";
    devices_ = same_kind_devices();
    if (devices_.size() < 2)
      GTEST_SKIP() << "needs two CPU devices; CTest also runs this suite with "
                      "TESSERA_CPU_DEVICES=2";
    GTEST_FLAG_SET(death_test_style, "threadsafe");
  }
  std::vector<Device> devices_;
};

TEST_P(CrossDeviceOrder, ACollectiveAndACopyBetweenTheSameDevicesFromTwoThreads) {
  const auto run = [&] {
    std::vector<Tensor> parts;
    for (const Device d : devices_) parts.push_back(ones({256}, d));
    const Tensor src = ones({256}, devices_[0]);
    const Tensor back = ones({256}, devices_[1]);
    run_both_or_give_up([&] { all_reduce(parts, ReduceKind::kMean); },
                        [&] {
                          (void)src.copy_to(devices_[1]);
                          (void)back.copy_to(devices_[0]);
                        },
                        2000);
  };
  EXPECT_EXIT(run(), ::testing::ExitedWithCode(0), "");
}

TEST_P(CrossDeviceOrder, TwoThreadsCollectivesAndAReplayedCollective) {
  const auto run = [&] {
    std::vector<Tensor> recorded, eager;
    for (const Device d : devices_) {
      recorded.push_back(ones({256}, d));
      eager.push_back(ones({256}, d));
    }
    const Graph graph = Graph::capture(devices_, [&] { all_reduce(recorded, ReduceKind::kMean); });
    run_both_or_give_up([&] { graph.replay(); }, [&] { all_reduce(eager, ReduceKind::kMean); },
                        2000);
  };
  EXPECT_EXIT(run(), ::testing::ExitedWithCode(0), "");
}

TESSERA_INSTANTIATE_DEVICE_SUITE(CrossDeviceOrder);

}  // namespace
}  // namespace tessera

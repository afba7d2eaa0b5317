// How logical CPU devices share the cores (Note [Devices own their cores]).
#include "backend/cpu/cpu_threads.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <thread>

#include "backend/cpu/cpu_backend.h"
#include "tessera/tessera.h"

namespace tessera::detail {
namespace {

TEST(CpuThreads, EachDeviceGetsAnEqualShareOfTheCores) {
  EXPECT_EQ(threads_per_device(16, 2, 0), 8);
  EXPECT_EQ(threads_per_device(16, 3, 0), 5);
  EXPECT_EQ(threads_per_device(2, 2, 0), 1);
  EXPECT_EQ(threads_per_device(2, 4, 0), 1);  // never zero
  EXPECT_EQ(threads_per_device(1, 1, 0), 1);
  EXPECT_EQ(threads_per_device(16, 2, 3), 3);  // asked for
}

TEST(CpuThreads, DevicesArePinnedToCoresOfTheirOwnWhenTheyFit) {
  const std::vector<int> allowed = {0, 1, 2, 3, 8, 9};
  EXPECT_EQ(cores_of_device(allowed, 0, 2, 3), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(cores_of_device(allowed, 1, 2, 3), (std::vector<int>{3, 8, 9}));
  EXPECT_EQ(cores_of_device(allowed, 1, 3, 2), (std::vector<int>{2, 3}));
  EXPECT_TRUE(cores_of_device(allowed, 0, 4, 2).empty());  // 8 threads on 6 cores
  EXPECT_TRUE(cores_of_device({0, 1}, 1, 2, 2).empty());
}

TEST(CpuThreads, AllowedCoresAreTheAffinityMask) {
  const std::vector<int> cores = allowed_cores();
  ASSERT_FALSE(cores.empty());
  EXPECT_LE(cores.size(), static_cast<std::size_t>(std::thread::hardware_concurrency()));
  for (std::size_t i = 1; i < cores.size(); ++i) EXPECT_LT(cores[i - 1], cores[i]);
}

TEST(CpuThreads, EnteringADeviceThreadSetsItsOpenMpTeamSize) {
  std::thread t([] {
    enter_device_thread({}, 3);
    EXPECT_EQ(omp_get_max_threads(), 3);
  });
  t.join();
}

// Whatever the configuration the suite runs under, kernels of a logical device see the
// device's thread count, on its queue or inline, and the calling thread's own OpenMP
// setting is left as it was.
TEST(CpuThreads, KernelsOfALogicalDeviceRunWithItsThreadCount) {
  CpuBackendBase& backend = cpu_backend_impl();
  if (!has_logical_cpu_devices()) {
    EXPECT_EQ(backend.kernel_threads(), 0);
    return;
  }
  const int expected = backend.kernel_threads();
  EXPECT_EQ(expected,
            threads_per_device(static_cast<int>(allowed_cores().size()), num_cpu_devices(), 0));
  const int before = omp_get_max_threads();
  for (int i = 0; i < num_cpu_devices(); ++i) {
    int seen = -1;
    backend.launch(i, [&seen] { seen = omp_get_max_threads(); });
    backend.synchronize(i);
    EXPECT_EQ(seen, expected) << "cpu:" << i;
  }
  EXPECT_EQ(omp_get_max_threads(), before);
}

}  // namespace
}  // namespace tessera::detail

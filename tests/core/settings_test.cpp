// Process-wide settings: defaults, round trips, and that the CPU ignores the TF32 switch.
#include <gtest/gtest.h>

#include <vector>

#include "tessera/tessera.h"

namespace tessera {
namespace {

// Restores the default however a test ends, so tests stay independent.
struct Tf32Guard {
  ~Tf32Guard() { set_matmul_allow_tf32(false); }
};

TEST(Settings, MatmulTf32IsOffByDefault) { EXPECT_FALSE(matmul_allow_tf32()); }

TEST(Settings, MatmulTf32RoundTrips) {
  Tf32Guard guard;
  set_matmul_allow_tf32(true);
  EXPECT_TRUE(matmul_allow_tf32());
  set_matmul_allow_tf32(true);  // idempotent
  EXPECT_TRUE(matmul_allow_tf32());
  set_matmul_allow_tf32(false);
  EXPECT_FALSE(matmul_allow_tf32());
}

TEST(Settings, CpuMatmulIgnoresTf32) {
  Tf32Guard guard;
  manual_seed(7);
  const Tensor a = randn({33, 47}), b = randn({47, 29});
  const std::vector<float> exact = matmul(a, b).to_vector<float>();
  set_matmul_allow_tf32(true);
  EXPECT_EQ(matmul(a, b).to_vector<float>(), exact);
}

}  // namespace
}  // namespace tessera

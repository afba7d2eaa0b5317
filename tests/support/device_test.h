#pragma once
// Device-parameterized tests: TEST_P(DeviceTest-derived suite, ...) runs once per available
// device (CPU, each logical CPU device, each GPU). Instantiate a suite with
// TESSERA_INSTANTIATE_DEVICE_SUITE(Suite).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tessera/tessera.h"

namespace tessera::testing {

class DeviceTest : public ::testing::TestWithParam<Device> {
 protected:
  Device device() const { return GetParam(); }
  // Every available device of the test device's kind, the test device first: a group for
  // collectives and data-parallel training.
  std::vector<Device> same_kind_devices() const {
    std::vector<Device> g{device()};
    for (Device d : available_devices()) {
      if (d.kind() == device().kind() && d != device()) g.push_back(d);
    }
    return g;
  }
};

inline std::string device_test_name(const ::testing::TestParamInfo<Device>& info) {
  const Device d = info.param;
  return std::string(d.is_cpu() ? "cpu" : "cuda") + std::to_string(d.index());
}

// Random doubles in [lo, hi) from a seeded host generator (independent of tessera's RNG).
inline std::vector<double> random_values(std::size_t n, std::uint64_t seed, double lo = -1,
                                         double hi = 1) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = dist(gen);
  return v;
}

// A tensor of `shape` and `dtype` on `device` holding `values` (converted), plus the same
// values rounded through `dtype` as float64, for references.
inline Tensor make_input(const std::vector<double>& values, const Shape& shape, Dtype dtype,
                         Device device) {
  return from_vector(values, shape, {dtype, device});
}

// Rounds values through `dtype` (what the tensor actually holds).
inline std::vector<double> rounded(const Tensor& t) { return t.to_vector<double>(); }

// Expects |actual - expected| <= atol + rtol * |expected| elementwise; NaNs must match. The
// first few elements that differ are reported one by one, then how many differ in all: a
// layer that went wrong reported each of its 65,536 elements, 16 MB of log.
inline void expect_close(const std::vector<double>& actual, const std::vector<double>& expected,
                         double rtol, double atol, const std::string& what = "") {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  constexpr int kReported = 5;
  int wrong = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const bool close = std::isnan(expected[i]) ? std::isnan(actual[i])
                                               : std::abs(actual[i] - expected[i]) <=
                                                     atol + rtol * std::abs(expected[i]);
    if (close || ++wrong > kReported) continue;
    if (std::isnan(expected[i])) {
      EXPECT_TRUE(std::isnan(actual[i])) << what << " at " << i;
    } else {
      EXPECT_NEAR(actual[i], expected[i], atol + rtol * std::abs(expected[i]))
          << what << " at " << i;
    }
  }
  if (wrong > kReported) {
    ADD_FAILURE() << what << ": " << wrong << " of " << actual.size()
                  << " elements differ; the first " << kReported << " are reported above";
  }
}

inline void expect_close(const Tensor& actual, const std::vector<double>& expected, double rtol,
                         double atol, const std::string& what = "") {
  expect_close(actual.to_vector<double>(), expected, rtol, atol, what);
}

// Expects every fragment in the message.
inline void expect_says(const std::string& message, const std::vector<std::string>& fragments) {
  for (const std::string& fragment : fragments) {
    EXPECT_NE(message.find(fragment), std::string::npos)
        << "message lacks '" << fragment << "': " << message;
  }
}

// Runs `f` and expects it to throw E whose message contains every fragment.
template <typename E, typename F>
void expect_throw_with(F&& f, const std::vector<std::string>& fragments) {
  try {
    f();
    ADD_FAILURE() << "expected an exception";
  } catch (const E& e) {
    expect_says(e.what(), fragments);
  }
}

// Two distinct devices, or skip: the rules about a second device need one.
#define TESSERA_REQUIRE_TWO_DEVICES()                                   \
  if (::tessera::available_devices().size() < 2)                        \
  GTEST_SKIP() << "needs two devices; CTest also runs this suite with " \
                  "TESSERA_CPU_DEVICES=2"

}  // namespace tessera::testing

#define TESSERA_INSTANTIATE_DEVICE_SUITE(Suite)                                                    \
  INSTANTIATE_TEST_SUITE_P(AllDevices, Suite, ::testing::ValuesIn(::tessera::available_devices()), \
                           ::tessera::testing::device_test_name)

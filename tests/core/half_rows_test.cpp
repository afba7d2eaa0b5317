// Note [Half rows]: dense float32 <-> float16 copies on the CPU (F16C instructions at the
// levels that have them) give the bits of the scalar conversions in core/half.h for every
// float16 and for floats around every rounding boundary; CTest runs this at every kernel
// level (unit.cpu_x86_64, unit.cpu_x86_64_v3, and the best one).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/half.h"
#include "core/tensor_impl.h"
#include "support/device_test.h"

namespace tessera {
namespace {

using testing::DeviceTest;

class HalfRows : public DeviceTest {
 protected:
  void SetUp() override {
    if (!device().is_cpu()) GTEST_SKIP() << "the CPU's copy kernel; GPUs convert with CUDA's";
  }
};

TEST_P(HalfRows, EveryFloat16WidensToTheScalarBits) {
  constexpr std::size_t kAll = 65536 + 13;  // a tail shorter than a vector, too
  Tensor half = detail::make_tensor({static_cast<std::int64_t>(kAll)}, kFloat16, device(), "test");
  std::vector<std::uint16_t> bits(kAll);
  for (std::size_t i = 0; i < kAll; ++i) bits[i] = static_cast<std::uint16_t>(i);
  std::memcpy(detail::impl_of(half).data(), bits.data(), kAll * 2);
  AllowSync deliberate;
  const std::vector<float> wide = half.to(kFloat32).to_vector<float>();
  for (std::size_t i = 0; i < kAll; ++i) {
    const std::uint32_t want = detail::float_bits(detail::float16_bits_to_float(bits[i]));
    ASSERT_EQ(detail::float_bits(wide[i]), want) << "float16 bits 0x" << std::hex << bits[i];
  }
}

TEST_P(HalfRows, FloatsAroundEveryRoundingBoundaryNarrowToTheScalarBits) {
  std::vector<std::uint32_t> inputs;
  // Every exponent and sign, with mantissas at and around the 13 dropped bits' halfway
  // points (ties to even both ways), the largest and smallest, and NaN payloads.
  for (std::uint32_t sign : {0u, 0x80000000u}) {
    for (std::uint32_t exp = 0; exp < 256; ++exp) {
      for (std::uint32_t mant :
           {0u, 1u, 0xfffu, 0x1000u, 0x1001u, 0x1fffu, 0x2000u, 0x3000u, 0x3001u, 0x5000u,
            0x400000u, 0x401000u, 0x7fe000u, 0x7ff000u, 0x7fefffu, 0x7fffffu}) {
        inputs.push_back(sign | exp << 23 | mant);
      }
    }
  }
  std::mt19937 gen(11);
  for (int i = 0; i < 1 << 20; ++i) inputs.push_back(static_cast<std::uint32_t>(gen()));
  std::vector<float> values(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) values[i] = detail::bits_float(inputs[i]);
  AllowSync deliberate;
  const Tensor half =
      from_vector(values, {static_cast<std::int64_t>(values.size())}, device()).to(kFloat16);
  synchronize(device());
  std::vector<std::uint16_t> got(values.size());
  std::memcpy(got.data(), detail::impl_of(half).data(), got.size() * 2);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    ASSERT_EQ(got[i], detail::float_to_float16_bits(values[i]))
        << "float bits 0x" << std::hex << inputs[i];
  }
}

TESSERA_INSTANTIATE_DEVICE_SUITE(HalfRows);

}  // namespace
}  // namespace tessera

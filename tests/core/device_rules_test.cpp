// The device rules: ops on tensors from different devices fail loudly, naming the op, both
// devices and the fix; C++ scalars are always fine; 0-dim tensors get no exception.
#include "support/device_test.h"

namespace tessera {
namespace {

using testing::DeviceTest;
using testing::expect_throw_with;

class DeviceRules : public DeviceTest {};

Device other_device(Device mine) {
  for (Device d : available_devices()) {
    if (d != mine) return d;
  }
  return mine;
}

TEST_P(DeviceRules, ResultsLiveWhereTheOperandsLive) {
  const Tensor x = ones({2, 3}, device());
  EXPECT_EQ((x + x).device(), device());
  EXPECT_EQ((x * 2.0).device(), device());
  EXPECT_EQ(exp(x).device(), device());
  EXPECT_EQ(where(x > 0.5, x, 0.0).device(), device());
  EXPECT_EQ(x.t().contiguous().device(), device());
}

// How the fix in a message names a device: C++ a user can paste, not Device::str()'s "cpu:1".
std::string code(Device d) {
  if (d.is_cuda()) return "gpu(" + std::to_string(d.index()) + ")";
  return d.index() == 0 ? "cpu()" : "cpu(" + std::to_string(d.index()) + ")";
}

TEST_P(DeviceRules, MismatchNamesOpDevicesAndFix) {
  TESSERA_REQUIRE_TWO_DEVICES();
  const Device other = other_device(device());
  const Tensor x = ones({2, 3}, device());
  const Tensor y = rand({2, 3}, other);
  expect_throw_with<DeviceMismatchError>(
      [&] { (void)(x + y); },
      {"[add] operands are on different devices", "self on " + device().str(),
       "other on " + other.str(), ".to(" + code(other) + ")", "never copies"});
  expect_throw_with<DeviceMismatchError>([&] { (void)(x * y); }, {"[mul]"});
  expect_throw_with<DeviceMismatchError>([&] { (void)(x < y); }, {"[lt]"});
  expect_throw_with<DeviceMismatchError>([&] { (void)maximum(x, y); }, {"[maximum]"});
  expect_throw_with<DeviceMismatchError>([&] { (void)where(x > 0.5, y, x); },
                                         {"[where]", "condition on", "self on " + other.str()});
}

TEST_P(DeviceRules, InPlaceOpsCheckToo) {
  TESSERA_REQUIRE_TWO_DEVICES();
  Tensor x = ones({2, 3}, device());
  const Tensor y = ones({2, 3}, other_device(device()));
  expect_throw_with<DeviceMismatchError>([&] { x.add_(y); }, {"[add_]"});
  expect_throw_with<DeviceMismatchError>([&] { x.mul_(y); }, {"[mul_]"});
  expect_throw_with<DeviceMismatchError>([&] { x += y; }, {"[add_]"});
  // Nothing was written.
  EXPECT_EQ(x.to_vector<float>(), std::vector<float>(6, 1.0f));
}

TEST_P(DeviceRules, ZeroDimTensorsAreNotSilentlyCopied) {
  TESSERA_REQUIRE_TWO_DEVICES();
  const Tensor x = ones({2, 3}, device());
  const Tensor s = full({}, 2.0, other_device(device()));
  expect_throw_with<DeviceMismatchError>([&] { (void)(x * s); }, {"0-dim", ".item()"});
  // The fix the message suggests works.
  EXPECT_EQ((x * s.item<double>()).to_vector<float>(), std::vector<float>(6, 2.0f));
  EXPECT_EQ((x * s.to(device())).to_vector<float>(), std::vector<float>(6, 2.0f));
}

TEST_P(DeviceRules, TheChaptersExampleWorksAfterAnExplicitCopy) {
  TESSERA_REQUIRE_TWO_DEVICES();
  const Device second = other_device(device());
  const Tensor X = ones({2, 3}, device());
  const Tensor Y = rand({2, 3}, second);
  const Tensor Z = X.to(second);
  EXPECT_EQ(Z.device(), second);
  const Tensor sum_yz = Y + Z;
  const auto y = Y.to_vector<float>();
  const auto s = sum_yz.to_vector<float>();
  for (std::size_t i = 0; i < y.size(); ++i) EXPECT_FLOAT_EQ(s[i], y[i] + 1.0f);
  EXPECT_TRUE(Z.to(second).is_same(Z));
  EXPECT_FALSE(Z.copy_to(second).is_same(Z));
}

TEST_P(DeviceRules, UndefinedOperandIsAnError) {
  const Tensor x = ones({2}, device());
  expect_throw_with<Error>([&] { (void)(x + Tensor()); }, {"[add]", "'other' is an undefined"});
}

TESSERA_INSTANTIATE_DEVICE_SUITE(DeviceRules);

}  // namespace
}  // namespace tessera

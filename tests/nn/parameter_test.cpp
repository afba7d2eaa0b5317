// nn::Parameter: assigning a tensor to a layer's public parameter (`linear.weight = w`)
// updates the registered parameter, so parameters(), the optimizer and the device audit
// follow it; what cannot be assigned is refused in words.
#include "support/device_test.h"

namespace tessera {
namespace {

using testing::DeviceTest;
using testing::expect_close;
using testing::expect_throw_with;

class Parameters : public DeviceTest {};

TEST_P(Parameters, AssignmentUpdatesTheRegisteredParameterAndTheOptimizerTrainsIt) {
  manual_seed(0);
  nn::Linear linear(2, 1, true, device());
  const Tensor registered = linear.parameters()[0];
  optim::SGD opt(linear.parameters(), {.lr = 0.5});
  const Tensor w = tensor({{1.0, 2.0}}, device());
  linear.weight = w;
  // One parameter, seen the same way from every handle.
  EXPECT_TRUE(linear.parameters()[0].is_same(linear.weight));
  EXPECT_TRUE(registered.is_same(linear.weight));
  EXPECT_TRUE(linear.tensor("weight").is_same(linear.weight));
  EXPECT_TRUE(linear.weight.requires_grad());
  EXPECT_TRUE(linear.weight.is_leaf());
  expect_close(registered, {1.0, 2.0}, 0, 0);
  // The optimizer, built before the assignment, trains the new value: the gradient of
  // sum(x W^T + b) with respect to W is x.
  const Tensor x = tensor({{1.0, -1.0}}, device());
  opt.zero_grad();
  sum(linear(x)).backward();
  opt.step();
  expect_close(linear.weight, {1.0 - 0.5, 2.0 + 0.5}, 1e-6, 1e-6);
  expect_close(w, {0.5, 2.5}, 1e-6, 1e-6, "the data is shared with the assigned tensor");
  // Assigning another parameter's value, and assigning a parameter to itself.
  nn::Linear other(2, 1, true, device());
  other.weight = linear.weight;
  expect_close(other.weight, {0.5, 2.5}, 1e-6, 1e-6);
  EXPECT_FALSE(other.weight.is_same(linear.weight)) << "each layer keeps its own parameter";
  linear.weight = linear.weight;
  expect_close(linear.weight, {0.5, 2.5}, 1e-6, 1e-6);
}

TEST_P(Parameters, AssignmentClearsTheGradientAndKeepsTheGraphOut) {
  nn::Linear linear(2, 2, false, device());
  sum(linear(ones({1, 2}, device()))).backward();
  ASSERT_TRUE(linear.weight.grad().defined());
  const Tensor source = ones({2, 2}, device()).requires_grad_();
  linear.weight = source * 3.0;  // a result of the graph: only its data is taken
  EXPECT_FALSE(linear.weight.grad().defined());
  EXPECT_TRUE(linear.weight.is_leaf());
  expect_close(linear.weight, {3, 3, 3, 3}, 0, 0);
}

TEST_P(Parameters, AssigningATensorOnAnotherDeviceMovesTheParameter) {
  Device other = device();
  for (Device d : same_kind_devices()) {
    if (d != device()) other = d;
  }
  if (other == device()) GTEST_SKIP() << "needs two devices of one kind (TESSERA_CPU_DEVICES=2)";
  nn::Linear linear(2, 1, true, device());
  optim::SGD opt(linear.parameters(), {.lr = 0.5});
  linear.weight = tensor({{1.0, 2.0}}, device()).to(other);
  EXPECT_EQ(linear.parameters()[0].device(), other);
  // The device audit sees the half-moved layer, naming both tensors.
  expect_throw_with<DeviceMismatchError>([&] { (void)linear.device(); },
                                         {"weight on " + other.str(), "bias on " + device().str()});
  linear.bias = linear.bias.to(other);
  EXPECT_EQ(linear.device(), other);
  opt.zero_grad();
  sum(linear(tensor({{1.0, -1.0}}, other))).backward();
  opt.step();
  expect_close(linear.weight, {0.5, 2.5}, 1e-6, 1e-6);
  EXPECT_EQ(linear.weight.device(), other);
}

TEST_P(Parameters, WhatCannotBeAssignedIsRefused) {
  nn::Linear linear(2, 3, false, device());
  expect_throw_with<ShapeError>(
      [&] {
        linear.weight = ones({2, 2}, device());
      },
      {"[Parameter::operator=] a parameter of shape [3, 2] cannot take a value of shape [2, 2]"});
  expect_throw_with<DtypeError>(
      [&] {
        linear.weight = ones({3, 2}, {kInt64, device()});
      },
      {"[Parameter::operator=]", "floating", "int64"});
  expect_throw_with<Error>([&] { linear.weight = Tensor(); }, {"[Parameter::operator=]"});
  // An expanded value was taken, then refused by the optimizer and by every load.
  expect_throw_with<Error>(
      [&] {
        linear.weight = ones({1, 2}, device()).expand({3, 2});
      },
      {"[Parameter::operator=] the value (shape [3, 2], strides [0, 1]) is an expanded view",
       ".clone()"});
  expect_throw_with<Error>([&] { linear.bias = ones({3}, device()); },
                           {"[Parameter::operator=] this parameter is not registered"});
  nn::LazyLinear lazy(4);
  expect_throw_with<Error>(
      [&] {
        lazy.weight = ones({4, 2}, device());
      },
      {"not registered", "lazy layer before its first call"});
  EXPECT_FALSE(lazy.built());
  // A refused assignment changes nothing.
  EXPECT_EQ(linear.weight.shape(), Shape({3, 2}));
  EXPECT_EQ(linear.weight.dtype(), kFloat32);
  EXPECT_EQ(linear.parameters().size(), 1u);
}

TEST_P(Parameters, ConvolutionParametersAssignToo) {
  nn::Conv2d conv(1, 2, 3, {}, true, device());
  const Tensor registered = conv.parameters()[0];
  conv.weight = zeros({2, 1, 3, 3}, device());
  EXPECT_TRUE(registered.is_same(conv.weight));
  expect_close(sum(registered), {0.0}, 0, 0);
}

TESSERA_INSTANTIATE_DEVICE_SUITE(Parameters);

}  // namespace
}  // namespace tessera

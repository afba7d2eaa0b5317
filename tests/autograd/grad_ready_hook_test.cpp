// set_grad_ready_hook: the signal data-parallel training reduces gradients on
// (Note [Grad-ready hooks]).
#include <string>
#include <vector>

#include "support/device_test.h"

namespace tessera {
namespace {

using testing::DeviceTest;
using testing::expect_throw_with;

class GradReadyHook : public DeviceTest {};

// Each hook fires once per pass, after the leaf's last contribution: what grad() holds then
// is what it holds when backward() returns. w1 is used early and late, w2 only late, so w2
// is final (and fires) first.
TEST_P(GradReadyHook, FiresOnceWhenTheLeafsGradientIsComplete) {
  Tensor x = tensor({1.0, -2.0, 3.0}, device());
  Tensor w1 = tensor({0.5, 1.5, -1.0}, device()).requires_grad_();
  Tensor w2 = tensor({2.0, 1.0, 0.25}, device()).requires_grad_();
  std::vector<std::string> order;
  std::vector<std::vector<float>> at_hook(2);
  set_grad_ready_hook(w1, [&](const Tensor& leaf) {
    order.push_back("w1");
    at_hook[0] = leaf.grad().to_vector<float>();
  });
  set_grad_ready_hook(w2, [&](const Tensor& leaf) {
    order.push_back("w2");
    at_hook[1] = leaf.grad().to_vector<float>();
  });
  const Tensor h = x * w1;               // w1's first use
  const Tensor y = sum(h * w2 + h * h);  // w2 once, h (w1) twice more
  y.backward();
  EXPECT_EQ(order, (std::vector<std::string>{"w2", "w1"}));
  EXPECT_EQ(at_hook[0], w1.grad().to_vector<float>());
  EXPECT_EQ(at_hook[1], w2.grad().to_vector<float>());
  // Against the float64 reference: dy/dw1 = x*w2 + 2*x*x*w1, dy/dw2 = x*w1.
  const std::vector<double> xs{1, -2, 3}, w1s{0.5, 1.5, -1}, w2s{2, 1, 0.25};
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(at_hook[0][i], xs[i] * w2s[i] + 2 * xs[i] * xs[i] * w1s[i], 1e-5);
    EXPECT_NEAR(at_hook[1][i], xs[i] * w1s[i], 1e-5);
  }
  sum(w2 * 2.0).backward();  // a second pass: only w2 is reached
  EXPECT_EQ(order, (std::vector<std::string>{"w2", "w1", "w2"}));
}

TEST_P(GradReadyHook, FiresOnlyInPassesThatReachTheLeaf) {
  Tensor a = ones({2}, device()).requires_grad_();
  Tensor b = ones({2}, device()).requires_grad_();
  int fired = 0;
  set_grad_ready_hook(b, [&](const Tensor&) { ++fired; });
  sum(a * 2.0).backward();
  EXPECT_EQ(fired, 0);  // not part of this pass
  sum(a + b).backward();
  EXPECT_EQ(fired, 1);
  set_grad_ready_hook(b, {});  // removed
  sum(a + b).backward();
  EXPECT_EQ(fired, 1);
}

TEST_P(GradReadyHook, ARootLeafFiresToo) {
  Tensor w = tensor({3.0}, device()).requires_grad_();
  int fired = 0;
  set_grad_ready_hook(w, [&](const Tensor& leaf) {
    ++fired;
    EXPECT_FLOAT_EQ(leaf.grad().item<float>(), 1.0F);
  });
  w.backward(ones_like(w));
  EXPECT_EQ(fired, 1);
}

// A hook may remove or replace itself (a one-shot hook): that destroyed the running
// function and what it captured (ASan: heap-use-after-free; a plain build read garbage).
TEST_P(GradReadyHook, AHookMayRemoveOrReplaceItself) {
  const std::string tag(100, 'x');
  std::vector<std::string> seen;
  for (const bool root : {false, true}) {
    Tensor w = tensor({3.0, 4.0}, device()).requires_grad_();
    set_grad_ready_hook(w, [tag, &seen](const Tensor& leaf) {
      set_grad_ready_hook(leaf, {});  // removes itself
      seen.push_back(tag);            // reads what it captured, after that
    });
    const auto pass = [&] {
      if (root) {
        w.backward(ones_like(w));
      } else {
        (w * 3.0).sum().backward();
      }
    };
    pass();
    pass();  // the hook is gone
    set_grad_ready_hook(w, [tag, &seen](const Tensor& leaf) {
      set_grad_ready_hook(leaf, [&seen](const Tensor&) { seen.push_back("second"); });
      seen.push_back(tag + "!");
    });
    pass();  // the first hook runs and puts the second in its place
    pass();
  }
  const std::vector<std::string> once{tag, tag + "!", "second"};
  std::vector<std::string> expected = once;
  expected.insert(expected.end(), once.begin(), once.end());
  EXPECT_EQ(seen, expected);
}

TEST_P(GradReadyHook, OnlyLeavesThatRequireGradTakeHooks) {
  Tensor plain = ones({2}, device());
  expect_throw_with<Error>([&] { set_grad_ready_hook(plain, [](const Tensor&) {}); },
                           {"[set_grad_ready_hook]", "does not require grad", "requires_grad_()"});
  Tensor w = ones({2}, device()).requires_grad_();
  const Tensor made = w * 2.0;
  expect_throw_with<Error>([&] { set_grad_ready_hook(made, [](const Tensor&) {}); },
                           {"[set_grad_ready_hook]", "produced by a recorded op"});
}

TESSERA_INSTANTIATE_DEVICE_SUITE(GradReadyHook);

}  // namespace
}  // namespace tessera

// Note [Gradients queued work still holds]: a matmul's output that becomes a weight's
// gradient is kept as it is, not copied, while the kernel that writes it is queued or
// recorded on a CPU device; the views such kernels hold are counted, and only while held.
#include <gtest/gtest.h>

#include "backend/cpu/queued_view.h"
#include "core/tensor_impl.h"
#include "support/device_test.h"

namespace tessera {
namespace {

using testing::DeviceTest;

class QueuedViews : public DeviceTest {
 protected:
  void SetUp() override {
    if (!device().is_cpu()) GTEST_SKIP() << "CPU kernels hold queued views; GPUs hold none";
  }
};

int queued_views_of(const Tensor& t) { return detail::impl_of(t).storage->queued_views.load(); }

TEST_P(QueuedViews, CountTheirHoldersWhileTheyLive) {
  const Tensor t = zeros({4, 3}, device());
  {
    const detail::QueuedView held(t);
    EXPECT_EQ(queued_views_of(t), 1);
    EXPECT_EQ(held.tensor().shape(), t.shape());
    EXPECT_EQ(detail::impl_of(held.tensor()).data(), detail::impl_of(t).data())
        << "the same memory";
    {
      const detail::QueuedView copy(held);  // a closure copied into a queue
      EXPECT_EQ(queued_views_of(t), 2);
    }
    EXPECT_EQ(queued_views_of(t), 1);
  }
  EXPECT_EQ(queued_views_of(t), 0);
}

// A recorded matmul holds its output for the graph's life, as a queued one does until it
// runs: the weight's gradient is that output itself, and replays still give the gradient.
TEST_P(QueuedViews, AWeightsGradientIsTheRecordedProductNotACopy) {
  manual_seed(5);
  const Tensor x = randn({6, 5}, device());
  Tensor w = randn({5, 4}, device());
  w.requires_grad_();
  Graph graph = Graph::capture(device(), [&] { matmul(x, w).sum().backward(); });
  ASSERT_TRUE(w.grad().defined());
  EXPECT_GT(queued_views_of(w.grad()), 0)
      << "w.grad() should be the recorded matmul's output, not a copy of it";
  graph.replay();
  // d/dw sum(x @ w) = x^T @ ones: each row i of the gradient is the sum of column i of x.
  const std::vector<double> xs = x.to_vector<double>();
  std::vector<double> expected(20, 0.0);
  for (int i = 0; i < 5; ++i) {
    for (int r = 0; r < 6; ++r) {
      for (int j = 0; j < 4; ++j) expected[static_cast<std::size_t>(i * 4 + j)] += xs[r * 5 + i];
    }
  }
  testing::expect_close(w.grad(), expected, 1e-5, 1e-5, "replayed gradient");
}

TESSERA_INSTANTIATE_DEVICE_SUITE(QueuedViews);

}  // namespace
}  // namespace tessera

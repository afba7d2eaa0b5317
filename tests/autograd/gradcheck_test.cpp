// Every differentiable op's backward formula against central finite differences in
// float64, on every device.
#include <functional>

#include "support/device_test.h"

namespace tessera {
namespace {

using testing::DeviceTest;
using testing::random_values;

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

struct Input {
  Shape shape;
  double lo = -1, hi = 1;
};

// Checks d/dx sum(f(x) * w) for random x and w against central differences.
void gradcheck(const char* name, Device device, const std::vector<Input>& inputs, const Fn& f,
               std::uint64_t seed = 1) {
  std::vector<std::vector<double>> values;
  std::vector<Tensor> xs;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    values.push_back(random_values(inputs[i].shape.numel(), seed + i, inputs[i].lo, inputs[i].hi));
    xs.push_back(from_vector(values.back(), inputs[i].shape, {kFloat64, device}).requires_grad_());
  }
  const Tensor out = f(xs);
  const Tensor w =
      from_vector(random_values(out.numel(), seed + 100), out.shape(), {kFloat64, device});
  sum(out * w).backward();
  auto loss = [&](const std::vector<std::vector<double>>& v) {
    NoGradGuard no_grad;
    std::vector<Tensor> ts;
    for (std::size_t i = 0; i < v.size(); ++i) {
      ts.push_back(from_vector(v[i], inputs[i].shape, {kFloat64, device}));
    }
    return sum(f(ts) * w).item<double>();
  };
  const double eps = 1e-6;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    ASSERT_TRUE(xs[i].grad().defined()) << name << ": input " << i << " got no gradient";
    EXPECT_EQ(xs[i].grad().device(), device) << name;
    const auto analytic = xs[i].grad().to_vector<double>();
    for (std::size_t k = 0; k < values[i].size(); ++k) {
      auto plus = values, minus = values;
      plus[i][k] += eps;
      minus[i][k] -= eps;
      const double numeric = (loss(plus) - loss(minus)) / (2 * eps);
      EXPECT_NEAR(analytic[k], numeric, 1e-6 + 1e-5 * std::abs(numeric))
          << name << ": input " << i << ", element " << k;
    }
  }
}

class GradCheck : public DeviceTest {};

TEST_P(GradCheck, BinaryOpsWithBroadcasting) {
  const Device d = device();
  gradcheck("add", d, {{{3, 4}}, {{4}}}, [](auto& x) { return x[0] + x[1]; });
  gradcheck("sub", d, {{{3, 1}}, {{1, 4}}}, [](auto& x) { return x[0] - x[1]; });
  gradcheck("mul", d, {{{2, 3}}, {{2, 3}}}, [](auto& x) { return x[0] * x[1]; });
  gradcheck("div", d, {{{2, 3}}, {{3}, 0.5, 2}}, [](auto& x) { return x[0] / x[1]; });
  gradcheck("pow", d, {{{2, 3}, 0.5, 2}, {{2, 3}}}, [](auto& x) { return pow(x[0], x[1]); });
  gradcheck("maximum", d, {{{2, 3}}, {{2, 3}}}, [](auto& x) { return maximum(x[0], x[1]); });
  gradcheck("minimum", d, {{{2, 3}}, {{3}}}, [](auto& x) { return minimum(x[0], x[1]); });
}

TEST_P(GradCheck, ScalarOps) {
  const Device d = device();
  gradcheck("scalar", d, {{{5}, 0.5, 2}}, [](auto& x) {
    return (x[0] + 1.0) * 3.0 - 2.0 / x[0] + pow(x[0], 1.5) - (1.0 - x[0]) / 4.0 +
           maximum(x[0], 1.2) + minimum(x[0], 0.9);
  });
}

TEST_P(GradCheck, LinearLayerAndLosses) {
  const Device d = device();
  gradcheck("linear", d, {{{2, 3, 4}}, {{5, 4}}, {{5}}},
            [](auto& x) { return nn::linear(x[0], x[1], x[2]); });
  gradcheck("linear without bias", d, {{{4}}, {{3, 4}}},
            [](auto& x) { return nn::linear(x[0], x[1]); });
  gradcheck("linear through a transposed input", d, {{{4, 3}}, {{2, 4}}},
            [](auto& x) { return nn::linear(x[0].t(), x[1]); });
  const Tensor targets = from_vector(std::vector<std::int64_t>{2, 0, 1}, {3}, d);
  gradcheck("cross_entropy", d, {{{3, 4}, -3, 3}},
            [&](auto& x) { return nn::cross_entropy(x[0], targets, nn::Reduction::kNone); });
  gradcheck("mse_loss", d, {{{3, 2}}, {{3, 2}}}, [](auto& x) { return nn::mse_loss(x[0], x[1]); });
}

TEST_P(GradCheck, ConvolutionAndPooling) {
  const Device d = device();
  gradcheck("conv2d", d, {{{2, 2, 5, 4}}, {{3, 2, 3, 2}}, {{3}}}, [](auto& x) {
    return conv2d(x[0], x[1], x[2], {.stride = {2, 1}, .padding = {1, 1}});
  });
  gradcheck("conv2d 1x1 without bias", d, {{{2, 3, 2, 3}}, {{2, 3, 1, 1}}},
            [](auto& x) { return conv2d(x[0], x[1]); });
  gradcheck("conv2d of a permuted input", d, {{{2, 4, 4, 1}}, {{1, 1, 2, 2}}}, [](auto& x) {
    return conv2d(x[0].permute({0, 3, 1, 2}), x[1]);
  });
  gradcheck("max_pool2d", d, {{{2, 2, 5, 5}}}, [](auto& x) {
    return max_pool2d(x[0], {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}});
  });
  gradcheck("avg_pool2d", d, {{{1, 2, 4, 5}}}, [](auto& x) {
    return avg_pool2d(x[0], {.kernel = {2, 3}, .stride = {1, 2}, .padding = {1, 1}});
  });
  // LeNet's 2x2 windows (a loop of their own on the CPU), on a plane with a row and a column
  // left over.
  gradcheck("avg_pool2d 2x2", d, {{{2, 1, 5, 7}}}, [](auto& x) {
    return avg_pool2d(x[0], {.kernel = {2, 2}});
  });
  gradcheck("conv2d 3x3, padding 1", d, {{{2, 2, 4, 5}}, {{3, 2, 3, 3}}, {{3}}}, [](auto& x) {
    return conv2d(x[0], x[1], x[2], {.padding = {1, 1}});
  });
}

TEST_P(GradCheck, Normalization) {
  const Device d = device();
  // Training: the batch's statistics depend on x, so every output depends on every input of
  // its channel.
  gradcheck("batch_norm, training", d, {{{4, 3, 2}}, {{3}, 0.5, 2}, {{3}}},
            [](auto& x) { return nn::batch_norm(x[0], {}, {}, x[1], x[2], /*training=*/true); });
  gradcheck("batch_norm, evaluation", d, {{{3, 2, 2, 2}}, {{2}}, {{2}}}, [d](auto& x) {
    const Tensor mean = from_vector(std::vector<double>{0.3, -0.2}, {2}, {kFloat64, d});
    const Tensor var = from_vector(std::vector<double>{0.5, 2.0}, {2}, {kFloat64, d});
    return nn::batch_norm(x[0], mean, var, x[1], x[2], /*training=*/false);
  });
  // [N, C]: the kernels' loops across the channels of each row.
  gradcheck("batch_norm of [N, C], training", d, {{{5, 3}}, {{3}, 0.5, 2}, {{3}}},
            [](auto& x) { return nn::batch_norm(x[0], {}, {}, x[1], x[2], /*training=*/true); });
  gradcheck("batch_norm of [N, C], evaluation", d, {{{4, 2}}, {{2}}}, [d](auto& x) {
    const Tensor mean = from_vector(std::vector<double>{0.1, -0.4}, {2}, {kFloat64, d});
    const Tensor var = from_vector(std::vector<double>{1.5, 0.25}, {2}, {kFloat64, d});
    return nn::batch_norm(x[0], mean, var, x[1], {}, /*training=*/false);
  });
  gradcheck("batch_norm of a transposed input", d, {{{3, 4}}},
            [](auto& x) { return nn::batch_norm(x[0].t(), {}, {}, {}, {}, /*training=*/true); });
  gradcheck("layer_norm", d, {{{3, 2, 3}}, {{2, 3}}, {{2, 3}}}, [](auto& x) {
    return nn::layer_norm(x[0], {2, 3}, x[1], x[2]);
  });
  gradcheck("layer_norm without affine", d, {{{2, 5}}},
            [](auto& x) { return nn::layer_norm(x[0], {5}); });
}

TEST_P(GradCheck, UnaryOps) {
  const Device d = device();
  gradcheck("neg", d, {{{4}}}, [](auto& x) { return -x[0]; });
  gradcheck("exp", d, {{{4}}}, [](auto& x) { return exp(x[0]); });
  gradcheck("log", d, {{{4}, 0.5, 2}}, [](auto& x) { return log(x[0]); });
  gradcheck("sqrt", d, {{{4}, 0.5, 2}}, [](auto& x) { return sqrt(x[0]); });
  gradcheck("abs", d, {{{6}}}, [](auto& x) { return abs(x[0]); });
  gradcheck("relu", d, {{{6}}}, [](auto& x) { return relu(x[0]); });
  gradcheck("sigmoid", d, {{{4}}}, [](auto& x) { return sigmoid(x[0]); });
  gradcheck("tanh", d, {{{4}}}, [](auto& x) { return tanh(x[0]); });
  gradcheck("gelu", d, {{{8}, -4, 4}}, [](auto& x) { return gelu(x[0]); });
  gradcheck("gelu tanh", d, {{{8}, -4, 4}},
            [](auto& x) { return gelu(x[0], GeluApproximation::kTanh); });
  gradcheck("silu", d, {{{8}, -6, 6}}, [](auto& x) { return silu(x[0]); });
  gradcheck("where", d, {{{2, 3}}, {{3}}},
            [](auto& x) { return where(x[0] > 0.0, x[0] * 2.0, x[1]); });
}

TEST_P(GradCheck, Reductions) {
  const Device d = device();
  gradcheck("sum", d, {{{2, 3, 2}}}, [](auto& x) { return sum(x[0]); });
  gradcheck("sum_dims", d, {{{2, 3, 2}}}, [](auto& x) { return sum(x[0], {0, 2}); });
  gradcheck("sum_keepdim", d, {{{2, 3}}}, [](auto& x) { return sum(x[0], {-1}, true); });
  gradcheck("mean", d, {{{2, 3}}}, [](auto& x) { return mean(x[0], {0}); });
  gradcheck("max", d, {{{3, 4}}}, [](auto& x) { return max(x[0], {1}); });
  gradcheck("min", d, {{{3, 4}}}, [](auto& x) { return min(x[0]); });
  gradcheck("norm", d, {{{2, 3}}}, [](auto& x) { return norm(x[0]); });
}

TEST_P(GradCheck, MatmulAndSoftmax) {
  const Device d = device();
  gradcheck("matmul", d, {{{3, 4}}, {{4, 2}}}, [](auto& x) { return matmul(x[0], x[1]); });
  gradcheck("matmul_t", d, {{{4, 3}}, {{4, 2}}}, [](auto& x) { return matmul(x[0].t(), x[1]); });
  gradcheck("matmul_batched", d, {{{2, 3, 4}}, {{4, 2}}},
            [](auto& x) { return matmul(x[0], x[1]); });
  gradcheck("matmul_vec", d, {{{4}}, {{4, 3}}}, [](auto& x) { return matmul(x[0], x[1]); });
  gradcheck("matmul_dot", d, {{{4}}, {{4}}}, [](auto& x) { return matmul(x[0], x[1]); });
  gradcheck("matvec", d, {{{2, 3, 4}}, {{4}}}, [](auto& x) { return matmul(x[0], x[1]); });
  // A 2-D (or 1-D) operand against a batch: its gradient is one GEMM over the folded batch.
  gradcheck("matmul_2d_batched", d, {{{3, 4}}, {{2, 2, 4, 5}}},
            [](auto& x) { return matmul(x[0], x[1]); });
  gradcheck("matmul_batched_2d", d, {{{2, 2, 3, 4}}, {{4, 5}}},
            [](auto& x) { return matmul(x[0], x[1]); });
  gradcheck("vecmat_batched", d, {{{4}}, {{2, 4, 3}}}, [](auto& x) { return matmul(x[0], x[1]); });
  gradcheck("matmul_t_batched", d, {{{4, 3}}, {{2, 4, 5}}},
            [](auto& x) { return matmul(x[0].t(), x[1]); });
  gradcheck("softmax", d, {{{2, 5}}}, [](auto& x) { return softmax(x[0], 1); });
  gradcheck("softmax0", d, {{{3, 2}}}, [](auto& x) { return softmax(x[0], 0); });
  gradcheck("log_softmax", d, {{{2, 5}}}, [](auto& x) { return log_softmax(x[0], -1); });
}

TEST_P(GradCheck, Views) {
  const Device d = device();
  gradcheck("view", d, {{{2, 6}}}, [](auto& x) { return x[0].view({3, 4}) * 2.0; });
  gradcheck("reshape_t", d, {{{3, 4}}},
            [](auto& x) { return x[0].t().reshape({12}) * x[0].reshape({12}); });
  gradcheck("permute", d, {{{2, 3, 4}}}, [](auto& x) { return x[0].permute({2, 0, 1}) * 1.5; });
  gradcheck("narrow", d, {{{4, 3}}}, [](auto& x) { return x[0].narrow(0, 1, 2); });
  gradcheck("slice", d, {{{3, 6}}}, [](auto& x) { return x[0].slice(1, 1, 6, 2); });
  gradcheck("select", d, {{{3, 3}}}, [](auto& x) { return x[0][1] + x[0].select(1, -1); });
  gradcheck("squeeze", d, {{{3, 1}}}, [](auto& x) { return x[0].squeeze().unsqueeze(0); });
  gradcheck("expand", d, {{{3, 1}}}, [](auto& x) { return x[0].expand({2, 3, 4}); });
  gradcheck("flatten", d, {{{2, 2, 3}}}, [](auto& x) { return x[0].flatten(1) * x[0].flatten(1); });
  gradcheck("clone", d, {{{3}}}, [](auto& x) { return x[0].clone() * x[0].contiguous(); });
}

TEST_P(GradCheck, JoiningAndSplitting) {
  const Device d = device();
  gradcheck("cat", d, {{{2, 3}}, {{2, 1}}, {{3, 2}}}, [](auto& x) {
    return cat({x[0], x[1] * x[1], x[2].t()}, -1);
  });
  gradcheck("cat_reused", d, {{{2, 2}}}, [](auto& x) { return cat({x[0], exp(x[0]), x[0]}); });
  gradcheck("stack", d, {{{3}}, {{3}}}, [](auto& x) { return stack({x[0], x[1] * x[0]}, 1); });
  gradcheck("split", d, {{{5, 2}}}, [](auto& x) {
    const std::vector<Tensor> p = split(x[0], {2, 0, 3});
    return cat({p[2] * 2.0, p[1], p[0].sum({0}, true)});
  });
  gradcheck("chunk", d, {{{2, 5}}}, [](auto& x) {
    const std::vector<Tensor> p = x[0].chunk(2, 1);  // 3 and 2 columns
    return p[0].narrow(1, 0, 2) * p[1];
  });
}

TEST_P(GradCheck, Indexing) {
  const Device d = device();
  const Tensor rows = from_vector(std::vector<std::int64_t>{2, 0, 2, 3}, {4}, {kInt64, d});
  const Tensor cols = from_vector(std::vector<std::int64_t>{1, 1, 0}, {3}, {kInt32, d});
  gradcheck("index_select", d, {{{4, 3}}}, [&](auto& x) {
    return index_select(x[0], 0, rows) * x[0].index_select(1, cols).sum();
  });
  gradcheck("index_select_t", d, {{{3, 4}}},
            [&](auto& x) { return x[0].t().index_select(-1, cols); });
  gradcheck("index_add", d, {{{4, 3}}, {{4, 3}}},
            [&](auto& x) { return index_add(x[0] * x[0], 0, rows, x[1] * x[1]); });
  gradcheck("index_add_dim1", d, {{{2, 3}}, {{2, 3}}},
            [&](auto& x) { return x[0].index_add(1, cols, exp(x[1])) * x[0]; });
}

TEST_P(GradCheck, AcrossDevicesTheGradientComesBack) {
  TESSERA_REQUIRE_TWO_DEVICES();
  Device other = device();
  for (Device c : available_devices()) {
    if (c != device()) other = c;
  }
  gradcheck("to", device(), {{{3}}},
            [other](auto& x) { return (x[0].to(other) * 2.0).to(x[0].device()); });
}

TESSERA_INSTANTIATE_DEVICE_SUITE(GradCheck);

}  // namespace
}  // namespace tessera

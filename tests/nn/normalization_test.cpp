// batch_norm, layer_norm and their layers against float64 references on every device: the
// normalized values, the running statistics, evaluation mode, buffers that move and save
// with the module, no host wait, and the errors. Their gradients are checked in
// tests/autograd/gradcheck_test.cpp.
#include <cmath>

#include "support/device_test.h"
#include "support/random_images.h"

namespace tessera {
namespace {

using testing::DeviceTest;
using testing::expect_close;
using testing::expect_throw_with;
using testing::random_values;

// x of shape [n, c, inner] (row-major) normalized per channel by its batch statistics, then
// w and b; also the channels' means and unbiased variances.
struct BatchNormReference {
  std::vector<double> y, mean, unbiased_var;
};
BatchNormReference reference_batch_norm(const std::vector<double>& x, int n, int c, int inner,
                                        const std::vector<double>& w, const std::vector<double>& b,
                                        double eps) {
  BatchNormReference r{std::vector<double>(x.size()), std::vector<double>(c),
                       std::vector<double>(c)};
  const auto at = [&](int i, int ch, int j) {
    return (static_cast<std::size_t>(i) * c + ch) * inner + j;
  };
  const double count = static_cast<double>(n) * inner;
  for (int ch = 0; ch < c; ++ch) {
    double sum = 0;
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < inner; ++j) sum += x[at(i, ch, j)];
    const double mean = sum / count;
    double squares = 0;
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < inner; ++j)
        squares += (x[at(i, ch, j)] - mean) * (x[at(i, ch, j)] - mean);
    const double var = squares / count;
    r.mean[ch] = mean;
    r.unbiased_var[ch] = squares / (count - 1);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < inner; ++j) {
        r.y[at(i, ch, j)] = (x[at(i, ch, j)] - mean) / std::sqrt(var + eps) * w[ch] + b[ch];
      }
  }
  return r;
}

class Normalization : public DeviceTest {};

TEST_P(Normalization, BatchNorm2dTrainsOnTheBatchAndUpdatesItsRunningStatistics) {
  const Device d = device();
  const int n = 3, c = 4, h = 5, w = 2;
  manual_seed(0);
  nn::BatchNorm2d bn(c, {.momentum = 0.25}, {kFloat32, d});
  const auto weight = random_values(c, 2, 0.5, 1.5), bias = random_values(c, 3);
  bn.weight = from_vector(weight, {c}, {kFloat32, d});
  bn.bias = from_vector(bias, {c}, {kFloat32, d});
  // Values offset from 0 so the mean matters; a permuted (non-contiguous) input.
  const auto xs = random_values(n * c * h * w, 4, 2, 5);
  const Tensor x = from_vector(xs, {n, h, w, c}, {kFloat32, d}).permute({0, 3, 1, 2});
  std::vector<double> contiguous(xs.size());  // x in [n, c, h*w] order, for the reference
  for (int i = 0; i < n; ++i)
    for (int y = 0; y < h; ++y)
      for (int z = 0; z < w; ++z)
        for (int ch = 0; ch < c; ++ch) {
          contiguous[((i * c + ch) * h + y) * w + z] = xs[((i * h + y) * w + z) * c + ch];
        }
  const auto ref = reference_batch_norm(contiguous, n, c, h * w, weight, bias, 1e-5);
  const Tensor y = bn(x);
  EXPECT_EQ(y.device(), d);
  EXPECT_EQ(y.shape(), Shape({n, c, h, w}));
  expect_close(y, ref.y, 1e-4, 1e-4, "training output");
  std::vector<double> want_mean(c), want_var(c);
  for (int ch = 0; ch < c; ++ch) {
    want_mean[ch] = 0.25 * ref.mean[ch];
    want_var[ch] = 0.75 + 0.25 * ref.unbiased_var[ch];
  }
  expect_close(bn.running_mean, want_mean, 1e-5, 1e-5, "running_mean");
  expect_close(bn.running_var, want_var, 1e-5, 1e-5, "running_var");
  EXPECT_EQ(bn.running_mean.device(), d);

  // Evaluation mode normalizes by the running statistics and leaves them alone.
  bn.eval();
  const Tensor e = bn(x);
  std::vector<double> want(contiguous.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    const int ch = static_cast<int>(i / (h * w)) % c;
    want[i] =
        (contiguous[i] - want_mean[ch]) / std::sqrt(want_var[ch] + 1e-5) * weight[ch] + bias[ch];
  }
  expect_close(e, want, 1e-4, 1e-4, "evaluation output");
  expect_close(bn.running_mean, want_mean, 1e-5, 1e-5, "running_mean after evaluation");
}

TEST_P(Normalization, BatchNorm1dTakesTwoAndThreeDimsAndFloat64) {
  const Device d = device();
  for (const bool three : {false, true}) {
    SCOPED_TRACE(three ? "[N, C, L]" : "[N, C]");
    const int n = 6, c = 3, l = three ? 4 : 1;
    nn::BatchNorm1d bn(c, {.affine = false}, {kFloat64, d});
    EXPECT_FALSE(bn.weight.defined());
    EXPECT_TRUE(bn.parameters().empty());
    const auto xs = random_values(n * c * l, 7, -3, 3);
    const Shape shape = three ? Shape({n, c, l}) : Shape({n, c});
    const auto ref = reference_batch_norm(xs, n, c, l, std::vector<double>(c, 1.0),
                                          std::vector<double>(c, 0.0), 1e-5);
    expect_close(bn(from_vector(xs, shape, {kFloat64, d})), ref.y, 1e-12, 1e-12);
    std::vector<double> want(c);
    for (int ch = 0; ch < c; ++ch) want[ch] = 0.9 + 0.1 * ref.unbiased_var[ch];
    expect_close(bn.running_var, want, 1e-12, 1e-12, "running_var");
  }
}

// Large enough for the kernels to split channels and rows across threads.
TEST_P(Normalization, ALargeBatchMatchesTheReferenceForwardAndBackward) {
  const Device d = device();
  const int n = 8, c = 4, h = 32, w = 33;  // 33,792 values
  nn::BatchNorm2d bn(c, {}, {kFloat32, d});
  const auto xs = random_values(n * c * h * w, 21, -1, 3);
  const Tensor x = from_vector(xs, {n, c, h, w}, {kFloat32, d}).requires_grad_();
  const auto ref = reference_batch_norm(xs, n, c, h * w, std::vector<double>(c, 1.0),
                                        std::vector<double>(c, 0.0), 1e-5);
  const Tensor y = bn(x);
  expect_close(y, ref.y, 1e-4, 1e-4, "output");
  // d/dx sum(y * g) for a fixed g: with xhat = y, grad_x = invstd (g - mean(g) - xhat
  // mean(g xhat)) per channel.
  const auto gs = random_values(xs.size(), 22);
  sum(y * from_vector(gs, y.shape(), {kFloat32, d})).backward();
  const int inner = h * w;
  std::vector<double> want(xs.size());
  for (int ch = 0; ch < c; ++ch) {
    double mean_g = 0, mean_gx = 0, var = 0;
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < inner; ++j) {
        const std::size_t at = (static_cast<std::size_t>(i) * c + ch) * inner + j;
        mean_g += gs[at] / (n * inner);
        mean_gx += gs[at] * ref.y[at] / (n * inner);
        var += (xs[at] - ref.mean[ch]) * (xs[at] - ref.mean[ch]) / (n * inner);
      }
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < inner; ++j) {
        const std::size_t at = (static_cast<std::size_t>(i) * c + ch) * inner + j;
        want[at] = (gs[at] - mean_g - ref.y[at] * mean_gx) / std::sqrt(var + 1e-5);
      }
  }
  expect_close(x.grad(), want, 1e-3, 1e-4, "grad_x");
  std::vector<double> want_db(c, 0.0);
  for (std::size_t i = 0; i < gs.size(); ++i) want_db[(i / inner) % c] += gs[i];
  expect_close(bn.bias.grad(), want_db, 1e-4, 1e-3, "grad_bias");
}

TEST_P(Normalization, AnEmptyBatchLeavesTheStatisticsAlone) {
  const Device d = device();
  nn::BatchNorm1d bn(3, {}, {kFloat32, d});
  const Tensor x = zeros({0, 3}, {kFloat32, d}).requires_grad_();
  const Tensor y = bn(x);
  EXPECT_EQ(y.shape(), Shape({0, 3}));
  sum(y).backward();
  expect_close(bn.running_mean, {0, 0, 0}, 0, 0, "running_mean");
  expect_close(bn.running_var, {1, 1, 1}, 0, 0, "running_var");
  expect_close(bn.weight.grad(), {0, 0, 0}, 0, 0, "grad_weight");
}

TEST_P(Normalization, AHalfModelNormalizesInFloat32AndKeepsItsDtype) {
  const Device d = device();
  for (const Dtype half : {kBFloat16, kFloat16}) {
    SCOPED_TRACE(dtype_name(half));
    nn::BatchNorm1d bn(3, {.momentum = 0.5}, {kFloat32, d});
    bn.to(half);
    const auto xs = random_values(12, 23, -2, 2);
    const Tensor x = from_vector(xs, {4, 3}, {half, d}).requires_grad_();
    const Tensor y = bn(x);
    EXPECT_EQ(y.dtype(), half);
    EXPECT_EQ(bn.running_mean.dtype(), half);
    sum(y * y).backward();
    EXPECT_EQ(x.grad().dtype(), half);
    EXPECT_EQ(bn.weight.grad().dtype(), half);
    const auto held = x.to_vector<double>();
    const auto ref = reference_batch_norm(held, 4, 3, 1, {1, 1, 1}, {0, 0, 0}, 1e-5);
    expect_close(y, ref.y, 1e-2, 1e-2, "output");
    std::vector<double> want(3);
    for (int ch = 0; ch < 3; ++ch) want[ch] = 0.5 * ref.mean[ch];
    expect_close(bn.running_mean, want, 1e-2, 1e-2, "running_mean");
  }
}

// Running statistics that are views with strides (columns of one tensor) are read and
// updated where they are, as PyTorch does: the kernels take [C] contiguous, so they get
// copies that are written back.
TEST_P(Normalization, StridedRunningStatisticsAreUpdatedInPlace) {
  const Device d = device();
  const Tensor store =
      from_vector(std::vector<double>{0.5, 2, -0.5, 1, 0, 3}, {3, 2}, {kFloat32, d});
  const Tensor mean = store.select(1, 0), var = store.select(1, 1);
  const auto xs = random_values(12, 41, -1, 2);
  const Tensor x = from_vector(xs, {4, 3}, {kFloat32, d});
  const auto ref = reference_batch_norm(xs, 4, 3, 1, {1, 1, 1}, {0, 0, 0}, 1e-5);
  expect_close(nn::batch_norm(x, mean, var, {}, {}, /*training=*/true, 0.5), ref.y, 1e-4, 1e-4,
               "training output");
  const std::vector<double> old_mean{0.5, -0.5, 0}, old_var{2, 1, 3};
  std::vector<double> want;
  for (int ch = 0; ch < 3; ++ch) {
    want.push_back(0.5 * old_mean[ch] + 0.5 * ref.mean[ch]);
    want.push_back(0.5 * old_var[ch] + 0.5 * ref.unbiased_var[ch]);
  }
  expect_close(store, want, 1e-5, 1e-5, "the store of both statistics");
}

TEST_P(Normalization, WithoutRunningStatisticsEvaluationUsesTheBatch) {
  const Device d = device();
  nn::BatchNorm1d bn(2, {.track_running_stats = false}, {kFloat32, d});
  EXPECT_FALSE(bn.running_mean.defined());
  EXPECT_TRUE(bn.buffers().empty());
  bn.eval();
  const auto xs = random_values(8, 9);
  const auto ref = reference_batch_norm(xs, 4, 2, 1, {1, 1}, {0, 0}, 1e-5);
  expect_close(bn(from_vector(xs, {4, 2}, {kFloat32, d})), ref.y, 1e-4, 1e-4);
}

TEST_P(Normalization, BuffersMoveSaveAndLoadWithTheModule) {
  const Device d = device();
  nn::Sequential net(nn::Linear(3, 4), nn::BatchNorm1d(4));
  net.to(d);
  const auto state = net.state_dict();
  ASSERT_EQ(state.count("1.running_mean"), 1u);
  ASSERT_EQ(state.count("1.running_var"), 1u);
  EXPECT_EQ(net.buffers().size(), 3u);
  ASSERT_EQ(state.count("1.num_batches_tracked"), 1u);  // PyTorch's names, for its files
  EXPECT_EQ(net.at<nn::BatchNorm1d>(1).running_mean.device(), d);
  (void)net(from_vector(random_values(15, 1), {5, 3}, {kFloat32, d}));  // updates the buffers
  nn::Sequential copy(nn::Linear(3, 4), nn::BatchNorm1d(4));
  copy.load_state_dict(net.state_dict());
  AllowSync deliberate;  // the test's reads
  EXPECT_EQ(net.at<nn::BatchNorm1d>(1).num_batches_tracked.item<std::int64_t>(), 1);
  EXPECT_EQ(net.at<nn::BatchNorm1d>(1).num_batches_tracked.dtype(), kInt64);
  net.eval();
  (void)net(from_vector(random_values(15, 1), {5, 3}, {kFloat32, d}));  // counts training only
  EXPECT_EQ(net.at<nn::BatchNorm1d>(1).num_batches_tracked.item<std::int64_t>(), 1);
  net.train();
  EXPECT_EQ(copy.at<nn::BatchNorm1d>(1).running_var.to_vector<double>(),
            net.at<nn::BatchNorm1d>(1).running_var.to_vector<double>());
  EXPECT_NE(copy.at<nn::BatchNorm1d>(1).running_var.to_vector<double>(),
            std::vector<double>(4, 1.0));
  EXPECT_NE(net.str().find("BatchNorm1d(4, eps=1e-05, momentum=0.1, affine=true, "
                           "track_running_stats=true)"),
            std::string::npos)
      << net.str();
  if (available_devices().size() > 1) {
    const Device other = available_devices()[available_devices()[0] == d ? 1 : 0];
    net.to(other);
    EXPECT_EQ(net.at<nn::BatchNorm1d>(1).running_mean.device(), other);
    EXPECT_EQ(net.device(), other);
  }
}

TEST_P(Normalization, TrainingQueuesWithoutAHostWait) {
  const Device d = device();
  nn::Sequential net(nn::Conv2d(2, 3, 3, {.padding = {1, 1}}), nn::BatchNorm2d(3), nn::ReLU(),
                     nn::Flatten(), nn::Linear(3 * 16, 5), nn::LayerNorm({5}));
  net.to(d);
  const Tensor x = randn({4, 2, 4, 4}, {kFloat32, d});
  synchronize(d);
  {
    SyncGuard no_waits(SyncMode::kError);
    sum(net(x) * net(x)).backward();
  }
  for (const Tensor& p : net.parameters()) EXPECT_TRUE(p.grad().defined());
  AllowSync deliberate;
  for (const double g : net.at<nn::BatchNorm2d>(1).weight.grad().to_vector<double>()) {
    EXPECT_TRUE(std::isfinite(g));
  }
}

TEST_P(Normalization, LayerNormMatchesAReferenceOverTheLastDims) {
  const Device d = device();
  const int rows = 5, a = 3, b = 4;
  nn::LayerNorm ln({a, b}, 1e-5, true, {kFloat32, d});
  const auto weight = random_values(a * b, 11, 0.5, 1.5), bias = random_values(a * b, 12);
  ln.weight = from_vector(weight, {a, b}, {kFloat32, d});
  ln.bias = from_vector(bias, {a, b}, {kFloat32, d});
  const auto xs = random_values(rows * a * b, 13, -2, 4);
  std::vector<double> want(xs.size());
  for (int r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int i = 0; i < a * b; ++i) mean += xs[r * a * b + i] / (a * b);
    for (int i = 0; i < a * b; ++i) {
      var += (xs[r * a * b + i] - mean) * (xs[r * a * b + i] - mean) / (a * b);
    }
    for (int i = 0; i < a * b; ++i) {
      want[r * a * b + i] =
          (xs[r * a * b + i] - mean) / std::sqrt(var + 1e-5) * weight[i] + bias[i];
    }
  }
  expect_close(ln(from_vector(xs, {rows, a, b}, {kFloat32, d})), want, 1e-4, 1e-4);
  EXPECT_EQ(ln.str(), "LayerNorm([3, 4], eps=1e-05, elementwise_affine=true)\n");
}

// Rows enough for the kernel to split them across threads; the gradients of x, weight and
// bias against a float64 reference.
TEST_P(Normalization, ALargeLayerNormMatchesTheReferenceForwardAndBackward) {
  const Device d = device();
  const int rows = 300, n = 128;  // 38,400 values
  const auto xs = random_values(rows * n, 31, -1, 3), ws = random_values(n, 32, 0.5, 1.5),
             bs = random_values(n, 33), gs = random_values(rows * n, 34);
  const Tensor x = from_vector(xs, {rows, n}, {kFloat32, d}).requires_grad_();
  const Tensor w = from_vector(ws, {n}, {kFloat32, d}).requires_grad_();
  const Tensor b = from_vector(bs, {n}, {kFloat32, d}).requires_grad_();
  const Tensor y = nn::layer_norm(x, {n}, w, b);
  sum(y * from_vector(gs, {rows, n}, {kFloat32, d})).backward();
  std::vector<double> want_y(xs.size()), want_dx(xs.size()), want_dw(n, 0.0), want_db(n, 0.0);
  for (int r = 0; r < rows; ++r) {
    const double* xr = xs.data() + static_cast<std::size_t>(r) * n;
    const double* gr = gs.data() + static_cast<std::size_t>(r) * n;
    double mean = 0, var = 0;
    for (int j = 0; j < n; ++j) mean += xr[j] / n;
    for (int j = 0; j < n; ++j) var += (xr[j] - mean) * (xr[j] - mean) / n;
    const double invstd = 1 / std::sqrt(var + 1e-5);
    double mean_h = 0, mean_hx = 0;
    for (int j = 0; j < n; ++j) {
      const double xhat = (xr[j] - mean) * invstd;
      want_y[r * n + j] = xhat * ws[j] + bs[j];
      mean_h += gr[j] * ws[j] / n;
      mean_hx += gr[j] * ws[j] * xhat / n;
      want_dw[j] += gr[j] * xhat;
      want_db[j] += gr[j];
    }
    for (int j = 0; j < n; ++j) {
      const double xhat = (xr[j] - mean) * invstd;
      want_dx[r * n + j] = invstd * (gr[j] * ws[j] - mean_h - xhat * mean_hx);
    }
  }
  expect_close(y, want_y, 1e-4, 1e-4, "output");
  expect_close(x.grad(), want_dx, 1e-3, 1e-4, "grad_x");
  expect_close(w.grad(), want_dw, 1e-4, 1e-3, "grad_weight");
  expect_close(b.grad(), want_db, 1e-4, 1e-3, "grad_bias");
  // No rows: an empty result, and zero gradients for the parameters.
  const Tensor none = zeros({0, n}, {kFloat32, d}).requires_grad_();
  Tensor(w).set_grad({});
  sum(nn::layer_norm(none, {n}, w, b)).backward();
  expect_close(w.grad(), std::vector<double>(n, 0.0), 0, 0, "grad_weight of no rows");
}

TEST_P(Normalization, HalfInputsUnderAutocastNormalizeInFloat32) {
  const Device d = device();
  nn::BatchNorm1d bn(3, {}, {kFloat32, d});
  nn::LayerNorm ln({3}, 1e-5, true, {kFloat32, d});
  const auto xs = random_values(12, 14, -2, 2);
  const Tensor x = from_vector(xs, {4, 3}, {kBFloat16, d});
  AutocastGuard autocast(d.kind(), kBFloat16);
  const Tensor y = bn(x), z = ln(x);
  EXPECT_EQ(y.dtype(), kBFloat16);
  EXPECT_EQ(z.dtype(), kBFloat16);
  EXPECT_EQ(bn.running_mean.dtype(), kFloat32);
  const auto held = x.to_vector<double>();  // the bfloat16 values the layer saw
  const auto ref = reference_batch_norm(held, 4, 3, 1, {1, 1, 1}, {0, 0, 0}, 1e-5);
  expect_close(y, ref.y, 1e-2, 1e-2, "batch norm in bfloat16");
}

TEST_P(Normalization, ErrorsNameTheLayerTheShapesAndTheFix) {
  const Device d = device();
  nn::Sequential net(nn::BatchNorm2d(3));
  net.to(d);
  const TensorOptions f32{kFloat32, d};
  expect_throw_with<ShapeError>(
      [&] {
        (void)net(zeros({2, 3, 4}, f32));
      },
      {"[BatchNorm2d] Sequential[0] takes inputs [N, C, H, W]", "got shape [2, 3, 4]"});
  expect_throw_with<ShapeError>(
      [&] {
        (void)net(zeros({2, 4, 1, 1}, f32));
      },
      {"num_features=3", "the input has 4 channels"});
  expect_throw_with<ShapeError>(
      [&] {
        (void)net(zeros({1, 3, 1, 1}, f32));
      },
      {"[BatchNorm2d] Sequential[0] normalizes each channel", "more than 1 value per channel",
       "[1, 3, 1, 1]", "eval()", "on each device", "--drop-last"});
  // Without running statistics eval() uses the batch's too: the advice is another one.
  nn::Sequential untracked(nn::BatchNorm1d(3, {.track_running_stats = false}));
  untracked.to(d);
  untracked.eval();
  expect_throw_with<ShapeError>(
      [&] {
        (void)untracked(zeros({1, 3}, f32));
      },
      {"[BatchNorm1d] Sequential[0] normalizes each channel by its batch's mean and variance "
       "in eval() too (it keeps no running statistics)",
       "Evaluate batches of 2 or more", "track_running_stats = true"});
  // The public options are checked where the layer can be named.
  auto& norm2d = net.at<nn::BatchNorm2d>(0);
  norm2d.norm.momentum = 2;
  expect_throw_with<Error>(
      [&] {
        (void)net(zeros({2, 3, 2, 2}, f32));
      },
      {"[BatchNorm2d] Sequential[0] has norm.momentum=2", "[0, 1]"});
  norm2d.norm.momentum = 0.1;
  norm2d.norm.eps = 0;
  expect_throw_with<Error>(
      [&] {
        (void)net(zeros({2, 3, 2, 2}, f32));
      },
      {"[BatchNorm2d] Sequential[0] has norm.eps=0", "> 0 when the batch's statistics are used"});
  net.eval();
  EXPECT_NO_THROW((void)net(zeros({2, 3, 2, 2}, f32))) << "eval() with running statistics";
  net.train();
  norm2d.norm.eps = 1e-5;
  // Under autocast a normalization layer's input is not converted: a float32 input to a
  // bfloat16 layer is refused by the layer, saying so.
  nn::Sequential half_norm(nn::BatchNorm1d(2, {}, {kBFloat16, d}));
  {
    const AutocastGuard autocast(d.kind(), kBFloat16);
    expect_throw_with<DtypeError>(
        [&] {
          (void)half_norm(zeros({4, 2}, f32));
        },
        {"[BatchNorm1d] Sequential[0] has bfloat16 parameters but the input is float32",
         "Autocast does not convert a normalization layer's input"});
  }
  nn::Sequential norms(nn::LayerNorm({6}), nn::LayerNorm({3, 2}));
  norms.to(d);
  expect_throw_with<ShapeError>(
      [&] {
        (void)norms(zeros({2, 6}, f32));
      },
      {"[LayerNorm] Sequential[1] normalizes over the last dims [3, 2]", "shape [2, 6]"});
  expect_throw_with<DtypeError>(
      [&] {
        (void)net(zeros({2, 3, 2, 2}, {kFloat64, d}));
      },
      {"has float32 parameters but the input is float64"});
  nn::BatchNorm1d one(2);
  expect_throw_with<ShapeError>([&] { (void)one(zeros({2, 2, 2, 2})); }, {"[N, C] or [N, C, L]"});
  expect_throw_with<Error>([] { nn::BatchNorm1d(2, {.momentum = 1.5}); },
                           {"[BatchNorm1d] momentum", "[0, 1]", "1.5"});
  expect_throw_with<ShapeError>([] { nn::BatchNorm2d(0); }, {"num_features must be positive"});
  expect_throw_with<DtypeError>([] { nn::BatchNorm2d(2, {}, kInt64); },
                                {"floating-point", "int64"});
  const Tensor x = zeros({4, 2}, f32);
  expect_throw_with<Error>([&] { (void)nn::batch_norm(x, zeros({2}, f32), {}, {}, {}, true); },
                           {"[batch_norm] running_mean and running_var go together"});
  expect_throw_with<Error>([&] { (void)nn::batch_norm(x, {}, {}, {}, {}, true, -0.1); },
                           {"[batch_norm] momentum", "[0, 1]", "-0.1"});
  expect_throw_with<Error>([&] { (void)nn::batch_norm(x, {}, {}); },
                           {"[batch_norm] evaluation", "undefined", "training = true"});
  expect_throw_with<ShapeError>([&] { (void)nn::batch_norm(x, zeros({3}, f32), ones({3}, f32)); },
                                {"running_mean has shape [3] but must be [2]", "[4, 2]"});
  expect_throw_with<DtypeError>(
      [&] {
        (void)nn::batch_norm(x, zeros({2}, {kFloat64, d}), ones({2}, {kFloat64, d}));
      },
      {"the input is float32 but running_mean is float64"});
  expect_throw_with<DtypeError>(
      [&] {
        (void)nn::batch_norm(zeros({4, 2}, {kInt64, d}), {}, {}, {}, {}, true);
      },
      {"floating inputs", "int64"});
  expect_throw_with<ShapeError>([&] { (void)nn::layer_norm(x, {3}); },
                                {"[layer_norm] normalized_shape [3]", "input has shape [4, 2]"});
  expect_throw_with<ShapeError>([] { nn::LayerNorm({}); }, {"1 dim or more"});
  expect_throw_with<Error>([&] { (void)nn::layer_norm(x, {2}, {}, {}, -1); }, {"eps", "-1"});
  expect_throw_with<Error>(
      [&] { (void)nn::batch_norm(x, {}, {}, {}, {}, true, 0.1, 0.0); },
      {"[batch_norm] training divides by sqrt(var + eps)", "eps must be > 0 in training; got 0"});
  EXPECT_NO_THROW((void)nn::batch_norm(x, zeros({2}, f32), ones({2}, f32), {}, {}, false, 0.1, 0.0))
      << "evaluation with eps = 0 divides by the running variance, as PyTorch allows";
  TESSERA_REQUIRE_TWO_DEVICES();
  const Device other = available_devices()[available_devices()[0] == d ? 1 : 0];
  expect_throw_with<DeviceMismatchError>(
      [&] {
        (void)nn::batch_norm(x, zeros({2}, {kFloat32, other}), ones({2}, f32));
      },
      {"batch_norm", "running_mean"});
  expect_throw_with<DeviceMismatchError>(
      [&] {
        (void)net(zeros({2, 3, 2, 2}, {kFloat32, other}));
      },
      {"Sequential[0]"});
}

// A recorded training step (TrainerOptions::graph) updates the running statistics at every
// replay, as eager steps do, and trains the same parameters.
TEST_P(Normalization, RecordedStepsUpdateTheRunningStatisticsAsEagerStepsDo) {
  const Device d = device();
  const auto [images, labels] = testing::random_images(40);  // 5 batches of 8
  std::vector<std::vector<double>> results[2];
  for (const bool graph : {false, true}) {
    data::DataLoader loader(images, labels, {.batch_size = 8, .seed = 2});
    manual_seed(0);
    train::Classifier task(
        [] {
          return std::make_shared<nn::Sequential>(nn::Flatten(), nn::Linear(64, 6),
                                                  nn::BatchNorm1d(6), nn::ReLU(), nn::Linear(6, 4));
        },
        [](const std::vector<Tensor>& p) -> std::unique_ptr<optim::Optimizer> {
          return std::make_unique<optim::SGD>(p, optim::SgdOptions{.lr = 0.2, .momentum = 0.9});
        });
    train::Trainer({.max_epochs = 2, .progress = false, .device = d, .graph = graph})
        .fit(task, loader);
    AllowSync deliberate;  // the test's reads
    for (const auto& [name, t] : task.model().state_dict()) {
      results[graph].push_back(t.to_vector<double>());
    }
  }
  ASSERT_EQ(results[0].size(), results[1].size());
  for (std::size_t i = 0; i < results[0].size(); ++i) {
    expect_close(results[1][i], results[0][i], 1e-5, 1e-6, "state " + std::to_string(i));
  }
}

TESSERA_INSTANTIATE_DEVICE_SUITE(Normalization);

}  // namespace
}  // namespace tessera

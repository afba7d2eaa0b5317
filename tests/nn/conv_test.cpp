// conv2d, max_pool2d and avg_pool2d against naive float64 references, LeNet end to end, and
// the errors. Their gradients are checked in tests/autograd/gradcheck_test.cpp.
#include <omp.h>

#include <array>
#include <atomic>
#include <cmath>
#include <limits>
#include <string>
#include <thread>

#include "support/device_test.h"

namespace tessera {
namespace {

using testing::DeviceTest;
using testing::expect_close;
using testing::expect_throw_with;
using testing::random_values;

struct Dims {
  int n, c, h, w;
};

std::vector<double> reference_conv(const std::vector<double>& x, Dims d,
                                   const std::vector<double>& wt, int o, int kh, int kw,
                                   const std::vector<double>& b, int sh, int sw, int ph, int pw) {
  const int oh = (d.h + 2 * ph - kh) / sh + 1, ow = (d.w + 2 * pw - kw) / sw + 1;
  std::vector<double> out(static_cast<std::size_t>(d.n) * o * oh * ow);
  for (int n = 0; n < d.n; ++n)
    for (int k = 0; k < o; ++k)
      for (int y = 0; y < oh; ++y)
        for (int xx = 0; xx < ow; ++xx) {
          double acc = b.empty() ? 0 : b[k];
          for (int c = 0; c < d.c; ++c)
            for (int i = 0; i < kh; ++i)
              for (int j = 0; j < kw; ++j) {
                const int iy = y * sh - ph + i, ix = xx * sw - pw + j;
                if (iy < 0 || iy >= d.h || ix < 0 || ix >= d.w) continue;
                acc += x[((n * d.c + c) * d.h + iy) * d.w + ix] *
                       wt[((k * d.c + c) * kh + i) * kw + j];
              }
          out[((n * o + k) * oh + y) * ow + xx] = acc;
        }
  return out;
}

// The gradients of reference_conv for a given grad_out: {dx, dw, db}.
struct ConvGrads {
  std::vector<double> dx, dw, db;
};
ConvGrads reference_conv_grads(const std::vector<double>& x, Dims d, const std::vector<double>& wt,
                               int o, int kh, int kw, const std::vector<double>& gy, int sh, int sw,
                               int ph, int pw) {
  const int oh = (d.h + 2 * ph - kh) / sh + 1, ow = (d.w + 2 * pw - kw) / sw + 1;
  ConvGrads g{std::vector<double>(x.size()), std::vector<double>(wt.size()),
              std::vector<double>(static_cast<std::size_t>(o))};
  for (int n = 0; n < d.n; ++n)
    for (int k = 0; k < o; ++k)
      for (int y = 0; y < oh; ++y)
        for (int xx = 0; xx < ow; ++xx) {
          const double gv = gy[((n * o + k) * oh + y) * ow + xx];
          g.db[k] += gv;
          for (int c = 0; c < d.c; ++c)
            for (int i = 0; i < kh; ++i)
              for (int j = 0; j < kw; ++j) {
                const int iy = y * sh - ph + i, ix = xx * sw - pw + j;
                if (iy < 0 || iy >= d.h || ix < 0 || ix >= d.w) continue;
                const int xi = ((n * d.c + c) * d.h + iy) * d.w + ix;
                const int wi = ((k * d.c + c) * kh + i) * kw + j;
                g.dx[xi] += gv * wt[wi];
                g.dw[wi] += gv * x[xi];
              }
        }
  return g;
}

std::vector<double> reference_pool(bool max, const std::vector<double>& x, Dims d, int kh, int kw,
                                   int sh, int sw, int ph, int pw) {
  const int oh = (d.h + 2 * ph - kh) / sh + 1, ow = (d.w + 2 * pw - kw) / sw + 1;
  std::vector<double> out;
  for (int p = 0; p < d.n * d.c; ++p)
    for (int y = 0; y < oh; ++y)
      for (int xx = 0; xx < ow; ++xx) {
        double acc = max ? -INFINITY : 0;
        for (int i = 0; i < kh; ++i)
          for (int j = 0; j < kw; ++j) {
            const int iy = y * sh - ph + i, ix = xx * sw - pw + j;
            if (iy < 0 || iy >= d.h || ix < 0 || ix >= d.w) continue;
            const double v = x[(p * d.h + iy) * d.w + ix];
            acc = max ? std::max(acc, v) : acc + v;
          }
        out.push_back(max ? acc : acc / (kh * kw));
      }
  return out;
}

class Conv : public DeviceTest {};

TEST_P(Conv, Conv2dMatchesReference) {
  const Device dev = device();
  struct Case {
    Dims d;
    int o, kh, kw, sh, sw, ph, pw;
    bool bias;
  };
  for (const Case& k : {Case{{2, 3, 7, 6}, 4, 3, 2, 1, 1, 0, 0, true},
                        Case{{3, 2, 9, 9}, 5, 3, 3, 2, 2, 1, 1, false},
                        Case{{1, 1, 28, 28}, 6, 5, 5, 1, 1, 2, 2, true},
                        Case{{4, 6, 5, 5}, 3, 1, 1, 1, 1, 0, 0, true},
                        Case{{2, 2, 6, 8}, 2, 2, 3, 3, 2, 1, 0, true}}) {
    const auto xs = random_values(static_cast<std::size_t>(k.d.n) * k.d.c * k.d.h * k.d.w, 1);
    const auto ws = random_values(static_cast<std::size_t>(k.o) * k.d.c * k.kh * k.kw, 2);
    const auto bs = k.bias ? random_values(k.o, 3) : std::vector<double>{};
    const auto expected = reference_conv(xs, k.d, ws, k.o, k.kh, k.kw, bs, k.sh, k.sw, k.ph, k.pw);
    for (Dtype dtype : {kFloat32, kFloat64}) {
      const Tensor x = from_vector(xs, {k.d.n, k.d.c, k.d.h, k.d.w}, {dtype, dev});
      const Tensor w = from_vector(ws, {k.o, k.d.c, k.kh, k.kw}, {dtype, dev});
      const Tensor b = k.bias ? from_vector(bs, {k.o}, {dtype, dev}) : Tensor();
      const Tensor y = conv2d(x, w, b, {.stride = {k.sh, k.sw}, .padding = {k.ph, k.pw}});
      EXPECT_EQ(y.device(), dev);
      const double tol = dtype == kFloat32 ? 1e-5 : 1e-12;
      expect_close(y, expected, tol, tol, "conv2d " + std::string(dtype_name(dtype)));
    }
  }
}

// Every CPU path (direct on flat planes or with images in lanes for stride 1 and few
// channels, im2col + GEMM otherwise) and the GPU's, against float64 loops: LeNet's two
// layers, batches that do not fill the last group of images, padding wider than the
// kernel's reach, and strides.
TEST_P(Conv, Conv2dGradientsMatchReference) {
  const Device dev = device();
  struct Case {
    Dims d;
    int o, kh, kw, sh, sw, ph, pw;
  };
  for (const Case& k :
       {Case{{3, 1, 28, 28}, 6, 5, 5, 1, 1, 2, 2}, Case{{11, 6, 14, 14}, 16, 5, 5, 1, 1, 0, 0},
        Case{{5, 3, 7, 5}, 5, 3, 3, 1, 1, 1, 1}, Case{{2, 2, 4, 9}, 9, 2, 3, 1, 1, 3, 0},
        Case{{1, 4, 6, 6}, 3, 1, 6, 1, 1, 0, 2}, Case{{3, 2, 9, 9}, 5, 3, 3, 2, 2, 1, 1},
        // Batches of 32 or more: small planes take images in lanes.
        Case{{37, 6, 14, 14}, 16, 5, 5, 1, 1, 0, 0}, Case{{33, 2, 6, 5}, 3, 3, 3, 1, 1, 1, 1},
        Case{{34, 1, 4, 9}, 4, 2, 4, 1, 1, 2, 1},
        // More than 32 channels: im2col, whose "same" convolutions (stride 1, output rows as
        // wide as the input's) copy and add each block of columns in one run (Note [Columns
        // as one run]): padding on both sides or one, more padding than input, rows of one.
        Case{{2, 33, 6, 7}, 4, 3, 3, 1, 1, 1, 1}, Case{{3, 34, 5, 6}, 3, 5, 5, 1, 1, 2, 2},
        Case{{2, 35, 4, 6}, 2, 3, 3, 1, 1, 0, 1}, Case{{2, 33, 1, 5}, 3, 3, 3, 1, 1, 1, 1},
        Case{{1, 40, 3, 3}, 2, 3, 5, 1, 1, 1, 2}, Case{{2, 33, 4, 1}, 3, 3, 3, 1, 1, 1, 1}}) {
    const std::size_t nx = static_cast<std::size_t>(k.d.n) * k.d.c * k.d.h * k.d.w;
    const auto xs = random_values(nx, 4);
    const auto ws = random_values(static_cast<std::size_t>(k.o) * k.d.c * k.kh * k.kw, 5);
    const auto bs = random_values(k.o, 6);
    const int oh = (k.d.h + 2 * k.ph - k.kh) / k.sh + 1, ow = (k.d.w + 2 * k.pw - k.kw) / k.sw + 1;
    const auto gs = random_values(static_cast<std::size_t>(k.d.n) * k.o * oh * ow, 7);
    const ConvGrads expected =
        reference_conv_grads(xs, k.d, ws, k.o, k.kh, k.kw, gs, k.sh, k.sw, k.ph, k.pw);
    for (Dtype dtype : {kFloat32, kFloat64}) {
      const std::string what = "conv2d " + std::to_string(k.d.c) + "->" + std::to_string(k.o) +
                               " " + std::string(dtype_name(dtype));
      Tensor x = from_vector(xs, {k.d.n, k.d.c, k.d.h, k.d.w}, {dtype, dev}).requires_grad_();
      Tensor w = from_vector(ws, {k.o, k.d.c, k.kh, k.kw}, {dtype, dev}).requires_grad_();
      Tensor b = from_vector(bs, {k.o}, {dtype, dev}).requires_grad_();
      const double tol = dtype == kFloat32 ? 2e-5 : 1e-12;
      const Tensor y = conv2d(x, w, b, {.stride = {k.sh, k.sw}, .padding = {k.ph, k.pw}});
      ASSERT_EQ(y.shape(), Shape({k.d.n, k.o, oh, ow})) << what;
      expect_close(y, reference_conv(xs, k.d, ws, k.o, k.kh, k.kw, bs, k.sh, k.sw, k.ph, k.pw), tol,
                   tol, what + " y");
      y.backward(from_vector(gs, {k.d.n, k.o, oh, ow}, {dtype, dev}));
      expect_close(x.grad(), expected.dx, tol, tol, what + " dx");
      expect_close(w.grad(), expected.dw, tol, tol, what + " dw");
      expect_close(b.grad(), expected.db, tol, tol, what + " db");
      // Without the input's gradient (a first layer), the weight's is unchanged.
      Tensor w2 = from_vector(ws, {k.o, k.d.c, k.kh, k.kw}, {dtype, dev}).requires_grad_();
      conv2d(x.detach(), w2, Tensor(), {.stride = {k.sh, k.sw}, .padding = {k.ph, k.pw}})
          .backward(from_vector(gs, {k.d.n, k.o, oh, ow}, {dtype, dev}));
      expect_close(w2.grad(), expected.dw, tol, tol, what + " dw alone");
    }
  }
}

// Convolutions of many channels (oneDNN's primitives on the CPU from the AVX2 level up: Note
// [oneDNN convolutions]; im2col at the x86-64 level) in more shapes than the primitives kept
// per shape (64), so some are made again after being dropped, each gradient wanted alone or
// with the others: forward and gradients against float64 loops.
TEST_P(Conv, ManyShapesWithEachGradientWantedMatchReference) {
  const Device dev = device();
  std::uint64_t seed = 40;
  for (int shape = 0; shape < 72; ++shape) {
    const int c = 33 + shape % 9, o = 3 + shape % 5, kh = 1 + shape % 3, kw = 1 + (shape / 3) % 3;
    const int s = 1 + (shape / 4) % 2, p = (shape / 2) % 3;
    const Dims d{1 + shape % 3, c, 4 + shape % 4, 3 + shape % 5};
    const int oh = (d.h + 2 * p - kh) / s + 1, ow = (d.w + 2 * p - kw) / s + 1;
    const std::string what = "conv2d " + std::to_string(shape) + ": [" + std::to_string(d.n) +
                             ", " + std::to_string(c) + ", " + std::to_string(d.h) + ", " +
                             std::to_string(d.w) + "] -> " + std::to_string(o) + ", kernel " +
                             std::to_string(kh) + "x" + std::to_string(kw) + ", stride " +
                             std::to_string(s) + ", padding " + std::to_string(p);
    const auto xs = random_values(static_cast<std::size_t>(d.n) * c * d.h * d.w, ++seed);
    const auto ws = random_values(static_cast<std::size_t>(o) * c * kh * kw, ++seed);
    const auto bs = random_values(o, ++seed);
    const auto gs = random_values(static_cast<std::size_t>(d.n) * o * oh * ow, ++seed);
    const ConvGrads expected = reference_conv_grads(xs, d, ws, o, kh, kw, gs, s, s, p, p);
    const Conv2dOptions opts{.stride = {s, s}, .padding = {p, p}};
    const double tol = 2e-5;
    // Which gradients are wanted: bits 0, 1, 2 for x, w, b; the forward without a bias when
    // the bias's is not.
    const int wanted = 1 + shape % 7;
    Tensor x =
        from_vector(xs, {d.n, c, d.h, d.w}, {kFloat32, dev}).requires_grad_((wanted & 1) != 0);
    Tensor w = from_vector(ws, {o, c, kh, kw}, {kFloat32, dev}).requires_grad_((wanted & 2) != 0);
    Tensor b =
        (wanted & 4) != 0 ? from_vector(bs, {o}, {kFloat32, dev}).requires_grad_() : Tensor();
    const Tensor y = conv2d(x, w, b, opts);
    const auto forward =
        reference_conv(xs, d, ws, o, kh, kw, b.defined() ? bs : std::vector<double>{}, s, s, p, p);
    expect_close(y, forward, tol, tol, what + " y");
    y.backward(from_vector(gs, {d.n, o, oh, ow}, {kFloat32, dev}));
    if ((wanted & 1) != 0) expect_close(x.grad(), expected.dx, tol, tol, what + " dx");
    if ((wanted & 2) != 0) expect_close(w.grad(), expected.dw, tol, tol, what + " dw");
    if ((wanted & 4) != 0) expect_close(b.grad(), expected.db, tol, tol, what + " db");
  }
}

// One convolution's primitives run by several threads at once (each call has memory of its
// own: Note [Convolution scratch kept per thread]): every result right, and the same bits in
// every round and thread (one thread count: Note [oneDNN convolutions]).
TEST_P(Conv, ConvolutionsFromSeveralThreadsAtOnceRepeatBitForBit) {
  const Device dev = device();
  const Dims d{8, 40, 14, 14};
  const int o = 48;
  const auto xs = random_values(static_cast<std::size_t>(d.n) * d.c * d.h * d.w, 60);
  const auto ws = random_values(static_cast<std::size_t>(o) * d.c * 9, 61);
  const auto gs = random_values(static_cast<std::size_t>(d.n) * o * d.h * d.w, 62);
  const auto y_expected = reference_conv(xs, d, ws, o, 3, 3, {}, 1, 1, 1, 1);
  const ConvGrads expected = reference_conv_grads(xs, d, ws, o, 3, 3, gs, 1, 1, 1, 1);
  const Tensor x0 = from_vector(xs, {d.n, d.c, d.h, d.w}, {kFloat32, dev});
  const Tensor w0 = from_vector(ws, {o, d.c, 3, 3}, {kFloat32, dev});
  const Tensor g0 = from_vector(gs, {d.n, o, d.h, d.w}, {kFloat32, dev});
  constexpr int kRounds = 40;
  constexpr std::size_t kThreads = 3;
  // results[t][round]: y, dx and dw as float32 values.
  std::array<std::vector<std::array<std::vector<float>, 3>>, kThreads> results;
  std::array<std::thread, kThreads> threads;
  std::atomic<std::size_t> waiting{kThreads};
  for (std::size_t t = 0; t < kThreads; ++t) {
    threads[t] = std::thread([&, t] {
      waiting.fetch_sub(1);
      while (waiting.load() > 0) std::this_thread::yield();  // all start at once
      for (int round = 0; round < kRounds; ++round) {
        Tensor x = x0.detach().requires_grad_();
        Tensor w = w0.detach().requires_grad_();
        const Tensor y = conv2d(x, w, Tensor(), {.padding = {1, 1}});
        y.backward(g0);
        results[t].push_back(
            {y.to_vector<float>(), x.grad().to_vector<float>(), w.grad().to_vector<float>()});
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const std::array<const std::vector<double>*, 3> want{&y_expected, &expected.dx, &expected.dw};
  const std::array<const char*, 3> names{"y", "dx", "dw"};
  const auto& first = results[0][0];
  for (std::size_t k = 0; k < 3; ++k) {
    for (std::size_t i = 0; i < want[k]->size(); ++i) {
      const double v = (*want[k])[i];
      ASSERT_NEAR(first[k][i], v, 2e-5 * (1 + std::abs(v))) << names[k] << " at " << i;
    }
  }
  for (std::size_t t = 0; t < results.size(); ++t) {
    ASSERT_EQ(results[t].size(), static_cast<std::size_t>(kRounds));
    for (int round = 0; round < kRounds; ++round) {
      for (std::size_t k = 0; k < 3; ++k) {
        EXPECT_EQ(results[t][round][k], first[k])
            << names[k] << " of thread " << t << ", round " << round << " differs from the first";
      }
    }
  }
}

// No input channels (an empty sum: the bias alone) or no output channels, in every dtype.
TEST_P(Conv, ConvolutionsWithoutInputOrOutputChannels) {
  const Device dev = device();
  for (const Dtype dtype : {kFloat32, kFloat64, kBFloat16}) {
    const std::string what(dtype_name(dtype));
    // [2, 0, 5, 5] by [4, 0, 3, 3], stride 2: every output is its bias.
    Tensor x = zeros({2, 0, 5, 5}, {dtype, dev}).requires_grad_();
    Tensor w = zeros({4, 0, 3, 3}, {dtype, dev}).requires_grad_();
    Tensor b = full({4}, 1.5, {dtype, dev}).requires_grad_();
    const Tensor y = conv2d(x, w, b, {.stride = {2, 2}});
    ASSERT_EQ(y.shape(), Shape({2, 4, 2, 2})) << what;
    expect_close(y, std::vector<double>(32, 1.5), 0, 0, what + " y, no input channels");
    y.backward(ones_like(y));
    expect_close(b.grad(), std::vector<double>(4, 8.0), 0, 0, what + " db, no input channels");
    EXPECT_EQ(x.grad().numel(), 0) << what;
    EXPECT_EQ(w.grad().numel(), 0) << what;
    // [2, 40, 5, 5] by [0, 40, 3, 3], stride 2: no outputs, so the input's gradient is 0.
    Tensor x2 = full({2, 40, 5, 5}, 1.0, {dtype, dev}).requires_grad_();
    Tensor w2 = zeros({0, 40, 3, 3}, {dtype, dev}).requires_grad_();
    const Tensor y2 = conv2d(x2, w2, Tensor{}, {.stride = {2, 2}});
    ASSERT_EQ(y2.shape(), Shape({2, 0, 2, 2})) << what;
    y2.backward(ones_like(y2));
    expect_close(x2.grad(), std::vector<double>(2 * 40 * 25, 0.0), 0, 0,
                 what + " dx, no output channels");
  }
}

// conv2d called from inside the caller's own OpenMP parallel region gives what it gives
// outside (oneDNN's primitives are not used there: onednn_conv_applies in cpu_conv.cpp).
TEST_P(Conv, ConvolutionsInsideTheCallersOpenMPRegionMatchOutside) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer does not see libgomp's barriers (scripts/tsan keeps teams "
                  "of one thread)";
#endif
  const Device dev = device();
  for (const Dtype dtype : {kFloat32, kBFloat16}) {
    const std::string what(dtype_name(dtype));
    const auto sized = [&](const Shape& s, std::uint64_t seed) {
      return from_vector(random_values(static_cast<std::size_t>(s.numel()), seed), s, {dtype, dev});
    };
    const Tensor x0 = sized({8, 64, 20, 20}, 70), w0 = sized({96, 64, 3, 3}, 71);
    const Tensor g0 = sized({8, 96, 10, 10}, 72);
    const auto run = [&] {
      Tensor x = x0.detach().requires_grad_(), w = w0.detach().requires_grad_();
      const Tensor y = conv2d(x, w, Tensor{}, {.stride = {2, 2}, .padding = {1, 1}});
      y.backward(g0);
      return std::array<std::vector<double>, 3>{y.to(kFloat64).to_vector<double>(),
                                                x.grad().to(kFloat64).to_vector<double>(),
                                                w.grad().to(kFloat64).to_vector<double>()};
    };
    const auto outside = run();
    std::array<std::array<std::vector<double>, 3>, 2> inside;
#pragma omp parallel num_threads(2)
    inside[static_cast<std::size_t>(omp_get_thread_num())] = run();
    const double tol = dtype == kFloat32 ? 2e-5 : 1.0 / 64;
    const std::array<const char*, 3> names{" y", " dx", " dw"};
    for (std::size_t t = 0; t < inside.size(); ++t) {
      for (std::size_t k = 0; k < 3; ++k) {
        ASSERT_EQ(inside[t][k].size(), outside[k].size()) << what << names[k];
        for (std::size_t i = 0; i < outside[k].size(); ++i) {
          ASSERT_NEAR(inside[t][k][i], outside[k][i], tol * (1 + std::abs(outside[k][i])))
              << what << names[k] << " of OpenMP thread " << t << " at " << i;
        }
      }
    }
  }
}

TEST_P(Conv, PoolingMatchesReference) {
  const Device dev = device();
  const Dims d{2, 3, 7, 8};
  const auto xs = random_values(2 * 3 * 7 * 8, 5);
  const Tensor x = from_vector(xs, {2, 3, 7, 8}, {kFloat64, dev});
  for (auto [kh, kw, sh, sw, ph, pw] :
       {std::array{2, 2, 2, 2, 0, 0}, std::array{3, 3, 2, 2, 1, 1}, std::array{3, 2, 1, 2, 1, 0}}) {
    const Pool2dOptions o{{kh, kw}, {sh, sw}, {ph, pw}};
    expect_close(max_pool2d(x, o), reference_pool(true, xs, d, kh, kw, sh, sw, ph, pw), 0, 0,
                 "max_pool2d");
    expect_close(avg_pool2d(x, o), reference_pool(false, xs, d, kh, kw, sh, sw, ph, pw), 1e-12,
                 1e-12, "avg_pool2d");
  }
  // Stride defaults to the kernel; a NaN propagates through max pooling.
  EXPECT_EQ(max_pool2d(x, {.kernel = {2, 2}}).shape(), Shape({2, 3, 3, 4}));
  const Tensor with_nan = from_vector(std::vector<double>{1, NAN, 3, 4}, {1, 1, 2, 2}, dev);
  EXPECT_TRUE(std::isnan(max_pool2d(with_nan).item<double>()));
}

// Each 2x2 window's gradient goes to the element the forward pass chose: of equal maxima the
// first in row-major order, the first NaN when there is one (its value is the output), and
// the first of a window that is all -inf. Checked in both float types.
TEST_P(Conv, MaxPoolingRoutesTheGradientToTheElementItChose) {
  const double inf = std::numeric_limits<double>::infinity();
  // Six windows side by side: columns 2k and 2k+1 of both rows are window k.
  const std::vector<std::array<double, 4>> windows{
      {5, 5, 5, 5},     {1, 7, 7, 2},    {-inf, -inf, -inf, -inf},
      {1, NAN, NAN, 9}, {3, 9, -inf, 9}, {0, 1, 2, NAN}};
  const std::vector<int> chosen{0, 1, 0, 1, 1, 3};  // position in the window (a, b, c, d)
  std::vector<double> xs(2 * 12);
  for (std::size_t k = 0; k < windows.size(); ++k) {
    xs[2 * k] = windows[k][0];
    xs[2 * k + 1] = windows[k][1];
    xs[12 + 2 * k] = windows[k][2];
    xs[12 + 2 * k + 1] = windows[k][3];
  }
  for (const Dtype dtype : {kFloat32, kFloat64}) {
    Tensor x = from_vector(xs, {1, 1, 2, 12}, {dtype, device()});
    x.requires_grad_();
    const Tensor y = max_pool2d(x, {.kernel = {2, 2}});
    y.sum().backward();
    const std::vector<double> out = y.to_vector<double>(), grad = x.grad().to_vector<double>();
    for (std::size_t k = 0; k < windows.size(); ++k) {
      const double want = windows[k][static_cast<std::size_t>(chosen[k])];
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(out[k])) << "window " << k;
      } else {
        EXPECT_EQ(out[k], want) << "window " << k;
      }
      for (int p = 0; p < 4; ++p) {
        const std::size_t at = (p < 2 ? 0 : 12) + 2 * k + static_cast<std::size_t>(p % 2);
        EXPECT_EQ(grad[at], p == chosen[k] ? 1.0 : 0.0)
            << dtype_name(dtype) << ", window " << k << ", element " << p;
      }
    }
  }
}

TEST_P(Conv, LeNetLossFallsOnAFewBatches) {
  const Device d = device();
  manual_seed(0);
  // LeNet-5 with ReLU (d2l's sigmoid version needs many more steps to get going).
  nn::Sequential net(nn::Conv2d(1, 6, 5, {.padding = {2, 2}}, true, d), nn::ReLU(),
                     nn::AvgPool2d(2), nn::Conv2d(6, 16, 5, {}, true, d), nn::ReLU(),
                     nn::MaxPool2d(2), nn::Flatten(), nn::Linear(400, 120, true, d), nn::ReLU(),
                     nn::Linear(120, 84, true, d), nn::ReLU(), nn::Linear(84, 10, true, d));
  // Ten classes of images told apart by where a bright square is.
  const Tensor labels = (rand({64}, d) * 10.0).to(kInt64);
  std::vector<double> pixels(64 * 28 * 28, 0.0);
  const auto ls = labels.to_vector<std::int64_t>();
  for (int i = 0; i < 64; ++i) {
    const int top = 2 + static_cast<int>(ls[i]) * 2;
    for (int y = top; y < top + 6; ++y)
      for (int x = 4; x < 10 + static_cast<int>(ls[i]); ++x) pixels[(i * 28 + y) * 28 + x] = 1.0;
  }
  const Tensor images = from_vector(pixels, {64, 1, 28, 28}, {kFloat32, d});
  optim::Adam opt(net.parameters(), {.lr = 0.01});
  double first = 0, last = 0;
  for (int step = 0; step < 20; ++step) {
    opt.zero_grad();
    const Tensor loss = nn::cross_entropy(net(images), labels);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_LT(last, 0.3 * first) << "first " << first << ", last " << last;
  EXPECT_EQ(net.device(), d);
}

TEST_P(Conv, ErrorsNameTheOpAndTheShapes) {
  const Device d = device();
  const Tensor x = zeros({2, 3, 8, 8}, d);
  expect_throw_with<ShapeError>(
      [&] {
        conv2d(zeros({3, 8, 8}, d), zeros({4, 3, 3, 3}, d));
      },
      {"[conv2d]", "[N, C, H, W]", "[3, 8, 8]", "unsqueeze(0)"});
  expect_throw_with<ShapeError>(
      [&] {
        conv2d(x, zeros({6, 1, 5, 5}, d));
      },
      {"input has 3 channels but weight [6, 1, 5, 5] expects 1"});
  expect_throw_with<ShapeError>(
      [&] {
        conv2d(x, zeros({4, 3, 9, 9}, d));
      },
      {"kernel (9 along H) is larger than the padded input"});
  // An empty plane is no kernel's fault: "use a smaller kernel" was impossible advice.
  expect_throw_with<ShapeError>(
      [&] {
        conv2d(zeros({1, 3, 0, 4}, d), zeros({4, 3, 1, 1}, d));
      },
      {"[conv2d] the input has no rows (size 0 along H)"});
  expect_throw_with<ShapeError>(
      [&] {
        conv2d(x, zeros({4, 3, 3, 3}, d), zeros({5}, d));
      },
      {"bias must be [4]"});
  expect_throw_with<DtypeError>(
      [&] {
        conv2d(zeros({2, 3, 8, 8}, {kInt32, d}), zeros({4, 3, 3, 3}, {kInt32, d}));
      },
      {"floating"});
  expect_throw_with<ShapeError>(
      [&] {
        max_pool2d(x, {.kernel = {2, 2}, .padding = {2, 2}});
      },
      {"[max_pool2d]", "at most half the kernel"});
  // An empty kernel gave the bias alone, a plane of no rows crashed max pooling's backward,
  // and a padding of 2^30 overflowed int (the message then blamed the kernel's size).
  expect_throw_with<ShapeError>(
      [&] {
        conv2d(x, zeros({4, 3, 0, 0}, d));
      },
      {"[conv2d] kernel sizes must be positive, got 0x0"});
  expect_throw_with<ShapeError>(
      [&] {
        max_pool2d(zeros({1, 1, 0, 4}, d), {{2, 2}, {2, 2}, {1, 0}});
      },
      {"[max_pool2d] input of shape [1, 1, 0, 4] has an empty plane (0 x 4)"});
  expect_throw_with<ShapeError>(
      [&] {
        avg_pool2d(zeros({1, 1, 0, 4}, d), {{2, 2}, {2, 2}, {1, 0}});
      },
      {"[avg_pool2d]"});
  EXPECT_EQ(max_pool2d(zeros({0, 1, 4, 4}, d)).shape(), Shape({0, 1, 2, 2})) << "an empty batch";
  expect_throw_with<ShapeError>(
      [&] {
        max_pool2d(ones({1, 1, 4, 4}, d), {{3, 3}, {1, 1}, {1 << 30, 0}});
      },
      {"[max_pool2d] padding (1073741824, 0) must be at most half the kernel"});
  expect_throw_with<ShapeError>([&] { nn::Conv2d(4, 2, 3, {}, true, d)(x); },
                                {"Conv2d expects inputs [N, 4, H, W]", "[2, 3, 8, 8]",
                                 "the layer was built for 4 input channels"});
  expect_throw_with<ShapeError>(
      [&] {
        nn::Conv2d(3, 2, 3, {}, true, d)(ones({3, 8, 8}, d));
      },
      {"[3, 8, 8]", "x.unsqueeze(0)"});
  expect_throw_with<Error>([&] { nn::Conv2d(3, 2, 3, {}, true, d)(Tensor()); },
                           {"[Conv2d]", "'input'"});
  expect_throw_with<Error>([&] { nn::Linear(3, 2, true, d)(Tensor()); }, {"[Linear]", "'input'"});
  expect_throw_with<ShapeError>(
      [&] {
        nn::LazyLinear(2)(ones({2, 0}, d));
      },
      {"[LazyLinear]", "[2, 0]", "nn::Flatten"});
  if (available_devices().size() > 1) {
    const Device other =
        available_devices()[0] == d ? available_devices()[1] : available_devices()[0];
    expect_throw_with<DeviceMismatchError>(
        [&] {
          conv2d(x, zeros({4, 3, 3, 3}, other));
        },
        {"[conv2d]"});
  }
}

// Sizes past what the kernels index in int: 2^30 of padding left output rows unwritten
// (their values were whatever the memory held), and a 46341 x 46341 average pooling window
// divided by a negative area.
TEST_P(Conv, SizesPastTheKernelsIndexAreRefusedOrExact) {
  const Tensor x = ones({1, 1, 3, 3}, device());
  const Tensor w = full({1, 1, 1, 1}, 2.0, device());
  testing::expect_throw_with<ShapeError>(
      [&] {
        (void)conv2d(x, w, {}, {{1 << 30, 1}, {1 << 30, 0}});
      },
      {"[conv2d] the padded input along H (3 + 2 x 1073741824) is larger than", "less padding"});
  const Tensor one = ones({1, 1, 1, 1}, {kFloat64, device()}).requires_grad_();
  const Tensor y = avg_pool2d(one, {{46341, 46341}, {0, 0}, {23170, 23170}});
  const double area = 46341.0 * 46341.0;
  EXPECT_DOUBLE_EQ(y.to_vector<double>()[0], 1.0 / area);
  sum(y).backward();
  EXPECT_DOUBLE_EQ(one.grad().to_vector<double>()[0], 1.0 / area);
}

TESSERA_INSTANTIATE_DEVICE_SUITE(Conv);

}  // namespace
}  // namespace tessera

// matmul on every device against a float64 host reference: 2-D sizes on both GEMM paths,
// transposed and strided views, batched with broadcast batch dims, 1-D operands, zero-size
// dims, and each error message.
#include "support/device_test.h"

namespace tessera {
namespace {

using testing::DeviceTest;
using testing::expect_close;
using testing::expect_throw_with;
using testing::random_values;

class Matmul : public DeviceTest {};

// Row-major [m, k] x [k, n] in float64.
std::vector<double> ref_matmul(const std::vector<double>& a, const std::vector<double>& b,
                               std::int64_t m, std::int64_t k, std::int64_t n) {
  std::vector<double> c(static_cast<std::size_t>(m * n), 0.0);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t p = 0; p < k; ++p)
      for (std::int64_t j = 0; j < n; ++j) c[i * n + j] += a[i * k + p] * b[p * n + j];
  return c;
}

double rtol_of(Dtype dtype) { return dtype == kFloat32 ? 1e-5 : 1e-12; }
double atol_of(Dtype dtype, std::int64_t k) { return (dtype == kFloat32 ? 1e-6 : 1e-14) * (k + 1); }

// Checks matmul(a, b) for 2-D a [m, k] and b [k, n] (any layouts) against the reference.
void check_2d(const Tensor& a, const Tensor& b, const std::string& what) {
  const std::int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  const Tensor c = matmul(a, b);
  ASSERT_EQ(c.shape(), (Shape{m, n})) << what;
  EXPECT_EQ(c.dtype(), a.dtype());
  expect_close(c, ref_matmul(a.to_vector<double>(), b.to_vector<double>(), m, k, n),
               rtol_of(a.dtype()), atol_of(a.dtype(), k), what);
}

TEST_P(Matmul, TwoDimensionalMatchesReference) {
  const std::vector<std::array<std::int64_t, 3>> sizes = {{1, 1, 1},       {3, 5, 4}, {64, 100, 37},
                                                          {200, 300, 150}, {7, 1, 9}, {1, 33, 1}};
  for (Dtype dtype : {kFloat32, kFloat64}) {
    for (const auto& [m, k, n] : sizes) {
      const std::string what = dtype_name(dtype).data() + std::string(" ") + std::to_string(m) +
                               "x" + std::to_string(k) + "x" + std::to_string(n);
      const Tensor a = from_vector(random_values(m * k, 1), {m, k}, {dtype, device()});
      const Tensor b = from_vector(random_values(k * n, 2), {k, n}, {dtype, device()});
      check_2d(a, b, what);
      // Transposed views go to BLAS with transpose flags; no copy.
      const Tensor at = from_vector(random_values(m * k, 3), {k, m}, {dtype, device()}).t();
      const Tensor bt = from_vector(random_values(k * n, 4), {n, k}, {dtype, device()}).t();
      check_2d(at, b, what + " a.t()");
      check_2d(a, bt, what + " b.t()");
      check_2d(at, bt, what + " both t()");
    }
  }
}

TEST_P(Matmul, StridedViewsAreHandled) {
  for (Dtype dtype : {kFloat32, kFloat64}) {
    const Tensor big = from_vector(random_values(40 * 50, 5), {40, 50}, {dtype, device()});
    const Tensor other = from_vector(random_values(50 * 30, 6), {50, 30}, {dtype, device()});
    check_2d(big.narrow(1, 5, 20), other.narrow(0, 10, 20), "column block (ld > cols)");
    check_2d(big.slice(1, 0, 50, 2), other.slice(0, 0, 50, 2), "step-2 slices (copied)");
    check_2d(big.narrow(0, 3, 1), other, "one row");
    check_2d(big.narrow(1, 7, 1).t(), big.narrow(0, 0, 40).narrow(1, 0, 9), "row from column");
    check_2d(big.narrow(0, 2, 1).expand({6, 50}), other, "expanded rows (copied)");
    check_2d(big.t().narrow(0, 4, 30), big.narrow(1, 0, 11), "slice of transpose");
  }
}

TEST_P(Matmul, BatchedBroadcastsLeadingDims) {
  for (Dtype dtype : {kFloat32, kFloat64}) {
    const std::int64_t m = 6, k = 5, n = 4;
    const Tensor a = from_vector(random_values(2 * 3 * m * k, 7), {2, 3, m, k}, {dtype, device()});
    const Tensor b = from_vector(random_values(3 * k * n, 8), {3, k, n}, {dtype, device()});
    const Tensor c = matmul(a, b);
    ASSERT_EQ(c.shape(), (Shape{2, 3, m, n}));
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j)
        expect_close(c[i][j],
                     ref_matmul(a[i][j].to_vector<double>(), b[j].to_vector<double>(), m, k, n),
                     rtol_of(dtype), atol_of(dtype, k), "batched");
    // One side broadcast over the other's batch (stride-0 batch), and a size-1 batch dim.
    const Tensor b2 = b[1];
    const Tensor c2 = matmul(a, b2);
    ASSERT_EQ(c2.shape(), (Shape{2, 3, m, n}));
    expect_close(c2[1][2], ref_matmul(a[1][2].to_vector<double>(), b2.to_vector<double>(), m, k, n),
                 rtol_of(dtype), atol_of(dtype, k), "broadcast 2-D other");
    const Tensor a3 = a[0].unsqueeze(1);  // [3, 1, m, k] with b [3, k, n] -> [3, 3, m, n]
    const Tensor c3 = matmul(a3, b);
    ASSERT_EQ(c3.shape(), (Shape{3, 3, m, n}));
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j)
        expect_close(c3[i][j],
                     ref_matmul(a[0][i].to_vector<double>(), b[j].to_vector<double>(), m, k, n),
                     rtol_of(dtype), atol_of(dtype, k), "broadcast both");
    // Transposed batched view: [3, n, k] -> transpose(1, 2) is [3, k, n] with row stride 1.
    const Tensor bt =
        from_vector(random_values(3 * n * k, 9), {3, n, k}, {dtype, device()}).transpose(1, 2);
    const Tensor c4 = matmul(a[1], bt);
    for (int j = 0; j < 3; ++j)
      expect_close(c4[j],
                   ref_matmul(a[1][j].to_vector<double>(), bt[j].to_vector<double>(), m, k, n),
                   rtol_of(dtype), atol_of(dtype, k), "batched transpose");
    // Many small matrices: one per thread.
    const Tensor many_a =
        from_vector(random_values(512 * 9 * 8, 10), {512, 9, 8}, {dtype, device()});
    const Tensor many_b =
        from_vector(random_values(512 * 8 * 7, 11), {512, 8, 7}, {dtype, device()});
    const Tensor many = matmul(many_a, many_b);
    for (int i : {0, 255, 511})
      expect_close(
          many[i],
          ref_matmul(many_a[i].to_vector<double>(), many_b[i].to_vector<double>(), 9, 8, 7),
          rtol_of(dtype), atol_of(dtype, 8), "many small");
  }
}

TEST_P(Matmul, ViewsReachBlasWithoutCopies) {
  const Tensor at = ones({8, 6}, {device()}).t();                    // [6, 8], row stride 1
  const Tensor b = ones({3, 8, 10}, {device()}).narrow(2, 2, 5);     // ld 10 > 5 columns
  const Tensor bt = ones({2, 1, 5, 8}, {device()}).transpose(2, 3);  // batch broadcast too
  for (const Tensor& other : {b, bt}) {
    const std::uint64_t before = memory_stats(device()).allocations;
    const Tensor c = matmul(at, other);
    EXPECT_EQ(memory_stats(device()).allocations - before, 1u) << "only the result is allocated";
    expect_close(c, std::vector<double>(c.numel(), 8.0), 0, 0, "ones");
  }
}

TEST_P(Matmul, OneDimensionalOperands) {
  for (Dtype dtype : {kFloat32, kFloat64}) {
    const Tensor v = from_vector(random_values(5, 12), {5}, {dtype, device()});
    const Tensor w = from_vector(random_values(5, 13), {5}, {dtype, device()});
    const Tensor mat = from_vector(random_values(15, 14), {5, 3}, {dtype, device()});
    const Tensor matl = from_vector(random_values(20, 15), {4, 5}, {dtype, device()});
    const Tensor batch = from_vector(random_values(30, 16), {2, 5, 3}, {dtype, device()});
    const auto vv = v.to_vector<double>(), wv = w.to_vector<double>();
    const Tensor dot = matmul(v, w);
    EXPECT_EQ(dot.dim(), 0);
    expect_close(dot, ref_matmul(vv, wv, 1, 5, 1), rtol_of(dtype), atol_of(dtype, 5), "dot");
    const Tensor vm = matmul(v, mat);
    EXPECT_EQ(vm.shape(), (Shape{3}));
    expect_close(vm, ref_matmul(vv, mat.to_vector<double>(), 1, 5, 3), rtol_of(dtype),
                 atol_of(dtype, 5), "v @ M");
    const Tensor mv = matmul(matl, v);
    EXPECT_EQ(mv.shape(), (Shape{4}));
    expect_close(mv, ref_matmul(matl.to_vector<double>(), vv, 4, 5, 1), rtol_of(dtype),
                 atol_of(dtype, 5), "M @ v");
    const Tensor vb = matmul(v, batch);
    EXPECT_EQ(vb.shape(), (Shape{2, 3}));
    expect_close(vb[1], ref_matmul(vv, batch[1].to_vector<double>(), 1, 5, 3), rtol_of(dtype),
                 atol_of(dtype, 5), "v @ batch");
    EXPECT_EQ(matmul(batch.transpose(1, 2), v).shape(), (Shape{2, 3}));
    EXPECT_EQ(matmul(v.slice(0, 0, 5, 2), w.slice(0, 1, 4)).dim(), 0);
  }
}

TEST_P(Matmul, ZeroSizeDims) {
  for (Dtype dtype : {kFloat32, kFloat64}) {
    const Tensor k0 = matmul(zeros({3, 0}, {dtype, device()}), zeros({0, 4}, {dtype, device()}));
    EXPECT_EQ(k0.shape(), (Shape{3, 4}));
    expect_close(k0, std::vector<double>(12, 0.0), 0, 0, "K = 0 gives zeros");
    EXPECT_EQ(matmul(zeros({0, 5}, {dtype, device()}), ones({5, 4}, {dtype, device()})).shape(),
              (Shape{0, 4}));
    EXPECT_EQ(matmul(ones({3, 5}, {dtype, device()}), zeros({5, 0}, {dtype, device()})).shape(),
              (Shape{3, 0}));
    EXPECT_EQ(matmul(zeros({0, 3, 5}, {dtype, device()}), ones({5, 2}, {dtype, device()})).shape(),
              (Shape{0, 3, 2}));
    EXPECT_EQ(matmul(zeros({0}, {dtype, device()}), zeros({0}, {dtype, device()})).item<double>(),
              0);
  }
}

TEST_P(Matmul, ErrorMessages) {
  const Tensor f = ones({2, 3}, {kFloat32, device()});
  expect_throw_with<ShapeError>(
      [&] {
        matmul(f, ones({4, 5}, {device()}));
      },
      {"[matmul]", "inner sizes differ", "[2, 3]", "[4, 5]", "3 vs 4"});
  expect_throw_with<ShapeError>([&] { matmul(f, ones({2}, {device()})); },
                                {"[matmul]", "[2, 3]", "[2]", "only dim"});
  expect_throw_with<ShapeError>(
      [&] {
        matmul(ones({2, 2, 3}, {device()}), ones({3, 3, 1}, {device()}));
      },
      {"[matmul] the batch dims (all but the last two) of self [2, 2, 3] and other [3, 3, 1]",
       "dim 0 of self is 2 and dim 0 of other is 3"});
  expect_throw_with<ShapeError>(
      [&] {
        matmul(ones({2, 3, 5, 4}, {device()}), ones({4, 5, 4, 6}, {device()}));
      },
      {"dim 1 of self is 3 and dim 1 of other is 5"});
  expect_throw_with<ShapeError>([&] { matmul(full({}, 1.0, {device()}), f); },
                                {"[matmul]", "at least 1 dim", "[]", "[2, 3]"});
  expect_throw_with<DtypeError>(
      [&] {
        matmul(f, ones({3, 2}, {kInt64, device()}));
      },
      {"[matmul]", "floating", "self float32", "other int64", ".to(kFloat32)"});
  expect_throw_with<DtypeError>(
      [&] {
        matmul(ones({3}, {kBool, device()}), ones({3}, {kBool, device()}));
      },
      {"[matmul]", "bool"});
  expect_throw_with<DtypeError>(
      [&] {
        matmul(f, ones({3, 2}, {kFloat64, device()}));
      },
      {"[matmul]", "different dtypes", "self float32", "other float64",
       "convert self with .to(kFloat64)"});
  // Neither operand's dtype holds the other's: both are converted.
  expect_throw_with<DtypeError>(
      [&] {
        matmul(ones({2, 2}, {kBFloat16, device()}), ones({2, 2}, {kFloat16, device()}));
      },
      {"self bfloat16 and other float16", "convert both with .to(kFloat32)"});
}

TEST_P(Matmul, OperandsOnDifferentDevicesThrow) {
  TESSERA_REQUIRE_TWO_DEVICES();
  Device other_device = device();
  for (Device d : available_devices()) {
    if (d != device()) other_device = d;
  }
  const Tensor a = ones({2, 3}, {device()});
  const Tensor b = ones({3, 2}, {other_device});
  expect_throw_with<DeviceMismatchError>([&] { matmul(a, b); },
                                         {"[matmul]", device().str(), other_device.str()});
}

// With M, K or N of 0, a 2-D operand against a batched one: the gradients are zeros of the
// operands' shapes (backward threw: reshape had no size to infer -1 from). The functional
// linear alike, with 0 output or input features.
TEST_P(Matmul, EmptyDimsGiveEmptyOrZeroGradients) {
  const std::vector<std::pair<Shape, Shape>> cases = {{{0, 4}, {2, 4, 5}}, {{3, 0}, {2, 0, 5}},
                                                      {{2, 3, 0}, {0, 5}}, {{2, 3, 4}, {4, 0}},
                                                      {{0}, {2, 0, 5}},    {{2, 3, 0}, {0}}};
  for (const auto& [sa, sb] : cases) {
    Tensor a = ones(sa, device()).requires_grad_();
    Tensor b = ones(sb, device()).requires_grad_();
    matmul(a, b).sum().backward();
    EXPECT_EQ(a.grad().shape(), sa) << sa.str() << " @ " << sb.str();
    EXPECT_EQ(b.grad().shape(), sb) << sa.str() << " @ " << sb.str();
    EXPECT_EQ(abs(a.grad()).sum().item<double>() + abs(b.grad()).sum().item<double>(), 0.0);
  }
  Tensor x = ones({4, 5}, device()).requires_grad_();
  Tensor w = ones({0, 5}, device()).requires_grad_();
  nn::linear(x, w).sum().backward();
  EXPECT_EQ(x.grad().to_vector<double>(), std::vector<double>(20, 0.0));
  EXPECT_EQ(w.grad().shape(), Shape({0, 5}));
  const Tensor y = nn::linear(ones({2, 3, 0}, device()), ones({4, 0}, device()));
  EXPECT_EQ(y.shape(), Shape({2, 3, 4}));
  EXPECT_EQ(y.sum().item<double>(), 0.0);
}

TESSERA_INSTANTIATE_DEVICE_SUITE(Matmul);

}  // namespace
}  // namespace tessera

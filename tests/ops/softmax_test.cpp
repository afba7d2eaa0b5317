// softmax and log_softmax on every device against a float64 host reference, along every
// dim, on contiguous and non-contiguous inputs, with large values, and each error message.
#include <cmath>
#include <limits>

#include "support/device_test.h"

namespace tessera {
namespace {

using testing::DeviceTest;
using testing::expect_close;
using testing::expect_throw_with;
using testing::random_values;

class Softmax : public DeviceTest {};

// Softmax of row-major `x` of `shape` along `dim`, in float64.
std::vector<double> ref_softmax(const std::vector<double>& x, const Shape& shape, int dim,
                                bool log) {
  std::int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; ++d) outer *= shape[d];
  for (int d = dim + 1; d < shape.size(); ++d) inner *= shape[d];
  const std::int64_t len = shape[dim];
  std::vector<double> y(x.size());
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t j = 0; j < inner; ++j) {
      auto at = [&](std::int64_t d) { return (o * len + d) * inner + j; };
      double mx = -std::numeric_limits<double>::infinity(), sum = 0;
      for (std::int64_t d = 0; d < len; ++d) mx = std::max(mx, x[at(d)]);
      for (std::int64_t d = 0; d < len; ++d) sum += std::exp(x[at(d)] - mx);
      for (std::int64_t d = 0; d < len; ++d) {
        y[at(d)] = log ? x[at(d)] - mx - std::log(sum) : std::exp(x[at(d)] - mx) / sum;
      }
    }
  }
  return y;
}

void check_every_dim(const Tensor& x, const std::string& what, double scale = 1) {
  const auto held = x.to_vector<double>();
  const double tol = x.dtype() == kFloat32 ? 2e-6 : 1e-13;
  for (int d = 0; d < x.dim(); ++d) {
    for (bool log : {false, true}) {
      const int dim = d % 2 == 0 ? d : d - x.dim();  // negative dims too
      const Tensor y = log ? log_softmax(x, dim) : softmax(x, dim);
      EXPECT_EQ(y.shape(), x.shape());
      EXPECT_EQ(y.dtype(), x.dtype());
      expect_close(y, ref_softmax(held, x.shape(), d, log), tol, tol * scale,
                   what + (log ? " log_softmax dim " : " softmax dim ") + std::to_string(d));
    }
  }
}

TEST_P(Softmax, EveryDimMatchesReference) {
  for (Dtype dtype : {kFloat32, kFloat64}) {
    const Tensor x = from_vector(random_values(4 * 5 * 6, 21, -4, 4), {4, 5, 6}, {dtype, device()});
    check_every_dim(x, "contiguous");
    check_every_dim(x.transpose(0, 2), "transposed");
    check_every_dim(x.slice(1, 0, 5, 2), "sliced");
    check_every_dim(from_vector(random_values(7, 2), {1, 7, 1}, {dtype, device()}), "size-1 dims");
    // Large enough for threads, with inner sizes above and below the column block.
    check_every_dim(
        from_vector(random_values(64 * 300 * 3, 22, -4, 4), {64, 300, 3}, {dtype, device()}),
        "large");
    check_every_dim(
        from_vector(random_values(3 * 40 * 600, 23, -4, 4), {3, 40, 600}, {dtype, device()}),
        "wide");
  }
}

TEST_P(Softmax, LargeValuesAreStable) {
  for (Dtype dtype : {kFloat32, kFloat64}) {
    const Tensor x =
        tensor({{1000.0, 1001.0, 1002.0}, {-1000.0, -1001.0, -1002.0}}, {dtype, device()});
    const auto held = x.to_vector<double>();
    expect_close(softmax(x, 1), ref_softmax(held, {2, 3}, 1, false), 1e-6, 1e-7, "softmax");
    expect_close(log_softmax(x, -1), ref_softmax(held, {2, 3}, 1, true), 1e-6, 1e-5, "log_softmax");
    expect_close(softmax(x, 0), ref_softmax(held, {2, 3}, 0, false), 1e-6, 1e-7, "softmax dim 0");
  }
}

// Rows long enough for the float32 kernel's vector body (16 lanes) and a tail, with values
// that reach each of its edges: an -inf among finite logits (exactly 0 / -inf out), logits
// far below the max (e^(x - max) a denormal, or 0), a row all -inf and a row with a NaN (NaN
// throughout, as before), and a max in the tail. A lane that kept the wrong max, a partial
// sum left out or an exp off by more than an ulp or two shows against the float64 reference.
TEST_P(Softmax, Float32LongRowsMatchReferenceAtTheEdges) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  for (const std::int64_t len : {1000, 1037}) {
    const std::int64_t rows = 8;
    std::vector<double> v = random_values(rows * len, 31 + len, -20, 20);
    // Row 0: one -inf among finite values.
    v[0 * len + 5] = -kInf;
    // Row 1: the rest 40 to 105 below the max, e^(x - max) down to denormals, and 0.
    v[1 * len + 3] = 60;
    for (std::int64_t i = 10; i < 200; ++i) v[1 * len + i] = -45 + 0.25 * (i % 100);
    v[1 * len + 300] = -10000;
    // Row 2 all -inf, row 3 with a NaN: NaN throughout.
    for (std::int64_t i = 0; i < len; ++i) v[2 * len + i] = -kInf;
    v[3 * len + 17] = std::nan("");
    // The max in the tail (row 4), in the first lane (row 5) and in the last (row 7): with
    // a lane's or the tail's max left out, e^(x - max) would be inf.
    v[4 * len + len - 1] = 500;
    v[5 * len + 0] = 1e4;
    v[7 * len + 15] = 400;
    // Row 6 all equal: 1 / len each.
    for (std::int64_t i = 0; i < len; ++i) v[6 * len + i] = 3.5;
    const Tensor x = from_vector(v, {rows, len}, {kFloat32, device()});
    const auto held = x.to_vector<double>();
    for (bool log : {false, true}) {
      const Tensor y = log ? log_softmax(x, -1) : softmax(x, -1);
      auto expected = ref_softmax(held, {rows, len}, 1, log);
      auto got = y.to_vector<double>();
      EXPECT_EQ(got[0 * len + 5], log ? -kInf : 0.0) << "the -inf logit, len " << len;
      got[0 * len + 5] = expected[0 * len + 5] = 0;  // -inf - -inf is no difference to bound
      // softmax's values are below 1 (absolute error); log_softmax's reach -10000.
      expect_close(got, expected, 2e-6, log ? 1e-5 : 1e-9,
                   std::string(log ? "log_softmax" : "softmax") + " len " + std::to_string(len));
      for (std::int64_t i = 0; i < len; ++i) {
        ASSERT_TRUE(std::isnan(got[2 * len + i])) << "the row of -inf, element " << i;
        ASSERT_TRUE(std::isnan(got[3 * len + i])) << "the row with a NaN, element " << i;
      }
    }
  }
}

TEST_P(Softmax, ZeroDimAndEmpty) {
  const Tensor s = full({}, 3.0, {device()});
  EXPECT_EQ(softmax(s, 0).dim(), 0);
  EXPECT_EQ(softmax(s, -1).item<double>(), 1.0);
  EXPECT_EQ(log_softmax(s, 0).item<double>(), 0.0);
  EXPECT_EQ(softmax(zeros({2, 0, 3}, {device()}), 1).shape(), (Shape{2, 0, 3}));
  EXPECT_EQ(log_softmax(zeros({0, 4}, {device()}), 1).shape(), (Shape{0, 4}));
}

TEST_P(Softmax, ErrorMessages) {
  expect_throw_with<DtypeError>(
      [&] {
        softmax(tensor({1, 2, 3}, {device()}), 0);
      },
      {"[softmax]", "floating", "got int64", ".to(kFloat32)"});
  expect_throw_with<DtypeError>(
      [&] {
        log_softmax(ones({3}, {kBool, device()}), 0);
      },
      {"[log_softmax]", "got bool"});
  expect_throw_with<ShapeError>(
      [&] {
        softmax(ones({2, 3}, {device()}), 2);
      },
      {"[softmax]", "dim 2", "shape [2, 3]", "expected -2 to 1"});
  expect_throw_with<ShapeError>(
      [&] {
        log_softmax(ones({2, 3}, {device()}), -3);
      },
      {"[log_softmax]", "dim -3"});
}

TESSERA_INSTANTIATE_DEVICE_SUITE(Softmax);

}  // namespace
}  // namespace tessera

// Reductions on every device against a float64 host reference: every dim subset of a 3-D
// tensor, keepdim on and off, non-contiguous inputs, size-1 and zero-size dims, integer and
// bool sums, NaN propagation, argmax ties, and each error message.
#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>

#include "support/device_test.h"

namespace tessera {
namespace {

using testing::DeviceTest;
using testing::expect_close;
using testing::expect_throw_with;
using testing::random_values;

class Reduce : public DeviceTest {};

enum class Kind { kSum, kMean, kMax, kMin, kArgMax, kArgMin };

// Reduces row-major `x` of `shape` over the dims in `mask`; the result is row-major over the
// kept dims. arg kinds give the row-major index within the reduced dims.
std::vector<double> reference(const std::vector<double>& x, const Shape& shape, std::uint32_t mask,
                              Kind kind) {
  const int r = shape.size();
  std::int64_t kept = 1, count = 1;
  for (int d = 0; d < r; ++d) ((mask >> d) & 1u ? count : kept) *= shape[d];
  std::vector<double> acc(
      kept, kind == Kind::kMax || kind == Kind::kArgMax   ? -std::numeric_limits<double>::infinity()
            : kind == Kind::kMin || kind == Kind::kArgMin ? std::numeric_limits<double>::infinity()
                                                          : 0.0);
  std::vector<double> arg(kept, -1);
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(x.size()); ++i) {
    std::int64_t rem = i, out = 0, out_stride = 1, idx = 0, idx_stride = 1;
    for (int d = r - 1; d >= 0; --d) {
      const std::int64_t c = rem % shape[d];
      rem /= shape[d];
      if ((mask >> d) & 1u) {
        idx += c * idx_stride;
        idx_stride *= shape[d];
      } else {
        out += c * out_stride;
        out_stride *= shape[d];
      }
    }
    const double v = x[i];
    double& a = acc[out];
    switch (kind) {
      case Kind::kSum:
      case Kind::kMean:
        a += v;
        break;
      case Kind::kMax:
        a = std::isnan(a) || std::isnan(v) ? NAN : std::max(a, v);
        break;
      case Kind::kMin:
        a = std::isnan(a) || std::isnan(v) ? NAN : std::min(a, v);
        break;
      case Kind::kArgMax:
        if (arg[out] < 0 || v > a) a = v, arg[out] = static_cast<double>(idx);
        break;
      case Kind::kArgMin:
        if (arg[out] < 0 || v < a) a = v, arg[out] = static_cast<double>(idx);
        break;
    }
  }
  if (kind == Kind::kMean) {
    for (double& a : acc) a /= static_cast<double>(count);
  }
  return kind == Kind::kArgMax || kind == Kind::kArgMin ? arg : acc;
}

std::vector<int> dims_of(std::uint32_t mask, int rank, bool negative) {
  std::vector<int> dims;
  for (int d = 0; d < rank; ++d) {
    if ((mask >> d) & 1u) dims.push_back(negative ? d - rank : d);
  }
  return dims;
}

Shape reduced_shape(const Shape& s, std::uint32_t mask, bool keepdim) {
  Shape out;
  for (int d = 0; d < s.size(); ++d) {
    if (!((mask >> d) & 1u)) {
      out.push_back(s[d]);
    } else if (keepdim) {
      out.push_back(1);
    }
  }
  return out;
}

// Checks sum/mean/max/min of `x` over every dim subset against the reference.
void check_all_subsets(const Tensor& x, const std::string& what) {
  const auto held = x.to_vector<double>();
  const Shape& s = x.shape();
  const double tol = x.dtype() == kFloat64 ? 1e-12 : 1e-6;
  for (std::uint32_t mask = 0; mask < (1u << s.size()); ++mask) {
    for (bool keepdim : {false, true}) {
      const std::vector<int> dims = dims_of(mask, s.size(), mask % 2 == 1);
      const std::string label = what + " mask " + std::to_string(mask) + (keepdim ? " keep" : "");
      const Tensor r_sum = sum(x, dims, keepdim), r_mean = mean(x, dims, keepdim);
      const Tensor r_max = max(x, dims, keepdim), r_min = min(x, dims, keepdim);
      EXPECT_EQ(r_sum.shape(), reduced_shape(s, mask, keepdim)) << label;
      EXPECT_EQ(r_max.shape(), reduced_shape(s, mask, keepdim)) << label;
      EXPECT_EQ(r_sum.dtype(), x.dtype());
      expect_close(r_sum, reference(held, s, mask, Kind::kSum), tol, tol, "sum " + label);
      expect_close(r_mean, reference(held, s, mask, Kind::kMean), tol, tol, "mean " + label);
      expect_close(r_max, reference(held, s, mask, Kind::kMax), 0, 0, "max " + label);
      expect_close(r_min, reference(held, s, mask, Kind::kMin), 0, 0, "min " + label);
    }
  }
  expect_close(sum(x), reference(held, s, (1u << s.size()) - 1, Kind::kSum), tol, tol, what);
  for (int d = 0; d < s.size(); ++d) {
    expect_close(argmax(x, d), reference(held, s, 1u << d, Kind::kArgMax), 0, 0, what + " argmax");
    expect_close(argmin(x, d - s.size(), true), reference(held, s, 1u << d, Kind::kArgMin), 0, 0,
                 what + " argmin");
  }
  EXPECT_EQ(argmax(x).item<std::int64_t>(), reference(held, {x.numel()}, 1u, Kind::kArgMax)[0]);
  EXPECT_EQ(argmin(x).item<std::int64_t>(), reference(held, {x.numel()}, 1u, Kind::kArgMin)[0]);
}

TEST_P(Reduce, EveryDimSubsetMatchesReference) {
  for (Dtype dtype : {kFloat32, kFloat64}) {
    const Tensor x = from_vector(random_values(60, 11), {3, 4, 5}, {dtype, device()});
    check_all_subsets(x, "contiguous");
    check_all_subsets(x.transpose(0, 2), "transposed");
    check_all_subsets(x.slice(1, 0, 4, 2), "sliced with step");
    check_all_subsets(x.permute({1, 2, 0}).slice(2, 1, 3), "permuted slice");
    check_all_subsets(x.slice(0, 0, 1).expand({3, 4, 5}), "expanded");
    check_all_subsets(from_vector(random_values(8, 3), {1, 8, 1}, {dtype, device()}),
                      "size-1 dims");
  }
}

TEST_P(Reduce, IntegerAndBoolSumsGiveInt64) {
  const Tensor i = tensor({{1, 2, 3}, {4, 5, 6}}, {kInt32, device()});
  EXPECT_EQ(sum(i).dtype(), kInt64);
  EXPECT_EQ(sum(i).item<std::int64_t>(), 21);
  EXPECT_EQ(sum(i, {0}).to_vector<std::int64_t>(), (std::vector<std::int64_t>{5, 7, 9}));
  EXPECT_EQ(max(i, {1}).to_vector<std::int64_t>(), (std::vector<std::int64_t>{3, 6}));
  EXPECT_EQ(max(i).dtype(), kInt32);
  const Tensor u = full({300}, 200, {kUInt8, device()});
  EXPECT_EQ(sum(u).item<std::int64_t>(), 60000);  // no uint8 overflow
  const Tensor b = tensor({{true, false, true}, {true, true, true}}, {device()});
  EXPECT_EQ(sum(b).dtype(), kInt64);
  EXPECT_EQ(sum(b).item<std::int64_t>(), 5);
  EXPECT_EQ(sum(b, {1}, true).to_vector<std::int64_t>(), (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(sum(b, {1}, true).shape(), (Shape{2, 1}));
  const Tensor big = full({4}, 3e9, {kInt64, device()});
  EXPECT_EQ(sum(big).item<std::int64_t>(), 12000000000LL);
}

TEST_P(Reduce, LargeInputsAreAccurate) {
  // 16M float32 values: a float accumulator would be off by ~1e-3 relative.
  const std::int64_t n = std::int64_t{1} << 24;
  manual_seed(5);
  const Tensor big = rand({n}, {kFloat32, device()});
  double total = 0;
  for (float v : big.to_vector<float>()) total += v;
  EXPECT_NEAR(sum(big).item<double>(), total, 1e-7 * total);
  EXPECT_NEAR(mean(big.view({4096, 4096}).t()).item<double>(), total / n, 1e-7 * total / n);

  // Large enough to run on several threads, along kept and along reduced dims.
  const std::int64_t rows = 768, cols = 1024;
  const Tensor x = big.narrow(0, 0, rows * cols).view({rows, cols});
  const auto held = x.to_vector<double>();
  expect_close(sum(x, {0}), reference(held, {rows, cols}, 1u, Kind::kSum), 1e-6, 0, "column sums");
  expect_close(sum(x.t(), {1}), reference(held, {rows, cols}, 1u, Kind::kSum), 1e-6, 0, "t rows");
  expect_close(sum(x, {1}), reference(held, {rows, cols}, 2u, Kind::kSum), 1e-6, 0, "row sums");
  expect_close(max(x, {1}), reference(held, {rows, cols}, 2u, Kind::kMax), 0, 0, "row max");
  expect_close(argmax(x.t(), 1), reference(held, {rows, cols}, 1u, Kind::kArgMax), 0, 0, "argmax");
  EXPECT_EQ(argmax(x).item<double>(), reference(held, {rows * cols}, 1u, Kind::kArgMax)[0]);
  // Few outputs, long reductions: split across threads with per-thread accumulators.
  const Shape s3{2, 2, rows * cols / 4};
  const Tensor y = x.view(s3);
  expect_close(argmin(y, 2), reference(held, s3, 4u, Kind::kArgMin), 0, 0, "argmin 2x2");
  expect_close(sum(y, {0, 2}), reference(held, s3, 5u, Kind::kSum), 1e-7, 0, "sum 0,2");
  expect_close(min(y.transpose(0, 2), {0, 2}), reference(held, s3, 5u, Kind::kMin), 0, 0, "min");
}

// float64 inputs have no wider type to be summed in: their sums are compensated, along
// reduced rows, down kept columns and across threads, as accurate as PyTorch's cascade sum.
// A plain running sum of this column was 1.6e-11 relative off (1e6 values of 0.1).
TEST_P(Reduce, Float64SumsAreCompensated) {
  const std::int64_t n = 1'000'000;
  const Tensor x = full({n, 2}, 0.1, {kFloat64, device()});
  // 1e6 x 0.1 (the double nearest 0.1) rounds to 100000 exactly.
  for (double v : sum(x, {0}).to_vector<double>()) EXPECT_NEAR(v, 1e5, 1e-14 * 1e5) << "columns";
  for (double v : sum(x.t(), {1}).to_vector<double>()) EXPECT_NEAR(v, 1e5, 1e-14 * 1e5) << "rows";
  EXPECT_NEAR(sum(x).item<double>(), 2e5, 1e-14 * 2e5);
  EXPECT_NEAR(mean(x, {0}).to_vector<double>()[0], 0.1, 1e-15);
  // Infinities and NaNs pass through the compensation.
  const Tensor edge =
      from_vector(std::vector<double>{1.0, INFINITY, 2.0}, {3}, {kFloat64, device()});
  EXPECT_EQ(sum(edge).item<double>(), INFINITY);
  const Tensor both =
      from_vector(std::vector<double>{INFINITY, -INFINITY, 2.0}, {3}, {kFloat64, device()});
  EXPECT_TRUE(std::isnan(sum(both).item<double>()));
}

// Long rows take 32 running extrema and NaN flags (cpu_reducers.h, long_row): a NaN
// anywhere in a row (in the lanes or in the tail), infinities and a row of one value.
TEST_P(Reduce, LongRowsFindTheirExtremaAndNaNs) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::int64_t rows = 6, cols = 100;  // 3 blocks of 32, then a tail of 4
  for (Dtype dtype : {kFloat32, kFloat64}) {
    std::vector<double> v =
        testing::random_values(static_cast<std::size_t>(rows * cols), 11, -50, 50);
    const auto at = [&](std::int64_t r, std::int64_t c) -> double& {
      return v[static_cast<std::size_t>(r * cols + c)];
    };
    at(1, 70) = nan;       // in the lanes
    at(2, 98) = nan;       // in the tail
    at(3, 5) = INFINITY;   // the max
    at(3, 6) = -INFINITY;  // the min
    for (std::int64_t c = 0; c < cols; ++c) at(4, c) = -7;
    at(5, 99) = 1000;  // the max in the last element
    const Tensor x = from_vector(v, {rows, cols}, {dtype, device()});
    std::vector<double> want_max, want_min;
    for (std::int64_t r = 0; r < rows; ++r) {
      double hi = -INFINITY, lo = INFINITY;
      bool has_nan = false;
      for (std::int64_t c = 0; c < cols; ++c) {
        const double e =
            static_cast<double>(dtype == kFloat32 ? static_cast<float>(at(r, c)) : at(r, c));
        has_nan = has_nan || std::isnan(e);
        hi = std::max(hi, e);
        lo = std::min(lo, e);
      }
      want_max.push_back(has_nan ? nan : hi);
      want_min.push_back(has_nan ? nan : lo);
    }
    const auto expect_same = [](const Tensor& got, const std::vector<double>& want,
                                const char* what) {
      const std::vector<double> g = got.to_vector<double>();
      ASSERT_EQ(g.size(), want.size());
      for (std::size_t i = 0; i < g.size(); ++i) {
        if (std::isnan(want[i])) {
          EXPECT_TRUE(std::isnan(g[i])) << what << " row " << i << ": " << g[i];
        } else {
          EXPECT_EQ(g[i], want[i]) << what << " row " << i;
        }
      }
    };
    expect_same(max(x, {1}), want_max, "max");
    expect_same(min(x, {1}), want_min, "min");
  }
}

// A reduction over a middle dim walks the kept columns in panels of 32 (Note [Column
// panels] in cpu_reduce.cpp): two full panels and a narrower one, a NaN in one column, ties
// for argmax/argmin, and a slice whose rows are not contiguous with each other.
TEST_P(Reduce, MiddleDimsMatchTheReferenceAcrossPanels) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Shape s{3, 37, 70};  // 70 kept columns: 32 + 32 + 6
  for (Dtype dtype : {kFloat32, kFloat64}) {
    std::vector<double> v = testing::random_values(static_cast<std::size_t>(s.numel()), 5, -4, 4);
    v[static_cast<std::size_t>(1 * 37 * 70 + 20 * 70 + 40)] = nan;  // batch 1, column 40
    for (std::int64_t r = 0; r < 37; ++r) v[static_cast<std::size_t>(r * 70 + 65)] = 2;  // ties
    const Tensor x = from_vector(v, s, {dtype, device()});
    const auto held = x.to_vector<double>();
    const double tol = dtype == kFloat64 ? 1e-12 : 1e-6;
    expect_close(sum(x, {1}), reference(held, s, 2u, Kind::kSum), tol, tol, "sum");
    expect_close(mean(x, {0, 1}), reference(held, s, 3u, Kind::kMean), tol, tol, "mean");
    expect_close(max(x, {1}), reference(held, s, 2u, Kind::kMax), 0, 0, "max");
    expect_close(min(x, {1}, true), reference(held, s, 2u, Kind::kMin), 0, 0, "min");
    // The reference skips NaNs; argmax and argmin take the first NaN (NumPy's rule).
    std::vector<double> want_max = reference(held, s, 2u, Kind::kArgMax);
    std::vector<double> want_min = reference(held, s, 2u, Kind::kArgMin);
    want_max[1 * 70 + 40] = want_min[1 * 70 + 40] = 20;
    expect_close(argmax(x, 1), want_max, 0, 0, "argmax");
    expect_close(argmin(x, 1), want_min, 0, 0, "argmin");
    const Tensor cut = x.narrow(2, 3, 64);  // rows 70 apart, 64 columns each
    const auto cut_held = cut.contiguous().to_vector<double>();
    const Shape cs = cut.shape();
    expect_close(sum(cut, {1}), reference(cut_held, cs, 2u, Kind::kSum), tol, tol, "narrow sum");
    std::vector<double> want_cut = reference(cut_held, cs, 2u, Kind::kArgMax);
    want_cut[1 * 64 + 37] = 20;  // the NaN, column 40 before the narrow
    expect_close(argmax(cut, 1), want_cut, 0, 0, "narrow argmax");
  }
}

// Rows shorter than 16 are reduced 16 at a time, one accumulator each (Note [Short rows] in
// cpu_reduce.cpp): 37 rows (16 + 16 + 5) of 10, with a NaN, argmax ties, an outer reduced
// dim, and a size that threads split. The sums equal, bit for bit, those of a layout that
// walks the same rows another way (the reduced dim outermost).
TEST_P(Reduce, ShortRowsMatchTheReferenceInBlocks) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Shape s{3, 37, 10};
  for (Dtype dtype : {kFloat32, kFloat64}) {
    std::vector<double> v = testing::random_values(static_cast<std::size_t>(s.numel()), 9, -4, 4);
    v[static_cast<std::size_t>(2 * 370 + 35 * 10 + 4)] = nan;  // batch 2, row 35 (the last block)
    for (std::int64_t c = 0; c < 10; c += 3) v[static_cast<std::size_t>(17 * 10 + c)] = 9;  // ties
    const Tensor x = from_vector(v, s, {dtype, device()});
    const auto held = x.to_vector<double>();
    const double tol = dtype == kFloat64 ? 1e-12 : 1e-6;
    for (std::uint32_t mask : {4u, 5u}) {  // the last dim; the first and the last
      const std::string label = " mask " + std::to_string(mask);
      const std::vector<int> dims = dims_of(mask, 3, false);
      expect_close(sum(x, dims), reference(held, s, mask, Kind::kSum), tol, tol, "sum" + label);
      expect_close(mean(x, dims), reference(held, s, mask, Kind::kMean), tol, tol, "mean" + label);
      expect_close(max(x, dims), reference(held, s, mask, Kind::kMax), 0, 0, "max" + label);
      expect_close(min(x, dims), reference(held, s, mask, Kind::kMin), 0, 0, "min" + label);
    }
    std::vector<double> want_max = reference(held, s, 4u, Kind::kArgMax);
    std::vector<double> want_min = reference(held, s, 4u, Kind::kArgMin);
    want_max[2 * 37 + 35] = want_min[2 * 37 + 35] = 4;  // the first NaN wins
    expect_close(argmax(x, 2), want_max, 0, 0, "argmax");
    expect_close(argmin(x, -1), want_min, 0, 0, "argmin");
    EXPECT_EQ(argmax(x, 2).to_vector<std::int64_t>()[17], 0);  // the first of the ties
    // The same values with the reduced dim outermost in memory (column panels, not short rows).
    const Tensor other = x.transpose(1, 2).contiguous().transpose(1, 2);
    expect_close(sum(x, {2}), sum(other, {2}).to_vector<double>(), 0, 0, "sum, other layout");
    expect_close(mean(x, {0, 2}), mean(other, {0, 2}).to_vector<double>(), 0, 0, "mean, other");
  }
  const Shape big{5000, 7};  // 35,000 elements: threads split the rows
  const Tensor y = from_vector(testing::random_values(35000, 4), big, {device()});
  const auto y_held = y.to_vector<double>();
  expect_close(sum(y, {1}), reference(y_held, big, 2u, Kind::kSum), 1e-6, 1e-6, "threaded sum");
  expect_close(max(y, {1}), reference(y_held, big, 2u, Kind::kMax), 0, 0, "threaded max");
  expect_close(argmax(y, 1), reference(y_held, big, 2u, Kind::kArgMax), 0, 0, "threaded argmax");
}

TEST_P(Reduce, NanPropagatesAndArgmaxTakesTheFirst) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (Dtype dtype : {kFloat32, kFloat64}) {
    const Tensor x =
        from_vector(std::vector<double>{1, nan, 3, nan, 5, 0}, {2, 3}, {dtype, device()});
    EXPECT_TRUE(std::isnan(max(x).item<double>()));
    EXPECT_TRUE(std::isnan(min(x).item<double>()));
    expect_close(max(x, {0}), {nan, nan, 3}, 0, 0, "max dim 0");
    expect_close(min(x, {1}), {nan, nan}, 0, 0, "min dim 1");
    EXPECT_EQ(argmax(x).item<std::int64_t>(), 1);  // the first NaN, as NumPy
    EXPECT_EQ(argmin(x).item<std::int64_t>(), 1);
    EXPECT_EQ(argmax(x, 0).to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 0, 0}));
    EXPECT_TRUE(std::isnan(mean(x).item<double>()));
  }
  const Tensor ties = tensor({{1.0, 3.0, 3.0, 0.0}, {2.0, 2.0, -1.0, -1.0}}, {device()});
  EXPECT_EQ(argmax(ties, 1).to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 0}));
  EXPECT_EQ(argmin(ties, 1).to_vector<std::int64_t>(), (std::vector<std::int64_t>{3, 2}));
  EXPECT_EQ(argmax(ties.t(), 0, true).to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 0}));
  EXPECT_EQ(argmax(ties.t(), 0, true).shape(), (Shape{1, 2}));
  EXPECT_EQ(argmax(ties.t()).item<std::int64_t>(), 2);  // flattened transpose: [1,2,3,2,3,..]
  EXPECT_EQ(argmax(ones({5}, {device()})).item<std::int64_t>(), 0);
  // A NaN maximum's gradient goes to the NaNs that made it, shared (PyTorch's max()); other
  // rows keep theirs. 0 / 0 put NaN in every element before.
  const Tensor a =
      from_vector(std::vector<double>{1, nan, 3, nan, 5, 0}, {2, 3}, {device()}).requires_grad_();
  max(a).backward();
  expect_close(a.grad(), {0, 0.5, 0, 0.5, 0, 0}, 0, 0, "max() grad with NaNs");
  const Tensor b =
      from_vector(std::vector<double>{1, nan, 3, 4, 5, 0}, {2, 3}, {device()}).requires_grad_();
  min(b, {1}).sum().backward();
  expect_close(b.grad(), {0, 1, 0, 0, 0, 1}, 0, 0, "min(dim 1) grad with a NaN row");
}

TEST_P(Reduce, ZeroSizeZeroDimAndSize1) {
  const Tensor e = zeros({2, 0, 3}, {device()});
  EXPECT_EQ(sum(e).item<double>(), 0);
  EXPECT_TRUE(std::isnan(mean(e).item<double>()));
  expect_close(sum(e, {1}), std::vector<double>(6, 0), 0, 0, "sum over empty dim");
  EXPECT_EQ(sum(e, {1}).shape(), (Shape{2, 3}));
  expect_close(mean(e, {1}, true), std::vector<double>(6, NAN), 0, 0, "mean over empty dim");
  EXPECT_EQ(max(e, {0, 2}).shape(), (Shape{0}));  // an empty result is fine
  EXPECT_EQ(argmax(e, 2).shape(), (Shape{2, 0}));
  EXPECT_EQ(sum(e, {0, 2}).numel(), 0);

  const Tensor s = full({}, 2.5, {device()});
  EXPECT_EQ(sum(s).dim(), 0);
  EXPECT_EQ(sum(s).item<double>(), 2.5);
  EXPECT_EQ(sum(s, {0}).dim(), 0);
  EXPECT_EQ(max(s, {-1}, true).item<double>(), 2.5);
  EXPECT_EQ(mean(s).item<double>(), 2.5);
  EXPECT_EQ(argmax(s).item<std::int64_t>(), 0);
  EXPECT_EQ(argmax(s, 0).dim(), 0);
  EXPECT_EQ(norm(s).item<double>(), 2.5);

  const Tensor x = from_vector(random_values(12, 2), {3, 4}, {kFloat64, device()});
  EXPECT_EQ(sum(x, {}).shape(), x.shape());  // no dims: nothing reduced, as numpy axis=()
}

TEST_P(Reduce, NormIsFrobenius) {
  for (Dtype dtype : {kFloat32, kFloat64}) {
    const Tensor x = from_vector(random_values(200, 9), {10, 20}, {dtype, device()});
    double ss = 0;
    for (double v : x.to_vector<double>()) ss += v * v;
    const Tensor n = norm(x.t());
    EXPECT_EQ(n.dim(), 0);
    EXPECT_EQ(n.dtype(), dtype);
    EXPECT_NEAR(n.item<double>(), std::sqrt(ss),
                (dtype == kFloat32 ? 1e-6 : 1e-14) * std::sqrt(ss));
  }
  EXPECT_EQ(norm(zeros({0}, {device()})).item<double>(), 0);
}

// Whole-tensor reductions of the sizes between "one small block" and "split across blocks"
// (a 100x100 norm), where GPUs use one wide block, and a strided view of them.
TEST_P(Reduce, MidSizeWholeReductionsMatchTheReference) {
  for (const std::int64_t n : {1000, 4099, 10000, 40000, 300000}) {
    const auto values = random_values(static_cast<std::size_t>(n), 11 + n);
    const Tensor x = from_vector(values, {n}, {kFloat32, device()});
    const auto held = x.to_vector<double>();
    double total = 0, squares = 0;
    for (double v : held) total += v, squares += v * v;
    const std::string what = "n = " + std::to_string(n);
    EXPECT_NEAR(sum(x).item<double>(), total, 1e-6 * n) << what;
    EXPECT_NEAR(mean(x).item<double>(), total / n, 1e-6) << what;
    EXPECT_NEAR(norm(x).item<double>(), std::sqrt(squares), 1e-6 * std::sqrt(squares)) << what;
    EXPECT_EQ(max(x).item<double>(), reference(held, {n}, 1u, Kind::kMax)[0]) << what;
    EXPECT_EQ(argmin(x).item<double>(), reference(held, {n}, 1u, Kind::kArgMin)[0]) << what;
    if (n % 2 == 0) {  // every other element: a strided run
      const Tensor odd = x.view({n / 2, 2}).select(1, 1);
      double odd_total = 0;
      for (std::int64_t i = 1; i < n; i += 2) odd_total += held[static_cast<std::size_t>(i)];
      EXPECT_NEAR(sum(odd).item<double>(), odd_total, 1e-6 * n) << what << " strided";
    }
  }
}

TEST_P(Reduce, ErrorMessages) {
  const Tensor x = zeros({2, 3, 4}, {device()});
  expect_throw_with<ShapeError>([&] { sum(x, {3}); },
                                {"[sum]", "dim 3", "shape [2, 3, 4]", "expected -3 to 2"});
  expect_throw_with<ShapeError>([&] { mean(x, {-4}); }, {"[mean]", "dim -4", "[2, 3, 4]"});
  expect_throw_with<ShapeError>(
      [&] {
        max(x, {1, -2});
      },
      {"[max]", "dim -2 appears more than once", "[1, -2]", "[2, 3, 4]"});
  // A 0-dim tensor has one dim to name, 0 or -1, and names it once too.
  const Tensor scalar = tensor(2.0, {device()});
  EXPECT_DOUBLE_EQ(sum(scalar, {-1}).item<double>(), 2.0);
  expect_throw_with<ShapeError>(
      [&] {
        sum(scalar, {0, -1});
      },
      {"[sum]", "dim -1 appears more than once", "[0, -1]"});
  expect_throw_with<ShapeError>([&] { argmax(x, 5); }, {"[argmax]", "dim 5", "[2, 3, 4]"});
  expect_throw_with<DtypeError>(
      [&] {
        mean(tensor({1, 2}, {device()}));
      },
      {"[mean]", "needs a floating tensor", "got int64", ".to(kFloat32)"});
  expect_throw_with<DtypeError>([&] { norm(tensor({1, 2}, {device()})); }, {"[norm]", "got int64"});
  const Tensor e = zeros({2, 0}, {device()});
  expect_throw_with<ShapeError>([&] { max(e); },
                                {"[max]", "dim 1 of size 0", "shape [2, 0]", "has no max"});
  expect_throw_with<ShapeError>([&] { min(e, {1}); }, {"[min]", "dim 1 of size 0"});
  expect_throw_with<ShapeError>([&] { argmin(e, 1); }, {"[argmin]", "dim 1 of size 0"});
  expect_throw_with<ShapeError>([&] { argmax(e); },
                                {"[argmax]", "cannot reduce an empty tensor", "shape [2, 0]"});
}

TESSERA_INSTANTIATE_DEVICE_SUITE(Reduce);

// A kernel's own memory (here a float32 sum's float64 sums, twice the output) comes from
// operator new, not the device's allocator: running out of it threw a bare std::bad_alloc
// (or ended the process, allocated inside an OpenMP region). Run in a child whose address
// space is capped 256 MiB above what it uses: the 128 MiB output fits, its 256 MiB of sums
// do not.
TEST(ReduceMemory, AKernelOutOfScratchMemoryThrowsOutOfMemoryErrorNamingTheOp) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "a sanitizer reserves far more address space than any cap leaves";
#else
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const auto run = [] {
    const Tensor x = ones({1, 1}).expand({std::int64_t{1} << 25, 2});
    // A first sum, read back, so that the device's thread (a logical device's worker) exists
    // and has made its malloc arena (64 MiB of address space) before the cap is measured: one
    // made after it took the output's room under load (CI).
    (void)sum(ones({4, 2}), {1}).to_vector<float>();
    std::ifstream statm("/proc/self/statm");
    std::uint64_t pages = 0;
    statm >> pages;
    const rlim_t cap = pages * static_cast<rlim_t>(sysconf(_SC_PAGESIZE)) + (rlim_t{256} << 20);
    const rlimit limit{cap, cap};
    setrlimit(RLIMIT_AS, &limit);
    try {
      const Tensor s = sum(x, {1});
      std::fprintf(stderr, "no error: %g\n", s[0].item<double>());
    } catch (const OutOfMemoryError& e) {
      std::fprintf(stderr, "%s\n", e.what());
      std::_Exit(0);
    }
    std::_Exit(1);
  };
  EXPECT_EXIT(run(), ::testing::ExitedWithCode(0),
              "\\[sum\\] out of memory on cpu.*could not allocate its scratch memory");
#endif
}

TEST(ReduceInfinity, RowsOfInfinitiesReduceToInfinity) {
  const Tensor neg = full({3}, -INFINITY);
  EXPECT_EQ(max(neg).item<float>(), -INFINITY);
  EXPECT_EQ(min(full({3}, INFINITY)).item<float>(), INFINITY);
  EXPECT_EQ(max(neg.view({1, 3}), {1}).item<float>(), -INFINITY);
}

}  // namespace
}  // namespace tessera

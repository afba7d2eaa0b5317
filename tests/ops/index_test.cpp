// index_select, index_add and index_add_ on every device against a float64 host reference:
// every dim, transposed inputs, repeated and empty indices, int32 and int64 indices, every
// dtype; gradients; out-of-range indices found on the device; the device rule, the ledger
// and each error's wording.
#include <fmt/format.h>

#include "support/device_test.h"

namespace tessera {
namespace {

using testing::DeviceTest;
using testing::expect_close;
using testing::expect_throw_with;
using testing::random_values;

class Index : public DeviceTest {};

// [outer, n, inner] sizes of `shape` around `dim`.
struct Geometry {
  std::int64_t outer = 1, n = 0, inner = 1;
};
Geometry geometry(const Shape& shape, int dim) {
  Geometry g;
  g.n = shape[dim];
  for (int d = 0; d < dim; ++d) g.outer *= shape[d];
  for (int d = dim + 1; d < static_cast<int>(shape.size()); ++d) g.inner *= shape[d];
  return g;
}

// The reference index_select of row-major values `x` of `shape` along `dim`.
std::vector<double> reference_select(const std::vector<double>& x, const Shape& shape, int dim,
                                     const std::vector<std::int64_t>& index) {
  const Geometry g = geometry(shape, dim);
  const auto k = static_cast<std::int64_t>(index.size());
  std::vector<double> out;
  for (std::int64_t o = 0; o < g.outer; ++o) {
    for (std::int64_t i = 0; i < k; ++i) {
      for (std::int64_t j = 0; j < g.inner; ++j) {
        out.push_back(x[(o * g.n + index[i]) * g.inner + j]);
      }
    }
  }
  return out;
}

// The reference index_add: x with source's slice i added to slice index[i], i in order.
std::vector<double> reference_add(std::vector<double> x, const Shape& shape, int dim,
                                  const std::vector<std::int64_t>& index,
                                  const std::vector<double>& source) {
  const Geometry g = geometry(shape, dim);
  const auto k = static_cast<std::int64_t>(index.size());
  for (std::int64_t o = 0; o < g.outer; ++o) {
    for (std::int64_t i = 0; i < k; ++i) {
      for (std::int64_t j = 0; j < g.inner; ++j) {
        x[(o * g.n + index[i]) * g.inner + j] += source[(o * k + i) * g.inner + j];
      }
    }
  }
  return x;
}

// Random values of `shape`, transposed in memory (dims 0 and the last) when `strided`.
Tensor random_tensor(Shape shape, Dtype dtype, Device device, std::uint64_t seed, bool strided) {
  const auto values = random_values(static_cast<std::size_t>(shape.numel()), seed, -4, 4);
  if (!strided) return from_vector(values, shape, {dtype, device});
  Shape swapped = shape;
  std::swap(swapped[0], swapped[swapped.size() - 1]);
  return from_vector(values, swapped, {dtype, device}).transpose(0, shape.size() - 1);
}

Tensor index_tensor(const std::vector<std::int64_t>& values, Dtype dtype, Device device) {
  return from_vector(values, {static_cast<std::int64_t>(values.size())}, {dtype, device});
}

// Indices into a dim of size n: every value, some repeated, in a scrambled order.
std::vector<std::int64_t> scrambled_indices(std::int64_t n, std::int64_t k) {
  std::vector<std::int64_t> index;
  for (std::int64_t i = 0; i < k; ++i) index.push_back((i * 7 + 3) % n);
  return index;
}

TEST_P(Index, SelectMatchesTheReferenceAlongEveryDim) {
  const Shape shape{4, 5, 6};
  for (Dtype dtype : {kFloat32, kFloat64}) {
    for (Dtype index_dtype : {kInt64, kInt32}) {
      for (bool strided : {false, true}) {
        for (int dim : {0, 1, 2, -1}) {
          const int d = dim < 0 ? dim + 3 : dim;
          const Tensor x = random_tensor(shape, dtype, device(), 1 + d, strided);
          ASSERT_EQ(x.is_contiguous(), !strided);
          const auto index = scrambled_indices(shape[d], 9);  // repeats: 9 > every size
          const Tensor out = index_select(x, dim, index_tensor(index, index_dtype, device()));
          Shape expected = shape;
          expected[d] = 9;
          const std::string what =
              fmt::format("{} {} index, {}, dim {}", dtype_name(dtype), dtype_name(index_dtype),
                          strided ? "transposed" : "contiguous", dim);
          EXPECT_EQ(out.shape(), expected) << what;
          EXPECT_EQ(out.dtype(), dtype) << what;
          EXPECT_EQ(out.device(), device()) << what;
          expect_close(out, reference_select(x.to_vector<double>(), shape, d, index), 0, 0, what);
        }
      }
    }
  }
}

TEST_P(Index, SelectOfLargeTensorsSplitsRowsAcrossThreads) {
  const Shape shape{300, 200};  // 500 rows of 200: past the CPU's parallel grain
  const Tensor x = random_tensor(shape, kFloat32, device(), 3, false);
  const auto index = scrambled_indices(300, 500);
  const Tensor out = x.index_select(0, index_tensor(index, kInt64, device()));
  expect_close(out, reference_select(x.to_vector<double>(), shape, 0, index), 0, 0);
}

TEST_P(Index, SelectKeepsEveryDtype) {
  const std::vector<double> values{0, 1, 2, 3, 4, 5};
  const auto index = index_tensor({2, 0, 2}, kInt64, device());
  for (Dtype dtype : {kBool, kUInt8, kInt32, kInt64, kBFloat16, kFloat16}) {
    const Tensor x = from_vector(values, {3, 2}, {dtype, device()});
    const Tensor out = index_select(x, 0, index);
    EXPECT_EQ(out.dtype(), dtype) << dtype_name(dtype);
    expect_close(out, reference_select(x.to_vector<double>(), {3, 2}, 0, {2, 0, 2}), 0, 0,
                 std::string(dtype_name(dtype)));
  }
}

TEST_P(Index, EmptyIndexGivesAnEmptyDim) {
  const Tensor x = random_tensor({3, 4}, kFloat32, device(), 4, true);
  const Tensor none = index_tensor({}, kInt64, device());
  EXPECT_EQ(index_select(x, 1, none).shape(), (Shape{3, 0}));
  EXPECT_EQ(index_select(x, 0, none).shape(), (Shape{0, 4}));
  const Tensor added = index_add(x, 0, none, zeros({0, 4}, device()));
  expect_close(added, x.to_vector<double>(), 0, 0);
  // A 0-dim index selects one slice, as PyTorch's.
  const Tensor one = index_select(x, 1, full({}, 2, {kInt64, device()}));
  EXPECT_EQ(one.shape(), (Shape{3, 1}));
  expect_close(one, reference_select(x.to_vector<double>(), {3, 4}, 1, {2}), 0, 0);
}

TEST_P(Index, AddMatchesTheReferenceAlongEveryDim) {
  const Shape shape{4, 5, 6};
  for (Dtype index_dtype : {kInt64, kInt32}) {
    for (bool strided : {false, true}) {
      for (int dim : {0, 1, 2, -1}) {
        const int d = dim < 0 ? dim + 3 : dim;
        const Tensor x = random_tensor(shape, kFloat64, device(), 5 + d, strided);
        const auto index = scrambled_indices(shape[d], 11);
        Shape source_shape = shape;
        source_shape[d] = 11;
        const Tensor source = random_tensor(source_shape, kFloat64, device(), 20 + d, strided);
        const Tensor idx = index_tensor(index, index_dtype, device());
        const std::string what = fmt::format("{} index, {}, dim {}", dtype_name(index_dtype),
                                             strided ? "transposed" : "contiguous", dim);
        const auto expected =
            reference_add(x.to_vector<double>(), shape, d, index, source.to_vector<double>());
        const Tensor out = index_add(x, dim, idx, source);
        EXPECT_FALSE(out.shares_storage(x)) << what;
        expect_close(out, expected, 1e-14, 1e-14, what);
        // In place, into the (possibly transposed) x itself.
        Tensor target = x.clone().transpose(0, 2).contiguous().transpose(0, 2);
        ASSERT_FALSE(target.is_contiguous());
        Tensor& same = target.index_add_(dim, idx, source);
        EXPECT_TRUE(same.is_same(target)) << what;
        expect_close(target, expected, 1e-14, 1e-14, what + ", in place");
      }
    }
  }
}

TEST_P(Index, AddOfLargeTensorsSplitsColumnsAcrossThreads) {
  const Shape shape{64, 1500};  // 3 blocks of 512 columns, 100 rows added
  const Tensor x = random_tensor(shape, kFloat64, device(), 6, false);
  const auto index = scrambled_indices(64, 100);
  const Tensor source = random_tensor({100, 1500}, kFloat64, device(), 7, false);
  const Tensor out = x.index_add(0, index_tensor(index, kInt64, device()), source);
  expect_close(out,
               reference_add(x.to_vector<double>(), shape, 0, index, source.to_vector<double>()),
               1e-14, 1e-14);
}

// Many indices into few rows (an embedding's backward): float32 sums in index order, bit
// for bit, whichever path the backend takes (CUDA sorts 64 or more indices by value: Note
// [index_add in sorted order]), and an out-of-range index among them is reported.
TEST_P(Index, AddOfManyIndicesAddsInIndexOrder) {
  const Shape shape{3, 10, 5};
  const std::int64_t k = 200;
  std::vector<std::int64_t> index(static_cast<std::size_t>(k));
  for (std::int64_t i = 0; i < k; ++i) index[static_cast<std::size_t>(i)] = (i * 7 + i / 13) % 10;
  const Tensor x = random_tensor(shape, kFloat32, device(), 3, false);
  const Tensor source = random_tensor({3, k, 5}, kFloat32, device(), 4, false);
  std::vector<float> want = x.to_vector<float>();
  const std::vector<float> src = source.to_vector<float>();
  for (std::int64_t o = 0; o < 3; ++o) {
    for (std::int64_t i = 0; i < k; ++i) {
      for (std::int64_t j = 0; j < 5; ++j) {
        want[static_cast<std::size_t>((o * 10 + index[static_cast<std::size_t>(i)]) * 5 + j)] +=
            src[static_cast<std::size_t>((o * k + i) * 5 + j)];
      }
    }
  }
  const Tensor out = index_add(x, 1, index_tensor(index, kInt64, device()), source);
  EXPECT_EQ(out.to_vector<float>(), want);
  index[150] = 10;
  expect_throw_with<IndexError>(
      [&] {
        const Tensor y = index_add(x, 1, index_tensor(index, kInt64, device()), source);
        (void)y.to_vector<double>();
      },
      {"[index_add] index[150] is 10, out of range for dim 1 of size 10"});
  EXPECT_NO_THROW(synchronize(device()));
}

TEST_P(Index, AddTakesIntegerBoolAndHalfDtypes) {
  const auto index = index_tensor({1, 1, 0}, kInt32, device());
  const Tensor xi = from_vector(std::vector<double>{1, 2, 3, 4}, {2, 2}, {kInt32, device()});
  const Tensor si =
      from_vector(std::vector<double>{10, 20, 30, 40, 50, 60}, {3, 2}, {kInt32, device()});
  EXPECT_EQ(index_add(xi, 0, index, si).to_vector<double>(), (std::vector<double>{51, 62, 43, 64}));
  const Tensor xb = from_vector(std::vector<double>{0, 0, 1, 0}, {2, 2}, {kBool, device()});
  const Tensor sb = from_vector(std::vector<double>{1, 0, 0, 0, 0, 1}, {3, 2}, {kBool, device()});
  EXPECT_EQ(index_add(xb, 0, index, sb).to_vector<double>(), (std::vector<double>{0, 1, 1, 0}));
  for (Dtype half : {kBFloat16, kFloat16}) {
    const Tensor xh = from_vector(std::vector<double>{1, 2, 3, 4}, {2, 2}, {half, device()});
    const Tensor sh =
        from_vector(std::vector<double>{0.5, 1, 1.5, 2, 2.5, 3}, {3, 2}, {half, device()});
    const Tensor out = index_add(xh, 0, index, sh);
    EXPECT_EQ(out.dtype(), half);
    EXPECT_EQ(out.to_vector<double>(), (std::vector<double>{3.5, 5, 5, 7})) << dtype_name(half);
  }
}

TEST_P(Index, GradientsAddUpOverRepeatedIndices) {
  const Tensor x = from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {3, 2}, {kFloat64, device()})
                       .requires_grad_();
  const Tensor w = from_vector(std::vector<double>{1, 10, 100, 1000, 2, 20, 200, 2000}, {4, 2},
                               {kFloat64, device()});
  const Tensor index = index_tensor({2, 0, 2, 2}, kInt64, device());
  sum(index_select(x, 0, index) * w).backward();
  // Row 2 is picked at positions 0, 2 and 3, row 0 at 1, row 1 never.
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{100, 1000, 0, 0, 203, 2030}));

  const Tensor y = zeros({3, 2}, {kFloat64, device()}).requires_grad_();
  const Tensor s = ones({4, 2}, {kFloat64, device()}).requires_grad_();
  sum(index_add(y, 0, index, s) * w.narrow(0, 0, 3)).backward();
  EXPECT_EQ(y.grad().to_vector<double>(), (std::vector<double>{1, 10, 100, 1000, 2, 20}));
  // source row i gets the gradient of row index[i].
  EXPECT_EQ(s.grad().to_vector<double>(), (std::vector<double>{2, 20, 1, 10, 2, 20, 2, 20}));
}

// Index values stay on the device: a bad one is found by the kernel and reported by the op
// (plain CPU) or at the next wait for the device (logical devices, GPUs).
TEST_P(Index, OutOfRangeIndicesAreReportedWithValuePositionAndSize) {
  const Tensor x = random_tensor({3, 5}, kFloat32, device(), 8, false);
  expect_throw_with<IndexError>(
      [&] {
        const Tensor y = index_select(x, 1, index_tensor({0, 4, 7, 1}, kInt64, device()));
        (void)y.to_vector<double>();
      },
      {"[index_select] index[2] is 7, out of range for dim 1 of size 5",
       "indices must be in [0, 5)", "negative ones are refused",
       "reported by the op on the plain CPU, elsewhere at the first wait for the device"});
  expect_throw_with<IndexError>(
      [&] {
        const Tensor y = index_select(x, 0, index_tensor({-1}, kInt32, device()));
        synchronize(device());
      },
      {"[index_select] index[0] is -1, out of range for dim 0 of size 3"});
  expect_throw_with<IndexError>(
      [&] {
        const Tensor y =
            index_add(x, 0, index_tensor({1, 3}, kInt64, device()), ones({2, 5}, device()));
        (void)y.sum().item<double>();
      },
      {"[index_add] index[1] is 3, out of range for dim 0 of size 3"});
  // Reported once: the device works on afterwards.
  const Tensor ok = index_select(x, 0, index_tensor({2}, kInt64, device()));
  expect_close(ok, reference_select(x.to_vector<double>(), {3, 5}, 0, {2}), 0, 0);
}

// An op with nothing to write (an empty slice of x) still checks its indices: the CPU's
// kernel checks them first, and the CUDA launchers run a check-only kernel.
TEST_P(Index, AnEmptySliceStillChecksItsIndices) {
  const Tensor bad = index_tensor({0, 9}, kInt64, device());
  expect_throw_with<IndexError>(
      [&] {
        (void)index_select(zeros({0, 3}, device()), 1, bad);
        synchronize(device());
      },
      {"[index_select] index[1] is 9, out of range for dim 1 of size 3"});
  expect_throw_with<IndexError>(
      [&] {
        (void)index_select(zeros({5, 0}, device()), 0, bad);
        synchronize(device());
      },
      {"[index_select] index[1] is 9, out of range for dim 0 of size 5"});
  expect_throw_with<IndexError>(
      [&] {
        (void)index_add(zeros({2, 0}, device()), 0, bad, zeros({2, 0}, device()));
        synchronize(device());
      },
      {"[index_add] index[1] is 9, out of range for dim 0 of size 2"});
  EXPECT_NO_THROW(synchronize(device()));
}

// The op itself never waits for the device: the error comes from the op where the kernel
// runs inside it (the plain CPU), else from the next wait.
TEST_P(Index, OutOfRangeIsReportedByTheOpOrAtTheNextWaitWithoutAHostWait) {
  const Tensor x = random_tensor({3, 5}, kFloat32, device(), 8, false);
  const Tensor bad = index_tensor({5}, kInt64, device());
  synchronize(device());
  bool thrown_by_op = false;
  {
    SyncGuard no_waits(SyncMode::kError);
    try {
      (void)index_select(x, 1, bad);
    } catch (const IndexError&) {
      thrown_by_op = true;
    }
  }
  if (!thrown_by_op) EXPECT_THROW(synchronize(device()), IndexError);
  EXPECT_NO_THROW(synchronize(device())) << "reported once, then cleared";
  if (!device().is_cpu()) EXPECT_FALSE(thrown_by_op) << "a GPU kernel never throws in the op";
}

// A result copied to another device before the error is reported carries the error there
// (Note [Errors follow the work] in work_queue.cpp): reading the copy throws, where it read
// garbage without a word.
TEST_P(Index, AnErrorFollowsTheResultToAnotherDevice) {
  TESSERA_REQUIRE_TWO_DEVICES();
  const Device other = available_devices()[available_devices()[0] == device() ? 1 : 0];
  const Tensor x = random_tensor({4, 3}, kFloat32, device(), 8, false);
  bool thrown_by_op = false;
  Tensor moved;
  try {
    moved = index_select(x, 0, index_tensor({0, 7}, kInt64, device())).to(other);
  } catch (const IndexError&) {
    thrown_by_op = true;  // the plain CPU's kernel runs inside the op
  }
  if (thrown_by_op) GTEST_SKIP() << "the op itself threw on this device";
  expect_throw_with<IndexError>([&] { (void)moved.to_vector<double>(); },
                                {"[index_select] index[1] is 7"});
  // Both devices held it; each reports it once, then works on.
  try {
    synchronize(device());
  } catch (const IndexError&) {
  }
  EXPECT_NO_THROW(synchronize(device()));
  EXPECT_NO_THROW(synchronize(other));
  const Tensor ok = index_select(x, 0, index_tensor({3}, kInt64, device())).to(other);
  expect_close(ok, reference_select(x.to_vector<double>(), {4, 3}, 0, {3}), 0, 0);
}

TEST_P(Index, BadArgumentsAreRefusedByName) {
  const Tensor x = zeros({2, 3}, device());
  const Tensor idx = index_tensor({0, 1}, kInt64, device());
  expect_throw_with<DtypeError>(
      [&] { (void)index_select(x, 0, zeros({2}, device())); },
      {"[index_select] index must be int64 or int32, got float32", ".to(kInt64)"});
  expect_throw_with<DtypeError>(
      [&] {
        (void)index_select(x, 0, zeros({2}, {kUInt8, device()}));
      },
      {"got uint8"});
  expect_throw_with<ShapeError>(
      [&] {
        (void)index_select(x, 0, zeros({1, 2}, {kInt64, device()}));
      },
      {"[index_select] index must be 1-D (or 0-dim), got shape [1, 2]"});
  expect_throw_with<ShapeError>([&] { (void)index_select(x, 2, idx); },
                                {"[index_select] dim 2 is out of range"});
  expect_throw_with<ShapeError>([&] { (void)index_select(full({}, 1.0, device()), 0, idx); },
                                {"[index_select] cannot index a 0-dim tensor", "unsqueeze(0)"});
  expect_throw_with<Error>([&] { (void)index_select(Tensor(), 0, idx); }, {"[index_select]"});
  expect_throw_with<DtypeError>(
      [&] {
        (void)index_add(x, 0, idx, zeros({2, 3}, {kFloat64, device()}));
      },
      {"[index_add] source is float64 but self is float32", ".to(float32)"});
  expect_throw_with<ShapeError>(
      [&] {
        (void)index_add(x, 1, idx, zeros({2, 3}, device()));
      },
      {"[index_add] source has shape [2, 3] but must be [2, 2]",
       "self's shape [2, 3] with the index's 2 elements along dim 1"});
  Tensor y = zeros({2, 3}, device());
  expect_throw_with<Error>(
      [&] {
        y.expand({2, 2, 3}).index_add_(0, idx, zeros({2, 2, 3}, device()));
      },
      {"[index_add_]"});
  const Tensor leaf = zeros({2, 3}, {kFloat64, device()}).requires_grad_();
  Tensor target = zeros({2, 3}, {kFloat64, device()});
  expect_throw_with<Error>([&] { target.index_add_(0, idx, leaf.narrow(0, 0, 2)); },
                           {"[index_add_]"});
}

TEST_P(Index, TensorsOnTwoDevicesAreRefusedNotCopied) {
  TESSERA_REQUIRE_TWO_DEVICES();
  Device other = device();
  for (Device d : available_devices()) {
    if (d != device()) other = d;
  }
  const Tensor x = zeros({2, 3}, device());
  const Tensor idx = index_tensor({0}, kInt64, other);
  const Tensor here = index_tensor({0}, kInt64, device());
  const Tensor source = zeros({1, 3}, other);
  reset_transfer_stats();
  expect_throw_with<DeviceMismatchError>([&] { (void)index_select(x, 0, idx); },
                                         {"[index_select] operands are on different devices",
                                          "self on " + device().str(), "index on " + other.str()});
  expect_throw_with<DeviceMismatchError>(
      [&] { (void)index_add(x, 0, here, source); },
      {"[index_add] operands are on different devices", "source on " + other.str()});
  EXPECT_EQ(transfer_stats(), TransferStats{});
}

TEST_P(Index, NothingIsCopiedBetweenDevicesOrWaitedFor) {
  const Tensor x = random_tensor({64, 8}, kFloat32, device(), 9, false).requires_grad_();
  const Tensor idx = index_tensor(scrambled_indices(64, 40), kInt32, device());
  const Tensor s = random_tensor({40, 8}, kFloat32, device(), 10, true).requires_grad_();
  synchronize(device());
  reset_transfer_stats();
  {
    SyncGuard no_waits(SyncMode::kError);
    const Tensor y = index_select(x, 0, idx);
    const Tensor z = index_add(x, 0, idx, s * 2.0);
    sum(y * y).backward();
    sum(z).backward();
    Tensor t = zeros({64, 8}, device());
    t.index_add_(0, idx, s.detach());
  }
  EXPECT_EQ(transfer_stats(), TransferStats{}) << transfer_stats();
  EXPECT_EQ(x.grad().device(), device());
}

TESSERA_INSTANTIATE_DEVICE_SUITE(Index);

}  // namespace
}  // namespace tessera

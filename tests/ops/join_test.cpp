// cat, stack, split and chunk on every device against a host reference built from
// to_vector: random inputs, contiguous and not, every dim (negative too), zero-size pieces,
// gradients, the device rule, the ledger, graph capture and each error's wording.
#include <fmt/format.h>

#include <numeric>

#include "support/device_test.h"

namespace tessera {
namespace {

using testing::DeviceTest;
using testing::expect_close;
using testing::expect_throw_with;
using testing::random_values;

class Join : public DeviceTest {};

// The row-major values of `tensors` joined along `dim` (non-negative), from their values.
std::vector<double> reference_cat(const std::vector<Tensor>& tensors, int dim) {
  std::vector<std::vector<double>> values;
  for (const Tensor& t : tensors) values.push_back(t.to_vector<double>());
  std::int64_t outer = 1;
  for (int d = 0; d < dim; ++d) outer *= tensors[0].size(d);
  std::vector<double> out;
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      const std::int64_t block = tensors[i].numel() / outer;  // this input's run per outer index
      const auto from = values[i].begin() + o * block;
      out.insert(out.end(), from, from + block);
    }
  }
  return out;
}

// A tensor of `shape` on `device` holding random values; transposed (dims 0 and the last
// swapped in memory) when `strided`, so its layout is not contiguous.
Tensor random_tensor(Shape shape, Dtype dtype, Device device, std::uint64_t seed, bool strided) {
  const auto values = random_values(static_cast<std::size_t>(shape.numel()), seed);
  if (!strided) return from_vector(values, shape, {dtype, device});
  Shape swapped = shape;
  std::swap(swapped[0], swapped[swapped.size() - 1]);
  return from_vector(values, swapped, {dtype, device}).transpose(0, shape.size() - 1);
}

TEST_P(Join, CatMatchesTheReferenceAlongEveryDim) {
  for (Dtype dtype : {kFloat32, kFloat64}) {
    for (int dim : {0, 1, 2, -1, -2, -3}) {
      const int d = dim < 0 ? dim + 3 : dim;
      std::vector<Tensor> inputs;
      const std::int64_t sizes[] = {3, 0, 2, 4};  // a zero-size piece in the middle
      for (std::size_t i = 0; i < std::size(sizes); ++i) {
        Shape shape{2, 3, 4};
        shape[d] = sizes[i];
        inputs.push_back(random_tensor(shape, dtype, device(), 10 + i, /*strided=*/i == 2));
      }
      ASSERT_FALSE(inputs[2].is_contiguous());
      const Tensor out = cat(inputs, dim);
      Shape expected{2, 3, 4};
      expected[d] = 9;
      const std::string what = fmt::format("{} dim {}", dtype_name(dtype), dim);
      EXPECT_EQ(out.shape(), expected) << what;
      EXPECT_EQ(out.dtype(), dtype) << what;
      EXPECT_EQ(out.device(), device()) << what;
      expect_close(out, reference_cat(inputs, d), 0, 0, what);
    }
  }
}

TEST_P(Join, CatOfOneTensorOrOfEmptyOnesKeepsTheShape) {
  const Tensor x = random_tensor({2, 3}, kFloat32, device(), 1, true);
  const Tensor one = cat({x}, 1);
  EXPECT_FALSE(one.shares_storage(x)) << "cat always makes a new tensor";
  expect_close(one, x.to_vector<double>(), 0, 0);
  const Tensor empty = cat({zeros({0, 3}, device()), zeros({0, 3}, device())});
  EXPECT_EQ(empty.shape(), (Shape{0, 3}));
  EXPECT_EQ(cat({zeros({2, 0}, device()), zeros({3, 0}, device())}).shape(), (Shape{5, 0}));
}

TEST_P(Join, CatPromotesDtypesAsTheBinaryOps) {
  const Tensor i = tensor({1, 2}, device()).to(kInt32);
  const Tensor f = tensor({0.5, 1.5}, device());
  const Tensor d = tensor({0.25}, device()).to(kFloat64);
  const Tensor a = cat({i, f});
  EXPECT_EQ(a.dtype(), promote_types(kInt32, kFloat32));
  EXPECT_EQ(a.to_vector<double>(), (std::vector<double>{1, 2, 0.5, 1.5}));
  const Tensor b = cat({f, d, i});
  EXPECT_EQ(b.dtype(), kFloat64);
  EXPECT_EQ(b.to_vector<double>(), (std::vector<double>{0.5, 1.5, 0.25, 1, 2}));
  EXPECT_EQ(cat({i, i}).dtype(), kInt32);
}

TEST_P(Join, StackIsCatOfUnsqueezedTensors) {
  for (int dim : {0, 1, 2, -1, -2, -3}) {
    std::vector<Tensor> inputs;
    for (int i = 0; i < 3; ++i) {
      inputs.push_back(random_tensor({2, 3}, kFloat32, device(), 20 + i, /*strided=*/i == 1));
    }
    const Tensor out = stack(inputs, dim);
    const int d = dim < 0 ? dim + 3 : dim;
    Shape expected{2, 3};
    expected.insert(d, 3);
    EXPECT_EQ(out.shape(), expected) << "dim " << dim;
    std::vector<Tensor> unsqueezed;
    for (const Tensor& t : inputs) unsqueezed.push_back(t.unsqueeze(d));
    expect_close(out, reference_cat(unsqueezed, d), 0, 0, fmt::format("dim {}", dim));
    for (int i = 0; i < 3; ++i) {
      expect_close(out.select(d, i), inputs[i].to_vector<double>(), 0, 0, "piece");
    }
  }
  const Tensor scalars = stack({full({}, 1.0, device()), full({}, 2.0, device())});
  EXPECT_EQ(scalars.shape(), (Shape{2}));
  EXPECT_EQ(scalars.to_vector<double>(), (std::vector<double>{1, 2}));
}

TEST_P(Join, CatAndStackGradientsAreSlicesOfTheOutputsGradient) {
  const Tensor a = random_tensor({2, 3}, kFloat32, device(), 1, false).requires_grad_();
  const Tensor b = random_tensor({2, 1}, kFloat32, device(), 2, false);  // no grad
  const Tensor leaf = random_tensor({4, 2}, kFloat32, device(), 3, false).requires_grad_();
  const Tensor c = exp(leaf).t();  // a recorded op's result, not contiguous: [2, 4]
  ASSERT_FALSE(c.is_contiguous());
  const Tensor out = cat({a, b, c}, -1);
  ASSERT_TRUE(out.requires_grad());
  const Tensor w = random_tensor({2, 8}, kFloat32, device(), 4, false);
  sum(out * w).backward();
  EXPECT_EQ(a.grad().device(), device());
  expect_close(a.grad(), w.narrow(1, 0, 3).to_vector<double>(), 0, 0, "a");
  EXPECT_FALSE(b.grad().defined());
  expect_close(leaf.grad(), (w.narrow(1, 4, 4).t() * exp(leaf.detach())).to_vector<double>(), 1e-6,
               0, "through t and exp");

  const Tensor x = random_tensor({3}, kFloat64, device(), 5, false).requires_grad_();
  const Tensor y = random_tensor({3}, kFloat64, device(), 6, false).requires_grad_();
  const Tensor s = stack({x, y}, 1);  // [3, 2]
  const Tensor v = random_tensor({3, 2}, kFloat64, device(), 7, false);
  sum(s * v).backward();
  expect_close(x.grad(), v.select(1, 0).to_vector<double>(), 0, 0, "stack x");
  expect_close(y.grad(), v.select(1, 1).to_vector<double>(), 0, 0, "stack y");
}

TEST_P(Join, SplitAndChunkGiveViewsOfPyTorchsSizes) {
  const Tensor x = random_tensor({7, 4}, kFloat32, device(), 8, true);
  auto sizes_of = [](const std::vector<Tensor>& pieces, int dim) {
    std::vector<std::int64_t> sizes;
    for (const Tensor& p : pieces) sizes.push_back(p.size(dim));
    return sizes;
  };
  const std::vector<Tensor> by3 = split(x, 3);
  EXPECT_EQ(sizes_of(by3, 0), (std::vector<std::int64_t>{3, 3, 1}));
  for (const Tensor& p : by3) EXPECT_TRUE(p.shares_storage(x)) << "split gives views";
  expect_close(cat(by3), x.to_vector<double>(), 0, 0, "split then cat");
  EXPECT_EQ(sizes_of(x.split(10), 0), (std::vector<std::int64_t>{7}));
  EXPECT_EQ(sizes_of(split(x, {1, 0, 6}), 0), (std::vector<std::int64_t>{1, 0, 6}));
  const std::vector<Tensor> columns = x.split({3, 1}, -1);
  EXPECT_EQ(sizes_of(columns, 1), (std::vector<std::int64_t>{3, 1}));
  expect_close(columns[1], x.narrow(1, 3, 1).to_vector<double>(), 0, 0, "last column");
  expect_close(cat(columns, -1), x.to_vector<double>(), 0, 0, "columns then cat");

  EXPECT_EQ(sizes_of(chunk(x, 4), 0), (std::vector<std::int64_t>{2, 2, 2, 1}));
  EXPECT_EQ(sizes_of(chunk(x, 3), 0), (std::vector<std::int64_t>{3, 3, 1}));
  EXPECT_EQ(sizes_of(x.chunk(7), 0), (std::vector<std::int64_t>{1, 1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(sizes_of(x.chunk(10), 0), (std::vector<std::int64_t>(7, 1)));
  EXPECT_EQ(sizes_of(chunk(x, 3, -1), 1), (std::vector<std::int64_t>{2, 2}));  // fewer chunks
  const Tensor six = zeros({6}, device());
  EXPECT_EQ(sizes_of(chunk(six, 4), 0), (std::vector<std::int64_t>{2, 2, 2}));
  expect_close(chunk(x, 4)[3], x.narrow(0, 6, 1).to_vector<double>(), 0, 0, "last chunk");

  // An empty dim, as PyTorch: split gives one empty piece, chunk `chunks` of them.
  const Tensor empty = zeros({0, 2}, device());
  EXPECT_EQ(sizes_of(split(empty, 2), 0), (std::vector<std::int64_t>{0}));
  EXPECT_EQ(sizes_of(chunk(empty, 3), 0), (std::vector<std::int64_t>{0, 0, 0}));
}

TEST_P(Join, GradientsFlowThroughSplitPieces) {
  const Tensor x = random_tensor({5, 2}, kFloat64, device(), 9, false).requires_grad_();
  const std::vector<Tensor> pieces = split(x, 2);  // 2, 2, 1 rows
  (sum(pieces[0] * 2.0) + sum(pieces[2] * 3.0)).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{2, 2, 2, 2, 0, 0, 0, 0, 3, 3}));
  const Tensor y = random_tensor({2, 3}, kFloat64, device(), 10, false).requires_grad_();
  sum(chunk(y, 3, 1)[1] * 5.0).backward();
  EXPECT_EQ(y.grad().to_vector<double>(), (std::vector<double>{0, 5, 0, 0, 5, 0}));
}

// The output lives on the inputs' device: nothing crosses devices and the host never waits,
// forward or backward.
TEST_P(Join, NothingIsCopiedBetweenDevicesOrWaitedFor) {
  const Tensor a = random_tensor({64, 8}, kFloat32, device(), 11, false).requires_grad_();
  const Tensor b = random_tensor({8, 64}, kFloat32, device(), 12, false).t();
  synchronize(device());
  reset_transfer_stats();
  {
    SyncGuard no_waits(SyncMode::kError);
    const Tensor out = cat({a, b}, 1);
    EXPECT_EQ(out.device(), device());
    const Tensor s = stack(split(out, 16), 0);
    EXPECT_EQ(s.device(), device());
    sum(s * s).backward();
  }
  EXPECT_EQ(transfer_stats(), TransferStats{}) << transfer_stats();
  EXPECT_EQ(a.grad().device(), device());
}

TEST_P(Join, CaptureAndReplayGiveTheEagerResult) {
  Tensor a = random_tensor({3, 4}, kFloat32, device(), 13, false);
  const Tensor b = random_tensor({4, 2}, kFloat32, device(), 14, false).t();
  // [3, 4, 2] on top of b's [2, 4] expanded to [2, 4, 2] (stride 0): [5, 4, 2].
  auto f = [&] { return cat({stack({a * 2.0, a}, -1), b.unsqueeze(-1).expand({2, 4, 2})}); };
  Tensor out;
  Graph graph = Graph::capture(device(), [&] { out = f(); });
  graph.replay();
  const Tensor eager = f();
  ASSERT_EQ(out.shape(), (Shape{5, 4, 2}));
  expect_close(out, eager.to_vector<double>(), 0, 0, "replay");
  a.mul_(-1.0);
  graph.replay();
  expect_close(out, f().to_vector<double>(), 0, 0, "replay with a new a");
}

TEST_P(Join, ErrorsNameTheOpTheTensorAndTheFix) {
  const Tensor x = zeros({2, 3}, device());
  const Tensor y = zeros({2, 4}, device());
  const std::vector<Tensor> none, undefined{x, Tensor()}, xy{x, y}, xx{x, x}, xxy{x, x, y};
  const std::vector<Tensor> ranks{x, x, zeros({2, 3, 1}, device())};
  const std::vector<Tensor> scalars{full({}, 1.0, device())};
  const std::vector<std::int64_t> short_sizes{1, 1}, negative{4, -1};
  const std::vector<std::int64_t> huge{INT64_MAX, INT64_MAX, 4};
  expect_throw_with<Error>([&] { (void)cat(none); }, {"[cat] expects at least one tensor"});
  expect_throw_with<Error>([&] { (void)stack(none); }, {"[stack] expects at least one tensor"});
  expect_throw_with<Error>([&] { (void)cat(undefined); },
                           {"[cat] 'tensors[1]' is an undefined tensor"});
  expect_throw_with<ShapeError>(
      [&] { (void)cat(xy); },
      {"[cat] tensors[1] has shape [2, 4] but tensors[0] has shape [2, 3]",
       "sizes must match in every dim but the joined dim 0 (dim 1 differs)"});
  EXPECT_EQ(cat(xy, 1).shape(), (Shape{2, 7}));
  expect_throw_with<ShapeError>(
      [&] { (void)cat(ranks, 0); },
      {"[cat] tensors[2] has shape [2, 3, 1] but tensors[0] has shape [2, 3]",
       "every tensor needs the same number of dims (2 here)"});
  expect_throw_with<ShapeError>([&] { (void)cat(xx, 2); },
                                {"[cat] dim 2 is out of range for a tensor with 2 dims"});
  expect_throw_with<ShapeError>([&] { (void)cat(scalars); },
                                {"[cat] tensors[0] is a 0-dim tensor", "use stack()"});
  expect_throw_with<ShapeError>(
      [&] { (void)stack(xxy); },
      {"[stack] tensors[2] has shape [2, 4] but tensors[0] has shape [2, 3]"});
  expect_throw_with<ShapeError>(
      [&] { (void)stack(xx, -4); },
      {"[stack] dim -4 is out of range for stacking tensors of 2 dims (expected -3 to 2)"});
  expect_throw_with<ShapeError>([&] { (void)split(x, 0); },
                                {"[split] split_size must be positive, got 0"});
  expect_throw_with<ShapeError>(
      [&] { (void)split(x, short_sizes, 1); },
      {"[split] sizes [1, 1] must sum to the size of dim 1, which is 3 (shape [2, 3])"});
  expect_throw_with<ShapeError>([&] { (void)split(x, negative); },
                                {"[split] sizes[1] is -1; sizes must not be negative"});
  expect_throw_with<ShapeError>([&] { (void)split(x, huge); },
                                {"[split] sizes [", "must sum to the size of dim 0"});
  expect_throw_with<ShapeError>([&] { (void)x.chunk(0); },
                                {"[chunk] chunks must be positive, got 0"});
  expect_throw_with<ShapeError>([&] { (void)chunk(scalars[0], 2); },
                                {"[chunk] cannot chunk a 0-dim tensor"});
  expect_throw_with<ShapeError>([&] { (void)split(x, 1, -3); }, {"[split] dim -3 is out of range"});
}

TEST_P(Join, TensorsOnTwoDevicesAreRefusedNotCopied) {
  TESSERA_REQUIRE_TWO_DEVICES();
  Device other = device();
  for (Device d : available_devices()) {
    if (d != device()) other = d;
  }
  const Tensor x = zeros({2, 3}, device());
  const Tensor y = zeros({2, 3}, other);
  const std::vector<Tensor> xxy{x, x, y}, xy{x, y};
  reset_transfer_stats();
  expect_throw_with<DeviceMismatchError>(
      [&] { (void)cat(xxy); },
      {"[cat] operands are on different devices", "tensors[0] on " + device().str(),
       "tensors[2] on " + other.str(), "never copies", ".to("});
  expect_throw_with<DeviceMismatchError>([&] { (void)stack(xy, 1); },
                                         {"[stack]", "tensors[1] on " + other.str()});
  EXPECT_EQ(transfer_stats(), TransferStats{});
}

TESSERA_INSTANTIATE_DEVICE_SUITE(Join);

}  // namespace
}  // namespace tessera

// Views share storage and never copy; their values match a host reference.
#include <limits>

#include "support/device_test.h"

namespace tessera {
namespace {

using testing::DeviceTest;
using testing::expect_throw_with;

class TensorView : public DeviceTest {};

std::vector<double> iota(int n) {
  std::vector<double> v(n);
  for (int i = 0; i < n; ++i) v[i] = i;
  return v;
}

TEST_P(TensorView, MetadataOfAFreshTensor) {
  const Tensor t = zeros({2, 3, 4}, device());
  EXPECT_EQ(t.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(t.strides(), (Strides{12, 4, 1}));
  EXPECT_EQ(t.dim(), 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_EQ(t.dtype(), kFloat32);
  EXPECT_EQ(t.device(), device());
  EXPECT_EQ(t.nbytes(), 96u);
  EXPECT_TRUE(t.is_contiguous());
  expect_throw_with<ShapeError>([&] { t.size(3); }, {"[size]", "dim 3 is out of range", "3 dims"});
}

TEST_P(TensorView, ViewsShareStorageAndAllocateNothing) {
  const Tensor t = arange(0, 24, 1, {kFloat32, device()}).reshape({2, 3, 4});
  synchronize(device());
  const auto before = memory_stats(device());
  const Tensor views[] = {t.view({6, 4}),       t.transpose(0, 2),
                          t.permute({2, 0, 1}), t.narrow(1, 1, 2),
                          t.slice(2, 0, 4, 2),  t.select(0, 1),
                          t.unsqueeze(1),       t.expand({5, 2, 3, 4}),
                          t.flatten(),          t[1][2]};
  for (const Tensor& v : views) EXPECT_TRUE(v.shares_storage(t));
  const auto after = memory_stats(device());
  EXPECT_EQ(after.in_use, before.in_use);
  EXPECT_EQ(after.allocations, before.allocations);
}

TEST_P(TensorView, ValuesMatchAHostReference) {
  const Tensor t = from_vector(iota(24), {2, 3, 4}, {kFloat64, device()});
  // transpose(0, 2): out[k][j][i] = t[i][j][k]
  std::vector<double> expected;
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < 3; ++j)
      for (int i = 0; i < 2; ++i) expected.push_back(i * 12 + j * 4 + k);
  EXPECT_EQ(t.transpose(0, 2).to_vector<double>(), expected);
  EXPECT_FALSE(t.transpose(0, 2).is_contiguous());
  EXPECT_EQ(t.select(1, 2).to_vector<double>(),
            (std::vector<double>{8, 9, 10, 11, 20, 21, 22, 23}));
  EXPECT_EQ(t.narrow(2, 1, 2).select(0, 0).to_vector<double>(),
            (std::vector<double>{1, 2, 5, 6, 9, 10}));
  EXPECT_EQ(t.slice(2, 1, 100, 2).select(0, 1).to_vector<double>(),
            (std::vector<double>{13, 15, 17, 19, 21, 23}));
  EXPECT_EQ(t.slice(0, -1, 2).numel(), 12);
  EXPECT_EQ(t[-1][-1].to_vector<double>(), (std::vector<double>{20, 21, 22, 23}));
  EXPECT_EQ(t.select(0, 1).select(0, 2).select(0, 3).item<double>(), 23);
  const Tensor e = from_vector(std::vector<double>{1, 2}, {2, 1}, {device()}).expand({2, 3});
  EXPECT_EQ(e.strides(), (Strides{1, 0}));
  EXPECT_EQ(e.to_vector<double>(), (std::vector<double>{1, 1, 1, 2, 2, 2}));
}

TEST_P(TensorView, ReshapeOfNonContiguousCopiesOnlyWhenItMust) {
  const Tensor t = arange(0, 12, 1, {kFloat32, device()}).reshape({3, 4});
  const Tensor tt = t.t();
  expect_throw_with<ShapeError>([&] { tt.view({12}); }, {"[view]", "not compatible", "reshape()"});
  const Tensor r = tt.reshape({12});
  EXPECT_FALSE(r.shares_storage(t));
  EXPECT_EQ(r.to_vector<double>(), (std::vector<double>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  // Splitting a dim of a transposed tensor is still a view.
  const Tensor split = tt.view({2, 2, 3});
  EXPECT_TRUE(split.shares_storage(t));
  EXPECT_EQ(split.to_vector<double>(), r.to_vector<double>());
  EXPECT_EQ(t.view({-1, 6}).shape(), (Shape{2, 6}));
  expect_throw_with<ShapeError>([&] { t.view({5, -1}); }, {"[view]", "cannot infer -1"});
  expect_throw_with<ShapeError>([&] { t.view({5, 3}); }, {"[view]", "15 elements", "has 12"});
  expect_throw_with<ShapeError>([&] { t.view({-1, -1}); }, {"more than one -1"});
  // reshape names itself, whether the tensor is contiguous or not.
  expect_throw_with<ShapeError>([&] { t.reshape({5, -1}); }, {"[reshape]", "cannot infer -1"});
  expect_throw_with<ShapeError>([&] { tt.reshape({5, 3}); }, {"[reshape]", "15 elements"});
}

TEST_P(TensorView, ViewErrorsNameOpAndValues) {
  const Tensor t = zeros({2, 3}, device());
  // A 0-dim tensor has no size or stride to read: a value past the end of its shape came
  // back (10 for a select of arange(10)).
  const Tensor one = arange(10, device()).select(0, 3);
  for (const int d : {0, -1}) {
    expect_throw_with<ShapeError>(
        [&] { (void)one.size(d); },
        {"[size] dim " + std::to_string(d) + " of a 0-dim tensor", "item()"});
    expect_throw_with<ShapeError>([&] { (void)one.stride(d); }, {"[stride]", "0-dim"});
  }
  expect_throw_with<ShapeError>([&] { (void)t.size(2); }, {"[size] dim 2 is out of range"});
  expect_throw_with<ShapeError>([&] { t.select(1, 3); }, {"[select]", "index 3", "size 3"});
  expect_throw_with<ShapeError>([&] { t.narrow(0, 1, 2); },
                                {"[narrow] start 1 + length 2 exceeds dim 0 of size 2"});
  expect_throw_with<ShapeError>([&] { t.narrow(1, -5, 1); },
                                {"[narrow] start -5 is out of range", "expected -3 to 3"});
  expect_throw_with<ShapeError>([&] { t.narrow(1, 0, -1); },
                                {"[narrow] length must not be negative, got -1"});
  expect_throw_with<ShapeError>([&] { t.transpose(0, 2); }, {"[transpose]", "dim 2"});
  expect_throw_with<ShapeError>([&] { t.permute({0, 0}); }, {"[permute]", "repeat dim 0"});
  expect_throw_with<ShapeError>([&] { t.permute({0}); }, {"[permute]", "2 dims"});
  expect_throw_with<ShapeError>([&] { t.expand({4, 3}); }, {"[expand]", "[2, 3] to [4, 3]"});
  // A dim past int's range was cut to its low bits: (1 << 32) + 1 permuted as 1.
  expect_throw_with<ShapeError>(
      [&] {
        t.permute({(1LL << 32) + 1, 0});
      },
      {"[permute] dim 4294967297 of [4294967297, 0] is out of range", "2 dims",
       "from 0 to 1, or from -2 back"});
  // A view of over 2^63 elements counted INT64_MAX of them; sum() of it was 0.
  expect_throw_with<ShapeError>(
      [&] {
        ones({1}, device()).expand({1LL << 32, 1LL << 32});
      },
      {"[expand] cannot expand shape [1] to [4294967296, 4294967296]", "more than 2^63"});
  EXPECT_EQ(ones({1}, device()).expand({1LL << 40, 0, 1LL << 40}).numel(), 0);
  EXPECT_EQ(ones({1}, device()).expand({1LL << 62, 4, 0}).numel(), 0);
  expect_throw_with<ShapeError>([&] { t.slice(0, 0, 1, 0); }, {"[slice]", "step must be positive"});
  expect_throw_with<ShapeError>([&] { zeros({}, device()).select(0, 0); }, {"[select]", "0-dim"});
  expect_throw_with<ShapeError>(
      [&] {
        zeros({1, 1, 1, 1, 1, 1, 1, 1, 1}, device());
      },
      {"[Shape]", "at most 8 dimensions"});
  expect_throw_with<Error>([] { Tensor().shape(); }, {"undefined tensor"});
  // The undefined tensors users meet: a lazy layer's weight, a missing bias, an unset grad.
  nn::LazyLinear lazy(2);
  expect_throw_with<Error>([&] { (void)lazy.weight.device(); },
                           {"undefined tensor",
                            "lazy layer's parameters exist only after its "
                            "first call",
                            "without a bias"});
}

TEST_P(TensorView, SqueezeUnsqueezeFlatten) {
  const Tensor t = zeros({2, 1, 3, 1}, device());
  EXPECT_EQ(t.squeeze().shape(), (Shape{2, 3}));
  EXPECT_EQ(t.squeeze(1).shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(t.squeeze(0).shape(), t.shape());
  EXPECT_EQ(t.unsqueeze(0).shape(), (Shape{1, 2, 1, 3, 1}));
  EXPECT_EQ(t.unsqueeze(-1).shape(), (Shape{2, 1, 3, 1, 1}));
  EXPECT_EQ(t.flatten().shape(), (Shape{6}));
  EXPECT_EQ(t.flatten(1).shape(), (Shape{2, 3}));
  EXPECT_EQ(zeros({}, device()).flatten().shape(), (Shape{1}));
}

TEST_P(TensorView, ZeroSizeDims) {
  const Tensor t = zeros({0, 3}, device());
  EXPECT_EQ(t.numel(), 0);
  EXPECT_TRUE(t.to_vector<float>().empty());
  EXPECT_EQ(t.reshape({3, 0}).shape(), (Shape{3, 0}));
  EXPECT_EQ(t.t().contiguous().shape(), (Shape{3, 0}));
  EXPECT_EQ((t + 1.0).numel(), 0);
}

// Sizes whose arithmetic wraps past 2^63 made views that read far outside their storage
// (a segfault on read); negative sizes made tensors of negative numel.
TEST_P(TensorView, SizesThatWrapOrAreNegativeAreRefused) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  const Tensor six = arange(6.0, {kFloat32, device()});
  expect_throw_with<ShapeError>(
      [&] {
        (void)six.view({9, 6148914691236517206LL});
      },
      {"[view] shape [9, 6148914691236517206] has more elements than"});
  expect_throw_with<ShapeError>(
      [&] {
        (void)six.reshape({9, 6148914691236517206LL});
      },
      {"[reshape]", "more elements than a tensor can hold"});
  EXPECT_EQ(zeros({0}, device()).view({kMax, 2, 0}).numel(), 0) << "a 0 among the sizes";
  expect_throw_with<ShapeError>([&] { (void)six.narrow(0, 1, kMax); },
                                {"[narrow] start 1 + length 9223372036854775807 exceeds"});
  expect_throw_with<ShapeError>([&] { (void)ones({1}, device()).expand({-2}); },
                                {"[expand]", "negative size -2"});
  expect_throw_with<ShapeError>(
      [&] {
        (void)ones({2, 1}, device()).expand({2, -5});
      },
      {"[expand]", "negative size -5"});
  EXPECT_EQ(six.slice(0, 0, 6, kMax).shape(), Shape({1}));
  EXPECT_EQ(six.view({2, 3}).slice(1, 0, 3, kMax).shape(), Shape({2, 1}));
  EXPECT_EQ(six.slice(0, 1, 6, 2).to_vector<double>(), (std::vector<double>{1, 3, 5}));
  const Tensor eight = zeros({1, 1, 1, 1, 1, 1, 1, 1}, device());
  expect_throw_with<ShapeError>([&] { (void)eight.unsqueeze(0); },
                                {"[unsqueeze] a tensor has at most 8 dims"});
  // A 0-dim tensor has dims 0 and -1 only, as in PyTorch.
  const Tensor scalar = full({}, 1.0, device());
  expect_throw_with<ShapeError>([&] { (void)scalar.squeeze(5); }, {"[squeeze] dim 5"});
  expect_throw_with<ShapeError>([&] { (void)scalar.flatten(3, 7); }, {"[flatten] dim 3"});
  EXPECT_EQ(scalar.squeeze(0).dim(), 0);
  EXPECT_EQ(scalar.flatten().shape(), Shape({1}));
  expect_throw_with<Error>([] { (void)Tensor().t(); }, {"[t]", "undefined tensor"});
  expect_throw_with<Error>([&] { six.expand({2, 6}).zero_(); }, {"[zero_]"});
}

TESSERA_INSTANTIATE_DEVICE_SUITE(TensorView);

}  // namespace
}  // namespace tessera

// Collectives over every device of the test device's kind (one device on the plain CPU, two
// with TESSERA_CPU_DEVICES=2, each GPU): values against a float64 reference, the ledger's
// bytes, no host wait, and every error.
#include "support/device_test.h"

namespace tessera {
namespace {

using testing::DeviceTest;
using testing::expect_close;
using testing::expect_throw_with;

class Collectives : public DeviceTest {
 protected:
  std::vector<Device> group() const { return same_kind_devices(); }
  // One [rows, 3] tensor per device, device i holding values seeded by i.
  std::vector<Tensor> inputs(std::int64_t rows, Dtype dtype,
                             std::vector<std::vector<double>>& values) const {
    std::vector<Tensor> out;
    const auto g = group();
    for (std::size_t i = 0; i < g.size(); ++i) {
      values.push_back(testing::random_values(static_cast<std::size_t>(rows * 3), 11 + i, -2, 2));
      out.push_back(from_vector(values.back(), {rows, 3}, {dtype, g[i]}));
      values.back() = out.back().to_vector<double>();  // as the dtype holds them
    }
    return out;
  }
};

TEST_P(Collectives, AllReduceSumsAndAveragesInPlaceWithoutAHostWait) {
  for (Dtype dtype : {kFloat32, kFloat64, kInt64}) {
    std::vector<std::vector<double>> v;
    const std::vector<Tensor> t = inputs(7, dtype, v);  // 21 elements: uneven chunks
    const std::size_t k = t.size();
    std::vector<double> sum(v[0].size(), 0.0);
    for (const auto& vi : v)
      for (std::size_t e = 0; e < sum.size(); ++e) sum[e] += vi[e];
    reset_transfer_stats();
    {
      SyncGuard strict(SyncMode::kError);
      all_reduce(t);
    }
    // Ring terms: each device gets (k - 1) * c_i + (n - c_i) elements.
    std::uint64_t expected_bytes = 0;
    for (std::size_t i = 0; i < k; ++i) {
      const std::uint64_t c = 21 / k + (i < 21 % k ? 1 : 0);
      const std::uint64_t bytes = ((k - 1) * c + (21 - c)) * itemsize(dtype);
      EXPECT_EQ(transfer_stats(t[i].device()).d2d_bytes, bytes) << t[i].device();
      EXPECT_EQ(transfer_stats(t[i].device()).host_waits, 0u);
      expected_bytes += bytes;
    }
    if (k == 2) EXPECT_EQ(expected_bytes, 2u * 21 * itemsize(dtype));
    for (const Tensor& x : t) expect_close(x, sum, 1e-6, 1e-6, std::string(dtype_name(dtype)));
    if (dtype == kInt64) {
      // A mean of integers is refused: in the element type its sum overflowed first.
      expect_throw_with<DtypeError>([&] { all_reduce(t, ReduceKind::kMean); },
                                    {"[all_reduce]", "mean of int64"});
      continue;
    }
    all_reduce(t, ReduceKind::kMean);  // the sums, averaged: the sums again
    for (const Tensor& x : t) expect_close(x, sum, 1e-6, 1e-6, "mean");
  }
}

TEST_P(Collectives, IntegerSumsWrapAsAdditionDoes) {
  const std::vector<Device> group = same_kind_devices();
  if (group.size() < 2) GTEST_SKIP() << "needs two devices of a kind";
  std::vector<Tensor> bytes, ints;
  for (std::size_t i = 0; i < 2; ++i) {
    bytes.push_back(full({3}, 200, {group[i], kUInt8}));
    ints.push_back(full({3}, 2000000000, {group[i], kInt32}));
  }
  all_reduce(bytes);
  all_reduce(ints);
  EXPECT_EQ(bytes[1].to_vector<std::uint8_t>(), std::vector<std::uint8_t>(3, 144));
  EXPECT_EQ(ints[0].to_vector<std::int32_t>(), std::vector<std::int32_t>(3, -294967296));
}

// bfloat16 and float16 move as they are and sum within a rounding per device of the exact
// sum (Note [Half collectives]: logical CPU devices round once, NCCL after each addition).
TEST_P(Collectives, HalfTensorsMoveAndSumInTheirOwnDtype) {
  for (const Dtype dtype : {kBFloat16, kFloat16}) {
    const std::string what(dtype_name(dtype));
    const double ulp = dtype == kBFloat16 ? 0x1p-8 : 0x1p-11;  // half of the last place
    std::vector<std::vector<double>> v;
    const std::vector<Tensor> t = inputs(7, dtype, v);
    const std::size_t k = t.size();
    std::vector<double> sum(v[0].size(), 0.0);
    for (const auto& vi : v)
      for (std::size_t e = 0; e < sum.size(); ++e) sum[e] += vi[e];
    std::vector<double> mean = sum;
    for (double& m : mean) m /= static_cast<double>(k);
    // What a rounding per device allows, with room for the values near 0 of a sum.
    const double rtol = static_cast<double>(k) * ulp, atol = 4 * ulp;
    std::vector<Tensor> copies;
    for (const Tensor& x : t) copies.push_back(x.clone());
    reset_transfer_stats();
    {
      SyncGuard strict(SyncMode::kError);
      all_reduce(t);
      all_reduce(copies, ReduceKind::kMean);
    }
    for (std::size_t i = 0; i < k; ++i) {
      EXPECT_EQ(t[i].dtype(), dtype);
      EXPECT_EQ(transfer_stats(t[i].device()).host_waits, 0u);
      if (k == 2) EXPECT_EQ(transfer_stats(t[i].device()).d2d_bytes, 2u * 2 * 21) << what;
      testing::expect_close(t[i], sum, rtol, atol, what + " sum");
      testing::expect_close(copies[i], mean, rtol, atol, what + " mean");
      // Every device holds the same values, bit for bit.
      EXPECT_EQ(t[i].to_vector<double>(), t[0].to_vector<double>()) << what;
    }
    // The largest finite float16 twice: the sum overflows, the mean does not.
    if (dtype == kFloat16 && k == 2) {
      std::vector<Tensor> big;
      for (std::size_t i = 0; i < k; ++i) big.push_back(full({3}, 65504.0, {dtype, t[i].device()}));
      all_reduce(big, ReduceKind::kMean);
      for (const Tensor& x : big)
        testing::expect_close(x, std::vector<double>(3, 65504.0), 0, 0, "mean");
      all_reduce(big);
      for (const Tensor& x : big) EXPECT_TRUE(std::isinf(x.to_vector<double>()[0])) << "sum";
    }
    const auto gathered = all_gather(t);
    broadcast(t, k - 1);
    std::vector<std::vector<double>> vs;
    const auto scattered = reduce_scatter(inputs(2 * static_cast<std::int64_t>(k), dtype, vs));
    const std::vector<double> last = t[k - 1].to_vector<double>();
    for (std::size_t i = 0; i < k; ++i) {
      EXPECT_EQ(gathered[i].dtype(), dtype);
      EXPECT_EQ(gathered[i].narrow(0, 7 * static_cast<std::int64_t>(i), 7).to_vector<double>(),
                last)
          << what << " all_gather: the sums went in";
      EXPECT_EQ(t[i].to_vector<double>(), last) << what << " broadcast";
      std::vector<double> expected;
      for (std::size_t e = i * 6; e < (i + 1) * 6; ++e) {
        double s = 0;
        for (const auto& vi : vs) s += vi[e];
        expected.push_back(s);
      }
      EXPECT_EQ(scattered[i].dtype(), dtype);
      testing::expect_close(scattered[i], expected, rtol, atol, what + " reduce_scatter");
    }
  }
}

TEST_P(Collectives, BroadcastGatherAndScatter) {
  std::vector<std::vector<double>> v;
  const std::vector<Tensor> t = inputs(4, kFloat32, v);
  const std::size_t k = t.size();
  // reduce_scatter of k*4 rows: device i gets its rows of the sum.
  std::vector<std::vector<double>> vs;
  const std::vector<Tensor> tall = inputs(4 * static_cast<std::int64_t>(k), kFloat32, vs);
  const auto scattered = reduce_scatter(tall);
  for (std::size_t i = 0; i < k; ++i) {
    std::vector<double> expected;
    for (std::size_t e = i * 12; e < (i + 1) * 12; ++e) {
      double s = 0;
      for (const auto& vi : vs) s += vi[e];
      expected.push_back(s);
    }
    EXPECT_EQ(scattered[i].shape(), (Shape{4, 3}));
    EXPECT_EQ(scattered[i].device(), t[i].device());
    expect_close(scattered[i], expected, 1e-6, 1e-6, "reduce_scatter");
  }
  const auto gathered = all_gather(t);
  std::vector<double> concat;
  for (const auto& vi : v) concat.insert(concat.end(), vi.begin(), vi.end());
  for (std::size_t i = 0; i < k; ++i) {
    EXPECT_EQ(gathered[i].shape(), (Shape{4 * static_cast<std::int64_t>(k), 3}));
    expect_close(gathered[i], concat, 0, 0, "all_gather");
  }
  broadcast(t, k - 1);
  for (const Tensor& x : t) expect_close(x, v[k - 1], 0, 0, "broadcast");
}

TEST_P(Collectives, ErrorsNameTheTensorAndTheFix) {
  const auto g = group();
  expect_throw_with<Error>([&] { all_reduce({}); }, {"[all_reduce] got no tensors"});
  const Tensor a = ones({2, 3}, device());
  expect_throw_with<DeviceError>(
      [&] {
        all_reduce({a, ones({2, 3}, device())});
      },
      {"[all_reduce] tensors[0] and tensors[1] are both on", device().str(),
       "one tensor per device"});
  expect_throw_with<DtypeError>(
      [&] {
        all_reduce({ones({2}, {kBool, device()})});
      },
      {"[all_reduce] bool tensors cannot be summed"});
  expect_throw_with<Error>([&] { broadcast({a.t()}); },
                           {"[broadcast] tensors[0] is not contiguous"});
  expect_throw_with<Error>([&] { broadcast({a}, 3); }, {"[broadcast] root 3"});
  Tensor w = ones({2}, device()).requires_grad_();
  expect_throw_with<Error>([&] { all_reduce({w}); }, {"[all_reduce] cannot write in place"});
  expect_throw_with<ShapeError>([&] { all_gather({ones({}, device())}); },
                                {"[all_gather] needs tensors with at least one dim"});
  if (g.size() >= 2) {
    expect_throw_with<ShapeError>(
        [&] {
          all_reduce({a, ones({3, 2}, g[1])});
        },
        {"[all_reduce] tensors[1] has shape [3, 2]", "[2, 3]"});
    expect_throw_with<DtypeError>(
        [&] {
          all_reduce({a, ones({2, 3}, {kFloat64, g[1]})});
        },
        {"[all_reduce] tensors[1] is float64", "tensors[0] is float32"});
    expect_throw_with<ShapeError>(
        [&] {
          reduce_scatter({ones({3, 1}, g[0]), ones({3, 1}, g[1])});
        },
        {"[reduce_scatter] the tensors have 3 rows", "over 2 devices"});
  }
}

TEST_P(Collectives, MixedKindsAreRefused) {
  if (!device().is_cuda()) GTEST_SKIP() << "needs a GPU beside the CPU";
  expect_throw_with<DeviceError>(
      [&] {
        all_reduce({ones({2}, device()), ones({2}, cpu())});
      },
      {"[all_reduce] tensors[1] is on cpu", "tensors[0] is on " + device().str(), "one kind"});
}

TESSERA_INSTANTIATE_DEVICE_SUITE(Collectives);

}  // namespace
}  // namespace tessera

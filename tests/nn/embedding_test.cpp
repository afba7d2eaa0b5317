// nn::Embedding and nn::embedding on every device: lookup and gradient against a hand
// computation, moving the layer, its state dict, initialization and errors.
#include <cmath>

#include "support/device_test.h"

namespace tessera {
namespace {

using testing::DeviceTest;
using testing::expect_close;
using testing::expect_throw_with;

class Embedding : public DeviceTest {};

// A 4 x 3 table whose entry (r, c) is 10 r + c.
Tensor table(Device device) {
  std::vector<double> w;
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 3; ++c) w.push_back(10 * r + c);
  }
  return from_vector(w, {4, 3}, {kFloat32, device});
}

TEST_P(Embedding, LooksUpRowsAndAddsUpTheirGradients) {
  nn::Embedding emb(4, 3, device());
  emb.weight = table(device());
  const Tensor indices =
      from_vector(std::vector<std::int64_t>{1, 3, 1, 0}, {2, 2}, {kInt64, device()});
  const Tensor out = emb(indices);
  EXPECT_EQ(out.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(out.device(), device());
  EXPECT_EQ(out.to_vector<double>(),
            (std::vector<double>{10, 11, 12, 30, 31, 32, 10, 11, 12, 0, 1, 2}));
  // d sum(out * w) / d weight[r] = the sum of w's rows whose index is r.
  const Tensor w = from_vector(std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12},
                               {2, 2, 3}, {kFloat32, device()});
  sum(out * w).backward();
  EXPECT_EQ(emb.weight.grad().to_vector<double>(),
            (std::vector<double>{10, 11, 12, 8, 10, 12, 0, 0, 0, 4, 5, 6}));
  // int32 indices and a 0-dim index give the same rows.
  EXPECT_EQ(emb(full({}, 3, {kInt32, device()})).to_vector<double>(),
            (std::vector<double>{30, 31, 32}));
}

TEST_P(Embedding, MovesWithToAndRoundTripsItsStateDict) {
  manual_seed(3);
  nn::Embedding emb(6, 2);  // on the default device
  emb.to(device());
  EXPECT_EQ(emb.weight.device(), device());
  EXPECT_EQ(emb.device(), device());
  const Tensor indices = from_vector(std::vector<std::int64_t>{5, 0, 2}, {3}, {kInt64, device()});
  const Tensor out = emb(indices);
  EXPECT_EQ(out.device(), device());

  nn::Embedding copy(6, 2, device());
  copy.load_state_dict(emb.state_dict());
  EXPECT_EQ(copy(indices).to_vector<double>(), out.to_vector<double>());
  EXPECT_EQ(emb.str().find("Embedding(6, 2)"), 0u) << emb.str();
}

TEST_P(Embedding, InitializesFromAStandardNormal) {
  manual_seed(0);
  nn::Embedding emb(1000, 16, {kFloat64, device()});
  const auto w = emb.weight.to_vector<double>();
  double mean = 0, square = 0;
  for (double v : w) mean += v;
  mean /= static_cast<double>(w.size());
  for (double v : w) square += (v - mean) * (v - mean);
  EXPECT_NEAR(mean, 0, 0.03);
  EXPECT_NEAR(std::sqrt(square / static_cast<double>(w.size())), 1, 0.03);
}

TEST_P(Embedding, ErrorsNameTheLayerAndTheFix) {
  nn::Embedding emb(4, 3, device());
  expect_throw_with<IndexError>(
      [&] {
        (void)emb(from_vector(std::vector<std::int64_t>{0, 4}, {2}, {kInt64, device()}))
            .to_vector<double>();
      },
      {"index[1] is 4, out of range for dim 0 of size 4"});
  expect_throw_with<DtypeError>([&] { (void)emb(zeros({2}, device())); },
                                {"[embedding] indices must be int64 or int32, got float32"});
  expect_throw_with<ShapeError>([&] { nn::Embedding(0, 3); },
                                {"[Embedding] num_embeddings and embedding_dim must be positive"});
  expect_throw_with<DtypeError>(
      [&] {
        nn::Embedding(2, 3, {kInt64, device()});
      },
      {"[Embedding] the weight is floating-point, got dtype int64"});
  if (available_devices().size() >= 2) {
    const Device other =
        available_devices()[0] == device() ? available_devices()[1] : available_devices()[0];
    expect_throw_with<DeviceMismatchError>(
        [&] {
          (void)emb(zeros({2}, {kInt64, other}));
        },
        {"[Embedding] Embedding.weight is on " + device().str(), "input is on " + other.str()});
  }
}

TESSERA_INSTANTIATE_DEVICE_SUITE(Embedding);

}  // namespace
}  // namespace tessera

// GradientReducer: bucketed gradient sums across replicas, queued during backward
// (Note [Gradient buckets]).
#include "train/gradient_reducer.h"

#include <vector>

#include "support/device_test.h"

namespace tessera::train {
namespace {

using testing::DeviceTest;

class GradientReducerTest : public DeviceTest {};

// Replicas on one device, summed by a plain function, so the bucketing and the timing are
// tested apart from the collectives (which collectives_test.cpp covers).
void sum_on_host_device(const std::vector<Tensor>& flat) {
  NoGradGuard no_grad;
  Tensor total = zeros_like(flat[0]);
  for (const Tensor& f : flat) total = total + f;
  for (const Tensor& f : flat) Tensor(f).copy_(total);
}

struct Replica {
  Tensor w1, b1, w2, unused;
  std::vector<Tensor> params() const { return {w1, b1, w2, unused}; }
};

Replica make_replica(Device d, double scale) {
  manual_seed(1);
  return {(randn({4, 3}, d) * scale).requires_grad_(), (randn({3}, d) * scale).requires_grad_(),
          (randn({3, 2}, d) * scale).requires_grad_(), ones({5}, d).requires_grad_()};
}

Tensor loss_of(const Replica& m, const Tensor& x) {
  return sum(matmul(relu(matmul(x, m.w1) + m.b1), m.w2));
}

TEST_P(GradientReducerTest, SumsEveryReplicasGradientsBucketByBucketDuringBackward) {
  const std::vector<Replica> replicas = {make_replica(device(), 1.0), make_replica(device(), 1.0)};
  const std::vector<Tensor> xs = {randn({6, 4}, device()), randn({6, 4}, device())};
  // Each replica's own gradients, before the reducer's hooks exist.
  std::vector<std::vector<std::vector<float>>> own(2);
  for (std::size_t r = 0; r < 2; ++r) {
    loss_of(replicas[r], xs[r]).backward();
    for (Tensor p : replicas[r].params()) {
      own[r].push_back(p.grad().defined() ? p.grad().to_vector<float>() : std::vector<float>());
    }
  }
  // 1 byte: every parameter a bucket of its own (unused, w2, b1, w1 in backward order).
  GradientReducer reducer({replicas[0].params(), replicas[1].params()}, sum_on_host_device, 1);
  EXPECT_EQ(reducer.buckets(), 4u);
  for (int step = 0; step < 2; ++step) {
    for (std::size_t r = 0; r < 2; ++r) {
      for (Tensor p : replicas[r].params()) p.set_grad(Tensor());
      loss_of(replicas[r], xs[r]).backward();
    }
    reducer.reduce();
    EXPECT_EQ(reducer.overlapped(), 3u);  // all but `unused`'s bucket, which reduce() did
    for (std::size_t r = 0; r < 2; ++r) {
      const std::vector<Tensor> params = replicas[r].params();
      for (std::size_t p = 0; p < 3; ++p) {
        const std::vector<float> got = params[p].grad().to_vector<float>();
        for (std::size_t i = 0; i < got.size(); ++i) {
          EXPECT_NEAR(got[i], static_cast<double>(own[0][p][i]) + own[1][p][i], 1e-5)
              << "step " << step << " replica " << r << " param " << p;
        }
      }
      // No replica's loss reached `unused`: it keeps no grad, as on one device, so that an
      // optimizer skips it (a zero grad would still decay it).
      EXPECT_FALSE(params[3].grad().defined()) << "step " << step << " replica " << r;
    }
  }
}

TEST_P(GradientReducerTest, OneBucketIsQueuedOnlyOnceEveryReplicaFilledIt) {
  const std::vector<Replica> replicas = {make_replica(device(), 1.0), make_replica(device(), 2.0)};
  const Tensor x = randn({6, 4}, device());
  GradientReducer reducer({replicas[0].params(), replicas[1].params()}, sum_on_host_device);
  EXPECT_EQ(reducer.buckets(), 1u);  // 25 MB holds them all
  loss_of(replicas[0], x).backward();
  loss_of(replicas[0], x).backward();  // a second pass adds nothing once the bucket is filled
  reducer.reduce();                    // replica 1 never ran backward: it adds zeros
  EXPECT_EQ(reducer.overlapped(), 0u);
  const std::vector<float> w1 = replicas[0].w1.grad().to_vector<float>();
  EXPECT_EQ(w1, replicas[1].w1.grad().to_vector<float>());
}

// Note [Gradients reduced in place]: a parameter of kInPlaceBytes or more is a bucket of its
// own, summed where backward left its gradient (no copy into a flat buffer); the smaller ones
// share a bucket as before. The sums are the same.
TEST_P(GradientReducerTest, ALargeGradientIsSummedWhereItLies) {
  const std::int64_t wide = GradientReducer::kInPlaceBytes / sizeof(float) / 4;  // [4, wide]
  const std::vector<Tensor> xs = {randn({6, 4}, device()), randn({6, 4}, device())};
  std::vector<std::vector<Tensor>> params;
  for (int r = 0; r < 2; ++r) {
    manual_seed(1);
    params.push_back(
        {randn({4, wide}, device()).requires_grad_(), randn({wide}, device()).requires_grad_()});
  }
  const auto loss = [&](std::size_t r) {
    return sum(relu(matmul(xs[r], params[r][0]) + params[r][1]));
  };
  std::vector<std::vector<std::vector<float>>> own(2);
  for (std::size_t r = 0; r < 2; ++r) {
    loss(r).backward();
    for (const Tensor& p : params[r]) own[r].push_back(p.grad().to_vector<float>());
  }
  GradientReducer reducer(params, sum_on_host_device);
  EXPECT_EQ(reducer.buckets(), 2u);
  EXPECT_EQ(reducer.in_place_buckets(), 1u);
  for (int step = 0; step < 2; ++step) {
    std::vector<Tensor> made;  // the large gradient each replica's backward made
    for (std::size_t r = 0; r < 2; ++r) {
      for (Tensor p : params[r]) p.set_grad(Tensor());
      loss(r).backward();
      made.push_back(params[r][0].grad());
    }
    reducer.reduce();
    EXPECT_EQ(reducer.overlapped(), 2u);
    for (std::size_t r = 0; r < 2; ++r) {
      EXPECT_TRUE(params[r][0].grad().shares_storage(made[r])) << "summed in place";
      for (std::size_t p = 0; p < 2; ++p) {
        const std::vector<float> got = params[r][p].grad().to_vector<float>();
        ASSERT_EQ(got.size(), own[0][p].size());
        for (std::size_t i = 0; i < got.size(); ++i) {
          ASSERT_NEAR(got[i], static_cast<double>(own[0][p][i]) + own[1][p][i], 1e-4)
              << "step " << step << " replica " << r << " param " << p << " element " << i;
        }
      }
    }
  }
}

TESSERA_INSTANTIATE_DEVICE_SUITE(GradientReducerTest);

}  // namespace
}  // namespace tessera::train

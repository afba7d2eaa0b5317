// randint on every device: range, shape, dtype, the same values from the same seed on every
// device, the whole int64 range, and the errors.
#include <algorithm>
#include <set>

#include "support/device_test.h"

namespace tessera {
namespace {

using testing::DeviceTest;
using testing::expect_throw_with;

class Randint : public DeviceTest {};

TEST_P(Randint, DrawsEveryValueOfTheRangeAndNoOther) {
  manual_seed(1);
  const Tensor t = randint(-3, 5, {10, 100}, device());
  EXPECT_EQ(t.shape(), (Shape{10, 100}));
  EXPECT_EQ(t.dtype(), kInt64);
  EXPECT_EQ(t.device(), device());
  const auto v = t.to_vector<std::int64_t>();
  EXPECT_EQ(*std::min_element(v.begin(), v.end()), -3);
  EXPECT_EQ(*std::max_element(v.begin(), v.end()), 4);
  EXPECT_EQ(std::set<std::int64_t>(v.begin(), v.end()).size(), 8u);
  const auto zero_based = randint(2, {1000}, device()).to_vector<std::int64_t>();
  EXPECT_EQ(std::set<std::int64_t>(zero_based.begin(), zero_based.end()),
            (std::set<std::int64_t>{0, 1}));
  EXPECT_EQ(randint(0, 1, {0, 3}, device()).shape(), (Shape{0, 3}));
}

TEST_P(Randint, TheSameSeedDrawsTheSameValuesOnEveryDevice) {
  manual_seed(7);
  const auto here = randint(0, 1000000, {257}, device()).to_vector<std::int64_t>();
  const auto next = randint(0, 1000000, {257}, device()).to_vector<std::int64_t>();
  EXPECT_NE(here, next) << "the generator moves on";
  manual_seed(7);
  EXPECT_EQ(randint(0, 1000000, {257}, device()).to_vector<std::int64_t>(), here);
  manual_seed(7);
  EXPECT_EQ(randint(0, 1000000, {257}, cpu()).to_vector<std::int64_t>(), here);
}

TEST_P(Randint, SpansTheWholeInt64Range) {
  const auto v = randint(INT64_MIN, INT64_MAX, {64}, device()).to_vector<std::int64_t>();
  EXPECT_GT(std::set<std::int64_t>(v.begin(), v.end()).size(), 60u);
  EXPECT_TRUE(std::any_of(v.begin(), v.end(), [](std::int64_t x) { return x < 0; }));
  EXPECT_TRUE(std::any_of(v.begin(), v.end(), [](std::int64_t x) { return x > 0; }));
  const auto top = randint(INT64_MAX - 2, INT64_MAX, {64}, device()).to_vector<std::int64_t>();
  for (std::int64_t x : top) EXPECT_TRUE(x == INT64_MAX - 2 || x == INT64_MAX - 1) << x;
}

TEST_P(Randint, ErrorsSayWhatIsWrong) {
  expect_throw_with<Error>([&] { (void)randint(3, 3, {2}, device()); },
                           {"[randint] needs low < high, got low=3, high=3"});
  expect_throw_with<Error>([&] { (void)randint(0, {2}, device()); },
                           {"[randint] needs low < high, got low=0, high=0"});
  expect_throw_with<DtypeError>(
      [&] {
        (void)randint(0, 2, {2}, {kFloat32, device()});
      },
      {"[randint] draws int64 values; got dtype float32", ".to()"});
}

TESSERA_INSTANTIATE_DEVICE_SUITE(Randint);

}  // namespace
}  // namespace tessera

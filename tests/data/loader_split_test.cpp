// DataLoader::split: one piece of each batch per device, gathered straight into the memory of
// its device where the host writes it (CPU devices), so moving it there copies nothing; the
// pieces stacked are the shard of the same part (same epoch order and values).
#include <numeric>

#include "support/device_test.h"

namespace tessera {
namespace {

using testing::DeviceTest;
using testing::expect_throw_with;

class LoaderSplit : public DeviceTest {};

data::DataLoader make_loader(std::int64_t prefetch) {
  const std::int64_t n = 23;
  std::vector<std::uint8_t> pixels(static_cast<std::size_t>(n * 4));
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<std::uint8_t>(i * 7);
  std::vector<std::int64_t> labels(static_cast<std::size_t>(n));
  std::iota(labels.begin(), labels.end(), 100);
  return data::DataLoader(from_vector(pixels, {n, 2, 2}), from_vector(labels, {n}),
                          {.batch_size = 10, .seed = 3, .prefetch = prefetch});  // 10, 10, 3
}

TEST_P(LoaderSplit, PiecesStackedAreTheShardAndLiveOnTheirDevices) {
  const std::vector<Device> devices = same_kind_devices();
  const auto k = static_cast<std::int64_t>(devices.size());
  AllowSync deliberate;  // the test's own reads
  for (const std::int64_t prefetch : {0, 2}) {
    for (const std::int64_t parts : {1, 2}) {
      for (std::int64_t p = 0; p < parts; ++p) {
        data::DataLoader by_shard = make_loader(prefetch), by_split = make_loader(prefetch);
        std::vector<std::vector<float>> xs;
        std::vector<std::vector<std::int64_t>> ys;
        for (int epoch = 0; epoch < 2; ++epoch) {
          for (const data::Batch& mine : by_shard.shard(p, parts)) {
            xs.push_back(mine.x.to_vector<float>());
            ys.push_back(mine.y.to_vector<std::int64_t>());
          }
        }
        std::size_t i = 0;
        for (int epoch = 0; epoch < 2; ++epoch) {
          for (const std::vector<data::Batch>& pieces : by_split.split(p, parts, devices)) {
            ASSERT_EQ(pieces.size(), devices.size());
            ASSERT_LT(i, xs.size());
            const auto rows = static_cast<std::int64_t>(ys[i].size());
            std::vector<float> x;
            std::vector<std::int64_t> y;
            for (std::int64_t r = 0; r < k; ++r) {
              const data::Batch& piece = pieces[static_cast<std::size_t>(r)];
              const Device d = devices[static_cast<std::size_t>(r)];
              // A GPU's piece waits in host memory for prepare_batch's copy.
              const Device home = d.is_cpu() ? d : cpu();
              EXPECT_EQ(piece.x.device(), home);
              EXPECT_EQ(piece.y.device(), home);
              EXPECT_EQ(piece.examples(), rows / k + (r < rows % k ? 1 : 0));
              EXPECT_TRUE(data::to_device(piece, home).x.is_same(piece.x)) << "no copy there";
              for (float v : piece.x.to_vector<float>()) x.push_back(v);
              for (auto v : piece.y.to_vector<std::int64_t>()) y.push_back(v);
            }
            EXPECT_EQ(x, xs[i]) << "batch " << i << ", part " << p << " of " << parts;
            EXPECT_EQ(y, ys[i]) << "batch " << i << ", part " << p << " of " << parts;
            ++i;
          }
        }
        EXPECT_EQ(i, xs.size()) << "every piece list has every batch";
      }
    }
  }
}

TEST_P(LoaderSplit, RefusesNoDevicesAndMissingParts) {
  data::DataLoader loader = make_loader(0);
  expect_throw_with<Error>([&] { loader.split(0, 1, {}); },
                           {"[DataLoader::split] needs at least one device"});
  expect_throw_with<Error>([&] { loader.split(1, 1, {device()}); },
                           {"[DataLoader::split] part 1 of 1 does not exist", "[0, 1)"});
}

TESSERA_INSTANTIATE_DEVICE_SUITE(LoaderSplit);

}  // namespace
}  // namespace tessera

// DataLoader::split: one piece of each batch per device, gathered straight into the memory of
// its device where the host writes it (CPU devices, by the device's own queue when it has
// one), so moving it there copies nothing; the pieces stacked are the shard of the same part
// (same epoch order and values).
#include <atomic>
#include <chrono>
#include <numeric>
#include <thread>

#include "core/host_fill.h"

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

// Note [Gathering on the devices]: a piece gathered by its device's queue is copied elsewhere
// only after that gather, though to_device skips the wait for batches the host filled. The
// device is held back first (by work of its own that waits for this thread), so a copy that
// did not wait would read the piece before its rows are there.
TEST_P(LoaderSplit, APieceGatheredOnItsDeviceIsCopiedAfterTheGather) {
  const std::vector<Device> devices = same_kind_devices();
  if (devices.size() < 2 || !devices[0].is_cpu()) GTEST_SKIP() << "needs two CPU devices";
  AllowSync deliberate;  // the test's own reads
  const std::vector<Device> pair{devices[0], devices[1]};
  data::DataLoader reference = make_loader(0), loader = make_loader(0);
  const data::Batch whole = *reference.begin();
  std::atomic<bool> open{false};
  // Inline (no queue) the hold runs here; the thread below releases it either way.
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    open = true;
  });
  detail::fill_in_device_order(pair[1], "test", "a hold", {}, [&](const std::vector<Tensor>&) {
    while (!open.load()) std::this_thread::sleep_for(std::chrono::microseconds(100));
  });
  auto pieces_it = loader.split(0, 1, pair).begin();
  const std::vector<data::Batch>& pieces = *pieces_it;
  const data::Batch moved = data::to_device(pieces[1], pair[0]);
  const std::vector<float> got = moved.x.to_vector<float>();
  opener.join();
  const std::vector<float> all = whole.x.to_vector<float>();
  const std::vector<float> second(all.begin() + static_cast<std::ptrdiff_t>(all.size() / 2),
                                  all.end());
  EXPECT_EQ(got, second) << "the copy read the piece before its device gathered it";
}

// Gathering a piece is host work on the device's queue: a replay would not gather the next
// batch, so it is refused while the device records a graph.
TEST_P(LoaderSplit, GatheringWhileTheDeviceRecordsIsRefused) {
  if (!device().is_cpu()) GTEST_SKIP() << "a GPU's piece is gathered on the host";
  data::DataLoader loader = make_loader(0);
  expect_throw_with<GraphCaptureError>(
      [&] {
        const Graph graph =
            Graph::capture(device(), [&] { loader.split(0, 1, {device()}).begin(); });
      },
      {"[DataLoader]", "is capturing a graph", "gathering a batch"});
  // The device is usable afterwards.
  AllowSync deliberate;
  EXPECT_EQ((*loader.split(0, 1, {device()}).begin())[0].examples(), 10);
}

TESSERA_INSTANTIATE_DEVICE_SUITE(LoaderSplit);

}  // namespace
}  // namespace tessera

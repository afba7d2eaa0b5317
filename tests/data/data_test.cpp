// IDX files (plain and gzipped, and every kind of broken one), Fashion-MNIST's files when
// installed, and the DataLoader's batches.
#include <fmt/format.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <set>
#include <sstream>
#include <string>
#include <tuple>

#include "support/device_test.h"
#include "support/fifo.h"
#include "support/random_images.h"
#include "support/temp_dir.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing::expect_throw_with;

class DataFiles : public ::testing::Test {
 protected:
  fs::path write(const std::string& name, const std::string& bytes, bool gzip = false) {
    const fs::path p = dir_ / name;
    if (gzip) {
      gzFile f = gzopen(p.c_str(), "wb");
      gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
      gzclose(f);
    } else {
      std::ofstream(p, std::ios::binary) << bytes;
    }
    return p;
  }
  testing::TempDir scratch_{"tessera-data"};
  fs::path dir_ = scratch_.path();
};

// An IDX file of unsigned bytes with these dims and data.
std::string idx(const std::vector<std::uint32_t>& dims, const std::string& data) {
  std::string out{'\0', '\0', '\x08', static_cast<char>(dims.size())};
  for (std::uint32_t d : dims) {
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<char>((d >> s) & 0xff));
  }
  return out + data;
}

TEST_F(DataFiles, ReadsPlainAndGzippedIdx) {
  const std::string data = {1, 2, 3, 4, 5, static_cast<char>(250)};
  for (bool gz : {false, true}) {
    const Tensor t = data::read_idx(write(gz ? "a.gz" : "a", idx({2, 3}, data), gz));
    EXPECT_EQ(t.dtype(), kUInt8);
    EXPECT_EQ(t.shape(), Shape({2, 3}));
    EXPECT_EQ(t.to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 2, 3, 4, 5, 250}));
  }
}

TEST_F(DataFiles, BrokenIdxFilesNameTheFileAndTheProblem) {
  auto expect_bad = [&](const std::string& bytes, bool gz, const std::string& fragment) {
    const fs::path p = write("bad", bytes, gz);
    expect_throw_with<IOError>([&] { data::read_idx(p); }, {"[read_idx]", p.string(), fragment});
  };
  const std::string full = idx({2, 3}, std::string(6, 'x'));
  expect_bad(full.substr(0, full.size() - 2), false, "truncated");
  expect_bad(full.substr(0, full.size() - 2), true, "truncated");
  expect_bad(full.substr(0, 2), false, "magic number");
  expect_bad(full + "zz", false, "bytes after");
  expect_bad(std::string{'\1', '\0', '\x08', '\1', 0, 0, 0, 0}, false, "bad magic number");
  expect_bad(std::string{'\0', '\0', '\x0d', '\1', 0, 0, 0, 0}, false, "element type 0x0d");
  expect_bad(std::string{'\0', '\0', '\x08', '\0'}, false, "0 dims");
  // Dims whose product wraps past 2^64 (to 0) are caught before it wraps.
  expect_bad(idx({1U << 20, 1U << 20, 1U << 24}, ""), false, "more than 2^40 bytes");
  expect_bad(idx({1U << 31, 1U << 31, 1U << 31, 8}, ""), false, "more than 2^40 bytes");
  // A gzip stream whose compressed bytes are cut short is caught as well.
  write("whole.gz", idx({64, 64}, std::string(4096, 'q')), true);
  std::ifstream in(dir_ / "whole.gz", std::ios::binary);
  const std::string gz{std::istreambuf_iterator<char>(in), {}};
  expect_bad(gz.substr(0, gz.size() / 2), false, "");
  expect_throw_with<IOError>([&] { data::read_idx(dir_ / "absent"); }, {"cannot open it"});
}

TEST_F(DataFiles, FashionMnistChecksItsFiles) {
  const std::string images = idx({3, 28, 28}, std::string(3 * 784, '\7'));
  write("train-images-idx3-ubyte.gz", images, true);
  write("train-labels-idx1-ubyte.gz", idx({3}, std::string{0, 9, 4}), true);
  write("t10k-images-idx3-ubyte", idx({2, 28, 28}, std::string(2 * 784, '\0')));
  write("t10k-labels-idx1-ubyte", idx({2}, std::string{1, 2}));
  const data::FashionMnist d = data::load_fashion_mnist(dir_);
  EXPECT_EQ(d.train_images.shape(), Shape({3, 28, 28}));
  EXPECT_EQ(d.train_labels.dtype(), kInt64);
  EXPECT_EQ(d.test_labels.to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 2}));
  write("t10k-labels-idx1-ubyte", idx({2}, std::string{1, 12}));
  expect_throw_with<IOError>([&] { data::load_fashion_mnist(dir_); }, {"label 12 of example 1"});
  write("t10k-labels-idx1-ubyte", idx({3}, std::string{1, 2, 3}));
  expect_throw_with<IOError>([&] { data::load_fashion_mnist(dir_); },
                             {"3 labels for the 2 images"});
  write("t10k-labels-idx1-ubyte", idx({2, 1}, std::string{1, 2}));
  expect_throw_with<IOError>([&] { data::load_fashion_mnist(dir_); },
                             {"holds shape [2, 1], not [N] labels"});
  expect_throw_with<IOError>(
      [&] { data::load_fashion_mnist(dir_ / "nowhere"); },
      {"the data directory '" + (dir_ / "nowhere").string() + "' does not exist",
       "dataset-fashion-mnist", "TESSERA_DATA_DIR"});
  expect_throw_with<IOError>([&] { data::load_fashion_mnist(dir_ / "t10k-labels-idx1-ubyte"); },
                             {"is not a directory"});
}

// Note [Bounded IDX reads]: a header declaring more than the file can hold is refused
// before anything is allocated or inflated.
TEST_F(DataFiles, DeclaredSizesAreCheckedBeforeReading) {
  // 40-odd gzip bytes cannot inflate to 78 MB: refused from the header.
  const fs::path bomb = write("bomb.gz", idx({100000, 28, 28}, std::string(10, '\0')), true);
  const MemoryStats before = memory_stats(cpu());
  reset_peak_memory(cpu());
  expect_throw_with<IOError>([&] { data::read_idx(bomb); },
                             {"[read_idx]",
                              "declares shape [100000, 28, 28] (78400000 bytes of "
                              "data), more than its",
                              "gzip bytes can inflate to"});
  EXPECT_LT(memory_stats(cpu()).peak, before.in_use + (std::size_t{1} << 20));
  const fs::path plain = write("plain", idx({1000, 1000}, std::string(10, '\0')));
  expect_throw_with<IOError>([&] { data::read_idx(plain); },
                             {"declares shape [1000, 1000] (1000000 bytes of data) but the file "
                              "holds 10 after the header (truncated)"});
}

// A file that honestly holds 20,000 images is not read when its labels say otherwise.
TEST_F(DataFiles, FashionMnistChecksTheHeadersAgainstEachOtherFirst) {
  write("train-images-idx3-ubyte.gz", idx({20000, 28, 28}, std::string(20000 * 784, '\0')), true);
  write("train-labels-idx1-ubyte.gz", idx({3}, std::string{0, 9, 4}), true);
  const MemoryStats before = memory_stats(cpu());
  reset_peak_memory(cpu());
  expect_throw_with<IOError>([&] { data::load_fashion_mnist(dir_); },
                             {"holds 3 labels for the 20000 images"});
  EXPECT_LT(memory_stats(cpu()).peak, before.in_use + (std::size_t{1} << 20))
      << "the images were read before the labels' header was checked";
}

TEST_F(DataFiles, AGzipStreamMustEndTheFile) {
  const std::string content = idx({2, 3}, std::string(6, 'x'));
  const fs::path p = write("a.gz", content, true);
  std::ofstream(p, std::ios::binary | std::ios::app) << "garbage";
  expect_throw_with<IOError>([&] { data::read_idx(p); },
                             {"[read_idx]",
                              "has bytes after the end of its gzip stream that are "
                              "not another gzip member"});
  // Inflating stops one byte past what the header declares, however much more there is.
  const fs::path longer = write("b.gz", content + std::string(5'000'000, 'y'), true);
  expect_throw_with<IOError>([&] { data::read_idx(longer); },
                             {"has bytes after the 6 its header declares (shape [2, 3])"});
  // Several gzip members are one stream (gzip's format allows it).
  write("first.gz", content.substr(0, 9), true);
  write("second.gz", content.substr(9), true);
  std::ifstream first(dir_ / "first.gz", std::ios::binary),
      second(dir_ / "second.gz", std::ios::binary);
  std::ostringstream both;
  both << first.rdbuf() << second.rdbuf();
  const Tensor t = data::read_idx(write("both.gz", both.str()));
  EXPECT_EQ(t.shape(), Shape({2, 3}));
  EXPECT_EQ(t.to_vector<std::int64_t>(), std::vector<std::int64_t>(6, 'x'));
}

// An empty data set would "train" with a loss of 0: refused where it is made.
TEST_F(DataFiles, AnEmptyDataSetIsRefused) {
  write("train-images-idx3-ubyte", idx({0, 28, 28}, ""));
  write("train-labels-idx1-ubyte", idx({0}, ""));
  expect_throw_with<IOError>([&] { data::load_fashion_mnist(dir_); },
                             {"[load_fashion_mnist]",
                              "train-images-idx3-ubyte' holds no images "
                              "(shape [0, 28, 28]): the data set is empty"});
  expect_throw_with<ShapeError>(
      [&] {
        data::DataLoader(zeros({0, 2, 2}, kUInt8), zeros({0}, kInt64));
      },
      {"[DataLoader] the data set is empty (images [0, 2, 2])"});
}

// Every file-system failure is an IOError with the path and the system's reason, never a
// std::filesystem::filesystem_error escaping to abort the program.
TEST_F(DataFiles, BadDataDirectoriesAreIOErrors) {
  fs::create_symlink("loop_b", dir_ / "loop_a");
  fs::create_symlink("loop_a", dir_ / "loop_b");
  expect_throw_with<IOError>(
      [&] { data::load_fashion_mnist(dir_ / "loop_a"); },
      {"[load_fashion_mnist]", "loop_a': cannot look it up", "Too many levels of symbolic links"});
  const fs::path too_long = dir_ / std::string(300, 'x');
  expect_throw_with<IOError>([&] { data::load_fashion_mnist(too_long); },
                             {"[load_fashion_mnist]", "File name too long"});
  write("plain-file", "not a directory");
  expect_throw_with<IOError>([&] { data::load_fashion_mnist(dir_ / "plain-file"); },
                             {"[load_fashion_mnist]", "plain-file' is not a directory"});
  if (::geteuid() == 0)
    GTEST_SKIP() << "root reads any directory: the unreadable case needs a user";
  fs::create_directory(dir_ / "locked");
  fs::permissions(dir_ / "locked", fs::perms::none);
  expect_throw_with<IOError>([&] { data::load_fashion_mnist(dir_ / "locked"); },
                             {"[load_fashion_mnist]", "Permission denied"});
  fs::permissions(dir_ / "locked", fs::perms::owner_all);
}

// A FIFO would block gzread for ever: refused before it is opened, naming what it is.
TEST_F(DataFiles, FifosAreRefusedNotRead) {
  ASSERT_TRUE(testing::make_fifo(dir_ / "pipe-idx"));
  testing::FifoUnblocker unblock(dir_ / "pipe-idx");
  expect_throw_with<IOError>(
      [&] { data::read_idx(dir_ / "pipe-idx"); },
      {"[read_idx]", "pipe-idx' is a FIFO (named pipe), not a regular file"});
  ASSERT_TRUE(testing::make_fifo(dir_ / "train-images-idx3-ubyte.gz"));
  testing::FifoUnblocker unblock_images(dir_ / "train-images-idx3-ubyte.gz");
  write("train-labels-idx1-ubyte.gz", idx({1}, std::string{0}), true);
  expect_throw_with<IOError>([&] { data::load_fashion_mnist(dir_); },
                             {"train-images-idx3-ubyte.gz' is a FIFO (named pipe)"});
  fs::create_directory(dir_ / "d");
  expect_throw_with<IOError>([&] { data::read_idx(dir_ / "d"); },
                             {"is a directory, not a regular file"});
}

TEST(FashionMnist, TheInstalledDataSetHasItsSizes) {
  if (!fs::exists(data::default_fashion_mnist_dir() / "train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "no Fashion-MNIST at " << data::default_fashion_mnist_dir()
                 << " (scripts/setup installs Debian's dataset-fashion-mnist)";
  }
  const data::FashionMnist d = data::load_fashion_mnist();
  EXPECT_EQ(d.train_images.shape(), Shape({60000, 28, 28}));
  EXPECT_EQ(d.test_images.shape(), Shape({10000, 28, 28}));
  EXPECT_EQ(d.test_labels.numel(), 10000);
  EXPECT_EQ(data::fashion_mnist_classes()[9], "ankle boot");
}

TEST(DataLoader, BatchesCoverEveryExampleOnceAndRepeatWithTheSeed) {
  const std::int64_t n = 10;
  std::vector<std::uint8_t> pixels(n * 4);
  for (std::int64_t i = 0; i < n; ++i) pixels[i * 4] = static_cast<std::uint8_t>(i * 10);
  std::vector<std::int64_t> labels(n);
  std::iota(labels.begin(), labels.end(), 0);
  const Tensor images = from_vector(pixels, {n, 2, 2});
  data::DataLoader loader(images, from_vector(labels, {n}), {.batch_size = 4, .seed = 7});
  EXPECT_EQ(loader.batches(), 3);
  auto epoch = [&] {
    std::vector<std::int64_t> seen;
    for (const data::Batch& b : loader) {
      EXPECT_EQ(b.x.dim(), 4);
      EXPECT_EQ(b.x.size(1), 1) << "a channel dim is added to [N, H, W] images";
      const auto x = b.x.to_vector<double>();
      const auto y = b.y.to_vector<std::int64_t>();
      for (std::size_t k = 0; k < y.size(); ++k) {
        EXPECT_NEAR(x[k * 4], y[k] * 10 / 255.0, 1e-6) << "image and label stay paired";
        seen.push_back(y[k]);
      }
    }
    return seen;
  };
  const auto first = epoch(), second = epoch();
  EXPECT_EQ(std::set<std::int64_t>(first.begin(), first.end()).size(), 10u);
  EXPECT_NE(first, second) << "each epoch reshuffles";
  data::DataLoader again(images, from_vector(labels, {n}), {.batch_size = 4, .seed = 7});
  std::vector<std::int64_t> replay;
  for (const data::Batch& b : again) {
    for (auto v : b.y.to_vector<std::int64_t>()) replay.push_back(v);
  }
  EXPECT_EQ(replay, first) << "the same seed gives the same order";
  data::DataLoader dropped(images, from_vector(labels, {n}), {.batch_size = 4, .drop_last = true});
  EXPECT_EQ(dropped.batches(), 2);
  data::DataLoader ordered(images, from_vector(labels, {n}),
                           {.batch_size = 3, .shuffle = false, .mean = 0.5, .std = 0.5});
  const data::Batch b0 = *ordered.begin();
  EXPECT_EQ(b0.y.to_vector<std::int64_t>(), (std::vector<std::int64_t>{0, 1, 2}));
  EXPECT_NEAR(b0.x.to_vector<double>()[4], (10 / 255.0 - 0.5) / 0.5, 1e-6);
  expect_throw_with<DtypeError>(
      [&] {
        data::DataLoader(zeros({4, 2}), from_vector(labels, {n}));
      },
      {"uint8"});
  expect_throw_with<ShapeError>(
      [&] { data::DataLoader(images, from_vector(labels, {n}).narrow(0, 0, 3)); },
      {"labels must be [10], one per image, got shape [3]"});
  // Each error is of its kind and says what it is about.
  expect_throw_with<DtypeError>(
      [&] { data::DataLoader(images, from_vector(labels, {n}).to(kFloat32)); },
      {"labels must be integers (class indices), got float32", ".to(kInt64)"});
  expect_throw_with<ShapeError>(
      [&] { data::DataLoader(zeros({n}, {kUInt8}), from_vector(labels, {n})); },
      {"images must be uint8 [N, ...]", "got shape [10]"});
  expect_throw_with<ShapeError>(
      [&] {
        data::DataLoader(std::vector<Tensor>{zeros({4, 3}), tensor(1.0)});
      },
      {"[DataLoader] tensors[1] is 0-dim"});
  expect_throw_with<ShapeError>(
      [&] {
        data::DataLoader(std::vector<Tensor>{zeros({4, 3}), zeros({5})});
      },
      {"tensors[0] is [4, 3], tensors[1] is [5]"});
  expect_throw_with<Error>(
      [&] { data::DataLoader(images, from_vector(labels, {n}), {.batch_size = 0}); },
      {"[DataLoader] batch_size (0) must be positive"});
  // A NaN or infinite mean or std made every batch NaN, infinite or zero, with no error.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (const auto& [mean, sd, shown] :
       std::vector<std::tuple<double, double, std::string>>{{nan, 1, "mean (nan) and std (1)"},
                                                            {inf, 1, "mean (inf) and std (1)"},
                                                            {0, inf, "mean (0) and std (inf)"},
                                                            {0, nan, "mean (0) and std (nan)"},
                                                            {0, 0, "mean (0) and std (0)"}}) {
    expect_throw_with<Error>(
        [&] { data::DataLoader(images, from_vector(labels, {n}), {.mean = mean, .std = sd}); },
        {"[DataLoader] " + shown + " must be finite numbers and std positive",
         "(pixel / 255 - mean) / std"});
  }
}

// "All the data in one batch" by a batch_size of INT64_MAX: (n + b - 1) / b overflowed to no
// batches, or to -1, an epoch that never ended.
TEST(DataLoader, ABatchSizeNearTheLargestIntegerGivesOneBatch) {
  const auto [images, labels] = testing::random_images(10);
  for (const std::int64_t b :
       {std::numeric_limits<std::int64_t>::max(), std::numeric_limits<std::int64_t>::max() - 5}) {
    data::DataLoader loader(images, labels, {.batch_size = b, .shuffle = false});
    EXPECT_EQ(loader.batches(), 1);
    std::int64_t steps = 0, seen = 0;
    for (const data::Batch& batch : loader) {
      ++steps;
      seen += batch.examples();
    }
    EXPECT_EQ(steps, 1);
    EXPECT_EQ(seen, 10);
    EXPECT_EQ(data::DataLoader(images, labels, {.batch_size = b, .drop_last = true}).batches(), 0);
  }
}

TEST(DataLoader, AnEpochKeepsItsOrderWhenTheLoaderBeginsAnother) {
  // A look at the next epoch's first batch, or a nested loop over the same loader, starts
  // another order; the epoch being iterated still visits every example once, with or without
  // prefetching.
  const std::int64_t n = 20;
  std::vector<std::int64_t> ids(static_cast<std::size_t>(n));
  std::iota(ids.begin(), ids.end(), 0);
  for (const std::int64_t prefetch : {0, 2}) {
    data::DataLoader loader(std::vector<Tensor>{from_vector(ids, {n})},
                            {.batch_size = 5, .seed = 3, .prefetch = prefetch});
    std::vector<std::int64_t> seen;
    int batch = 0;
    for (const data::Batch& b : loader) {
      for (const std::int64_t v : b.x.to_vector<std::int64_t>()) seen.push_back(v);
      if (batch++ == 1) EXPECT_EQ(loader.begin()->x.size(0), 5);
    }
    EXPECT_EQ(seen.size(), static_cast<std::size_t>(n)) << "prefetch " << prefetch;
    EXPECT_EQ(std::set<std::int64_t>(seen.begin(), seen.end()).size(), static_cast<std::size_t>(n))
        << "prefetch " << prefetch << ": the epoch went on in the other epoch's order";
  }
}

// DataLoader::shard: the parts of a batch, stacked in part order, are the whole batch (same
// epoch order, same values), with and without prefetching, for batches that do not divide.
TEST(DataLoader, ShardsStackedAreTheWholeBatch) {
  const std::int64_t n = 23;
  std::vector<std::uint8_t> pixels(static_cast<std::size_t>(n * 4));
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<std::uint8_t>(i * 7);
  std::vector<std::int64_t> labels(static_cast<std::size_t>(n));
  std::iota(labels.begin(), labels.end(), 100);
  const Tensor images = from_vector(pixels, {n, 2, 2});
  for (const std::int64_t prefetch : {0, 2}) {
    const data::LoaderOptions options{.batch_size = 10, .seed = 3, .prefetch = prefetch};
    data::DataLoader whole(images, from_vector(labels, {n}), options);
    std::vector<std::vector<float>> xs;
    std::vector<std::vector<std::int64_t>> ys;
    for (int epoch = 0; epoch < 2; ++epoch) {
      for (const data::Batch& b : whole) {
        xs.push_back(b.x.to_vector<float>());
        ys.push_back(b.y.to_vector<std::int64_t>());
      }
    }
    for (const std::int64_t parts : {1, 2, 3, 4}) {
      std::vector<data::DataLoader> loaders;
      for (std::int64_t p = 0; p < parts; ++p) {
        loaders.emplace_back(images, from_vector(labels, {n}), options);
      }
      std::vector<std::vector<float>> stacked_x(xs.size());
      std::vector<std::vector<std::int64_t>> stacked_y(ys.size());
      for (std::int64_t p = 0; p < parts; ++p) {
        std::size_t i = 0;
        for (int epoch = 0; epoch < 2; ++epoch) {
          std::int64_t batch = 0;
          for (const data::Batch& mine : loaders[static_cast<std::size_t>(p)].shard(p, parts)) {
            const std::int64_t length = loaders[static_cast<std::size_t>(p)].batch_length(batch++);
            EXPECT_EQ(mine.y.size(0), length / parts + (p < length % parts ? 1 : 0))
                << "part " << p << " of " << parts << ", batch of " << length;
            EXPECT_EQ(mine.x.size(0), mine.y.size(0));
            for (float v : mine.x.to_vector<float>()) stacked_x[i].push_back(v);
            for (auto v : mine.y.to_vector<std::int64_t>()) stacked_y[i].push_back(v);
            ++i;
          }
        }
        EXPECT_EQ(i, xs.size()) << "every part has every batch";
      }
      EXPECT_EQ(stacked_x, xs) << parts << " parts, prefetch " << prefetch;
      EXPECT_EQ(stacked_y, ys) << parts << " parts, prefetch " << prefetch;
    }
  }
  data::DataLoader loader(images, from_vector(labels, {n}), {.batch_size = 10});
  EXPECT_EQ(loader.batch_length(0), 10);
  EXPECT_EQ(loader.batch_length(2), 3) << "the short last batch";
  expect_throw_with<Error>([&] { loader.shard(2, 2); },
                           {"[DataLoader::shard] part 2 of 2 does not exist", "[0, 2)"});
  expect_throw_with<Error>([&] { loader.shard(0, 0); }, {"part 0 of 0 does not exist"});
  expect_throw_with<Error>([&] { loader.batch_length(3); },
                           {"[DataLoader::batch_length] batch 3 does not exist", "3 batches"});
  // batch(i) read outside its epoch's order (a crash at -1, other rows at -3, empty at 3).
  for (const std::int64_t i : {-1, -3, 3, 5}) {
    expect_throw_with<Error>([&] { (void)loader.batch(i); },
                             {fmt::format("[DataLoader::batch] batch {} does not exist", i),
                              "an epoch has 3 batches (0 to 2)"});
  }
  EXPECT_EQ(loader.batch(2).examples(), 3);
}

TEST(DataLoader, ToDeviceMovesABatchWithoutWaitingForItsQueue) {
  const std::int64_t n = 6;
  std::vector<std::uint8_t> pixels(static_cast<std::size_t>(n * 4));
  std::iota(pixels.begin(), pixels.end(), 0);
  const Tensor images = from_vector(pixels, {n, 2, 2});
  std::vector<std::int64_t> labels(static_cast<std::size_t>(n));
  std::iota(labels.begin(), labels.end(), 0);
  data::DataLoader loader(images, from_vector(labels, {n}), {.batch_size = 4, .shuffle = false});
  const data::Batch b = loader.batch(0);
  for (Device d : available_devices()) {
    const data::Batch moved = data::to_device(b, d);
    EXPECT_EQ(moved.x.device(), d);
    EXPECT_EQ(moved.x.to_vector<float>(), b.x.to_vector<float>());
    EXPECT_EQ(moved.y.to_vector<std::int64_t>(), b.y.to_vector<std::int64_t>());
    if (d == b.x.device()) EXPECT_TRUE(moved.x.is_same(b.x));  // already there: no copy
  }
}

}  // namespace
}  // namespace tessera

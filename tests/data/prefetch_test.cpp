// The DataLoader's prefetch thread (Note [Prefetching batches] in src/data/prefetcher.cpp):
// the same batches bit for bit as without it, errors on the thread rethrown on the iterating
// thread, and no hang or leak when an epoch is abandoned (the suite also runs under ASan).
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <typeinfo>

#include "data/prefetcher.h"
#include "support/device_test.h"
#include "support/random_images.h"

namespace tessera {
namespace {

using testing::DeviceTest;
using testing::expect_throw_with;

// Every batch of `epochs` epochs, as raw bytes (x then y), in order.
std::vector<std::vector<char>> all_batches(data::DataLoader& loader, int epochs) {
  std::vector<std::vector<char>> out;
  for (int e = 0; e < epochs; ++e) {
    for (const data::Batch& b : loader) {
      const auto x = b.x.to_vector<float>();
      const auto y = b.y.to_vector<std::int64_t>();
      std::vector<char> bytes(x.size() * sizeof(float) + y.size() * sizeof(std::int64_t));
      std::memcpy(bytes.data(), x.data(), x.size() * sizeof(float));
      std::memcpy(bytes.data() + x.size() * sizeof(float), y.data(),
                  y.size() * sizeof(std::int64_t));
      out.push_back(std::move(bytes));
    }
  }
  return out;
}

TEST(DataLoaderPrefetch, GivesTheSameBatchesBitForBitAsWithout) {
  const auto [images, labels] = testing::random_images(1000);
  for (const data::LoaderOptions base :
       {data::LoaderOptions{.batch_size = 64, .seed = 5, .mean = 0.3, .std = 0.7},
        data::LoaderOptions{.batch_size = 64, .drop_last = true, .seed = 9},
        data::LoaderOptions{.batch_size = 100, .shuffle = false},
        data::LoaderOptions{.batch_size = 5000}}) {
    data::LoaderOptions off = base;
    off.prefetch = 0;
    data::DataLoader plain(images, labels, off);
    const auto expected = all_batches(plain, 3);
    ASSERT_EQ(expected.size(), static_cast<std::size_t>(3 * plain.batches()));
    for (const std::int64_t depth : {1, 2, 7}) {
      data::LoaderOptions on = base;
      on.prefetch = depth;
      data::DataLoader ahead(images, labels, on);
      EXPECT_TRUE(all_batches(ahead, 3) == expected)
          << "prefetch " << depth << ", batch size " << base.batch_size;
    }
  }
  data::DataLoader by_default(images, labels);
  EXPECT_EQ(by_default.prefetch(), num_gpus() > 0 ? 2 : 0) << "on by default with a GPU only";
  expect_throw_with<Error>([&] { data::DataLoader(images, labels, {.prefetch = -2}); },
                           {"[DataLoader] prefetch (-2) must be -1 (2 with a GPU, else 0), 0"});
}

// An allocation the thread cannot make (the CPU's memory limit) is an OutOfMemoryError on the
// iterating thread, naming the batch and the epoch, and again on every later step.
TEST(DataLoaderPrefetch, AnErrorOnTheThreadSurfacesOnTheIteratingThread) {
  const auto [images, labels] = testing::random_images(640);
  data::DataLoader loader(images, labels, {.batch_size = 64, .seed = 1, .prefetch = 2});
  struct Unlimit {
    ~Unlimit() { set_memory_limit(cpu(), SIZE_MAX); }
  } unlimit;
  // The first batch fails: begin() throws.
  set_memory_limit(cpu(), 1);
  expect_throw_with<OutOfMemoryError>(
      [&] { loader.begin(); },
      {"[DataLoader] the prefetch thread failed to gather batch 0 of 10 in epoch 0 (both "
       "0-based, as set_epoch counts): ",
       "[DataLoader] out of memory on cpu"});
  set_memory_limit(cpu(), SIZE_MAX);
  // A later batch fails: the batches before it arrive, then the step that needs it throws.
  std::int64_t received = 0;
  try {
    for (auto it = loader.begin(); it != loader.end(); ++it) {
      EXPECT_EQ(it->y.size(0), 64);
      if (++received == 2) set_memory_limit(cpu(), 1);
    }
    ADD_FAILURE() << "expected an OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("[DataLoader] the prefetch thread failed to gather batch"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("of 10 in epoch 1 (both 0-based"), std::string::npos)
        << e.what();
  }
  EXPECT_GE(received, 2);
  EXPECT_LT(received, 10);
  set_memory_limit(cpu(), SIZE_MAX);
  // The error repeats for an iterator that is advanced again; a new epoch starts afresh.
  auto it = loader.begin();
  set_memory_limit(cpu(), 1);
  EXPECT_THROW(
      {
        for (int k = 0; k < 10; ++k) ++it;
      },
      OutOfMemoryError);
  EXPECT_THROW(++it, OutOfMemoryError);
  set_memory_limit(cpu(), SIZE_MAX);
  std::int64_t batches = 0;
  for (const data::Batch& b : loader) batches += b.y.size(0) > 0 ? 1 : 0;
  EXPECT_EQ(batches, 10);
}

// Leaving an epoch early (a break, an exception in the step, an epoch begun and dropped)
// stops the thread at once; ASan and the test's own time say nothing leaks or hangs.
TEST(DataLoaderPrefetch, AnAbandonedEpochStopsItsThread) {
  const auto [images, labels] = testing::random_images(4096);
  data::DataLoader loader(images, labels, {.batch_size = 16, .seed = 2, .prefetch = 3});
  const auto start = std::chrono::steady_clock::now();
  for (int e = 0; e < 50; ++e) {
    for (const data::Batch& b : loader) {
      (void)b;
      break;
    }
    (void)loader.begin();  // begun and dropped at once
  }
  try {
    for (const data::Batch& b : loader) {
      if (b.y.size(0) > 0) throw std::runtime_error("the step failed");
    }
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "the step failed");
  }
  // 100 epochs dropped after one batch cost about 100 batches, not 25,600.
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 20.0);
  std::int64_t seen = 0;
  for (const data::Batch& b : loader) seen += b.y.size(0);
  EXPECT_EQ(seen, 4096) << "the loader works after abandoned epochs";
}

// Each of tessera's error types comes back from the thread as itself, its message behind the
// batch and the epoch (IndexError, GraphCaptureError and SyncError came back as plain Error).
template <typename E>
void expect_rethrown_as_itself() {
  detail::Prefetcher prefetcher(3, 1, 0, [](std::int64_t) -> detail::Prefetcher::Pieces {
    throw E("the gather's own words");
  });
  try {
    prefetcher.next(0);
    ADD_FAILURE() << "expected an exception";
  } catch (const std::exception& e) {
    EXPECT_EQ(typeid(e), typeid(E)) << e.what();
    testing::expect_says(e.what(),
                         {"failed to gather batch 0 of 3 in epoch 0", "the gather's own words"});
  }
}

TEST(DataLoaderPrefetch, EveryErrorTypeComesBackAsItself) {
  expect_rethrown_as_itself<DeviceMismatchError>();
  expect_rethrown_as_itself<DeviceError>();
  expect_rethrown_as_itself<ShapeError>();
  expect_rethrown_as_itself<DtypeError>();
  expect_rethrown_as_itself<IndexError>();
  expect_rethrown_as_itself<OutOfMemoryError>();
  expect_rethrown_as_itself<IOError>();
  expect_rethrown_as_itself<NonFiniteError>();
  expect_rethrown_as_itself<GraphCaptureError>();
  expect_rethrown_as_itself<SyncError>();
  expect_rethrown_as_itself<Error>();
}

// An iterator may outlive its loader (declared before it, kept past its scope): its thread,
// still gathering ahead, read the freed loader (ASan in CI reports it: a heap-use-after-free
// in DataLoader::gather_rows before the fix).
TEST(DataLoaderPrefetch, AnIteratorOutlivingItsLoaderKeepsItsThreadOffTheFreedLoader) {
  // Batches large enough that the thread begins batch 2 after the loader is gone.
  auto loader = std::make_unique<data::DataLoader>(
      zeros({30000, 28, 28}, kUInt8), zeros({30000}, kInt64),
      data::LoaderOptions{.batch_size = 10000, .seed = 4, .prefetch = 2});
  {
    auto it = loader->begin();  // batch 0 is taken; the thread gathers batches 1 and 2
    loader.reset();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the thread goes on
  }
  SUCCEED() << "under ASan, a read of the freed loader fails the run here";
}

// Copies of one iterator share its epoch's prefetch thread: advancing both is a usage error
// (it gave each copy other batches, then an internal error at the epoch's end).
TEST(DataLoaderPrefetch, AdvancingTwoCopiesOfAnIteratorIsRefused) {
  const auto [images, labels] = testing::random_images(40);
  data::DataLoader loader(images, labels, {.batch_size = 10, .seed = 2, .prefetch = 2});
  auto a = loader.begin();
  auto b = a;
  ++a;
  testing::expect_throw_with<Error>(
      [&] { ++b; }, {"[DataLoader] batch 1 was asked of the prefetch thread of epoch 0 (0-based), "
                     "which has 2 next",
                     "Advance only one copy"});
}

class PrefetchOnDevice : public DeviceTest {};

// Training on prefetched batches gives the same losses, bit for bit, as training on batches
// gathered on the step's thread; a step that throws ends the fit without a hang.
TEST_P(PrefetchOnDevice, TrainingGivesTheSameLossesAndStopsCleanly) {
  const auto [images, labels] = testing::random_images(512);
  const auto losses = [&, images = images, labels = labels](std::int64_t prefetch) {
    data::DataLoader train_data(images, labels,
                                {.batch_size = 48, .seed = 4, .prefetch = prefetch});
    manual_seed(0);
    nn::Sequential net(nn::Flatten(), nn::Linear(64, 16), nn::ReLU(), nn::Linear(16, 4));
    optim::SGD opt(net.parameters(), {.lr = 0.2, .momentum = 0.9});
    train::Classifier task(net, opt);
    train::Trainer trainer({.max_epochs = 3, .progress = false, .device = device()});
    {
      SyncGuard strict(SyncMode::kError);  // prefetching adds no host wait to the steps
      trainer.fit(task, train_data);
    }
    return trainer.step_losses().to_vector<float>();
  };
  const std::vector<float> plain = losses(0);
  ASSERT_EQ(plain.size(), 3u * 11u);
  EXPECT_TRUE(losses(2) == plain);
  EXPECT_TRUE(losses(1) == plain);

  struct FailingTask : train::Classifier {
    using Classifier::Classifier;
    int steps = 0;
    train::StepResult training_step(const data::Batch& batch) override {
      if (++steps == 3) throw ShapeError("[test] the third step fails");
      return Classifier::training_step(batch);
    }
  };
  data::DataLoader train_data(images, labels, {.batch_size = 16, .seed = 4, .prefetch = 2});
  manual_seed(0);
  nn::Sequential net(nn::Flatten(), nn::Linear(64, 4));
  optim::SGD opt(net.parameters(), {.lr = 0.1});
  FailingTask task(net, opt);
  train::Trainer trainer({.max_epochs = 2, .progress = false, .device = device()});
  expect_throw_with<ShapeError>([&] { trainer.fit(task, train_data); }, {"the third step fails"});
  EXPECT_EQ(task.steps, 3);
}

TESSERA_INSTANTIATE_DEVICE_SUITE(PrefetchOnDevice);

}  // namespace
}  // namespace tessera

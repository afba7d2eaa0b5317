// Note [Memory freed in queue order]: on a CPU device with a work queue, a tensor the host
// drops while kernels that use it are still queued goes back to the allocator at once, and
// the next op's output on the same queue reuses it, so a host running ahead of its device
// holds one step's memory, not every queued step's; the results stay right.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "core/device_registry.h"
#include "core/host_fill.h"
#include "core/tensor_impl.h"
#include "support/device_test.h"
#include "tessera/data/loader.h"

namespace tessera {
namespace {

using testing::DeviceTest;

class QueueOrderMemory : public DeviceTest {
 protected:
  void SetUp() override {
    if (!device().is_cpu() || detail::cpu_options().count == 0 ||
        !detail::cpu_options().async_queues) {
      GTEST_SKIP() << "needs a logical CPU device with a work queue; CTest runs this suite with "
                      "TESSERA_CPU_DEVICES=2 (a GPU's allocator is stream-ordered by design)";
    }
  }
  // Holds the queue of `held` (the test's device by default) until the promise is set.
  std::promise<void> hold_queue(std::optional<Device> held = std::nullopt) {
    std::promise<void> go;
    const Device d = held.value_or(device());
    const Tensor token = empty({1}, d);
    detail::fill_in_device_order(
        d, "test", "holding the queue", {token},
        [gate = go.get_future().share()](const std::vector<Tensor>&) { gate.wait(); });
    return go;
  }
};

TEST_P(QueueOrderMemory, TemporariesDroppedBeforeTheirKernelsRunAreReusedInQueueOrder) {
  manual_seed(11);
  // An odd size, so blocks cached by earlier tests do not serve it.
  const Shape shape{331, 263};
  const Tensor a = randn(shape, device());
  const Tensor b = randn(shape, device());
  synchronize(device());
  empty_cache(device());
  const std::size_t before = memory_stats(device()).reserved;
  std::promise<void> go = hold_queue();
  constexpr int kSteps = 8;
  std::vector<Tensor> sums;
  for (int i = 0; i < kSteps; ++i) {
    const Tensor t = a * static_cast<double>(i + 1) + b;  // two temporaries of `shape`
    sums.push_back(t.sum());
  }
  const std::size_t grown = memory_stats(device()).reserved - before;
  go.set_value();
  const std::size_t block = a.nbytes();
  EXPECT_LT(grown, 3 * block) << "with the queue held, " << kSteps << " steps took "
                              << format_bytes(grown) << ", not about two blocks of "
                              << format_bytes(block) << ": dropped temporaries were not reused";
  const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  for (int i = 0; i < kSteps; ++i) {
    double expected = 0;
    for (std::size_t e = 0; e < av.size(); ++e) expected += av[e] * (i + 1) + bv[e];
    EXPECT_NEAR(sums[static_cast<std::size_t>(i)].item<double>(), expected,
                1e-4 * static_cast<double>(av.size()))
        << "step " << i;
  }
}

TEST_P(QueueOrderMemory, MemoryTheHostWritesIsNeverABlockQueuedWorkStillUses) {
  const Shape shape{257, 131};
  const Tensor a = ones(shape, device());
  synchronize(device());
  empty_cache(device());
  std::promise<void> go = hold_queue();
  const void* dropped = nullptr;
  {
    const Tensor t = a * 2.0;  // queued behind the held task; dropped at once
    dropped = detail::impl_of(t).data();
    const Tensor s = t.sum();
  }
  // What a loader or a file reader allocates (FirstWriter::kAnyone) and then fills on the
  // host while the queue is still held.
  const Tensor host = detail::make_tensor(shape, kFloat32, device(), "test");
  EXPECT_NE(static_cast<const void*>(detail::impl_of(host).data()), dropped)
      << "the host would write memory that the held multiply has yet to write";
  // An op's output, written by a kernel queued behind the multiply, may take it.
  const Tensor next = a * 3.0;
  EXPECT_EQ(static_cast<const void*>(detail::impl_of(next).data()), dropped);
  go.set_value();
  EXPECT_DOUBLE_EQ(next.sum().item<double>(), 3.0 * static_cast<double>(a.numel()));
}

// Memory freed outside the device's allocator (a pinned block) asks the backend how long the
// work queued so far may read it.
TEST_P(QueueOrderMemory, QueuedReadersLastUntilTheQueuedWorkHasRun) {
  detail::Backend& backend = detail::backend_of(device());
  synchronize(device());
  EXPECT_FALSE(backend.queued_readers(device().index())) << "nothing is queued";
  std::promise<void> go = hold_queue();
  const Tensor t = ones({64}, device()) * 2.0;  // queued behind the held task
  const detail::Backend::StillRead still_read = backend.queued_readers(device().index());
  ASSERT_TRUE(still_read);
  EXPECT_TRUE(still_read());
  go.set_value();
  synchronize(device());
  EXPECT_FALSE(still_read());
}

// A pinned batch on a logical CPU device (the DataLoader pins the batches it gathers on cpu()
// when there is a GPU) is dropped while the step that reads it is still queued; the next
// pinned block of its size must be another one, or the host writes the next batch under the
// step. Two-device runs on the H100 trained wrong values before.
TEST_P(QueueOrderMemory, APinnedBlockIsNotHandedOutUnderTheKernelsThatReadIt) {
  if (num_gpus() == 0) GTEST_SKIP() << "page-locked memory comes from the CUDA driver";
  const Shape shape{61, 67};  // an odd size, so blocks kept by earlier tests do not serve it
  std::promise<void> go = hold_queue();
  const void* dropped = nullptr;
  Tensor sum;
  {
    const Tensor batch = detail::make_tensor(shape, kFloat32, device(), "test", /*pinned=*/true);
    ASSERT_TRUE(batch.is_pinned());
    std::fill_n(reinterpret_cast<float*>(detail::impl_of(batch).data()), batch.numel(), 1.0f);
    dropped = detail::impl_of(batch).data();
    sum = batch.sum();  // queued behind the held task, reading the batch
  }
  const Tensor next = detail::make_tensor(shape, kFloat32, device(), "test", /*pinned=*/true);
  EXPECT_NE(static_cast<const void*>(detail::impl_of(next).data()), dropped)
      << "the host would write the next batch under the queued sum";
  std::fill_n(reinterpret_cast<float*>(detail::impl_of(next).data()), next.numel(), 5.0f);
  go.set_value();
  EXPECT_DOUBLE_EQ(sum.item<double>(), static_cast<double>(next.numel()));
}

// Releases a held queue from another thread after a while: the test's own thread is about to
// wait for the held work (that wait is what the test checks).
std::thread release_later(std::promise<void>& go) {
  return std::thread([&go] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    go.set_value();
  });
}

// A loader reads its sources on the host: an epoch begun after the sources were changed in
// place by queued work (new labels between epochs) waits for that work, not gathering the
// old values under it.
TEST_P(QueueOrderMemory, ALoaderSeesItsSourcesChangedBetweenEpochs) {
  const Tensor x = ones({64, 8}, device());
  const Tensor y = zeros({64}, {kInt64, device()});
  data::DataLoader loader(std::vector<Tensor>{x, y},
                          {.batch_size = 16, .shuffle = false, .prefetch = 0});
  for (const data::Batch& b : loader) EXPECT_DOUBLE_EQ(b.x.sum().item<double>(), 16.0 * 8);
  std::promise<void> go = hold_queue();
  Tensor(x).fill_(2.0);  // queued behind the held task
  std::thread release = release_later(go);
  for (const data::Batch& b : loader) {
    EXPECT_DOUBLE_EQ(b.x.sum().item<double>(), 2.0 * 16 * 8) << "a batch of the old values";
  }
  release.join();
}

// to_device(batch, other) reads the batch on the other device's queue. A write the user
// then makes to the batch (through data(), or an op on its device) comes after that read.
TEST_P(QueueOrderMemory, AWriteToABatchAfterToDeviceComesAfterTheCopy) {
  const auto devices = same_kind_devices();
  if (devices.size() < 2) GTEST_SKIP() << "needs two logical CPU devices";
  const Tensor x = ones({64, 8}, device());
  data::DataLoader loader(std::vector<Tensor>{x, zeros({64}, {kInt64, device()})},
                          {.batch_size = 64, .shuffle = false, .prefetch = 0});
  for (const data::Batch& b : loader) {
    // The batch lies on cpu(): the copy goes to the other device.
    const Device other = devices[0] == b.x.device() ? devices[1] : devices[0];
    std::promise<void> go = hold_queue(other);
    const data::Batch moved = data::to_device(b, other);  // queued behind the held task
    std::thread release = release_later(go);
    float* p = b.x.data<float>();  // waits for the copy that reads it
    std::fill(p, p + b.x.numel(), 0.0f);
    release.join();
    EXPECT_DOUBLE_EQ(moved.x.sum().item<double>(), 64.0 * 8) << "the copy read the zeros";
    std::promise<void> go_again = hold_queue(other);
    const data::Batch again = data::to_device(b, other);  // reads the zeros, once released
    Tensor(b.x).fill_(5.0);  // an op on the batch's device: after that read
    std::thread release_again = release_later(go_again);
    EXPECT_DOUBLE_EQ(again.x.sum().item<double>(), 0.0) << "the copy read the op's fives";
    release_again.join();
  }
}

TEST_P(QueueOrderMemory, ABatchGatheredOnItsDeviceIsReusedByTheBatchAfterNext) {
  // Note [Gathering on the devices]: the device gathers its piece of each batch. The host
  // drops a piece once it has queued the step that reads it, and the piece after next takes
  // its memory, queued behind that step: the gather writes memory the device has just used,
  // however far ahead the host runs.
  const std::int64_t n = 48, h = 27, w = 29;  // odd sizes, so cached blocks do not serve them
  std::vector<std::uint8_t> pixels(static_cast<std::size_t>(n * h * w));
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<std::uint8_t>(i * 13);
  std::vector<std::int64_t> labels(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>(i % 10);
  const data::LoaderOptions options{.batch_size = 8, .seed = 5, .prefetch = 0};
  data::DataLoader reference(from_vector(pixels, {n, h, w}), from_vector(labels, {n}), options);
  data::DataLoader loader(from_vector(pixels, {n, h, w}), from_vector(labels, {n}), options);
  std::vector<double> expected;
  for (const data::Batch& b : reference) expected.push_back(b.x.sum().item<double>());
  synchronize(device());
  std::promise<void> go = hold_queue();
  std::vector<Tensor> sums;
  std::set<const void*> blocks;
  for (const std::vector<data::Batch>& pieces : loader.split(0, 1, {device()})) {
    blocks.insert(detail::impl_of(pieces[0].x).data());
    sums.push_back(pieces[0].x.sum());  // queued behind the held task, like a step
  }
  go.set_value();
  EXPECT_LE(blocks.size(), 2u) << "with the queue held, " << sums.size()
                               << " batches were gathered into " << blocks.size()
                               << " blocks: a dropped batch's memory waited for its gather "
                                  "to run instead of going to the batch after next";
  ASSERT_EQ(sums.size(), expected.size());
  for (std::size_t i = 0; i < sums.size(); ++i) {
    EXPECT_NEAR(sums[i].item<double>(), expected[i], 1e-3) << "batch " << i;
  }
}

TESSERA_INSTANTIATE_DEVICE_SUITE(QueueOrderMemory);

}  // namespace
}  // namespace tessera

#include "data/prefetcher.h"

#include <fmt/format.h>

#include <utility>

#include "core/check.h"
#include "core/rethrow.h"

// Note [Prefetching batches]
// A DataLoader epoch with prefetch > 0 gathers its batches on one background thread, up to
// `prefetch` ahead of the step, so that the step's thread only queues device work. The order
// is the one DataLoader::batch(i) gives on the calling thread: the thread reads a snapshot
// of the epoch's shuffled order and gathers batch 0, 1, ... with the same code, so batches
// are the same bit for bit. Every batch gets fresh host storage (from the caching
// allocator): the thread never writes a buffer it handed out, and a queued copy out of one
// (to_device, SourceWriters::kHostOnly) holds the source until it has run, so the buffer
// goes back to the cache only then. Errors are caught on the thread, queued in the batch's
// place, and rethrown by next() on the caller's thread; the thread stops after one. The
// destructor (an iterator dropped mid-epoch, an exception in the step) sets stop_, wakes the
// thread and joins it: the thread waits only on the queue having room, never for the caller.
// By default (prefetch = -1) only a machine with a GPU prefetches: there the step's thread
// queues work and the host's cores are otherwise idle. Without a GPU the kernels already run
// on every core (OMP_NUM_THREADS), and on the 2-core VM the extra thread made a loader-fed
// MLP epoch slower, not faster (docs/benchmarks.md), so batches are gathered inline.

namespace tessera::detail {
namespace {

// `error` again, as the same tessera type, with `context` in front of its message.
[[noreturn]] void rethrow_with_context(const std::exception_ptr& error,
                                       const std::string& context) {
  rethrow_reworded(error, [&](const std::string& what) { return context + what; });
}

}  // namespace

Prefetcher::Prefetcher(std::int64_t count, std::int64_t depth, std::uint64_t epoch,
                       std::function<Pieces(std::int64_t)> gather)
    : count_(count), depth_(depth), epoch_(epoch), gather_(std::move(gather)) {
  TESSERA_INTERNAL_ASSERT(depth_ >= 1, "prefetch depth {}", depth_);
  thread_ = std::thread([this] { run(); });
}

Prefetcher::~Prefetcher() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  space_cv_.notify_all();
  thread_.join();
}

void Prefetcher::run() {
  for (std::int64_t i = 0; i < count_; ++i) {
    {
      std::unique_lock lock(mutex_);
      space_cv_.wait(lock,
                     [&] { return stop_ || static_cast<std::int64_t>(ready_.size()) < depth_; });
      if (stop_) return;
    }
    Slot slot;
    try {
      slot.batch = gather_(i);
    } catch (...) {
      slot.error = std::current_exception();
    }
    const bool failed = slot.error != nullptr;
    {
      std::lock_guard lock(mutex_);
      ready_.push_back(std::move(slot));
    }
    ready_cv_.notify_one();
    if (failed) return;
  }
}

Prefetcher::Pieces Prefetcher::next(std::int64_t index) {
  std::unique_lock lock(mutex_);
  if (failed_) std::rethrow_exception(failed_);
  TESSERA_CHECK(
      index == taken_ && taken_ < count_, Error,
      "[DataLoader] batch {} was asked of the prefetch thread of epoch {} (0-based), "
      "which has {} next: two copies of one iterator were both advanced, and with prefetch they "
      "share one gather thread. Advance only one copy (or begin another pass with "
      "begin())",
      index, epoch_, taken_);
  ready_cv_.wait(lock, [&] { return !ready_.empty(); });
  Slot slot = std::move(ready_.front());
  ready_.pop_front();
  ++taken_;
  lock.unlock();
  space_cv_.notify_one();
  if (slot.error) {
    try {
      rethrow_with_context(slot.error,
                           fmt::format("[DataLoader] the prefetch thread failed to gather batch {} "
                                       "of {} in epoch {} (both 0-based, as set_epoch counts): ",
                                       index, count_, epoch_));
    } catch (...) {
      lock.lock();
      failed_ = std::current_exception();
      throw;
    }
  }
  return std::move(slot.batch);
}

}  // namespace tessera::detail

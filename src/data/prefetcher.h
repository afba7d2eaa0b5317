#pragma once
// Batches of one epoch gathered ahead of the training step on a background thread. See
// Note [Prefetching batches] in prefetcher.cpp.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "tessera/data/loader.h"

namespace tessera::detail {

class Prefetcher {
 public:
  // The pieces of one batch (one per device of DataLoader::split, else one).
  using Pieces = std::vector<data::Batch>;
  // Gathers gather(0), ..., gather(count - 1) in that order on its own thread, at most
  // `depth` (>= 1) batches ahead of next(). `epoch` (0-based, as
  // DataLoader::set_epoch counts) only names the epoch in error messages.
  Prefetcher(std::int64_t count, std::int64_t depth, std::uint64_t epoch,
             std::function<Pieces(std::int64_t)> gather);
  // Stops the thread after the batch it is gathering, if any, and joins it; batches not
  // taken are dropped. Never waits for more than one batch.
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // The next batch, in order, waiting for it when it is not ready. An exception thrown while
  // gathering it is rethrown here, on the caller's thread, as the same type with the batch
  // and the epoch named in front of its message; later calls throw it again. `index` is the
  // batch the caller expects: Error when it is not the next one (two copies of an iterator,
  // which share this prefetcher, were both advanced).
  Pieces next(std::int64_t index);

 private:
  struct Slot {
    Pieces batch;
    std::exception_ptr error;
  };
  void run();

  const std::int64_t count_, depth_;
  const std::uint64_t epoch_;
  const std::function<Pieces(std::int64_t)> gather_;
  std::mutex mutex_;
  std::condition_variable ready_cv_, space_cv_;
  std::deque<Slot> ready_;
  std::int64_t taken_ = 0;
  std::exception_ptr failed_;  // the first error, kept for calls after it
  bool stop_ = false;
  std::thread thread_;  // last: started once everything above exists
};

}  // namespace tessera::detail

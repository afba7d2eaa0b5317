#pragma once
// An in-order work queue on its own thread: the CPU's stand-in for a GPU stream. Tasks
// run one after another in submission order; each submission gets a ticket, and any thread
// can wait for a ticket (the stand-in for a CUDA event). See Note [Quiet queues].
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace tessera::detail {

class WorkQueue {
 public:
  // `on_start` runs first on the queue's thread (to pin it and size its OpenMP team).
  explicit WorkQueue(std::function<void()> on_start = {});
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Tasks queued but not finished beyond which submit() waits: like a GPU's launch queue,
  // this keeps a host thread from running far ahead with what queued tasks own held
  // (Note [Run-ahead memory]). kMaxPending is the most a caller may allow; a host that
  // feeds this queue alone needs about a step, kMaxPendingAlone.
  static constexpr std::uint64_t kMaxPending = 256;
  static constexpr std::uint64_t kMaxPendingAlone = 32;

  // Queues `task`; returns its ticket (1, 2, ...). Waits while `max_pending` (at most
  // kMaxPending) tasks are ahead of it (unless called from the queue's own thread).
  std::uint64_t submit(std::function<void()> task, std::uint64_t max_pending = kMaxPending);
  // The ticket of the last task submitted (0 before any).
  std::uint64_t last_ticket() const;
  // Whether the task with `ticket` (and every one before it) has run.
  bool done(std::uint64_t ticket) const { return completed_.load() >= ticket; }
  // Whether the calling thread is some WorkQueue's own (it runs a task now).
  static bool on_queue_thread();
  // Blocks until the task with `ticket` (and all before it) has run.
  void wait(std::uint64_t ticket);
  // Waits for everything submitted so far, then rethrows the first exception a task threw
  // since the last synchronize (like a sticky CUDA error, but cleared once reported).
  void synchronize();

  // How often a waiter (wait, synchronize, or a submit held back) went to sleep in the
  // kernel, for tests of Note [Quiet queues]. The queue's own thread sleeps whenever it
  // runs dry, which depends on the scheduler, so it is not counted.
  std::uint64_t waiter_sleeps() const { return waiter_sleeps_.load(std::memory_order_relaxed); }

 private:
  void run(const std::function<void()>& on_start);
  // Pops the next task, spinning briefly and then sleeping while there is none; returns
  // false when the queue is stopping and drained.
  bool next_task(std::function<void()>& task);
  void finish_task();

  mutable std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  std::deque<std::function<void()>> tasks_;  // guarded by mutex_
  std::exception_ptr error_;                 // guarded by mutex_
  bool stopping_ = false;                    // guarded by mutex_
  bool worker_sleeping_ = false;             // guarded by mutex_
  std::atomic<std::uint64_t> submitted_{0};
  std::atomic<std::uint64_t> completed_{0};
  // The lowest ticket a sleeping waiter waits for (UINT64_MAX: none).
  std::atomic<std::uint64_t> wake_at_{UINT64_MAX};
  std::atomic<std::uint64_t> waiter_sleeps_{0};
  std::thread thread_;
};

}  // namespace tessera::detail

#pragma once
// An in-order work queue on its own thread: the CPU's stand-in for a GPU stream. Tasks
// run one after another in submission order; each submission gets a ticket, and any thread
// can wait for a ticket (the stand-in for a CUDA event). See Note [Quiet queues].
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "backend/cpu/queued_task.h"
#include "backend/spin_lock.h"

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
  std::uint64_t submit(QueuedTask task, std::uint64_t max_pending = kMaxPending);
  // The ticket of the last task submitted (0 before any).
  std::uint64_t last_ticket() const;
  // Whether the task with `ticket` (and every one before it) has run.
  bool done(std::uint64_t ticket) const { return completed_.load() >= ticket; }
  // Whether the calling thread is some WorkQueue's own (it runs a task now).
  static bool on_queue_thread();
  // Whether the queue's thread runs in this process: a child forked after the queue was
  // made has the queue but not its thread, and a wait there never ends.
  bool thread_here() const { return made_in_ == ::getpid(); }
  // Blocks until the task with `ticket` (and all before it) has run.
  void wait(std::uint64_t ticket);
  // From a task of another queue that depends on this one's work up to `ticket` (a copy
  // between devices, a stream join): waits for it, then rethrows the error this queue holds,
  // if any, without clearing it, so that the waiting queue reports it too (Note [Errors
  // follow the work]).
  void wait_in_task(std::uint64_t ticket);
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
  bool next_task(QueuedTask& task);
  // Doubles the ring (ring_lock_ held).
  void grow();
  static constexpr std::size_t kFirstRing = 64;
  void finish_task();

  mutable std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  // Tasks not yet taken, a ring that grows and never shrinks, so that queueing allocates
  // nothing once it has held a step's worth (Note [Queueing allocates nothing]): tasks_[(head_ +
  // i) % size] for i < count_; the size is a power of two. Guarded by ring_lock_, not mutex_:
  // the host adds a task and the queue's thread takes one every few microseconds, and a
  // contended std::mutex sends the loser to sleep. A task is moved in and out under it, so a
  // task's move constructor must not queue work (none does: they move handles and values).
  SpinLock ring_lock_;
  std::vector<QueuedTask> tasks_;
  std::size_t head_ = 0;
  std::size_t count_ = 0;
  std::exception_ptr error_;  // guarded by mutex_
  // Set under mutex_, so a worker about to sleep sees it or is woken.
  std::atomic<bool> stopping_{false};
  // The worker is asleep or about to sleep on work_ready_ (Note [Quiet queues]).
  std::atomic<bool> worker_sleeping_{false};
  std::atomic<std::uint64_t> submitted_{0};
  std::atomic<std::uint64_t> completed_{0};
  // The lowest ticket a sleeping waiter waits for (UINT64_MAX: none).
  std::atomic<std::uint64_t> wake_at_{UINT64_MAX};
  std::atomic<std::uint64_t> waiter_sleeps_{0};
  const pid_t made_in_ = ::getpid();
  std::thread thread_;
};

}  // namespace tessera::detail

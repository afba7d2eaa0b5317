#include "backend/cpu/work_queue.h"

#include <chrono>

#include "backend/spin_wait.h"

// Note [Quiet queues]
// A training step queues dozens of small kernels. Waking the queue's thread with a futex for
// each one (and putting it back to sleep after each) cost more than the kernels themselves:
// tens of thousands of system calls per epoch, 2-4x the time of running them inline. So both
// sides spin before they sleep, and nobody signals a thread that is not asleep:
// - the queue's thread, out of work, polls `submitted_` for kSpin before it sleeps, and
//   says so in `worker_sleeping_` before it checks `submitted_` a last time (both
//   sequentially consistent, and a submit counts its ticket before it reads the flag: so
//   the submit sees the flag, takes the mutex the sleeper holds until it is inside wait()
//   and notifies, or the thread sees the ticket and does not sleep);
// - a waiter polls `completed_` for kSpin, then publishes the ticket it needs in `wake_at_`
//   (the lowest of all sleepers') and sleeps; the thread notifies only when a task reaches
//   it, not after every task (a host that queued an epoch and waits for its end would
//   otherwise be woken thousands of times). Both counters are sequentially consistent: the
//   thread sees the waiter's ticket or the waiter sees the completion; and the thread takes
//   the mutex before notifying, so the notification cannot fall between the waiter's check
//   and its sleep.
// kSpin is a few times a small kernel's duration: long enough to bridge the gap between two
// launches of one step, short enough not to steal a core from an idle machine's other work.

// Note [Queueing allocates nothing]
// A kernel queued on a logical CPU device used to cost the host thread about 1.6 us against
// 0.15 us run inline (`a + b` on 2x3 floats, a host thread feeding one queue as fast as it
// can), ten times a kernel's own host work. perf put most of it in futex calls: every task
// was a std::function (one malloc) holding one make_shared block per tensor (three for a
// binary op), all allocated by the host and freed by the queue's thread after the kernel, so
// the two threads fought for glibc's arena lock on every op; and the std::mutex both took
// for every task sent the loser of each race to sleep. Now a task is a QueuedTask that keeps
// its lambda inside itself, the queue is a ring of them that grows but never shrinks, the
// borrowed handles come from a recycled list (borrowed_tensor.h), and the ring is guarded by
// a spin lock; the mutex is left to sleeping and waking. Measured: docs/benchmarks.md,
// 2026-11-26.

// Note [Run-ahead memory]
// A host thread may queue many tasks ahead of a device, and until queued kernels borrowed
// their tensors (Note [Memory freed in queue order] in cpu_allocator.cpp) every queued task
// held what it reads and writes until it ran, so memory grew with the lead: at 256 tasks
// ahead (about 8 training steps of an MLP) a logical CPU device held 10x the memory of one
// step, and two devices training LeNet held 1.29 GB against 0.49 GB on one. Now a dropped
// tensor is reused behind its queued uses: two devices hold 0.46 GB, one 0.43 GB, the plain
// CPU 0.41 GB. What still grows with the lead is what queued tasks own (a loader's batches
// gathered in device order, host data staged for a copy) and memory the host writes itself,
// which takes only blocks whose uses have all run: one device 256 tasks ahead holds 0.49 GB
// instead of 0.43 GB. So the bound still depends on the host thread
// (CpuBackendBase::run_ahead). A CPU device needs far less lead than a GPU: its kernels take
// tens of microseconds or more and a host submits one in a few, so kMaxPendingAlone (32)
// tasks, about a step, keep one device busy. But one host thread feeds every replica of
// data-parallel training, replica after replica, and a queue must hold a whole replica's
// step for the host to go on to the next device while it runs: at 32 (and at 128) for every
// queue the host waited on cpu:0 while cpu:1 sat idle, and two logical devices trained LeNet
// 1.05x (1.66x) as fast as one instead of 1.8x. So a host thread that is feeding several
// devices may run kMaxPending (256) tasks ahead of each. A graph-recorded step
// (TrainerOptions::graph) is a few tasks per device and needs no lead. Measurements:
// docs/benchmarks.md, 2026-11-25.

namespace tessera::detail {
namespace {

thread_local bool t_queue_thread = false;

}  // namespace

WorkQueue::WorkQueue(std::function<void()> on_start)
    : thread_([this, start = std::move(on_start)] { run(start); }) {}

WorkQueue::~WorkQueue() {
  {
    const std::lock_guard lock(mutex_);
    stopping_.store(true);
  }
  work_ready_.notify_one();
  thread_.join();
}

std::uint64_t WorkQueue::submit(QueuedTask task, std::uint64_t max_pending) {
  std::uint64_t ticket;
  {
    const std::lock_guard ring(ring_lock_);
    if (count_ == tasks_.size()) grow();
    tasks_[(head_ + count_) & (tasks_.size() - 1)] = std::move(task);
    ++count_;
    ticket = submitted_.fetch_add(1) + 1;
  }
  // After the ticket is counted: a worker going to sleep either sees it or has said so
  // (Note [Quiet queues]). Taking the mutex makes sure it is inside wait() before the notify.
  if (worker_sleeping_.load()) {
    {
      const std::lock_guard lock(mutex_);
    }
    work_ready_.notify_one();
  }
  if (ticket > max_pending && completed_.load() <= ticket - max_pending &&
      std::this_thread::get_id() != thread_.get_id()) {
    // Full: wait until half has drained, so a host far ahead is woken once per
    // max_pending / 2 tasks rather than after every one.
    wait(ticket - max_pending / 2);
  }
  return ticket;
}

std::uint64_t WorkQueue::last_ticket() const { return submitted_.load(); }

bool WorkQueue::on_queue_thread() { return t_queue_thread; }

void WorkQueue::wait(std::uint64_t ticket) {
  if (spin_until([&] { return completed_.load() >= ticket; })) return;
  std::unique_lock lock(mutex_);
  for (;;) {
    if (ticket < wake_at_.load()) wake_at_.store(ticket);
    if (completed_.load() >= ticket) return;  // after publishing wake_at_: Note [Quiet queues]
    waiter_sleeps_.fetch_add(1, std::memory_order_relaxed);
    work_done_.wait(lock);
  }
}

// Note [Errors follow the work]
// A task that throws (an index out of range found by its kernel) leaves its error on its
// queue, reported at the next synchronize of that queue. Work that another queue runs after
// it (a copy to another device, a stream joined into another) would otherwise go on with
// the failed task's garbage and report nothing where the user reads it: the waiting task
// rethrows the error, so the waiting queue holds it too, and the user's next wait for either
// device reports it.
void WorkQueue::wait_in_task(std::uint64_t ticket) {
  wait(ticket);
  std::exception_ptr error;
  {
    std::lock_guard lock(mutex_);
    error = error_;
  }
  if (error) std::rethrow_exception(error);
}

void WorkQueue::synchronize() {
  wait(submitted_.load());
  std::exception_ptr error;
  {
    std::lock_guard lock(mutex_);
    std::swap(error, error_);
  }
  if (error) std::rethrow_exception(error);
}

void WorkQueue::grow() {
  std::vector<QueuedTask> bigger(tasks_.empty() ? kFirstRing : 2 * tasks_.size());
  for (std::size_t i = 0; i < count_; ++i) {
    bigger[i] = std::move(tasks_[(head_ + i) & (tasks_.size() - 1)]);
  }
  tasks_ = std::move(bigger);
  head_ = 0;
}

bool WorkQueue::next_task(QueuedTask& task) {
  for (;;) {
    {
      const std::lock_guard ring(ring_lock_);
      if (count_ != 0) {
        task = std::move(tasks_[head_]);
        head_ = (head_ + 1) & (tasks_.size() - 1);
        --count_;
        return true;
      }
      if (stopping_.load()) return false;  // stopping and drained
    }
    const std::uint64_t taken = completed_.load();  // every earlier task has finished
    const auto more = [&] { return submitted_.load() > taken || stopping_.load(); };
    if (spin_until(more)) continue;
    std::unique_lock lock(mutex_);
    worker_sleeping_.store(true);  // before the check in wait(): Note [Quiet queues]
    work_ready_.wait(lock, more);
    worker_sleeping_.store(false);
  }
}

void WorkQueue::finish_task() {
  const std::uint64_t done = completed_.fetch_add(1) + 1;
  if (done >= wake_at_.load()) {
    {
      std::lock_guard lock(mutex_);  // see Note [Quiet queues]
      wake_at_.store(UINT64_MAX);    // the woken waiters still short of theirs register again
    }
    work_done_.notify_all();
  }
}

void WorkQueue::run(const std::function<void()>& on_start) {
  t_queue_thread = true;
  if (on_start) on_start();
  QueuedTask task;
  while (next_task(task)) {
    try {
      task();
    } catch (...) {
      std::lock_guard lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    // Destroy the task (and the tensors it holds) before reporting it done, so memory
    // accounting is settled when a waiter wakes up.
    task.reset();
    finish_task();
  }
}

}  // namespace tessera::detail

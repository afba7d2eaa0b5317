#pragma once
// An in-order work queue on its own thread: the CPU's stand-in for a GPU stream. Tasks
// run one after another in submission order; each submission gets a ticket, and any thread
// can wait for a ticket (the stand-in for a CUDA event).
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
  WorkQueue();
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Queues `task`; returns its ticket (1, 2, ...).
  std::uint64_t submit(std::function<void()> task);
  // The ticket of the last task submitted (0 before any).
  std::uint64_t last_ticket() const;
  // Blocks until the task with `ticket` (and all before it) has run.
  void wait(std::uint64_t ticket);
  // Waits for everything submitted so far, then rethrows the first exception a task threw
  // since the last synchronize (like a sticky CUDA error, but cleared once reported).
  void synchronize();

 private:
  void run();

  mutable std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  std::deque<std::function<void()>> tasks_;
  std::uint64_t submitted_ = 0;
  std::uint64_t completed_ = 0;
  std::exception_ptr error_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tessera::detail

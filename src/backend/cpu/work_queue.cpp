#include "backend/cpu/work_queue.h"

namespace tessera::detail {

WorkQueue::WorkQueue() : thread_([this] { run(); }) {}

WorkQueue::~WorkQueue() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_one();
  thread_.join();
}

std::uint64_t WorkQueue::submit(std::function<void()> task) {
  std::uint64_t ticket;
  {
    std::lock_guard lock(mutex_);
    tasks_.push_back(std::move(task));
    ticket = ++submitted_;
  }
  work_ready_.notify_one();
  return ticket;
}

std::uint64_t WorkQueue::last_ticket() const {
  std::lock_guard lock(mutex_);
  return submitted_;
}

void WorkQueue::wait(std::uint64_t ticket) {
  std::unique_lock lock(mutex_);
  work_done_.wait(lock, [&] { return completed_ >= ticket; });
}

void WorkQueue::synchronize() {
  std::exception_ptr error;
  {
    std::unique_lock lock(mutex_);
    const std::uint64_t ticket = submitted_;
    work_done_.wait(lock, [&] { return completed_ >= ticket; });
    std::swap(error, error_);
  }
  if (error) std::rethrow_exception(error);
}

void WorkQueue::run() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock lock(mutex_);
      work_ready_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping and drained
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    try {
      task();
    } catch (...) {
      std::lock_guard lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    // Destroy the task (and the tensors it holds) before reporting it done, so memory
    // accounting is settled when a waiter wakes up.
    task = nullptr;
    {
      std::lock_guard lock(mutex_);
      ++completed_;
    }
    work_done_.notify_all();
  }
}

}  // namespace tessera::detail

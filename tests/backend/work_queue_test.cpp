// The CPU backend's in-order work queue (Note [Quiet queues]).
#include "backend/cpu/work_queue.h"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/queued_task.h"
#include "support/helper_program.h"

namespace tessera::detail {
namespace {

TEST(WorkQueue, RunsTasksInSubmissionOrder) {
  WorkQueue queue;
  std::vector<int> order;  // only the queue's thread writes it
  for (int i = 0; i < 1000; ++i) queue.submit([&order, i] { order.push_back(i); });
  queue.synchronize();
  ASSERT_EQ(order.size(), 1000u);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(order[static_cast<std::size_t>(i)], i);
}

TEST(WorkQueue, WaitReturnsOnceItsTicketHasRun) {
  WorkQueue queue;
  std::atomic<bool> release{false};
  std::atomic<int> ran{0};
  const auto first = queue.submit([&] {
    while (!release.load()) std::this_thread::yield();
    ++ran;
  });
  const auto second = queue.submit([&] { ++ran; });
  EXPECT_EQ(first, 1u);
  EXPECT_EQ(second, 2u);
  EXPECT_EQ(queue.last_ticket(), 2u);
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past the waiter's spin
    release = true;
  });
  queue.wait(first);
  EXPECT_GE(ran.load(), 1);
  queue.wait(second);
  EXPECT_EQ(ran.load(), 2);
  releaser.join();
}

TEST(WorkQueue, SynchronizeRethrowsATasksErrorOnce) {
  WorkQueue queue;
  std::atomic<int> after{0};
  queue.submit([] { throw std::runtime_error("kernel failed"); });
  queue.submit([&] { ++after; });  // later tasks still run, as on a GPU stream
  EXPECT_THROW(queue.synchronize(), std::runtime_error);
  EXPECT_EQ(after.load(), 1);
  EXPECT_NO_THROW(queue.synchronize());
}

TEST(WorkQueue, ManyWaitersOnManyTicketsAllWakeUp) {
  WorkQueue queue;
  std::atomic<bool> release{false};
  queue.submit([&] {
    while (!release.load()) std::this_thread::yield();
  });
  std::vector<std::uint64_t> tickets;
  // Fewer than kMaxPending, or submit() itself would wait behind the blocked task.
  for (std::uint64_t i = 0; i + 1 < WorkQueue::kMaxPending; ++i)
    tickets.push_back(queue.submit([] {}));
  std::vector<std::thread> waiters;
  std::atomic<int> woken{0};
  for (std::size_t i = 0; i < tickets.size(); i += tickets.size() / 8 + 1) {
    waiters.emplace_back([&, t = tickets[i]] {
      queue.wait(t);
      ++woken;
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  release = true;
  for (auto& w : waiters) w.join();
  EXPECT_EQ(woken.load(), 8);
}

// A host far ahead of the queue is held back (its memory with it), and is not woken after
// every task while it waits.
TEST(WorkQueue, SubmitWaitsWhenTooFarAheadAndSleepsRarely) {
  WorkQueue queue;
  std::atomic<bool> release{false};
  queue.submit([&] {
    while (!release.load()) std::this_thread::yield();
  });
  std::atomic<std::uint64_t> submitted{1};
  std::thread host([&] {
    for (int i = 0; i < 4000; ++i) {
      queue.submit([] {});
      ++submitted;
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_LE(submitted.load(), WorkQueue::kMaxPending + 1);  // blocked behind the first task
  release = true;
  host.join();
  queue.synchronize();
  EXPECT_EQ(queue.last_ticket(), 4001u);
  // Held back, the host sleeps until half the queue has drained, so each of its sleeps
  // covers kMaxPending / 2 tasks: about 4000 / 16 of them, not one per task.
  EXPECT_LT(queue.waiter_sleeps(), 4001u / (WorkQueue::kMaxPending / 4));
}

TEST(WorkQueue, OnStartRunsOnTheQueuesThreadBeforeAnyTask) {
  std::thread::id start_thread, task_thread;
  std::atomic<int> step{0};
  WorkQueue queue([&] {
    start_thread = std::this_thread::get_id();
    step = 1;
  });
  queue.submit([&] {
    task_thread = std::this_thread::get_id();
    EXPECT_EQ(step.load(), 1);
  });
  queue.synchronize();
  EXPECT_EQ(start_thread, task_thread);
  EXPECT_NE(task_thread, std::this_thread::get_id());
}

TEST(WorkQueue, DestructorRunsWhatWasQueued) {
  std::atomic<int> ran{0};
  {
    WorkQueue queue;
    for (int i = 0; i < 100; ++i) queue.submit([&] { ++ran; });
  }
  EXPECT_EQ(ran.load(), 100);
}

// The ring grows while its thread is busy (the first ring holds 64) and keeps the order.
TEST(WorkQueue, TasksQueuedBehindABusyThreadGrowTheRingInOrder) {
  WorkQueue queue;
  std::atomic<bool> release{false};
  std::vector<int> order;  // only the queue's thread writes it
  queue.submit([&] {
    while (!release.load()) std::this_thread::yield();
  });
  for (int i = 0; i < 200; ++i) queue.submit([&order, i] { order.push_back(i); });
  EXPECT_EQ(queue.last_ticket(), 201u);
  release = true;
  queue.synchronize();
  ASSERT_EQ(order.size(), 200u);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(order[static_cast<std::size_t>(i)], i);
}

// Counts how many of its copies are alive, so a test sees each task's state destroyed once.
struct Alive {
  explicit Alive(std::atomic<int>& count) : count(&count) { ++*this->count; }
  Alive(const Alive& other) : count(other.count) { ++*count; }
  Alive(Alive&& other) noexcept : count(other.count) { ++*count; }
  Alive& operator=(const Alive&) = delete;
  ~Alive() { --*count; }
  std::atomic<int>* count;
};

TEST(QueuedTask, KeepsSmallCallablesInsideAndBigOnesOnTheHeapAndDestroysEachOnce) {
  std::atomic<int> alive{0};
  int runs = 0;
  {
    QueuedTask small([&runs, a = Alive(alive)] { ++runs; });
    std::array<char, QueuedTask::kInlineBytes> padding{};
    QueuedTask big([&runs, a = Alive(alive), padding] { runs += 1 + padding[0]; });
    QueuedTask only_moves([&runs, p = std::make_unique<int>(2)] { runs += *p; });
    EXPECT_EQ(alive.load(), 2);
    QueuedTask moved_small(std::move(small));
    QueuedTask moved_big = std::move(big);
    EXPECT_FALSE(small);  // NOLINT(bugprone-use-after-move): moved-from tasks are empty
    EXPECT_FALSE(big);    // NOLINT(bugprone-use-after-move)
    EXPECT_EQ(alive.load(), 2);
    moved_small();
    moved_big();
    only_moves();
    EXPECT_EQ(runs, 4);
    moved_small.reset();
    EXPECT_FALSE(moved_small);
    EXPECT_EQ(alive.load(), 1);
    moved_small = std::move(moved_big);
    EXPECT_EQ(alive.load(), 1);
  }
  EXPECT_EQ(alive.load(), 0);
}

}  // namespace
}  // namespace tessera::detail

namespace tessera {
namespace {

// A program that returns from main with kernels queued on logical CPU devices exits cleanly:
// exit waits for the queues before the BLAS library they call is torn down.
TEST(WorkQueueAtExit, AProgramEndingWithQueuedWorkExitsCleanly) {
  const std::string command =
      "TESSERA_CPU_DEVICES=2 " + testing::helper_program(TESSERA_TEST_EXIT_WITH_QUEUED_WORK);
  for (int run = 0; run < 12; ++run) {
    EXPECT_EQ(std::system(command.c_str()), 0) << "run " << run;  // NOLINT(cert-env33-c)
  }
}

// The same with the work queued on a side stream that made the first matmul (the plain CPU's
// and a logical device's): oneDNN's statics were destroyed under it at exit, every run.
TEST(WorkQueueAtExit, AProgramEndingWithWorkQueuedOnASideStreamExitsCleanly) {
  const std::string program =
      testing::helper_program(TESSERA_TEST_EXIT_WITH_QUEUED_WORK) + " side-stream";
  for (const std::string env : {"env -u TESSERA_CPU_DEVICES ", "TESSERA_CPU_DEVICES=2 "}) {
    for (int run = 0; run < 6; ++run) {
      const std::string command = env + program;
      EXPECT_EQ(std::system(command.c_str()), 0) << command << ", run " << run;  // NOLINT
    }
  }
}

// The same with the work queued by a thread the main thread joined, main queueing nothing
// itself: only the main thread's own first launch armed the exit drain (SIGSEGV, 2 runs in 3).
TEST(WorkQueueAtExit, AProgramEndingWithWorkAnotherThreadQueuedExitsCleanly) {
  const std::string command = "TESSERA_CPU_DEVICES=2 " +
                              testing::helper_program(TESSERA_TEST_EXIT_WITH_QUEUED_WORK) +
                              " other-thread";
  for (int run = 0; run < 8; ++run) {
    EXPECT_EQ(std::system(command.c_str()), 0) << command << ", run " << run;  // NOLINT
  }
}

// A child forked after another thread queued work exits: the drain armed at load waited
// there for queues whose threads the child does not have (it hung, every run).
TEST(WorkQueueAtExit, AChildForkedAfterQueuedWorkExits) {
  // The child holds the parent's queues, whose threads it does not have: what they own is
  // unreachable there, which LeakSanitizer (the ASan build) reports as leaks at its exit.
  const std::string command = "ASAN_OPTIONS=detect_leaks=0 TESSERA_CPU_DEVICES=2 " +
                              testing::helper_program(TESSERA_TEST_EXIT_WITH_QUEUED_WORK) + " fork";
  EXPECT_EQ(std::system(command.c_str()), 0) << command;  // NOLINT(cert-env33-c)
  // A child that makes queues of its own waits for them at exit (skipping every drain in a
  // forked child left its matmuls running under the libraries' teardown: SIGSEGV).
  const std::string own = "TESSERA_CPU_DEVICES=2 " +
                          testing::helper_program(TESSERA_TEST_EXIT_WITH_QUEUED_WORK) +
                          " fork-then-queue";
  for (int run = 0; run < 6; ++run) {
    EXPECT_EQ(std::system(own.c_str()), 0) << own << ", run " << run;  // NOLINT(cert-env33-c)
  }
}

}  // namespace
}  // namespace tessera

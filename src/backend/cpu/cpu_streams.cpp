// Side streams on CPU devices: more in-order queues per device, ordered with the default
// stream by tickets. See Note [CPU side streams].
#include <cstdlib>
#include <exception>
#include <mutex>
#include <utility>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_threads.h"

// Note [CPU side streams]
// Every CPU device (the plain CPU and each logical device) has kSideStreams side streams,
// each a WorkQueue on its own thread, made the first time a StreamGuard enters it and never
// destroyed (like the backend). A thread's current stream per device is t_stream below, and
// launch() queues there (stream_queue). The ordering is that of Note [CUDA streams], with a
// queue's ticket for an event and a queued task that waits for it for cudaStreamWaitEvent:
// - Entering a side stream queues on it a wait for the default queue's last ticket, so what
//   the default stream made is ready. Where the default stream runs on the calling thread
//   (the plain CPU, TESSERA_CPU_ASYNC=0), its work is done already and nothing waits.
// - Leaving it records the side queue's last ticket as a join of the device; the next work
//   queued on the default stream, by any thread, first applies the joins (apply_joins): a
//   task on the default queue that waits for those tickets, or, where the default stream runs
//   on the calling thread, a wait there. Joins are not applied on entering another side
//   stream, so two guards in a row on two side streams overlap. The wait on the calling
//   thread is the default stream waiting for a side stream, not the host waiting to read a
//   device, so the ledger counts it no more than it counts an inline kernel.
// - Nested guards order the inner stream after the outer one on entry, and the outer after
//   the inner on leaving.
// Every wait is for a task queued before the waiting one, so the waits never form a cycle.
// Memory: a block the host frees keeps the last ticket of every queue of the device, and is
// handed out again only behind those tickets (Note [Memory freed in queue order]).
// Collectives across processes issued under a side guard go through the default stream
// (cpu_process_collectives.cpp), so one thread per device calls MPI.
// Threads: t_stream is the calling thread's; queues[id] is written once, under the mutex,
// before any thread can enter stream id (enter_stream makes it first), and read without the
// mutex only by a thread that entered it; joins and the making of queues are under the mutex,
// and a join is queued (or waited for) before has_joins is cleared, so a thread that sees it
// clear queues its default-stream work behind the join. At exit, work still queued on side
// streams is finished when main returns (Note [Exit with work queued]), and again by an atexit
// handler registered when the first side queue is made (for a program that entered streams
// only from other threads), so no kernel of a side stream runs against a library being torn
// down.

namespace tessera::detail {
namespace {

// This thread's current stream per CPU device (0 = default).
thread_local std::array<std::int8_t, kMaxDevicesPerKind> t_stream{};

}  // namespace

WorkQueue* CpuBackendBase::side_queue(int index, int id) {
  SideStreams& s = side_[index];
  const std::lock_guard lock(s.mutex);
  std::unique_ptr<WorkQueue>& q = s.queues[id];
  if (q == nullptr) {
    // A logical device's side streams run on its cores with its kernel threads, as its own
    // queue does; the plain CPU's keep the defaults of a new thread.
    std::function<void()> on_start;
    const CpuDeviceOptions& options = cpu_options();
    if (options.count > 0) {
      const int threads = kernel_threads();
      on_start = [own = cores_of_device(allowed_cores(), index, options.count, threads), threads] {
        enter_device_thread(own, threads);
      };
    }
    q = std::make_unique<WorkQueue>(std::move(on_start));
    s.made[id].store(q.get(), std::memory_order_release);
    s.any.store(true, std::memory_order_release);
    static std::once_flag at_exit;
    std::call_once(at_exit, [] { std::atexit([] { cpu_backend_impl().drain_side_streams(); }); });
  }
  return q.get();
}

WorkQueue* CpuBackendBase::queue_of_stream(int index, int id) {
  return id == 0 ? queue(index) : side_queue(index, id);
}

WorkQueue* CpuBackendBase::stream_queue(int index) {
  const int id = t_stream[index];
  // Made before this thread entered it (side_queue, under the mutex), never replaced.
  if (id != 0) return side_[index].queues[id].get();
  if (side_[index].has_joins.load(std::memory_order_acquire)) [[unlikely]] {
    apply_joins(index);
  }
  return queue(index);
}

WorkQueue* CpuBackendBase::current_queue(int index) {
  const int id = t_stream[index];
  return id != 0 ? side_[index].queues[id].get() : queue(index);
}

void CpuBackendBase::wait_for_current_stream(int index) {
  if (WorkQueue* q = stream_queue(index)) q->wait(q->last_ticket());
}

void CpuBackendBase::order_after(int index, int waiter, int waited) {
  WorkQueue* const from = queue_of_stream(index, waited);
  if (from == nullptr) return;  // runs on the calling thread: its work is done
  const std::uint64_t ticket = from->last_ticket();
  if (ticket == 0) return;
  if (WorkQueue* to = queue_of_stream(index, waiter)) {
    to->submit([from, ticket] { from->wait_in_task(ticket); });  // Note [Errors follow the work]
  } else {
    from->wait(ticket);  // the waiter is the default stream, run by this thread
  }
}

void CpuBackendBase::apply_joins(int index) {
  SideStreams& s = side_[index];
  // Under the mutex until the wait is queued (or done), so no thread's default-stream work
  // slips in between: it sees the joins pending and waits here for the mutex.
  const std::lock_guard lock(s.mutex);
  if (!s.has_joins.load(std::memory_order_relaxed)) return;
  std::array<std::pair<WorkQueue*, std::uint64_t>, kSideStreams> joins{};
  for (int id = 1; id <= kSideStreams; ++id) {
    if (s.joins[id] != 0) joins[id - 1] = {s.queues[id].get(), s.joins[id]};
    s.joins[id] = 0;
  }
  const auto wait_all = [joins] {
    for (const auto& [q, ticket] : joins) {
      if (q != nullptr) q->wait(ticket);
    }
  };
  if (WorkQueue* q = queue(index)) {
    q->submit([joins, wait_all] {
      wait_all();  // every join first: an error must not cut the waiting short
      for (const auto& [from, ticket] : joins) {
        if (from != nullptr) from->wait_in_task(ticket);  // Note [Errors follow the work]
      }
    });
  } else {
    wait_all();
  }
  s.has_joins.store(false, std::memory_order_release);
}

void CpuBackendBase::enter_stream(int index, int id, int previous) {
  if (id != 0) {
    drain_when_main_returns();  // Note [Exit with work queued]
    side_queue(index, id);      // made (on first entry) before stream_queue reads it
  }
  if (id != previous) order_after(index, id, previous);
  t_stream[index] = static_cast<std::int8_t>(id);
}

void CpuBackendBase::leave_stream(int index, int id, int previous) {
  t_stream[index] = static_cast<std::int8_t>(previous);
  if (id == previous) return;
  if (previous != 0) {
    order_after(index, previous, id);  // back on the outer stream of nested guards
    if (id == 0) return;
  }
  if (id != 0) {
    SideStreams& s = side_[index];
    const std::lock_guard lock(s.mutex);
    const std::uint64_t ticket = s.queues[id]->last_ticket();
    if (ticket == 0) return;
    s.joins[id] = ticket;  // tickets only grow: the latest join covers the earlier ones
    s.has_joins.store(true, std::memory_order_release);
  }
}

int CpuBackendBase::current_stream(int index) const { return t_stream[index]; }

void CpuBackendBase::order_stream_after(int index, int waiter, int waited) {
  if (waiter == waited) return;
  if (waiter != 0) side_queue(index, waiter);  // made before anything is queued on it
  SideStreams& s = side_[index];
  if (waited == 0 && s.has_joins.load(std::memory_order_acquire)) {
    if (waiter == 0) {
      apply_joins(index);
    } else {
      // The side streams the default stream has joined but not yet waited for: the waiter
      // waits for them itself, leaving the joins pending (applying them here would make the
      // default stream wait now, or the host on the plain CPU).
      const std::lock_guard lock(s.mutex);
      WorkQueue* const to = s.queues[waiter].get();
      for (int id = 1; id <= kSideStreams; ++id) {
        if (s.joins[id] == 0 || id == waiter) continue;
        to->submit([q = s.queues[id].get(), ticket = s.joins[id]] { q->wait_in_task(ticket); });
      }
    }
  }
  order_after(index, waiter, waited);
}

void CpuBackendBase::synchronize_stream(int index, int id) {
  refuse_while_capturing(index, "a host wait");
  if (id == 0) {
    if (WorkQueue* q = queue(index)) {
      apply_joins(index);
      q->synchronize();
    } else {
      apply_joins(index);  // the default stream runs here: waiting for its joins is all
    }
    return;
  }
  WorkQueue* q;
  {
    const std::lock_guard lock(side_[index].mutex);
    q = side_[index].queues[id].get();
  }
  if (q != nullptr) q->synchronize();  // a stream never entered has nothing queued
}

void CpuBackendBase::drain_side_streams() {
  for (SideStreams& s : side_) {
    for (int id = 1; id <= kSideStreams; ++id) {
      WorkQueue* q;
      {
        const std::lock_guard lock(s.mutex);
        q = s.queues[id].get();
      }
      // Errors are nobody's to report now; a forked child's queues have no thread to wait on.
      if (q != nullptr && q->thread_here()) q->wait(q->last_ticket());
    }
  }
}

void CpuBackendBase::drain_queues() {
  for (const auto& q : queues_) {
    // Errors are nobody's to report now; a forked child's queues have no thread to wait on.
    if (q != nullptr && q->thread_here()) q->wait(q->last_ticket());
  }
  drain_side_streams();
}

void CpuBackendBase::synchronize(int index) {
  refuse_while_capturing(index, "a host wait");
  WorkQueue* const own = queue(index);
  // The fast path: no side queue was ever made (work queued on one by another thread
  // happened after it was made, so waiting for that work means seeing `any` set).
  if (!side_[index].any.load(std::memory_order_acquire)) {
    if (own != nullptr) own->synchronize();
    return;
  }
  // Every stream, and the first error any of them had (the others are waited for anyway).
  std::exception_ptr first;
  const auto sync = [&first](WorkQueue* q) {
    if (q == nullptr) return;
    try {
      q->synchronize();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  };
  sync(own);
  for (int id = 1; id <= kSideStreams; ++id) {
    WorkQueue* q;
    {
      const std::lock_guard lock(side_[index].mutex);
      q = side_[index].queues[id].get();
    }
    sync(q);
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace tessera::detail

// Graph capture on CPU devices. See Note [CPU graphs].
#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <mutex>

#include "backend/cpu/cpu_backend.h"
#include "tessera/graph.h"

// Note [CPU graphs]
// A CPU kernel is a closure that launch() runs now or queues (cpu_backend.h), so recording
// one is keeping the closure instead: while a device captures, launch() appends its kernels
// to the device's recording, and a replay queues the whole recording as one task (or, on a
// device without a queue, runs it on the calling thread). A replay thus costs the host one
// submission instead of the front end's checks, autograd bookkeeping, allocations and one
// submission per op; this is what a CUDA graph saves on a GPU, and what lets CI test the
// Trainer's captured steps without one.
//
// Note [Memory of CPU graphs]
// As on a GPU (Note [CUDA caching allocator]), a capture takes its tensors' memory from a
// pool of its own (CpuGraphPool, in the device's allocator), and recorded kernels borrow
// their tensors (launch_with). A tensor the capture made and the host dropped during the
// capture gives its block to the next tensor the capture makes, as eager steps reuse memory:
// the recorded order is the replay order, so the old contents are dead by then. Every block
// the capture made stays the graph's as long as the graph lives (a tensor the host keeps
// holds the latest replay's result in it; dropped, its block goes back to the pool, not to
// the cache). Tensors from before the capture are kept alive by the recording, so a replay
// never reads memory someone else was given. Only the recording thread's allocations come
// from the pool: a loader thread or a queue's kernel allocating at the same time gets
// ordinary memory. Kernels that own their handles (collectives, cross-device copies, host
// fills) keep what they touch alive, as before. Before the pool a recording held every
// temporary of its work at once (`tessera train --model lenet --graph --batch-size 1024`
// peaked at 597 MB, 569 MB with the pool, 488 MB eager: the pool's blocks are not lent to
// the eager work around the replays, the validation pass and the short last batch).
//
// Several devices: queued devices each keep their own recording and replay it on their
// current stream's queue (a side stream's under a StreamGuard); a collective among them was
// recorded as one task per device meeting at reusable barriers (Note [CPU collectives]), so
// each replay meets again. Devices without queues (TESSERA_CPU_ASYNC=0) share one
// recording, which keeps the order the host issued their kernels in, as eager inline
// execution does, and replay it on the calling thread.
//
// Note [Captures and other threads]
// A capture records what the capturing thread issues. Other threads' work on the device
// runs as usual meanwhile: it went into the capturing thread's graph (run at no defined
// time, and again at every replay, writing that thread's tensors), it raced the capture's
// end on the recording (SIGSEGV), and its host reads and copies were refused in the name of
// a capture it never made. A second capture on the device, from any thread, is refused.
//
// What a replay cannot repeat (a read on the host, a copy from the host, a copy between two
// queues, which orders them by tickets of one moment) is refused at capture, by the front
// end (check_not_capturing) and again here for the backend's own paths.

namespace tessera::detail {

struct CpuBackendBase::Recording {
  std::mutex mutex;  // the capturing thread alone should launch, but never corrupt
  std::vector<std::function<void()>> kernels;
  // Memory of tensors from before the capture that the kernels borrow.
  std::vector<std::shared_ptr<Storage>> kept;
  // The pool of each recorded device's allocator (several when inline devices share one).
  std::vector<std::pair<CpuAllocator*, std::shared_ptr<CpuGraphPool>>> pools;

  Recording() = default;
  Recording(const Recording&) = delete;
  Recording& operator=(const Recording&) = delete;
  // The last replay has run (each held the recording): the pools' memory goes back.
  ~Recording() {
    kernels.clear();
    kept.clear();
    for (auto& [allocator, pool] : pools) allocator->release(pool);
  }
};

namespace {

// One handle per storage is enough (a parameter is read by many recorded kernels).
void dedupe_kept(CpuBackendBase::Recording& r) {
  std::sort(r.kept.begin(), r.kept.end());
  r.kept.erase(std::unique(r.kept.begin(), r.kept.end()), r.kept.end());
}

// Runs every kernel of a recording. On a queue a failed kernel does not stop the rest (a
// collective's partners wait for this device's part), and the first error is rethrown at
// the end, to be reported by the queue like any failed task; inline, the first error
// stops the replay, as it stops eager inline work.
void run_recording(const std::vector<std::function<void()>>& kernels, bool keep_going) {
  std::exception_ptr first;
  for (const std::function<void()>& kernel : kernels) {
    if (!keep_going) {
      kernel();
      continue;
    }
    try {
      kernel();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace

class CpuGraph final : public CapturedWork {
 public:
  struct Part {
    std::vector<int> indices;  // several: devices without queues sharing one recording
    std::shared_ptr<const CpuBackendBase::Recording> recording;
  };
  CpuGraph(CpuBackendBase& backend, std::vector<Part> parts)
      : backend_(backend), parts_(std::move(parts)) {}

  void replay() override {
    // The parts of several queued devices meet at their recorded collectives' barriers, so
    // they are queued as one step (Note [Cross-device submissions]).
    std::unique_lock<std::mutex> lock;
    if (parts_.size() > 1) lock = backend_.hold_cross_device_submissions();
    for (const Part& part : parts_) {
      const int index = part.indices.front();
      if (part.indices.size() > 1 && !backend_.capturing(index)) {
        // Devices whose default streams run on the calling thread: so does their shared
        // recording, once each device's current stream (a side stream, perhaps) is done.
        for (const int i : part.indices) backend_.wait_for_current_stream(i);
        backend_.run_here([&] { run_recording(part.recording->kernels, false); });
        continue;
      }
      const bool queued = backend_.queue(index) != nullptr || backend_.current_stream(index) != 0;
      // The task shares the recording, so a graph destroyed with a replay still queued
      // leaves the replay its kernels.
      backend_.launch(index, [recording = part.recording, queued] {
        run_recording(recording->kernels, queued);
      });
    }
  }

  std::size_t node_count() const override {
    std::size_t n = 0;
    for (const Part& part : parts_) n += part.recording->kernels.size();
    return n;
  }

 private:
  CpuBackendBase& backend_;
  std::vector<Part> parts_;
};

void CpuBackendBase::begin_capture(const std::vector<int>& indices) {
  // Claim every device first, all or none.
  for (std::size_t k = 0; k < indices.size(); ++k) {
    bool expected = false;
    if (!capture_claimed_[indices[k]].compare_exchange_strong(expected, true,
                                                              std::memory_order_acq_rel)) {
      for (std::size_t j = 0; j < k; ++j) {
        capture_claimed_[indices[j]].store(false, std::memory_order_release);
      }
      throw GraphCaptureError(fmt::format(
          "[Graph::capture] {} is already capturing a graph on another thread; captures do "
          "not nest, and a device records one graph at a time",
          Device(DeviceKind::kCpu, indices[k]).str()));
    }
  }
  const bool queued = queue(indices.front()) != nullptr;  // logical devices all or none
  const auto shared = queued ? nullptr : std::make_shared<Recording>();
  for (const int i : indices) {
    recordings_[i] = queued ? std::make_shared<Recording>() : shared;
    auto pool = std::make_shared<CpuGraphPool>();
    allocators_[i]->begin_capture(pool);
    recordings_[i]->pools.emplace_back(allocators_[i].get(), std::move(pool));
    capture_thread_[i].store(std::this_thread::get_id(), std::memory_order_relaxed);
    capturing_[i].store(true, std::memory_order_release);
  }
}

std::unique_ptr<CapturedWork> CpuBackendBase::end_capture(const std::vector<int>& indices) {
  std::vector<CpuGraph::Part> parts;
  for (const int i : indices) {
    capturing_[i].store(false, std::memory_order_release);
    allocators_[i]->end_capture();
    std::shared_ptr<Recording> r = std::move(recordings_[i]);
    capture_claimed_[i].store(false, std::memory_order_release);
    dedupe_kept(*r);
    if (!parts.empty() && parts.back().recording == r) {  // shared, inline
      parts.back().indices.push_back(i);
    } else {
      parts.push_back({{i}, std::move(r)});
    }
  }
  return std::make_unique<CpuGraph>(*this, std::move(parts));
}

void CpuBackendBase::abort_capture(const std::vector<int>& indices) {
  // Nothing recorded ran; dropping the recording releases its tensors and pools.
  for (const int i : indices) {
    capturing_[i].store(false, std::memory_order_release);
    allocators_[i]->end_capture();
    recordings_[i].reset();
    capture_claimed_[i].store(false, std::memory_order_release);
  }
}

void CpuBackendBase::record(int index, std::function<void()> kernel) {
  Recording& r = *recordings_[index];
  const std::lock_guard lock(r.mutex);
  r.kernels.push_back(std::move(kernel));
}

void CpuBackendBase::keep_for_graph(int index, const Tensor& t) {
  if (!t.defined()) return;
  const std::shared_ptr<Storage>& storage = impl_of(t).storage;
  if (storage->device.index() == index && allocators_[index]->made_for_capture(storage->data)) {
    return;  // the pool keeps it
  }
  Recording& r = *recordings_[index];
  const std::lock_guard lock(r.mutex);
  r.kept.push_back(storage);
}

void CpuBackendBase::refuse_while_capturing(int index, const char* what) const {
  if (!capturing(index)) return;
  throw GraphCaptureError(fmt::format(
      "[Graph::capture] {} is capturing a graph, and {} cannot be recorded: a replay would "
      "not repeat it. Do it before Graph::capture or after it (outside the captured code)",
      Device(DeviceKind::kCpu, index).str(), what));
}

}  // namespace tessera::detail

// Graph capture on CPU devices. See Note [CPU graphs].
#include <fmt/format.h>

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
// Memory: each closure holds the handles of the tensors it reads and writes, so everything
// a recorded kernel touches, made during the capture or before it, lives as long as the
// graph. Nothing is reused between the recorded ops, which costs one step's temporaries of
// memory and makes replays independent of what the host allocates in between.
//
// Several devices: queued devices each keep their own recording and replay it on their
// current stream's queue (a side stream's under a StreamGuard); a collective among them was
// recorded as one task per device meeting at reusable barriers (Note [CPU collectives]), so
// each replay meets again. Devices without queues (TESSERA_CPU_ASYNC=0) share one
// recording, which keeps the order the host issued their kernels in, as eager inline
// execution does, and replay it on the calling thread.
//
// What a replay cannot repeat (a read on the host, a copy from the host, a copy between two
// queues, which orders them by tickets of one moment) is refused at capture, by the front
// end (check_not_capturing) and again here for the backend's own paths.

namespace tessera::detail {

struct CpuBackendBase::Recording {
  std::mutex mutex;  // the capturing thread alone should launch, but never corrupt
  std::vector<std::function<void()>> kernels;
};

namespace {

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
  const bool queued = queue(indices.front()) != nullptr;  // logical devices all or none
  const auto shared = queued ? nullptr : std::make_shared<Recording>();
  for (const int i : indices) {
    recordings_[i] = queued ? std::make_shared<Recording>() : shared;
    capturing_[i].store(true, std::memory_order_release);
  }
}

std::unique_ptr<CapturedWork> CpuBackendBase::end_capture(const std::vector<int>& indices) {
  std::vector<CpuGraph::Part> parts;
  for (const int i : indices) {
    capturing_[i].store(false, std::memory_order_release);
    std::shared_ptr<Recording> r = std::move(recordings_[i]);
    if (!parts.empty() && parts.back().recording == r) {  // shared, inline
      parts.back().indices.push_back(i);
    } else {
      parts.push_back({{i}, std::move(r)});
    }
  }
  return std::make_unique<CpuGraph>(*this, std::move(parts));
}

void CpuBackendBase::abort_capture(const std::vector<int>& indices) {
  // Nothing recorded ran; dropping the closures releases the tensors they held.
  for (const int i : indices) {
    capturing_[i].store(false, std::memory_order_release);
    recordings_[i].reset();
  }
}

void CpuBackendBase::record(int index, std::function<void()> kernel) {
  Recording& r = *recordings_[index];
  const std::lock_guard lock(r.mutex);
  r.kernels.push_back(std::move(kernel));
}

void CpuBackendBase::refuse_while_capturing(int index, const char* what) const {
  if (!capturing(index)) return;
  throw GraphCaptureError(fmt::format(
      "[Graph::capture] {} is capturing a graph, and {} cannot be recorded: a replay would "
      "not repeat it. Do it before Graph::capture or after it (outside the captured code)",
      Device(DeviceKind::kCpu, index).str(), what));
}

}  // namespace tessera::detail

#pragma once
/// Graphs: the device work of a piece of code, recorded once and replayed with one launch
/// (a CUDA graph on a GPU; on CPU devices, the recorded kernels queued as one task). Replaying
/// skips the host's per-op cost (checks, autograd, allocation, launches), which dominates
/// small ops such as the book's 100x100 matmuls and the book's small models. Recording does
/// not run the work; replay() does.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "tessera/device.h"
#include "tessera/error.h"
#include "tessera/export.h"

namespace tessera {

namespace detail {
class CapturedWork;
}

/// Something the code being captured may not do (wait for the device, copy between the host
/// and the device, draw random numbers), or a capture that cannot start or broke.
class TESSERA_API GraphCaptureError : public Error {
 public:
  using Error::Error;
};

/// Work recorded on one device (or on several CPU devices at once), replayable. Move-only.
///
/// What a replay reads and writes is fixed at capture: the tensors the recorded ops used.
/// Tensors created during the capture live in memory the graph keeps, so they hold the
/// results of the latest replay; tensors from before the capture that the recorded ops read
/// must stay alive (and hold their new inputs) while the graph is replayed.
///
/// Training steps: a backward() recorded into a gradient that already exists adds to it in
/// place, so every replay accumulates as an eager backward() would; a gradient the capture
/// makes (after zero_grad()) is the recording's, set afresh by every replay. The state an
/// optimizer or a GradScaler makes on its first step cannot be recorded (a replay would
/// reset it: GraphCaptureError), and Adam must be capturable: take one step before
/// capturing, as Trainer does. A capture that throws drops what it recorded, but not what
/// `record` changed on the host (a GradScaler's progress through its step).
class TESSERA_API Graph {
 public:
  /// Records the work that `record` queues on `device` without running it. Only the
  /// calling thread's work is recorded: on CPU devices other threads' work runs as usual
  /// meanwhile, while on a GPU other threads must not use the device (CUDA records the
  /// stream, whoever issues on it). Throws DeviceError for a missing
  /// device, GraphCaptureError when `record` waits for the device (reads a value), copies
  /// between the host and the device (or between two GPUs, or two queued CPU devices), runs
  /// a GPU's first NCCL collective (which makes its communicator) or one over several GPUs,
  /// draws random numbers or enters a StreamGuard, or when a capture is already under way
  /// on the device (on any thread); the device is then usable as before.
  static Graph capture(Device device, const std::function<void()>& record);
  /// Records the work `record` queues on several devices of one kind at once, for example
  /// the replicas of a data-parallel step and the collectives between them; a replay runs
  /// every device's part on its own queue. Logical CPU devices only: a graph holds one GPU
  /// (DeviceError otherwise, as for devices of two kinds or a device listed twice).
  static Graph capture(const std::vector<Device>& devices, const std::function<void()>& record);

  /// Queues one run of the recorded work on each device's current stream or queue. No host
  /// wait.
  void replay() const;
  /// The (first) device it was recorded on. Throws GraphCaptureError on a graph moved from.
  Device device() const;
  const std::vector<Device>& devices() const { return devices_; }
  /// Number of operations (kernels, copies, collectives' parts) in the graph.
  std::size_t node_count() const;

  Graph(Graph&&) noexcept;
  Graph& operator=(Graph&&) noexcept;
  ~Graph();

 private:
  TESSERA_HIDDEN Graph(std::vector<Device> devices, std::unique_ptr<detail::CapturedWork> work);
  std::vector<Device> devices_;
  std::unique_ptr<detail::CapturedWork> work_;
  // What one replay moves between devices, per device index of the kind: transfers counted
  // and bytes, in pairs (Note [Graphs in the ledger] in graph.cpp).
  std::vector<std::uint64_t> replay_moves_;
};

}  // namespace tessera

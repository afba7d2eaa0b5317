#pragma once
/// Graphs: the GPU work of a piece of code, recorded once and replayed with one launch
/// (CUDA graphs). Replaying skips the host's per-op cost, which dominates small ops such as
/// the seed's 100x100 matmuls. Recording does not run the work; replay() does.
#include <cstddef>
#include <functional>
#include <memory>

#include "tessera/device.h"
#include "tessera/error.h"

namespace tessera {

namespace detail {
class CapturedWork;
}

/// Something the code being captured may not do (wait for the device, copy between the host
/// and the device, draw random numbers), or a capture that cannot start or broke.
class GraphCaptureError : public Error {
 public:
  using Error::Error;
};

/// Work recorded on a GPU, replayable. Move-only.
///
/// What a replay reads and writes is fixed at capture: the tensors the recorded ops used.
/// Tensors created during the capture live in memory the graph keeps, so they hold the
/// results of the latest replay; tensors from before the capture that the recorded ops read
/// must stay alive (and hold their new inputs) while the graph is replayed.
class Graph {
 public:
  /// Records the GPU work that `record` queues on `device` without running it. While it
  /// records, other threads must not use the device. Throws DeviceError for a CPU device or
  /// a missing GPU, GraphCaptureError when `record` waits for the device, copies between
  /// the host and the device, draws random numbers or enters a StreamGuard, or when a
  /// capture is already under way; the device is then usable as before.
  static Graph capture(Device device, const std::function<void()>& record);

  /// Queues one run of the recorded work on the device's current stream. No host wait.
  void replay() const;
  Device device() const { return device_; }
  /// Number of operations (kernels, copies) in the graph.
  std::size_t node_count() const;

  Graph(Graph&&) noexcept;
  Graph& operator=(Graph&&) noexcept;
  ~Graph();

 private:
  Graph(Device device, std::unique_ptr<detail::CapturedWork> work);
  Device device_;
  std::unique_ptr<detail::CapturedWork> work_;
};

}  // namespace tessera

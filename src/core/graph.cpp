// Graph capture: the front end checks the device and makes sure a failed capture leaves the
// device as it was; the backend records (backend/cuda/cuda_graph.cpp).
#include "tessera/graph.h"

#include <fmt/format.h>

#include <atomic>
#include <exception>

#include "backend/backend.h"
#include "core/check.h"
#include "core/device_registry.h"
#include "core/device_rules.h"

namespace tessera::detail {
namespace {

// Captures in progress on any device, counted here around the backend's begin and end, so
// check_not_capturing costs one load when there are none.
std::atomic<int> g_captures_in_progress{0};

// Counts one capture for as long as it lives.
class CaptureCount {
 public:
  CaptureCount() { g_captures_in_progress.fetch_add(1); }
  ~CaptureCount() { g_captures_in_progress.fetch_sub(1); }
  CaptureCount(const CaptureCount&) = delete;
  CaptureCount& operator=(const CaptureCount&) = delete;
};

}  // namespace
}  // namespace tessera::detail

namespace tessera {

Graph::Graph(Device device, std::unique_ptr<detail::CapturedWork> work)
    : device_(device), work_(std::move(work)) {}
Graph::Graph(Graph&&) noexcept = default;
Graph& Graph::operator=(Graph&&) noexcept = default;
Graph::~Graph() = default;

Graph Graph::capture(Device device, const std::function<void()>& record) {
  detail::check_device(device, "Graph::capture");
  detail::Backend& backend = detail::backend_of(device);
  TESSERA_CHECK(backend.supports_capture(), DeviceError,
                "[Graph::capture] {} runs each op as it is issued and cannot record graphs; "
                "graphs need a GPU (try_gpu() gives one when there is one)",
                device.str());
  TESSERA_CHECK(!backend.capturing(device.index()), GraphCaptureError,
                "[Graph::capture] {} is already capturing a graph; captures do not nest",
                device.str());
  TESSERA_CHECK(backend.current_stream(device.index()) == 0, GraphCaptureError,
                "[Graph::capture] this thread is inside a StreamGuard for {}; capture on the "
                "default stream (outside the guard)",
                device.str());
  backend.begin_capture(device.index());
  const detail::CaptureCount counted;  // until the recording is ended or dropped
  try {
    record();
  } catch (...) {
    backend.abort_capture(device.index());
    throw;
  }
  return Graph(device, backend.end_capture(device.index()));
}

void Graph::replay() const {
  TESSERA_CHECK(work_ != nullptr, GraphCaptureError,
                "[Graph::replay] this graph was moved from; replay the graph it was moved to");
  work_->replay();
}

std::size_t Graph::node_count() const { return work_ ? work_->node_count() : 0; }

}  // namespace tessera

namespace tessera::detail {

void check_not_capturing(Device device, const char* op, const char* what) {
  if (g_captures_in_progress.load(std::memory_order_relaxed) == 0) [[likely]] return;
  if (!device.is_cuda() || !backend_of(device).capturing(device.index())) return;
  throw GraphCaptureError(fmt::format(
      "[{}] {} is capturing a graph, and {} cannot be recorded: a replay would not repeat "
      "it. Do it before Graph::capture or after it (outside the captured code)",
      op, device.str(), what));
}

}  // namespace tessera::detail

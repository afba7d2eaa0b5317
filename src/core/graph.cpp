// Graph capture: the front end checks the devices and makes sure a failed capture leaves
// them as they were; the backend records (backend/cuda/cuda_graph.cpp,
// backend/cpu/cpu_graph.cpp).
#include "tessera/graph.h"

#include <fmt/format.h>

#include <atomic>
#include <exception>

#include "backend/backend.h"
#include "core/capture_undo.h"
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

Graph::Graph(std::vector<Device> devices, std::unique_ptr<detail::CapturedWork> work)
    : devices_(std::move(devices)), work_(std::move(work)) {}
Graph::Graph(Graph&&) noexcept = default;
Graph& Graph::operator=(Graph&&) noexcept = default;
Graph::~Graph() = default;

Graph Graph::capture(Device device, const std::function<void()>& record) {
  return capture(std::vector<Device>{device}, record);
}

Graph Graph::capture(const std::vector<Device>& devices, const std::function<void()>& record) {
  TESSERA_CHECK(!devices.empty(), DeviceError,
                "[Graph::capture] got no devices; pass the device(s) whose work to record");
  std::vector<int> indices;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const Device d = devices[i];
    detail::check_device(d, "Graph::capture");
    TESSERA_CHECK(d.kind() == devices.front().kind(), DeviceError,
                  "[Graph::capture] devices mixes {} and {}; one graph records devices of one "
                  "kind",
                  devices.front().str(), d.str());
    for (std::size_t j = 0; j < i; ++j) {
      TESSERA_CHECK(devices[j] != d, DeviceError,
                    "[Graph::capture] devices lists {} twice; give each device once", d.str());
    }
    indices.push_back(d.index());
  }
  detail::Backend& backend = detail::backend_of(devices.front());
  const int most = backend.max_capture_devices();
  TESSERA_CHECK(most > 0, DeviceError,
                "[Graph::capture] {} runs each op as it is issued and cannot record graphs",
                devices.front().str());
  TESSERA_CHECK(static_cast<int>(devices.size()) <= most, DeviceError,
                "[Graph::capture] got {} devices, and a graph on {} holds at most {}; capture "
                "one graph per device",
                devices.size(), devices.front().str(), most);
  for (const Device d : devices) {
    TESSERA_CHECK(!backend.capturing_on_any_thread(d.index()), GraphCaptureError,
                  "[Graph::capture] {} is already capturing a graph{}; captures do not nest, "
                  "and a device records one graph at a time",
                  d.str(), backend.capturing(d.index()) ? "" : " on another thread");
    TESSERA_CHECK(backend.current_stream(d.index()) == 0, GraphCaptureError,
                  "[Graph::capture] this thread is inside a StreamGuard for {}; capture on the "
                  "default stream (outside the guard)",
                  d.str());
  }
  const std::vector<std::uint64_t> before = detail::d2d_moves(devices.front().kind());
  backend.begin_capture(indices);
  const detail::CaptureCount counted;  // until the recording is ended or dropped
  detail::CaptureUndo undo;            // Note [A refused capture's host state]
  try {
    record();
  } catch (...) {
    backend.abort_capture(indices);
    undo.roll_back();
    throw;
  }
  Graph graph(devices, backend.end_capture(indices));
  // Note [Graphs in the ledger]
  // The front end counts a collective or a copy between devices when it is issued; during a
  // capture that is when it is recorded, and nothing moves. What the recording counted is
  // taken back and added again at every replay, which does move it: a data-parallel step run
  // as a graph shows its all-reduce bytes per step, as eager steps do. (Another thread
  // moving data between devices of this kind while the capture runs would be counted with
  // the graph's.)
  graph.replay_moves_ = detail::d2d_moves(devices.front().kind());
  for (std::size_t i = 0; i < before.size(); ++i) {  // 0 if the ledger was reset meanwhile
    std::uint64_t& moved = graph.replay_moves_[i];
    moved = moved >= before[i] ? moved - before[i] : 0;
  }
  detail::add_d2d_moves(devices.front().kind(), graph.replay_moves_, /*sign=*/-1);
  return graph;
}

void Graph::replay() const {
  TESSERA_CHECK(work_ != nullptr, GraphCaptureError,
                "[Graph::replay] this graph was moved from; replay the graph it was moved to");
  if (devices_.size() > 1) {
    detail::check_capturing_together(devices_, "Graph::replay", "a graph of several devices");
  }
  work_->replay();
  detail::add_d2d_moves(devices_.front().kind(), replay_moves_, /*sign=*/1);
}

Device Graph::device() const {
  TESSERA_CHECK(!devices_.empty(), GraphCaptureError,
                "[Graph::device] this graph was moved from; ask the graph it was moved to");
  return devices_.front();
}

std::size_t Graph::node_count() const { return work_ ? work_->node_count() : 0; }

}  // namespace tessera

namespace tessera::detail {

bool is_capturing(Device device) {
  if (g_captures_in_progress.load(std::memory_order_relaxed) == 0) [[likely]]
    return false;
  return backend_of(device).capturing(device.index());
}

void check_not_capturing(Device device, const char* op, const char* what) {
  if (g_captures_in_progress.load(std::memory_order_relaxed) == 0) [[likely]]
    return;
  if (!backend_of(device).capturing(device.index())) return;
  throw GraphCaptureError(fmt::format(
      "[{}] {} is capturing a graph, and {} cannot be recorded: a replay would not repeat "
      "it. Do it before Graph::capture or after it (outside the captured code)",
      op, device.str(), what));
}

void check_capturing_together(const std::vector<Device>& devices, const char* op,
                              const char* what) {
  if (g_captures_in_progress.load(std::memory_order_relaxed) == 0) [[likely]]
    return;
  const Device* capturing = nullptr;
  const Device* not_capturing = nullptr;
  for (const Device& d : devices) {
    (backend_of(d).capturing(d.index()) ? capturing : not_capturing) = &d;
  }
  if (capturing == nullptr || not_capturing == nullptr) return;
  throw GraphCaptureError(fmt::format(
      "[{}] {} is capturing a graph but {} is not, and {} runs on both: record every device "
      "it uses in one capture (Graph::capture with all of them) or run it outside the capture",
      op, capturing->str(), not_capturing->str(), what));
}

}  // namespace tessera::detail

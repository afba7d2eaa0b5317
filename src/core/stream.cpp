// Streams: the front end checks devices and hands the ordering to the backend (see
// Note [CUDA streams] in backend/cuda/cuda_streams.cpp and Note [CPU side streams] in
// backend/cpu/cpu_streams.cpp).
#include "tessera/stream.h"

#include <fmt/format.h>

#include <atomic>
#include <ostream>

#include "backend/backend.h"
#include "core/check.h"
#include "core/device_registry.h"
#include "core/device_rules.h"
#include "tessera/graph.h"

namespace tessera {

std::string Stream::str() const {
  return is_default() ? device_.str() : fmt::format("{}/stream {}", device_.str(), id_);
}

std::ostream& operator<<(std::ostream& os, Stream stream) { return os << stream.str(); }

Stream default_stream(Device device) {
  detail::check_device(device, "default_stream");
  return Stream(device, 0);
}

Stream new_stream(Device device) {
  detail::check_device(device, "new_stream");
  detail::Backend& backend = detail::backend_of(device);
  const int extra = backend.extra_streams();
  TESSERA_CHECK(extra > 0, DeviceError,
                "[new_stream] {} has a single in-order queue and no side streams; queue its "
                "work on the default stream",
                device.str());
  // Round-robin over the pool, as PyTorch does: streams are cheap handles, never destroyed.
  static std::atomic<unsigned> next[2][detail::kMaxDevicesPerKind];  // per kind (CPU, CUDA)
  const unsigned n =
      next[static_cast<int>(device.kind())][device.index()].fetch_add(1, std::memory_order_relaxed);
  return Stream(device, 1 + static_cast<int>(n % static_cast<unsigned>(extra)));
}

Stream current_stream(Device device) {
  detail::check_device(device, "current_stream");
  return Stream(device, detail::backend_of(device).current_stream(device.index()));
}

StreamGuard::StreamGuard(Stream stream) : stream_(stream) {
  const Device device = stream.device();
  detail::check_device(device, "StreamGuard");
  detail::Backend& backend = detail::backend_of(device);
  TESSERA_CHECK(!backend.capturing(device.index()), GraphCaptureError,
                "[StreamGuard] {} is capturing a graph, which records one stream; enter the "
                "stream outside Graph::capture",
                device.str());
  previous_ = backend.current_stream(device.index());
  backend.enter_stream(device.index(), stream.id(), previous_);
}

StreamGuard::~StreamGuard() {
  detail::backend_of(stream_.device())
      .leave_stream(stream_.device().index(), stream_.id(), previous_);
}

void wait_stream(Stream waiter, Stream waited) {
  const Device device = waiter.device();
  detail::check_device(device, "wait_stream");
  TESSERA_CHECK(waited.device() == device, DeviceError,
                "[wait_stream] the streams are of {} and {}; a stream waits for another of its "
                "own device (across devices, copy the tensor with .to(), which orders itself)",
                device.str(), waited.device().str());
  TESSERA_CHECK(!detail::backend_of(device).capturing(device.index()), GraphCaptureError,
                "[wait_stream] {} is capturing a graph, which records one stream; order the "
                "streams outside Graph::capture",
                device.str());
  detail::backend_of(device).order_stream_after(device.index(), waiter.id(), waited.id());
}

void synchronize(Stream stream) {
  const Device device = stream.device();
  detail::check_device(device, "synchronize");
  detail::check_not_capturing(device, "synchronize", "a host wait");
  if (!detail::is_host(device)) ++detail::counters(device).host_waits;
  detail::backend_of(device).synchronize_stream(device.index(), stream.id());
}

}  // namespace tessera

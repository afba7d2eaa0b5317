// Moving bytes: between devices (copy_data, under the ops' to/copy_to/copy_ in
// ops/copy.cpp), and to the host (item, to_vector, data). Every crossing is counted in the
// transfer ledger.
#include <fmt/format.h>

#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "core/check.h"
#include "core/code_names.h"
#include "core/convert.h"
#include "core/copy.h"
#include "core/device_registry.h"
#include "core/device_rules.h"
#include "core/dispatch_half.h"
#include "core/tensor_impl.h"
#include "tessera/graph.h"

namespace tessera {
using detail::check_defined;
using detail::impl_of;
using detail::make_tensor;

}  // namespace tessera

namespace tessera::detail {
namespace {

// The plain CPU runs its default stream on the calling thread, which therefore never waits
// for it, but its side streams (StreamGuard) on threads of their own: the host touches its
// memory directly only once they are done. Not a counted wait (the host is no device); a
// no-op when no side stream has work, and while the CPU records a graph (nothing runs).
void settle_host(Device host) {
  Backend& backend = backend_of(host);
  if (!backend.capturing(host.index())) backend.synchronize(host.index());
}

// `t` itself when contiguous, else a contiguous copy queued on its own device.
Tensor packed_on_device(const Tensor& t, const char* op) {
  if (t.is_contiguous()) return t;
  Tensor packed = make_output(t.shape(), t.dtype(), t.device(), op);
  backend_of(t.device()).copy(t, packed);
  return packed;
}

}  // namespace

void copy_data(const Tensor& src, const Tensor& dst, const char* op,
               const std::source_location& where, SourceWriters writers) {
  TESSERA_INTERNAL_ASSERT(src.shape() == dst.shape(), "copy_data from {} into {}",
                          src.shape().str(), dst.shape().str());
  const Device from = src.device(), to = dst.device();
  // A DataLoader piece gathered on its device's queue: the host did not write it itself.
  if (impl_of(src).storage->filled_in_device_order) writers = SourceWriters::kAnyQueue;
  if (from.kind() == to.kind()) {
    if (writers == SourceWriters::kHostOnly && from.is_cpu() && from != to && src.is_contiguous() &&
        dst.is_contiguous() && src.dtype() == dst.dtype()) {
      // A batch only the host wrote: dst's queue reads it, and src's queue is not involved.
      backend_of(to).copy_from_cpu(src, dst);
    } else if (from == to) {
      backend_of(to).copy(src, dst);
    } else {
      // One backend: it orders both devices' queues itself. It alone knows whether both are
      // queued, so it refuses to record such a copy; the message names the user's call too.
      try {
        backend_of(to).copy(src, dst);
      } catch (const GraphCaptureError& e) {
        // In the user's call's name alone ("[to] [Graph::capture] ..." named two ops).
        std::string_view what = e.what();
        constexpr std::string_view kBackends = "[Graph::capture] ";
        if (what.starts_with(kBackends)) what.remove_prefix(kBackends.size());
        throw GraphCaptureError(fmt::format("[{}] {}", op, what));
      }
    }
    if (from != to) count_copy(from, to, src.nbytes());
    return;
  }
  // CPU <-> GPU: the bytes cross in src's dtype from a contiguous tensor; the destination
  // backend then converts and lays them out in place if dst needs it.
  if (from.is_cpu()) check_not_capturing(to, op, "a copy from the host");
  const Tensor packed = packed_on_device(src, op);
  const bool direct = dst.is_contiguous() && dst.dtype() == packed.dtype();
  const Tensor landed = direct ? dst : make_tensor(dst.shape(), packed.dtype(), to, op);
  if (from.is_cpu()) {
    // A queued CPU device may still be producing src (or its packed copy, just queued),
    // unless the caller knows that only the host wrote it (a DataLoader batch).
    const bool host_only = writers == SourceWriters::kHostOnly && packed.is_same(src);
    if (!is_host(from) && !host_only) {
      count_host_wait(from, op, &where);
      backend_of(from).synchronize(from.index());
    } else if (!host_only) {
      settle_host(from);
    }
    backend_of(to).copy_from_cpu(packed, landed);
  } else {
    // The host waits for the GPU; and a queued CPU destination for its earlier readers.
    count_host_wait(from, op, &where);
    if (!is_host(to)) {
      backend_of(to).synchronize(to.index());
    } else {
      settle_host(to);
    }
    backend_of(from).copy_to_host(packed, impl_of(landed).data());
  }
  if (!direct) backend_of(to).copy(landed, dst);
  count_copy(from, to, packed.nbytes());
}

}  // namespace tessera::detail

namespace tessera {

Tensor Tensor::pin_memory() const {
  check_defined(*this, "pin_memory");
  TESSERA_CHECK(device().is_cpu(), DeviceError,
                "[pin_memory] only CPU tensors can be pinned; this tensor is on {}",
                device().str());
  if (is_pinned()) return *this;
  TESSERA_CHECK(num_gpus() > 0, DeviceError,
                "[pin_memory] page-locked memory comes from the CUDA driver, and no GPU is "
                "available: {}. Use the tensor as it is",
                gpu_unavailable_reason());
  Tensor out = make_tensor(shape(), dtype(), device(), "pin_memory", /*pinned=*/true);
  detail::backend_of(device()).copy(*this, out);
  return out;
}

bool Tensor::is_pinned() const {
  check_defined(*this, "is_pinned");
  return impl_->storage->pinned;
}

}  // namespace tessera

namespace tessera::detail {

void read_to_host(const Tensor& t, void* dst, Dtype as, const char* op,
                  const std::source_location& where) {
  check_defined(t, op);
  // Move the tensor's own bytes (packed on the device if it is a view) and convert on the
  // host, so the ledger and the bus see the data's size, not the requested type's.
  const Tensor packed = packed_on_device(t, op);
  count_host_read(t.device(), packed.nbytes(), op, &where);
  if (packed.dtype() == as) {
    backend_of(t.device()).copy_to_host(packed, dst);
    return;
  }
  std::vector<char> raw(packed.nbytes());
  backend_of(t.device()).copy_to_host(packed, raw.data());
  const std::int64_t n = packed.numel();
  dispatch_dtype_with_half(as, [&](auto to_tag) {
    using To = typename decltype(to_tag)::type;
    dispatch_dtype_with_half(packed.dtype(), [&](auto from_tag) {
      using From = typename decltype(from_tag)::type;
      const From* from = reinterpret_cast<const From*>(raw.data());
      To* to = static_cast<To*>(dst);
      for (std::int64_t i = 0; i < n; ++i) to[i] = convert_value<To>(from[i]);
    });
  });
}

void read_item(const Tensor& t, void* dst, Dtype as, const std::source_location& where) {
  check_defined(t, "item");
  TESSERA_CHECK(t.numel() == 1, ShapeError,
                "[item] expects a tensor with exactly one element, got shape {} ({} elements); "
                "reduce it first (e.g. sum()) or index it",
                t.shape().str(), t.numel());
  read_to_host(t, dst, as, "item", where);
}

void* cpu_data(const Tensor& t, Dtype expected, const char* op, const std::source_location& where) {
  check_defined(t, op);
  TESSERA_CHECK(t.device().is_cpu(), DeviceError,
                "[{}] raw pointers are only given for CPU tensors; this tensor is on {}. Copy it "
                "with .cpu() or read it with to_vector()",
                op, t.device().str());
  TESSERA_CHECK(t.dtype() == expected, DtypeError,
                "[{}] the tensor holds {}, not {}; convert it with .to({}) first", op,
                dtype_name(t.dtype()), dtype_name(expected), detail::dtype_code(expected));
  check_not_capturing(t.device(), op, "handing its memory to the host");
  if (!is_host(t.device())) {
    // The host reads the device's memory as a GPU's would be copied out: a wait and a
    // device-to-host read of the tensor (docs/device_model.md).
    count_host_read(t.device(), t.nbytes(), op, &where);
    backend_of(t.device()).synchronize(t.device().index());
  } else {
    settle_host(t.device());
  }
  return impl_of(t).data();
}

}  // namespace tessera::detail

namespace tessera {

void Tensor::read_to_host_as(void* dst, Dtype as, const char* op,
                             const std::source_location& where) const {
  detail::read_to_host(*this, dst, as, op, where);
}

void Tensor::read_item_as(void* dst, Dtype as, const std::source_location& where) const {
  detail::read_item(*this, dst, as, where);
}

void* Tensor::cpu_data_as(Dtype expected, const char* op, const std::source_location& where) const {
  return detail::cpu_data(*this, expected, op, where);
}

}  // namespace tessera

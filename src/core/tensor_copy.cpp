// Moving data: between devices (to, copy_to, copy_), between dtypes, and to the host
// (item, to_vector, data). Every crossing is counted in the transfer ledger.
#include <fmt/format.h>

#include <vector>

#include "backend/backend.h"
#include "backend/cpu/copy_kernel.h"
#include "core/check.h"
#include "core/device_registry.h"
#include "core/device_rules.h"
#include "core/dispatch.h"
#include "core/tensor_impl.h"

namespace tessera {
using detail::check_defined;
using detail::impl_of;
using detail::make_tensor;

Tensor Tensor::to(Device device) const {
  check_defined(*this, "to");
  if (device == this->device()) return *this;  // no copy, no allocation: the seed's `is Z`
  return copy_to(device);
}

Tensor Tensor::to(Dtype dtype) const {
  check_defined(*this, "to");
  if (dtype == this->dtype()) return *this;
  Tensor out = make_tensor(shape(), dtype, device(), "to");
  detail::backend_of(device()).copy(*this, out);
  return out;
}

Tensor Tensor::to(Device device, Dtype dtype) const { return to(device).to(dtype); }

Tensor Tensor::copy_to(Device device) const {
  check_defined(*this, "copy_to");
  Tensor out = make_tensor(shape(), dtype(), device, "copy_to");
  out.copy_(*this);
  return out;
}

Tensor Tensor::cpu() const { return to(tessera::cpu()); }
Tensor Tensor::cuda(int index) const { return to(gpu(index)); }

Tensor Tensor::clone() const { return copy_to(device()); }

Tensor Tensor::contiguous() const {
  check_defined(*this, "contiguous");
  return is_contiguous() ? *this : clone();
}

Tensor& Tensor::copy_(const Tensor& src_in) {
  check_defined(*this, "copy_", "self");
  check_defined(src_in, "copy_", "src");
  const Tensor src = src_in.shape() == shape() ? src_in : src_in.expand(shape());
  const Device from = src.device(), to = device();
  if (from.kind() == to.kind()) {
    // One backend: it orders both devices' queues itself.
    detail::backend_of(to).copy(src, *this);
    if (from != to) detail::record_copy(from, to, src.nbytes());
    return *this;
  }
  // Across backends, stage through the host: contiguous on the source device, then bytes
  // to the host and on to the destination device, then a same-device copy into place.
  Tensor packed = src.is_contiguous() ? src : src.clone();
  std::vector<char> staging(packed.nbytes());
  detail::backend_of(from).copy_to_host(packed, staging.data());
  Tensor landed = make_tensor(shape(), src.dtype(), to, "copy_");
  detail::backend_of(to).copy_from_host(staging.data(), landed);
  detail::backend_of(to).copy(landed, *this);
  detail::record_copy(from, to, packed.nbytes());
  return *this;
}

}  // namespace tessera

namespace tessera::detail {

void read_to_host(const Tensor& t, void* dst, Dtype as, const char* op) {
  check_defined(t, op);
  // Move the tensor's own bytes (packed on the device if it is a view) and convert on the
  // host, so the ledger and the bus see the data's size, not the requested type's.
  const Tensor packed = t.is_contiguous() ? t : t.clone();
  record_host_read(t.device(), packed.nbytes());
  if (packed.dtype() == as) {
    backend_of(t.device()).copy_to_host(packed, dst);
    return;
  }
  std::vector<char> raw(packed.nbytes());
  backend_of(t.device()).copy_to_host(packed, raw.data());
  const std::int64_t n = packed.numel();
  dispatch_dtype(as, [&](auto to_tag) {
    using To = typename decltype(to_tag)::type;
    dispatch_dtype(packed.dtype(), [&](auto from_tag) {
      using From = typename decltype(from_tag)::type;
      const From* from = reinterpret_cast<const From*>(raw.data());
      To* to = static_cast<To*>(dst);
      for (std::int64_t i = 0; i < n; ++i) to[i] = convert_value<To>(from[i]);
    });
  });
}

void read_item(const Tensor& t, void* dst, Dtype as) {
  check_defined(t, "item");
  TESSERA_CHECK(t.numel() == 1, ShapeError,
                "[item] expects a tensor with exactly one element, got shape {} ({} elements); "
                "reduce it first (e.g. sum()) or index it",
                t.shape().str(), t.numel());
  read_to_host(t, dst, as, "item");
}

void* cpu_data(const Tensor& t, Dtype expected, const char* op) {
  check_defined(t, op);
  TESSERA_CHECK(t.device().is_cpu(), DeviceError,
                "[{}] raw pointers are only given for CPU tensors; this tensor is on {}. Copy it "
                "with .cpu() or read it with to_vector()",
                op, t.device().str());
  TESSERA_CHECK(t.dtype() == expected, DtypeError,
                "[{}] the tensor holds {}, not {}; convert it with .to({}) first", op,
                dtype_name(t.dtype()), dtype_name(expected), dtype_name(expected));
  if (!is_host(t.device())) {
    ++counters(t.device()).host_waits;
    backend_of(t.device()).synchronize(t.device().index());
  }
  return impl_of(t).data();
}

}  // namespace tessera::detail

// Moving data: between devices (to, copy_to, copy_), between dtypes, and to the host
// (item, to_vector, data). Every crossing is counted in the transfer ledger.
#include <fmt/format.h>

#include <vector>

#include "autograd/formulas.h"
#include "autograd/record.h"
#include "backend/backend.h"
#include "tessera/autograd.h"
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

Tensor Tensor::to(Device device, std::source_location where) const {
  check_defined(*this, "to");
  if (device == this->device()) return *this;  // no copy, no allocation: the seed's `is Z`
  return copy_to(device, where);
}

Tensor Tensor::to(Dtype dtype) const {
  check_defined(*this, "to");
  if (dtype == this->dtype()) return *this;
  Tensor out = make_tensor(shape(), dtype, device(), "to");
  detail::backend_of(device()).copy(*this, out);
  if (detail::needs_grad(*this)) detail::record_copy("to", *this, out);
  return out;
}

Tensor Tensor::to(Device device, Dtype dtype, std::source_location where) const {
  return to(device, where).to(dtype);
}

Tensor Tensor::copy_to(Device device, std::source_location where) const {
  check_defined(*this, "copy_to");
  Tensor out = make_tensor(shape(), dtype(), device, "copy_to");
  const bool grad = detail::needs_grad(*this);
  {
    NoGradGuard internal;  // the copy below is this op's own plumbing
    out.copy_(*this, where);
  }
  if (grad) detail::record_copy("copy_to", *this, out);
  return out;
}

Tensor Tensor::cpu(std::source_location where) const { return to(tessera::cpu(), where); }
Tensor Tensor::cuda(int index) const { return to(gpu(index)); }

Tensor Tensor::clone() const { return copy_to(device()); }

Tensor Tensor::contiguous() const {
  check_defined(*this, "contiguous");
  return is_contiguous() ? *this : clone();
}

Tensor& Tensor::copy_(const Tensor& src_in, std::source_location where) {
  check_defined(*this, "copy_", "self");
  check_defined(src_in, "copy_", "src");
  detail::check_inplace("copy_", {this, &src_in});
  const Tensor src = src_in.shape() == shape() ? src_in : src_in.expand(shape());
  const Device from = src.device(), to = device();
  if (from.kind() == to.kind()) {
    // One backend: it orders both devices' queues itself.
    detail::backend_of(to).copy(src, *this);
    if (from != to) detail::record_copy(from, to, src.nbytes());
    return *this;
  }
  // CPU <-> GPU: the bytes cross in src's dtype from a contiguous tensor; the destination
  // backend then converts and lays them out in place if this tensor needs it.
  if (from.is_cpu()) detail::check_not_capturing(to, "copy_", "a copy from the host");
  const Tensor packed = src.is_contiguous() ? src : src.clone();
  const bool direct = is_contiguous() && dtype() == packed.dtype();
  const Tensor landed = direct ? *this : make_tensor(shape(), packed.dtype(), to, "copy_");
  if (from.is_cpu()) {
    // A queued CPU device may still be producing src (unless only the host ever wrote it).
    if (!detail::is_host(from) && !impl_of(packed).storage->host_written) {
      detail::record_host_wait(from, "copy_", &where);
      detail::backend_of(from).synchronize(from.index());
    }
    detail::backend_of(to).copy_from_cpu(packed, landed);
  } else {
    // The host waits for the GPU; and a queued CPU destination for its earlier readers.
    detail::record_host_wait(from, "copy_", &where);
    if (!detail::is_host(to)) detail::backend_of(to).synchronize(to.index());
    detail::backend_of(from).copy_to_host(packed, impl_of(landed).data());
  }
  if (!direct) detail::backend_of(to).copy(landed, *this);
  detail::record_copy(from, to, packed.nbytes());
  return *this;
}

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
  const Tensor packed = t.is_contiguous() ? t : t.clone();
  record_host_read(t.device(), packed.nbytes(), op, &where);
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

void read_item(const Tensor& t, void* dst, Dtype as, const std::source_location& where) {
  check_defined(t, "item");
  TESSERA_CHECK(t.numel() == 1, ShapeError,
                "[item] expects a tensor with exactly one element, got shape {} ({} elements); "
                "reduce it first (e.g. sum()) or index it",
                t.shape().str(), t.numel());
  read_to_host(t, dst, as, "item", where);
}

void* cpu_data(const Tensor& t, Dtype expected, const char* op,
               const std::source_location& where) {
  check_defined(t, op);
  TESSERA_CHECK(t.device().is_cpu(), DeviceError,
                "[{}] raw pointers are only given for CPU tensors; this tensor is on {}. Copy it "
                "with .cpu() or read it with to_vector()",
                op, t.device().str());
  TESSERA_CHECK(t.dtype() == expected, DtypeError,
                "[{}] the tensor holds {}, not {}; convert it with .to({}) first", op,
                dtype_name(t.dtype()), dtype_name(expected), dtype_name(expected));
  if (!is_host(t.device())) {
    record_host_wait(t.device(), op, &where);
    backend_of(t.device()).synchronize(t.device().index());
  }
  return impl_of(t).data();
}

}  // namespace tessera::detail

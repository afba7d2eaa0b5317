// Front end of the copies: to, copy_to, copy_, clone, contiguous. The bytes move in
// core (copy_data, which counts them in the ledger); here they join the autograd graph and
// in-place writes are checked.
#include "core/copy.h"
#include "autograd/formulas.h"
#include "autograd/record.h"
#include "backend/backend.h"
#include "core/check.h"
#include "core/tensor_impl.h"
#include "ops/broadcast.h"
#include "tessera/autograd.h"

namespace tessera {
using detail::check_defined;
using detail::make_output;
using detail::make_tensor;

namespace {

// A copy of t on `device`, named in errors and the graph after the call the user made
// (`to`, `cpu`, `cuda`, `copy_to`, `clone`).
Tensor copy_named(const Tensor& t, Device device, const std::source_location& where,
                  const char* op) {
  check_defined(t, op);
  Tensor out = make_tensor(t.shape(), t.dtype(), device, op);
  const bool grad = detail::needs_grad(t);
  detail::copy_data(t, out, op, where);
  if (grad) detail::record_copy(op, t, out);
  return out;
}

// to(device) under the caller's name: the tensor itself when it is already there (no copy,
// no allocation: the book's `is Z`).
Tensor move_named(const Tensor& t, Device device, const std::source_location& where,
                  const char* op) {
  check_defined(t, op);
  if (device == t.device()) return t;
  return copy_named(t, device, where, op);
}

}  // namespace

Tensor Tensor::to(Device device, std::source_location where) const {
  return move_named(*this, device, where, "to");
}

Tensor Tensor::to(Dtype dtype) const {
  check_defined(*this, "to");
  if (dtype == this->dtype()) return *this;
  Tensor out = make_output(shape(), dtype, device(), "to");
  detail::backend_of(device()).copy(*this, out);
  // An integer or bool result has no gradient (as a comparison's): recorded, the rounding's
  // "slope" was taken as 1.
  if (is_floating(dtype) && detail::needs_grad(*this)) detail::record_copy("to", *this, out);
  return out;
}

Tensor Tensor::to(Device device, Dtype dtype, std::source_location where) const {
  return to(device, where).to(dtype);
}

Tensor Tensor::copy_to(Device device, std::source_location where) const {
  return copy_named(*this, device, where, "copy_to");
}

Tensor Tensor::cpu(std::source_location where) const {
  return move_named(*this, tessera::cpu(), where, "cpu");
}
Tensor Tensor::cuda(int index) const {
  return move_named(*this, gpu(index), std::source_location::current(), "cuda");
}

Tensor Tensor::clone() const {
  return copy_named(*this, device(), std::source_location::current(), "clone");
}

Tensor Tensor::contiguous() const {
  check_defined(*this, "contiguous");
  return is_contiguous() ? *this : clone();
}

Tensor& Tensor::copy_(const Tensor& src, std::source_location where) {
  check_defined(*this, "copy_", "self");
  check_defined(src, "copy_", "src");
  detail::check_inplace("copy_", {this, &src});
  detail::check_writable(*this, "copy_");
  TESSERA_CHECK(detail::broadcast_shapes("copy_", shape(), src.shape()) == shape(), ShapeError,
                "[copy_] src's shape {} does not broadcast to self's shape {} (a copy keeps "
                "self's shape)",
                src.shape().str(), shape().str());
  // A source that overlaps self anywhere but in place (x.copy_(x.t()), a shifted slice) is
  // read from a copy, so no element is read after it was overwritten.
  const bool overlaps = src.shares_storage(*this) &&
                        !(src.strides() == strides() && src.storage_offset() == storage_offset());
  const Tensor from = overlaps ? src.clone() : src;
  detail::copy_data(from.shape() == shape() ? from : from.expand(shape()), *this, "copy_", where);
  detail::mark_written(*this);  // once nothing can refuse the write (record.h)
  return *this;
}

}  // namespace tessera

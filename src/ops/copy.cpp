// Front end of the copies: to, copy_to, copy_, clone, contiguous. The bytes move in
// core (copy_data, which counts them in the ledger); here they join the autograd graph and
// in-place writes are checked.
#include "autograd/formulas.h"
#include "autograd/record.h"
#include "backend/backend.h"
#include "core/copy.h"
#include "core/tensor_impl.h"
#include "tessera/autograd.h"

namespace tessera {
using detail::check_defined;
using detail::make_tensor;

Tensor Tensor::to(Device device, std::source_location where) const {
  check_defined(*this, "to");
  if (device == this->device()) return *this;  // no copy, no allocation: the book's `is Z`
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
  detail::copy_data(*this, out, where);
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

Tensor& Tensor::copy_(const Tensor& src, std::source_location where) {
  check_defined(*this, "copy_", "self");
  check_defined(src, "copy_", "src");
  detail::check_inplace("copy_", {this, &src});
  detail::copy_data(src.shape() == shape() ? src : src.expand(shape()), *this, where);
  return *this;
}

}  // namespace tessera

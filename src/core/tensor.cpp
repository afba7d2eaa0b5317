// Tensor metadata and construction of fresh tensors (views: ops/views.cpp).
#include "tessera/tensor.h"

#include <fmt/format.h>

#include "core/check.h"
#include "core/device_registry.h"
#include "core/tensor_impl.h"

namespace tessera::detail {

Strides contiguous_strides(const Shape& shape) {
  Strides strides;
  strides.resize(shape.size());
  std::int64_t s = 1;
  for (int d = shape.size() - 1; d >= 0; --d) {
    strides[d] = s;
    if (__builtin_mul_overflow(s, shape[d] > 1 ? shape[d] : 1, &s)) {
      // Only an empty tensor gets here (a zero beside huge sizes; make_tensor refuses the
      // rest). Its strides address no element; unit strides keep every later stride
      // product (views, kernels' byte offsets) far from overflow.
      for (std::int64_t& unit : strides) unit = 1;
      return strides;
    }
  }
  return strides;
}

bool is_contiguous_layout(const Shape& shape, const Strides& strides) {
  for (int d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) return true;  // no element: any strides will do
  }
  std::int64_t expected = 1;
  for (int d = shape.size() - 1; d >= 0; --d) {
    if (shape[d] != 1 && strides[d] != expected) return false;
    if (__builtin_mul_overflow(expected, shape[d], &expected)) return false;  // not a real layout
  }
  return true;
}

void check_defined(const Tensor& t, const char* op, const char* name) {
  TESSERA_CHECK(t.defined(), Error,
                "[{}] '{}' is an undefined tensor; create it with a factory such as zeros() "
                "first. (A lazy layer's parameters exist only after its first call, a layer made "
                "without a bias has none, and a grad is undefined until backward reaches it.)",
                op, name);
}

int wrap_dim(int dim, int rank, const char* op) {
  const int lo = rank == 0 ? -1 : -rank, hi = rank == 0 ? 0 : rank - 1;
  TESSERA_CHECK(dim >= lo && dim <= hi, ShapeError,
                "[{}] dim {} is out of range for a tensor with {} dims (expected {} to {})", op,
                dim, rank, lo, hi);
  return dim < 0 ? dim + (rank == 0 ? 1 : rank) : dim;
}

namespace {

// Bytes for `shape` of `dtype`, checking sizes and overflow.
std::size_t checked_bytes(const Shape& shape, Dtype dtype, const char* op) {
  bool empty = false;
  for (std::int64_t d : shape) {
    TESSERA_CHECK(d >= 0, ShapeError, "[{}] shape {} has a negative size", op, shape.str());
    empty = empty || d == 0;
  }
  if (empty) return 0;  // whatever the other sizes: [huge, huge, 0] holds nothing
  std::size_t n = itemsize(dtype);
  for (std::int64_t d : shape) {
    TESSERA_CHECK(d == 0 || n <= SIZE_MAX / static_cast<std::size_t>(d), OutOfMemoryError,
                  "[{}] shape {} of {} needs more bytes than the address space holds", op,
                  shape.str(), dtype_name(dtype));
    n *= static_cast<std::size_t>(d);
  }
  return n;
}

Tensor new_tensor(const Shape& shape, Dtype dtype, Device device, const char* op, bool pinned,
                  FirstWriter first) {
  // Checked first: a call refused for its device made no tensor, and the message it gives
  // (set TESSERA_CPU_DEVICES or call configure_cpu_devices first) must still be followable.
  if (!is_available(device)) check_device(device, op);
  mark_devices_in_use();  // the configuration the devices' memory is made under
  auto impl = std::make_shared<TensorImpl>();
  impl->storage =
      std::make_shared<Storage>(device, checked_bytes(shape, dtype, op), op, pinned, first);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

}  // namespace

Tensor make_tensor(const Shape& shape, Dtype dtype, Device device, const char* op, bool pinned) {
  return new_tensor(shape, dtype, device, op, pinned, FirstWriter::kAnyone);
}

Tensor make_output(const Shape& shape, Dtype dtype, Device device, const char* op) {
  return new_tensor(shape, dtype, device, op, false, FirstWriter::kQueue);
}

Tensor make_view(const Tensor& base, const Shape& shape, const Strides& strides,
                 std::int64_t offset) {
  const TensorImpl& b = impl_of(base);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = b.storage;
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = b.dtype;
  impl->contiguous = is_contiguous_layout(shape, strides);
  return Tensor(std::move(impl));
}

}  // namespace tessera::detail

namespace tessera {
using detail::check_defined;
using detail::impl_of;
using detail::make_view;
using detail::wrap_dim;

namespace {}  // namespace

const Shape& Tensor::shape() const {
  check_defined(*this, "shape");
  return impl_->shape;
}
namespace {

// wrap_dim lets a 0-dim tensor's reductions name dim 0 or -1; a size or a stride cannot:
// there was none to read, and the value past the end of the shape came back.
int existing_dim(int d, int rank, const char* op) {
  TESSERA_CHECK(rank > 0, ShapeError,
                "[{}] dim {} of a 0-dim tensor: it has no dims (shape []), only its one value, "
                "which item() reads",
                op, d);
  return wrap_dim(d, rank, op);
}

}  // namespace

std::int64_t Tensor::size(int d) const {
  const Shape& s = shape();
  return s[existing_dim(d, s.size(), "size")];
}
std::int64_t Tensor::numel() const { return shape().numel(); }
const Strides& Tensor::strides() const {
  check_defined(*this, "strides");
  return impl_->strides;
}
std::int64_t Tensor::stride(int d) const { return strides()[existing_dim(d, dim(), "stride")]; }
std::int64_t Tensor::storage_offset() const {
  check_defined(*this, "storage_offset");
  return impl_->offset;
}
Dtype Tensor::dtype() const {
  check_defined(*this, "dtype");
  return impl_->dtype;
}
Device Tensor::device() const {
  check_defined(*this, "device");
  return impl_->device();
}
bool Tensor::is_contiguous() const {
  check_defined(*this, "is_contiguous");
  return impl_->contiguous;
}
bool Tensor::shares_storage(const Tensor& other) const {
  return defined() && other.defined() && impl_->storage == other.impl_->storage;
}

}  // namespace tessera

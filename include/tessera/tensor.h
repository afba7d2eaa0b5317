#pragma once
/// Tensor: a cheap handle to an n-dimensional view of storage that lives on one device.
/// Copying a Tensor copies the handle, not the data; is_same() tells whether two handles
/// are one tensor.
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <source_location>
#include <string>
#include <type_traits>
#include <vector>

#include "tessera/device.h"
#include "tessera/dtype.h"
#include "tessera/export.h"
#include "tessera/scalar.h"
#include "tessera/shape.h"

namespace tessera {

class Tensor;

namespace detail {
struct TensorImpl;
}  // namespace detail

class TESSERA_API Tensor {
 public:
  /// An undefined tensor; most calls on it throw Error.
  Tensor() = default;
  explicit Tensor(std::shared_ptr<detail::TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }

  // ---- metadata (never waits) ----
  const Shape& shape() const;
  /// Size of dimension d; negative d counts from the end. Throws ShapeError.
  std::int64_t size(int d) const;
  int dim() const { return shape().size(); }
  std::int64_t numel() const;
  const Strides& strides() const;
  std::int64_t stride(int d) const;
  std::int64_t storage_offset() const;
  Dtype dtype() const;
  Device device() const;
  std::size_t itemsize() const { return tessera::itemsize(dtype()); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * itemsize(); }
  bool is_contiguous() const;
  /// Whether both handles are the same tensor (the book's `Z.cuda(1) is Z`).
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }
  /// Whether both view the same storage (e.g. a tensor and its transpose).
  bool shares_storage(const Tensor& other) const;

  // ---- moving between devices and dtypes (explicit, counted by the transfer ledger) ----
  // [[nodiscard]]: these return a new tensor and leave this one where it is, unlike
  // Module::to, which moves a model in place; `x.to(gpu());` alone did nothing, silently.
  /// This tensor itself when already on `device` (no allocation), else a copy there. A copy
  /// to the CPU from a GPU waits for the GPU (checked by SyncGuard, reported at `where`).
  [[nodiscard]] Tensor to(Device device,
                          std::source_location where = std::source_location::current()) const;
  /// This tensor itself when already of `dtype`, else a converted copy on the same device.
  /// Floating to integer truncates toward zero, as C++ and PyTorch do; NaN, infinity and
  /// values outside the integer dtype's range give an unspecified value (no error).
  [[nodiscard]] Tensor to(Dtype dtype) const;
  [[nodiscard]] Tensor to(Device device, Dtype dtype,
                          std::source_location where = std::source_location::current()) const;
  /// Always allocates and copies, even onto the device the tensor is already on.
  [[nodiscard]] Tensor copy_to(Device device,
                               std::source_location where = std::source_location::current()) const;
  /// to(cpu()) and to(gpu(i)).
  [[nodiscard]] Tensor cpu(std::source_location where = std::source_location::current()) const;
  [[nodiscard]] Tensor cuda(int index = 0) const;
  /// A copy on the same device with contiguous layout.
  [[nodiscard]] Tensor clone() const;
  /// This tensor when contiguous, else clone().
  [[nodiscard]] Tensor contiguous() const;
  /// Copies src's values into this tensor, converting dtype and broadcasting src to this
  /// shape; src may live on any device (an explicit copy, counted). Returns *this.
  Tensor& copy_(const Tensor& src, std::source_location where = std::source_location::current());
  /// A copy of this CPU tensor in page-locked (pinned) host memory, or this tensor when it
  /// is pinned already: copies from it to a GPU run asynchronously and overlap compute.
  /// Throws DeviceError without a GPU, and for tensors not on the CPU.
  Tensor pin_memory() const;
  /// Whether the tensor's memory is page-locked host memory.
  bool is_pinned() const;

  // ---- views: share storage, never copy ----
  /// Same data, new shape; one entry may be -1. Throws ShapeError when the layout does not
  /// allow a view (use reshape).
  Tensor view(const Shape& shape) const;
  /// view() when possible, else a contiguous copy with the new shape.
  Tensor reshape(const Shape& shape) const;
  Tensor transpose(int dim0, int dim1) const;
  /// transpose(0, 1) of a 2-D tensor.
  Tensor t() const;
  Tensor permute(const Shape& dims) const;
  /// Elements [start, start + length) of `dim`.
  Tensor narrow(int dim, std::int64_t start, std::int64_t length) const;
  /// Python-style slice [start:end:step] of `dim`; negative indices count from the end.
  Tensor slice(int dim, std::int64_t start, std::int64_t end, std::int64_t step = 1) const;
  /// Index `index` of `dim`, removing that dimension.
  Tensor select(int dim, std::int64_t index) const;
  /// select(0, index).
  Tensor operator[](std::int64_t index) const { return select(0, index); }
  Tensor unsqueeze(int dim) const;
  /// Removes every size-1 dimension, or only `dim`.
  Tensor squeeze() const;
  Tensor squeeze(int dim) const;
  /// Broadcast view to `shape` (stride 0 along expanded dims); -1 keeps a size.
  Tensor expand(const Shape& shape) const;
  Tensor flatten(int start_dim = 0, int end_dim = -1) const;

  // ---- method forms of the ops in ops.h, as LibTorch writes them: x.sum() is sum(x),
  //      x.matmul(y) is matmul(x, y); same checks, errors and devices ----
  Tensor sum() const;
  Tensor sum(const std::vector<int>& dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(const std::vector<int>& dims, bool keepdim = false) const;
  Tensor max() const;
  Tensor max(const std::vector<int>& dims, bool keepdim = false) const;
  Tensor min() const;
  Tensor min(const std::vector<int>& dims, bool keepdim = false) const;
  Tensor argmax() const;
  Tensor argmax(int dim, bool keepdim = false) const;
  Tensor argmin() const;
  Tensor argmin(int dim, bool keepdim = false) const;
  Tensor norm() const;
  Tensor matmul(const Tensor& other) const;
  Tensor pow(Scalar exponent) const;
  Tensor neg() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor abs() const;
  Tensor relu() const;
  Tensor sigmoid() const;
  Tensor tanh() const;
  Tensor softmax(int dim) const;
  Tensor log_softmax(int dim) const;
  Tensor diag() const;
  Tensor trace() const;
  std::vector<Tensor> split(std::int64_t split_size, int dim = 0) const;
  std::vector<Tensor> split(const std::vector<std::int64_t>& sizes, int dim = 0) const;
  std::vector<Tensor> chunk(std::int64_t chunks, int dim = 0) const;
  Tensor index_select(int dim, const Tensor& index) const;
  Tensor index_add(int dim, const Tensor& index, const Tensor& source) const;

  // ---- reading on the host (waits for the device; counted as a host wait and a
  //      device-to-host copy when the device is not the host) ----
  /// The single element, converted to T. Throws ShapeError unless numel() == 1.
  template <typename T = float>
  T item(std::source_location where = std::source_location::current()) const {
    T value{};
    read_item_as(&value, dtype_of<T>, where);
    return value;
  }
  /// All elements in row-major order, converted to T.
  template <typename T = float>
  std::vector<T> to_vector(std::source_location where = std::source_location::current()) const {
    if constexpr (std::is_same_v<T, bool>) {  // std::vector<bool> has no data()
      std::vector<std::uint8_t> bytes(static_cast<std::size_t>(numel()));
      read_to_host_as(bytes.data(), kBool, "to_vector", where);
      return std::vector<bool>(bytes.begin(), bytes.end());
    } else {
      std::vector<T> out(static_cast<std::size_t>(numel()));
      read_to_host_as(out.data(), dtype_of<T>, "to_vector", where);
      return out;
    }
  }
  /// Pointer to the first element of a CPU tensor whose dtype is T, after waiting for its
  /// device. Throws DeviceError for non-CPU tensors and DtypeError for another T.
  template <typename T>
  T* data(std::source_location where = std::source_location::current()) const {
    return static_cast<T*>(cpu_data_as(dtype_of<T>, "data", where));
  }
  /// The printed form, e.g. "tensor([[1., 1.], [1., 1.]], device=cpu:1)". Waits for the
  /// device (a host read: under SyncGuard, reported at the caller's line).
  std::string str(std::source_location where = std::source_location::current()) const;

  // ---- in-place ops (same-device rule applies; return *this) ----
  Tensor& add_(const Tensor& other);
  Tensor& add_(Scalar value);
  Tensor& sub_(const Tensor& other);
  Tensor& sub_(Scalar value);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(Scalar value);
  Tensor& div_(const Tensor& other);
  Tensor& div_(Scalar value);
  /// index_add (ops.h) into this tensor: its slice index[i] along dim += source's slice i.
  /// Not recorded for autograd: refused, as every in-place op, when grad mode is on and an
  /// operand takes part in the graph.
  Tensor& index_add_(int dim, const Tensor& index, const Tensor& source);
  Tensor& fill_(double value);
  Tensor& zero_();

  // ---- automatic differentiation (see tessera/autograd.h) ----
  /// Marks this tensor as a leaf whose gradient backward() accumulates in grad(). Floating
  /// dtypes only (DtypeError). Returns *this.
  Tensor& requires_grad_(bool enabled = true);
  /// Whether ops on this tensor are recorded for backward().
  bool requires_grad() const;
  /// The accumulated gradient, on this tensor's device; undefined until a backward() reached
  /// it.
  Tensor grad() const;
  /// Replaces the accumulated gradient (an undefined tensor clears it).
  void set_grad(const Tensor& grad);
  /// Whether the tensor was not produced by a recorded op.
  bool is_leaf() const;
  /// Computes the gradient of this tensor with respect to every leaf that requires grad and
  /// adds it to their grad(). Without `gradient` the tensor must have one element.
  /// `retain_graph` keeps the recorded graph for another backward(). Never waits.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  /// The same data, cut from the graph: requires_grad() is false.
  Tensor detach() const;

  detail::TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<detail::TensorImpl>& impl_ptr() const { return impl_; }

 private:
  // The library's halves of the templates item(), to_vector() and data():
  /// Copies every element to `dst` on the host as `as`, waiting for the device.
  void read_to_host_as(void* dst, Dtype as, const char* op,
                       const std::source_location& where) const;
  /// Checks there is one element and writes it to `dst` as `as` (waits for the device).
  void read_item_as(void* dst, Dtype as, const std::source_location& where) const;
  /// Host pointer to the first element of a CPU tensor, after waiting for its device.
  void* cpu_data_as(Dtype expected, const char* op, const std::source_location& where) const;

  std::shared_ptr<detail::TensorImpl> impl_;
};

/// Prints like PyTorch: `tensor([[1., 1., 1.], [1., 1., 1.]], device=cuda:0)`. The device is
/// shown unless it is the plain CPU. Waits for the device.
TESSERA_API std::ostream& operator<<(std::ostream& os, const Tensor& t);

}  // namespace tessera

#pragma once
// The data behind a Tensor handle. Metadata (shape, strides, offset, dtype) never changes
// after construction, so work queued on a device can hold a handle without copying it.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "tessera/device.h"
#include "tessera/dtype.h"
#include "tessera/shape.h"
#include "tessera/tensor.h"

namespace tessera::detail {

// Who writes new memory first. Decides whether it may be a block that work queued on the
// device still uses (Note [Memory freed in queue order] in backend/cpu/cpu_allocator.cpp).
enum class FirstWriter : std::uint8_t {
  kAnyone,  // the host may write it directly (a loader, a file reader): a block nothing uses
  kQueue,   // a kernel this thread queues next on the device's current stream (an op's output)
};

// A block of device memory. Frees itself through the device's allocator and accounting.
struct Storage {
  // Throws OutOfMemoryError naming `op` when the device's limit or memory is exhausted.
  // `pinned` (CPU only) takes page-locked memory from the GPU backend.
  Storage(Device device, std::size_t bytes, const char* op, bool pinned = false,
          FirstWriter first = FirstWriter::kAnyone);
  // A stand-in for `owner` that points at its memory without owning or counting it: what a
  // kernel queued on a CPU device holds, so the memory goes back to the allocator when the
  // last real handle goes (Note [Memory freed in queue order] in backend/cpu/cpu_allocator.cpp).
  struct Borrow {};
  Storage(Borrow, const Storage& owner)
      : data(owner.data),
        bytes(owner.bytes),
        device(owner.device),
        pinned(owner.pinned),
        filled_in_device_order(owner.filled_in_device_order),
        borrowed(true) {}
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data = nullptr;
  std::size_t bytes = 0;
  Device device;
  bool pinned = false;
  // Written by host code queued on the device (fill_in_device_order): a copy out of it
  // follows the device's queue even where its caller vouches that only the host wrote it.
  bool filled_in_device_order = false;
  // A Borrow stand-in: frees and counts nothing.
  bool borrowed = false;
  // Bumped by every in-place write (mark_written), so backward() can tell that a tensor a
  // formula saved has changed since. See Note [Saved tensors] in autograd/engine.cpp.
  std::uint64_t version = 0;
};

struct AutogradMeta;  // src/autograd/autograd_meta.h

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  // Set only for tensors that require grad (leaves) or were produced by a recorded op.
  std::shared_ptr<AutogradMeta> autograd;
  Shape shape;
  Strides strides;
  std::int64_t offset = 0;  // in elements
  Dtype dtype = kFloat32;
  bool contiguous = true;  // cached: strides are the row-major strides of shape
  // How many times Module::to or a parameter assignment pointed this tensor at other memory
  // or another layout (nn/module.cpp's rebind): autograd refuses a graph recorded before
  // (Note [Saved tensors] in autograd/engine.cpp).
  std::uint32_t rebinds = 0;

  char* data() const {
    return static_cast<char*>(storage->data) + offset * static_cast<std::int64_t>(itemsize(dtype));
  }
  Device device() const { return storage->device; }
  std::int64_t numel() const { return shape.numel(); }
};

inline TensorImpl& impl_of(const Tensor& t) { return *t.impl(); }

// Every front end that writes an existing tensor in place calls this first.
inline void mark_written(const Tensor& t) { ++t.impl()->storage->version; }

// Row-major strides of `shape`.
Strides contiguous_strides(const Shape& shape);
bool is_contiguous_layout(const Shape& shape, const Strides& strides);

// A new tensor with fresh, uninitialized storage. `op` names the op in an OOM message.
// Checks that `device` exists (DeviceError otherwise).
Tensor make_tensor(const Shape& shape, Dtype dtype, Device device, const char* op,
                   bool pinned = false);
// make_tensor for an op's output: a new tensor that a kernel this thread queues next on
// `device`'s current stream writes first (FirstWriter::kQueue), so its memory may be a block
// that work queued there earlier still uses. Never for memory the host writes directly.
Tensor make_output(const Shape& shape, Dtype dtype, Device device, const char* op);
// A view of `base`'s storage with new metadata.
Tensor make_view(const Tensor& base, const Shape& shape, const Strides& strides,
                 std::int64_t offset);
// Throws Error naming `op` when `t` is undefined.
void check_defined(const Tensor& t, const char* op, const char* name = "tensor");
// Normalizes a possibly negative dim for a tensor of `rank` dims (callers that insert a dim
// pass rank + 1). Throws ShapeError naming `op` when it is out of range.
int wrap_dim(int dim, int rank, const char* op);

}  // namespace tessera::detail

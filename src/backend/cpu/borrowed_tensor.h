#pragma once
// A kernel's non-owning handle to a tensor, for work queued on a CPU device's work queue.
// See Note [Memory freed in queue order] in cpu_allocator.cpp.
#include <cstddef>
#include <memory>

#include "core/tensor_impl.h"
#include "tessera/tensor.h"

namespace tessera::detail {

// Memory for borrowed handles, recycled: the host thread takes a block for each tensor it
// queues and the queue's thread gives it back after the kernel, a hand-over that through
// malloc made the two threads fight for the allocator's lock (Note [Queueing allocates
// nothing] in work_queue.cpp). Blocks move between threads in batches (borrowed_tensor.cpp).
// Requests larger than a block go to new.
inline constexpr std::size_t kHandleBlockBytes = 512;
void* take_handle_block(std::size_t bytes);
void give_handle_block(void* block, std::size_t bytes) noexcept;

template <typename T>
struct HandleBlockAllocator {
  using value_type = T;
  HandleBlockAllocator() = default;
  template <typename U>
  HandleBlockAllocator(const HandleBlockAllocator<U>&) noexcept {}  // NOLINT: rebinding
  T* allocate(std::size_t n) { return static_cast<T*>(take_handle_block(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) noexcept { give_handle_block(p, n * sizeof(T)); }
  template <typename U>
  bool operator==(const HandleBlockAllocator<U>&) const noexcept {
    return true;
  }
};

// A handle to `t`'s metadata and memory that keeps neither `t` nor its memory alive: the
// memory goes back to the allocator when the last owning handle goes, and the allocator
// keeps it from work that could run before the queued kernel holding this handle. One
// allocation holds the copied metadata and a borrowing Storage; undefined stays undefined.
inline Tensor borrow(const Tensor& t) {
  if (!t.defined()) return t;
  struct Borrowed {
    explicit Borrowed(const TensorImpl& owner) : storage(Storage::Borrow{}, *owner.storage) {
      // Aliasing an empty owner: points at the borrowing Storage, owns nothing (no cycle).
      impl.storage = std::shared_ptr<Storage>(std::shared_ptr<Storage>(), &storage);
      impl.shape = owner.shape;  // no autograd: kernels see data, never the graph
      impl.strides = owner.strides;
      impl.offset = owner.offset;
      impl.dtype = owner.dtype;
      impl.contiguous = owner.contiguous;
    }
    Storage storage;
    TensorImpl impl;
  };
  // The handle and shared_ptr's control block (a few pointers) share one recycled block.
  static_assert(sizeof(Borrowed) + 64 <= kHandleBlockBytes, "grow kHandleBlockBytes");
  auto b = std::allocate_shared<Borrowed>(HandleBlockAllocator<Borrowed>{}, impl_of(t));
  return Tensor(std::shared_ptr<TensorImpl>(b, &b->impl));
}

}  // namespace tessera::detail

#pragma once
// A kernel's non-owning handle to a tensor, for work queued on a CPU device's work queue.
// See Note [Memory freed in queue order] in cpu_allocator.cpp.
#include <memory>

#include "core/tensor_impl.h"
#include "tessera/tensor.h"

namespace tessera::detail {

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
  auto b = std::make_shared<Borrowed>(impl_of(t));
  return Tensor(std::shared_ptr<TensorImpl>(b, &b->impl));
}

}  // namespace tessera::detail

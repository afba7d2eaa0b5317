#pragma once
// A CPU kernel's private view of a tensor it writes, for work that a graph records.
#include <atomic>
#include <utility>

#include "core/tensor_impl.h"
#include "tessera/tensor.h"

namespace tessera::detail {

// Note [Gradients queued work still holds]
// Autograd keeps the first gradient a leaf receives as its grad() only when nothing else can
// see that memory: a formula may hand one tensor to several inputs, and clipping or the
// all-reduce then write grad() in place (accumulate in autograd/engine.cpp). A kernel recorded
// in a graph holds handles to its operands for the life of the graph (and a queued one held
// them until it had run, before queued kernels borrowed theirs: Note [Memory freed in queue
// order]), so every gradient a recorded matmul produced looked shared and was copied: one
// copy of each weight's gradient per step (0.8 MB per device per step for the MLP's first
// layer), found as an unexplained memmove on the devices' threads. Those handles cannot see
// anything the host does later: the kernel writes the output before any work queued after
// it reads it. So a recorded kernel that writes a gradient-sized output (the matmul) holds a
// private view of it, counted in Storage::queued_views, and autograd treats the storage as
// unshared when every other reference to it is such a view. The count drops before the
// view's reference to the storage does, so autograd, which reads the storage's use count
// first, never sees the count fall short of the views alive.
class QueuedView {
 public:
  explicit QueuedView(const Tensor& t)
      : view_(make_view(t, t.shape(), t.strides(), t.storage_offset())) {
    hold();
  }
  QueuedView(const QueuedView& other) : view_(other.view_) { hold(); }
  QueuedView& operator=(const QueuedView&) = delete;
  ~QueuedView() { impl_of(view_).storage->queued_views.fetch_sub(1, std::memory_order_release); }

  const Tensor& tensor() const { return view_; }

 private:
  void hold() { impl_of(view_).storage->queued_views.fetch_add(1, std::memory_order_relaxed); }
  Tensor view_;
};

}  // namespace tessera::detail

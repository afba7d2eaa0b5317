#pragma once
/// Reverse-mode automatic differentiation on a dynamic graph. Ops on tensors that require
/// grad record how to differentiate themselves; Tensor::backward() walks the record from
/// the output back to the leaves and accumulates each leaf's gradient in grad(), on the
/// leaf's own device. In-place ops on tensors that take part in the graph are refused with
/// a clear error (use NoGradGuard for updates such as an optimizer's).
#include <functional>

#include "tessera/export.h"
#include "tessera/tensor.h"

namespace tessera {

/// While alive, ops on this thread record nothing (the results do not require grad).
class TESSERA_API NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

/// Whether ops on this thread are recorded (false inside a NoGradGuard).
TESSERA_API bool grad_enabled();

/// Calls `hook(leaf)` in every backward() that reaches `leaf`, as soon as leaf.grad() holds
/// its whole gradient for that pass, while backward() goes on with the rest of the graph
/// (data-parallel training starts reducing gradients there). Replaces the leaf's earlier
/// hook; an empty function removes it. Runs on the thread calling backward(), with grad
/// recording off; what it throws leaves backward(). Throws Error unless `leaf` is a leaf that
/// requires grad.
TESSERA_API void set_grad_ready_hook(const Tensor& leaf, std::function<void(const Tensor&)> hook);

}  // namespace tessera

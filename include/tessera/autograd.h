#pragma once
/// Reverse-mode automatic differentiation on a dynamic graph. Ops on tensors that require
/// grad record how to differentiate themselves; Tensor::backward() walks the record from
/// the output back to the leaves and accumulates each leaf's gradient in grad(), on the
/// leaf's own device. In-place ops on tensors that take part in the graph are refused with
/// a clear error (use NoGradGuard for updates such as an optimizer's).
#include "tessera/tensor.h"

namespace tessera {

/// While alive, ops on this thread record nothing (the results do not require grad).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

/// Whether ops on this thread are recorded (false inside a NoGradGuard).
bool grad_enabled();

}  // namespace tessera

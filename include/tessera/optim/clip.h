#pragma once
/// Gradient clipping by global norm (the trainer's gradient_clip_val), as
/// torch.nn.utils.clip_grad_norm_, computed on the device without waiting.
#include <vector>

#include "tessera/export.h"
#include "tessera/tensor.h"

namespace tessera::optim {

/// Scales the grads of `params` in place by min(1, max_norm / (norm + 1e-6)), where norm is
/// the L2 norm of all their grads together, and returns that norm as a 0-dim tensor on
/// their device (reading it waits; clipping does not), float32 for half grads (their norm
/// is summed in float32, where a float16 one would overflow at 256). Parameters without a grad are
/// skipped; with none, returns a 0-dim zero. Throws Error for a negative or non-finite
/// max_norm and DeviceMismatchError when the grads are on different devices.
TESSERA_API Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm);

}  // namespace tessera::optim

#pragma once
// NumPy broadcasting and operand preparation shared by the elementwise ops.
#include "tessera/tensor.h"

namespace tessera::detail {

// The broadcast shape of a and b. Throws ShapeError naming `op`, both shapes and the dim.
Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b);

// `t` converted to `dtype` (a same-device copy only when the dtype differs) and expanded to
// `shape` (a stride-0 view, never a copy).
Tensor prepare_operand(const Tensor& t, Dtype dtype, const Shape& shape);

// Whether `t` can be written in place: no two of its elements share memory (no stride 0
// over a dim longer than 1, as an expanded view has).
bool writable(const Tensor& t);
// Throws Error naming `op` when `t` cannot be written in place (!writable(t)).
void check_writable(const Tensor& t, const char* op);

}  // namespace tessera::detail

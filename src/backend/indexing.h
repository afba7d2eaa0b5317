#pragma once
// What every backend's index_select and index_add kernels share: the [outer, n, inner] view
// of a contiguous tensor around the indexed dim, and the error an index out of range raises.
#include <cstdint>

#include "tessera/tensor.h"

// Note [Indices checked by the kernel]
// An index's value lives on the device, and an op never waits for the device (ops.h), so
// the front end cannot look at it: the kernel checks every index against the indexed dim's
// size before it reads a row. Negative indices are refused too, as PyTorch's index_select and
// index_add refuse them. What happens then depends on the backend:
//  - CPU: the kernel checks all indices first (in order, so the first bad one is named) and
//    throws IndexError before writing anything. On the plain CPU the kernel runs inside the
//    op, so the op throws; on a logical device it runs on the device's queue, and the error
//    comes back at the next wait for that device (item(), to_vector(), synchronize()), as a
//    sticky CUDA error would, then is cleared.
//  - CUDA: a device assert would kill the context, so the kernel never asserts. It reads no
//    row outside the tensor: index_select writes zeros for a bad index's slice, index_add
//    skips it. The first thread to meet a bad index records the op, value, position and size
//    in a per-GPU slot of mapped pinned host memory (cuda::IndexFault); the host looks at
//    the slot whenever it waits for the GPU (copy_to_host, synchronize, synchronize_stream;
//    with TESSERA_LAUNCH_BLOCKING=1, right after the op) and throws the same IndexError
//    there, clearing the slot, once, and from the GPUs the data was copied or reduced to
//    as well (Note [Faults follow the data] in cuda/cuda_ops.cpp). An op with nothing to
//    write (an empty slice) still checks its indices, as the CPU does. Threads run in no
//    fixed order, so with several bad indices the one named is one of them, not necessarily
//    the first.
// Either way the result of the failed op (for index_add_, its target) holds unspecified
// values once the error is reported.

namespace tessera::detail {

// A contiguous tensor seen as [outer, n, inner] around dim `dim`.
struct IndexGeometry {
  std::int64_t outer = 1, n = 0, inner = 1;
};
IndexGeometry index_geometry(const Tensor& t, int dim);

// Which op a kernel reports a bad index for (an integer, so a GPU can store it).
enum class IndexOp : int { kIndexSelect = 0, kIndexAdd = 1 };

// Throws IndexError for index `value` found at `position` of the index of `op` along dim
// `dim` of size `size` (Note [Indices checked by the kernel]).
[[noreturn]] void throw_index_out_of_range(IndexOp op, std::int64_t value, std::int64_t position,
                                           int dim, std::int64_t size);

}  // namespace tessera::detail

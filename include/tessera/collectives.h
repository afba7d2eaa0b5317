#pragma once
/// Collectives across the devices of one process: one tensor per device, all of one kind
/// (logical CPU devices, or GPUs through NCCL), as data-parallel training uses them. Each is
/// queued on every device's current stream or work queue and never makes the host wait;
/// later work on each device sees the result. The bytes moved between devices are counted
/// in the transfer ledger (d2d, on the receiving device).
///
///   std::vector<Tensor> grads = {g0 /* on cpu:0 */, g1 /* on cpu:1 */};
///   all_reduce(grads, ReduceKind::kMean);   // both now hold the mean
///
/// Every function throws DeviceError for devices of two kinds, a device listed twice or a
/// kind without collectives; ShapeError or DtypeError when the tensors' shapes or dtypes
/// differ (naming the first that does); Error for an empty group or an undefined tensor.
#include <cstddef>
#include <vector>

#include "tessera/export.h"
#include "tessera/tensor.h"

namespace tessera {

enum class ReduceKind { kSum, kMean };

/// Replaces every tensor, in place, with the sum (or mean) over the group. Tensors must be
/// contiguous; bool tensors cannot be reduced, and integer ones only summed (an integer sum
/// wraps on overflow, as integer addition does).
TESSERA_API void all_reduce(const std::vector<Tensor>& tensors, ReduceKind op = ReduceKind::kSum);

/// Copies tensors[root] into every other tensor, in place.
TESSERA_API void broadcast(const std::vector<Tensor>& tensors, std::size_t root = 0);

/// Per device, the concatenation of every device's tensor along dim 0 (k times the rows),
/// in group order.
TESSERA_API std::vector<Tensor> all_gather(const std::vector<Tensor>& tensors);

/// Per device i, rows [i*r, (i+1)*r) of the sum (or mean) over the group, where the
/// tensors have k*r rows (ShapeError otherwise). A mean needs floating tensors.
TESSERA_API std::vector<Tensor> reduce_scatter(const std::vector<Tensor>& tensors,
                                               ReduceKind op = ReduceKind::kSum);

}  // namespace tessera

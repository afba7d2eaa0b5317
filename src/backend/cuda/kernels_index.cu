// CUDA index_select and index_add. No device assert and no read outside a tensor for a bad
// index: see Note [Indices checked by the kernel] in backend/indexing.h.
#include <cuda_runtime.h>

#include <cub/device/device_radix_sort.cuh>

#include <cstdint>

#include "backend/cuda/kernel_utils.cuh"
#include "backend/indexing.h"
#include "core/dispatch.h"

namespace tessera::detail::cuda {
namespace {

using i64 = std::int64_t;

// Records the bad index `value` at `position` in the GPU's slot, unless a thread already did.
__device__ void report_bad_index(IndexFault* fault, IndexOp op, int dim, i64 value, i64 position,
                                 i64 size) {
  if (atomicCAS(&fault->claimed, 0u, 1u) != 0u) return;
  fault->op = static_cast<int>(op);
  fault->dim = dim;
  fault->value = value;
  fault->position = position;
  fault->size = size;
  __threadfence_system();  // the record is visible to the host before `ready` is
  *static_cast<volatile unsigned int*>(&fault->ready) = 1u;
}

// Checks the indices alone, for an op with nothing to write (an empty slice of x or target),
// as the CPU checks them: one thread per index.
__global__ void check_indices_kernel(const i64* __restrict__ index, i64 k, i64 n, IndexOp op,
                                     int dim, IndexFault* fault) {
  const i64 stride = static_cast<i64>(gridDim.x) * blockDim.x;
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < k; i += stride) {
    const i64 v = index[i];
    if (v < 0 || v >= n) [[unlikely]]
      report_bad_index(fault, op, dim, v, i, n);
  }
}

void check_indices(cudaStream_t stream, const KernelArg& index, i64 n, IndexOp op, int dim,
                   IndexFault* fault) {
  constexpr auto kernel = check_indices_kernel;
  kernel<<<grid_for<kernel>(index.numel), kThreads, 0, stream>>>(
      static_cast<const i64*>(index.data), index.numel, n, op, dim, fault);
}

// One element of out per step (moved as an unsigned integer of the dtype's width, so every
// dtype, halves included, shares four instantiations).
template <typename U>
__global__ void index_select_kernel(const U* __restrict__ x, const i64* __restrict__ index,
                                    U* __restrict__ out, i64 total, i64 k, i64 n, i64 inner,
                                    int dim, IndexFault* fault) {
  const i64 stride = static_cast<i64>(gridDim.x) * blockDim.x;
  for (i64 e = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; e < total; e += stride) {
    const i64 j = e % inner, r = e / inner;  // r: the row (o, i) of out
    const i64 i = r % k, o = r / k;
    const i64 v = index[i];
    if (v < 0 || v >= n) [[unlikely]] {
      if (j == 0) report_bad_index(fault, IndexOp::kIndexSelect, dim, v, i, n);
      out[e] = U(0);
      continue;
    }
    out[e] = x[(o * n + v) * inner + j];
  }
}

template <typename T>
__device__ __forceinline__ void add_into(T& d, T s) {
  if constexpr (std::is_same_v<T, bool>) {
    d = d || s;
  } else {
    d = static_cast<T>(d + s);
  }
}

// One thread per column (o, j) of target, over i in order: no two threads write one element,
// so no atomics, and the sums run in the CPU's order.
template <typename T>
__global__ void index_add_kernel(T* __restrict__ target, const i64* __restrict__ index,
                                 const T* __restrict__ source, i64 columns, i64 k, i64 n, i64 inner,
                                 int dim, IndexFault* fault) {
  const i64 stride = static_cast<i64>(gridDim.x) * blockDim.x;
  for (i64 c = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; c < columns; c += stride) {
    const i64 o = c / inner, j = c % inner;
    bool reported = false;
    for (i64 i = 0; i < k; ++i) {
      const i64 v = index[i];
      if (v < 0 || v >= n) [[unlikely]] {
        if (!reported) report_bad_index(fault, IndexOp::kIndexAdd, dim, v, i, n);
        reported = true;
        continue;
      }
      add_into(target[(o * n + v) * inner + j], source[(o * k + i) * inner + j]);
    }
  }
}

// Note [index_add in sorted order]
// index_add_kernel gives one thread per column of target (o, j) and walks all k indices:
// nn::Embedding's backward ([V, E] target, k = batch x sequence) had only E threads, each
// k dependent updates deep. For k >= kSortedFrom the indices' positions are sorted by value
// (a stable radix sort: equal values keep their order), and one thread per (run of equal
// values, column) adds that run's source rows in position order into a register, then
// stores it once. Each element of target still receives its additions in index order, one
// rounding each, so the result is the one index_add_kernel and the CPU give; no atomics.
constexpr i64 kSortedFrom = 64;

__global__ void iota_kernel(i64* __restrict__ out, i64 k) {
  const i64 stride = static_cast<i64>(gridDim.x) * blockDim.x;
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < k; i += stride) {
    out[i] = i;
  }
}

template <typename T>
__global__ void index_add_sorted_kernel(T* __restrict__ target, const i64* __restrict__ values,
                                        const i64* __restrict__ positions,
                                        const T* __restrict__ source, i64 columns, i64 k, i64 n,
                                        i64 inner, int dim, IndexFault* fault) {
  const i64 stride = static_cast<i64>(gridDim.x) * blockDim.x;
  const i64 total = k * columns;
  for (i64 e = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; e < total; e += stride) {
    const i64 c = e % columns, t = e / columns;  // column c of the t-th sorted index
    const i64 v = values[t];
    if (t > 0 && values[t - 1] == v) continue;  // not the start of a run
    if (v < 0 || v >= n) [[unlikely]] {
      if (c == 0) report_bad_index(fault, IndexOp::kIndexAdd, dim, v, positions[t], n);
      continue;
    }
    const i64 o = c / inner, j = c % inner;
    T& out = target[(o * n + v) * inner + j];
    T sum = out;
    for (i64 u = t; u < k && values[u] == v; ++u) {
      add_into(sum, source[(o * k + positions[u]) * inner + j]);
    }
    out = sum;
  }
}

// Bytes rounded up to a multiple of 256, so what follows them in a block stays aligned.
std::size_t round_up(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

// The radix sort's temporary storage for k keys (a query: nothing runs).
std::size_t sort_temp_bytes(i64 k) {
  std::size_t bytes = 0;
  TESSERA_CUDA_EXPECT(cub::DeviceRadixSort::SortPairs(
                          nullptr, bytes, static_cast<const i64*>(nullptr),
                          static_cast<i64*>(nullptr), static_cast<const i64*>(nullptr),
                          static_cast<i64*>(nullptr), k, 0, 64, cudaStream_t{}) == cudaSuccess,
                      "cub radix sort size query");
  return bytes;
}

template <typename U>
void select_as(cudaStream_t stream, const KernelArg& x, const KernelArg& index,
               const KernelArg& out, i64 k, i64 n, i64 inner, int dim, IndexFault* fault) {
  constexpr auto kernel = index_select_kernel<U>;
  kernel<<<grid_for<kernel>(out.numel), kThreads, 0, stream>>>(
      static_cast<const U*>(x.data), static_cast<const i64*>(index.data), static_cast<U*>(out.data),
      out.numel, k, n, inner, dim, fault);
}

}  // namespace

void launch_index_select(StreamHandle s, const KernelArg& x, const KernelArg& index,
                         const KernelArg& out, i64 outer, i64 n, i64 inner, int dim,
                         IndexFault* fault) {
  TESSERA_CUDA_EXPECT(index.dtype == kInt64 && index.contiguous && x.contiguous && out.contiguous,
                      "index_select operands are not contiguous with an int64 index");
  const i64 k = index.numel;
  const auto stream = static_cast<cudaStream_t>(s);
  if (out.numel == 0) {  // nothing to write: the indices alone are checked
    if (k > 0) {
      check_indices(stream, index, n, IndexOp::kIndexSelect, dim, fault);
      TESSERA_CUDA_CHECK_LAUNCH(stream, "index_select");
    }
    return;
  }
  switch (itemsize(x.dtype)) {
    case 1:
      select_as<std::uint8_t>(stream, x, index, out, k, n, inner, dim, fault);
      break;
    case 2:
      select_as<std::uint16_t>(stream, x, index, out, k, n, inner, dim, fault);
      break;
    case 4:
      select_as<std::uint32_t>(stream, x, index, out, k, n, inner, dim, fault);
      break;
    default:
      select_as<std::uint64_t>(stream, x, index, out, k, n, inner, dim, fault);
      break;
  }
  TESSERA_CUDA_CHECK_LAUNCH(stream, "index_select");
}

void launch_index_add(StreamHandle s, const KernelArg& target, const KernelArg& index,
                      const KernelArg& source, i64 outer, i64 n, i64 inner, int dim,
                      IndexFault* fault, void* scratch) {
  TESSERA_CUDA_EXPECT(index.dtype == kInt64 && index.contiguous && target.contiguous &&
                          source.contiguous && target.dtype == source.dtype,
                      "index_add operands are not contiguous of one dtype with an int64 index");
  const i64 columns = outer * inner;
  if (index.numel == 0) return;
  const auto stream = static_cast<cudaStream_t>(s);
  if (columns == 0) {  // nothing to add: the indices alone are checked
    check_indices(stream, index, n, IndexOp::kIndexAdd, dim, fault);
    TESSERA_CUDA_CHECK_LAUNCH(stream, "index_add");
    return;
  }
  const i64 k = index.numel;
  if (k < kSortedFrom || scratch == nullptr) {
    dispatch_dtype(target.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      constexpr auto kernel = index_add_kernel<T>;
      kernel<<<grid_for<kernel>(columns), kThreads, 0, stream>>>(
          static_cast<T*>(target.data), static_cast<const i64*>(index.data),
          static_cast<const T*>(source.data), columns, k, n, inner, dim, fault);
    });
    TESSERA_CUDA_CHECK_LAUNCH(stream, "index_add");
    return;
  }
  // Note [index_add in sorted order]: scratch holds the sort's temporary storage (first, so
  // it starts where the allocator aligned the block), then the values and the positions in
  // and out (index_add_scratch_bytes).
  std::size_t temp_bytes = sort_temp_bytes(k);
  void* temp = scratch;
  i64* values = reinterpret_cast<i64*>(static_cast<char*>(scratch) + round_up(temp_bytes));
  i64* positions_in = values + k;
  i64* positions = positions_in + k;
  {
    constexpr auto kernel = iota_kernel;
    kernel<<<grid_for<kernel>(k), kThreads, 0, stream>>>(positions_in, k);
    TESSERA_CUDA_CHECK_LAUNCH(stream, "index_add");
  }
  TESSERA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes,
                                                     static_cast<const i64*>(index.data), values,
                                                     positions_in, positions, k, 0, 64, stream));
  dispatch_dtype(target.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr auto kernel = index_add_sorted_kernel<T>;
    kernel<<<grid_for<kernel>(k * columns), kThreads, 0, stream>>>(
        static_cast<T*>(target.data), values, positions, static_cast<const T*>(source.data),
        columns, k, n, inner, dim, fault);
  });
  TESSERA_CUDA_CHECK_LAUNCH(stream, "index_add");
}

std::size_t index_add_scratch_bytes(std::int64_t k, std::int64_t columns) {
  if (k < kSortedFrom || columns == 0) return 0;
  return round_up(sort_temp_bytes(k)) + 3 * static_cast<std::size_t>(k) * sizeof(i64);
}

}  // namespace tessera::detail::cuda

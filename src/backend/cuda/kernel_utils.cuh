#pragma once
// Helpers shared by the elementwise CUDA kernels (private to src/backend/cuda): value
// conversion, aligned vectors, 32-bit strided indexing with the host-side layout that feeds
// it, and grid sizing. See Note [32-bit indexing].
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "tessera/error.h"

// Note [32-bit indexing]
// Strided kernels turn a linear index into per-operand offsets with one division per dim.
// 64-bit division is a long software sequence on the GPU, so strided kernels only ever use
// 32-bit indices (with precomputed magic-number division). A launch whose element count or
// any operand's largest offset does not fit in int32 is split on the host into pieces that
// do (halving the dim that spans the most memory), so no kernel is instantiated twice.
// Contiguous kernels need no division and simply use 64-bit indices.

namespace tessera::detail::cuda {

inline constexpr int kThreads = 256;

[[noreturn]] inline void internal_error(const char* what, const char* file, int line) {
  throw InternalError(std::string("internal error at ") + file + ":" + std::to_string(line) + ": " +
                      what + ". Please report this as a tessera bug.");
}
#define TESSERA_CUDA_EXPECT(cond, what)                                    \
  do {                                                                     \
    if (!(cond)) [[unlikely]] {                                            \
      ::tessera::detail::cuda::internal_error((what), __FILE__, __LINE__); \
    }                                                                      \
  } while (false)

// The CPU's convert_value (core/convert.h): bool means "non-zero". Floating -> uint8 goes
// through int32 so negative values wrap as on x86 (CUDA's direct conversion saturates).
template <typename To, typename From>
__host__ __device__ __forceinline__ To convert_to(From v) {
  if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (std::is_same_v<To, std::uint8_t> && std::is_floating_point_v<From>) {
    return static_cast<std::uint8_t>(static_cast<std::int32_t>(v));
  } else {
    return static_cast<To>(v);
  }
}

// N elements moved as one aligned access (16 bytes at most, one LDG/STG.128).
template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

// Elements per thread in a vectorized loop: 16 bytes of the widest operand.
template <typename... Ts>
inline constexpr int kVecWidth = static_cast<int>(16 / std::max({sizeof(Ts)...}));

inline bool aligned_to(const void* p, std::size_t bytes) {
  return reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
}

// n / d for n, d < 2^31 by multiply-high and shift (Granlund-Montgomery, as in PyTorch).
struct IntDivider {
  std::uint32_t divisor = 1, magic = 1, shift = 0;
  IntDivider() = default;
  explicit IntDivider(std::uint32_t d) : divisor(d) {
    while (shift < 32 && (std::uint64_t{1} << shift) < d) ++shift;
    magic = static_cast<std::uint32_t>(
        ((std::uint64_t{1} << 32) * ((std::uint64_t{1} << shift) - d)) / d + 1);
  }
  __device__ __forceinline__ std::uint32_t div(std::uint32_t n) const {
    return (__umulhi(n, magic) + n) >> shift;
  }
};

// Offsets (in elements) of N operands at a linear index. Dim 0 is the innermost, so the
// unrolled loop reads the kernel parameters at constant positions.
template <int N>
struct Indexer {
  int ndim = 0;
  IntDivider sizes[kMaxDims];
  std::int32_t strides[kMaxDims][N];

  __device__ __forceinline__ void offsets(std::uint32_t i, std::int32_t (&off)[N]) const {
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = 0;
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) {
      if (d == ndim) break;
      const std::uint32_t q = sizes[d].div(i);
      const std::int32_t c = static_cast<std::int32_t>(i - q * sizes[d].divisor);
      i = q;
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] += c * strides[d][k];
    }
  }
};

// Host view of N same-shaped operands (operand 0 is the output), size-1 dims dropped and
// dims that are contiguous in every operand merged. Dim 0 is the outermost here.
template <int N>
struct Layout {
  int ndim = 0;
  std::int64_t sizes[kMaxDims];
  std::int64_t strides[N][kMaxDims];  // elements
  char* ptrs[N];                      // nullptr for an immediate scalar (all strides 0)
  std::int64_t itemsizes[N];

  // `args[k]` nullptr: an immediate scalar, every stride 0.
  Layout(const KernelArg& shape, const KernelArg* const (&args)[N], const std::int64_t (&item)[N]) {
    for (int k = 0; k < N; ++k) {
      ptrs[k] = args[k] ? static_cast<char*>(args[k]->data) : nullptr;
      itemsizes[k] = item[k];
    }
    for (int d = 0; d < shape.ndim; ++d) {
      if (shape.sizes[d] == 1) continue;
      const int last = ndim - 1;
      bool merge = last >= 0;
      for (int k = 0; k < N && merge; ++k) {
        merge = strides[k][last] == stride(args[k], d) * shape.sizes[d];
      }
      const int at = merge ? last : ndim++;
      sizes[at] = merge ? sizes[at] * shape.sizes[d] : shape.sizes[d];
      for (int k = 0; k < N; ++k) strides[k][at] = stride(args[k], d);
    }
  }
  static std::int64_t stride(const KernelArg* a, int d) { return a ? a->strides[d] : 0; }

  std::int64_t numel() const {
    std::int64_t n = 1;
    for (int d = 0; d < ndim; ++d) n *= sizes[d];
    return n;
  }
  // Largest |offset| of operand k, in elements.
  std::int64_t span(int k) const {
    std::int64_t s = 0;
    for (int d = 0; d < ndim; ++d)
      s += (sizes[d] - 1) * (strides[k][d] < 0 ? -strides[k][d] : strides[k][d]);
    return s;
  }
  bool fits(std::int64_t limit) const {
    if (numel() > limit) return false;
    for (int k = 0; k < N; ++k) {
      if (span(k) > limit) return false;
    }
    return true;
  }
  Indexer<N> indexer() const {
    Indexer<N> ix;
    ix.ndim = ndim;
    for (int d = 0; d < ndim; ++d) {
      const int r = ndim - 1 - d;  // innermost first
      ix.sizes[d] = IntDivider(static_cast<std::uint32_t>(sizes[r]));
      for (int k = 0; k < N; ++k) ix.strides[d][k] = static_cast<std::int32_t>(strides[k][r]);
    }
    return ix;
  }
};

// Calls f(piece) for pieces of `l` that each fit 32-bit indexing (Note [32-bit indexing]).
// `limit` is lowered only by tests.
template <int N, typename F>
void for_each_int32_piece(const Layout<N>& l, F&& f, std::int64_t limit = INT32_MAX) {
  if (l.fits(limit)) {
    f(l);
    return;
  }
  int split = 0;  // the dim spanning the most memory (or elements, for broadcast operands)
  std::int64_t widest = -1;
  for (int d = 0; d < l.ndim; ++d) {
    std::int64_t w = 1;
    for (int k = 0; k < N; ++k)
      w = std::max(w, l.strides[k][d] < 0 ? -l.strides[k][d] : l.strides[k][d]);
    w *= l.sizes[d] - 1;
    if (w > widest) widest = w, split = d;
  }
  const std::int64_t half = l.sizes[split] / 2;
  Layout<N> first = l, second = l;
  first.sizes[split] = half;
  second.sizes[split] -= half;
  for (int k = 0; k < N; ++k) {
    if (l.strides[k][split] != 0) second.ptrs[k] += half * l.strides[k][split] * l.itemsizes[k];
  }
  for_each_int32_piece(first, f, limit);
  for_each_int32_piece(second, f, limit);
}

// Multiprocessors of the current device, cached per device.
int sm_count();

// Blocks for `threads_needed` threads: enough to cover them, but no more than fill the GPU
// once (grid-stride loops do the rest). Occupancy is read once per kernel; it assumes all
// GPUs in the process share one architecture (a wrong guess only costs speed).
template <auto Kernel>
int grid_for(std::int64_t threads_needed) {
  static const int per_sm = [] {
    int blocks = 0;
    TESSERA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, Kernel, kThreads, 0));
    return std::max(blocks, 1);
  }();
  const std::int64_t wanted = (threads_needed + kThreads - 1) / kThreads;
  return static_cast<int>(std::clamp<std::int64_t>(wanted, 1, std::int64_t{per_sm} * sm_count()));
}

}  // namespace tessera::detail::cuda

// CUDA reductions (sum, mean, sum of squares, max/min, argmax/argmin over any dims of any
// strided input) and softmax / log_softmax. See Note [CUDA reduction plan].
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <cuda/std/limits>
#include <string>
#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "core/dispatch.h"
#include "tessera/error.h"

// Note [CUDA reduction plan]
// The input's dims split into kept dims (one output element per index) and reduced dims
// (the "reduced index" j runs row-major over them, 0 <= j < count; argmax reports j). Size-1
// dims are dropped, each list is sorted by input stride (largest first, so the last dim
// walks memory fastest) and neighbours that are one run in memory are merged; a full
// reduction of a contiguous tensor is then one reduced dim of stride 1.
// A block of bx * by = 256 threads covers out_lanes outputs with red_lanes threads each:
// - inner mode (the smallest input stride is a reduced dim, e.g. sum over the last dim):
//   threadIdx.x walks j, so a warp reads consecutive addresses; threadIdx.y picks the output.
// - outer mode (the smallest stride is a kept dim, e.g. column sums): threadIdx.x picks the
//   output, so a warp reads consecutive outputs' elements; threadIdx.y walks j.
// Each thread accumulates its js in ascending order, then the block combines its lanes in a
// fixed tree (warp shuffles, shared memory). When the outputs alone cannot fill the GPU
// (few outputs, long reductions: a full reduction), gridDim.y splits j into chunks whose
// partial accumulators go to a scratch buffer that a second kernel combines in split order.
// There are no atomics, so results are the same run to run on a given GPU model. Floating
// sums accumulate in double and integer sums in int64, like the CPU backend, so float32
// sums of many elements agree with the CPU's to rounding of the final result.

namespace tessera::detail::cuda {
namespace {

using i64 = std::int64_t;

constexpr int kThreads = 256;       // threads per block of every kernel here but one:
constexpr int kWideThreads = 1024;  // a single-output reduction's one block
constexpr int kUnroll = 4;          // loads in flight per thread before their adds
constexpr int kMinPerThread = 32;   // reduced elements per thread before splitting pays

template <typename T>
using Limits = ::cuda::std::numeric_limits<T>;

i64 ceil_div(i64 a, i64 b) { return (a + b - 1) / b; }

int pow2_ceil(i64 v, int cap = kThreads) {  // smallest power of 2 >= v, at most cap (1 for v <= 1)
  int p = 1;
  while (p < v && p < cap) p *= 2;
  return p;
}

// gridDim.x is at most 2^31 - 1; only a tensor of tens of billions of elements gets here.
unsigned grid_size(i64 blocks, const char* op) {
  if (blocks > Limits<int>::max()) {
    throw ShapeError(std::string("[") + op + "] tensor too large for one CUDA launch (" +
                     std::to_string(blocks) + " blocks); split it into smaller pieces");
  }
  return static_cast<unsigned>(blocks);
}

int multiprocessors() {
  int device = 0, sms = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&device));
  TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

// ---- reducers: the CPU's (cpu_reducers.h) as device code, with runtime flags ----

struct Flags {
  bool square = false;  // sum of squares
  bool mean = false;    // divide the sum by count
  bool root = false;    // the square root of the sum (with square: the 2-norm)
  bool max = false;     // max/argmax (else min/argmin)
};

template <typename T>
__device__ bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return v != v;
  } else {
    return false;
  }
}

// Sum (or sum of squares, or mean) in double for floating inputs, int64 for bool and integers.
template <typename T>
struct SumReducer {
  using Acc = std::conditional_t<std::is_floating_point_v<T>, double, i64>;
  using Out = std::conditional_t<std::is_floating_point_v<T>, T, i64>;
  __device__ static Acc identity(const Flags&) { return 0; }
  __device__ static void add(Acc& acc, T v, i64, const Flags& f) {
    const Acc a = static_cast<Acc>(v);
    acc += f.square ? a * a : a;
  }
  __device__ static Acc combine(Acc a, Acc b, const Flags&) { return a + b; }
  __device__ static Out finish(Acc acc, i64 count, const Flags& f) {
    // Mean of nothing is 0 / 0 = NaN, as on the CPU.
    if (f.mean) return static_cast<Out>(static_cast<double>(acc) / static_cast<double>(count));
    if (f.root) return static_cast<Out>(::sqrt(static_cast<double>(acc)));
    return static_cast<Out>(acc);
  }
};

// Max/min; a NaN wins and stays (NumPy semantics). The floating identity is -inf/+inf, not
// lowest()/max(): with those, the max of a row of -infs would come out as -FLT_MAX.
template <typename T>
struct ExtremumReducer {
  using Acc = T;
  using Out = T;
  __device__ static Acc identity(const Flags& f) {
    if constexpr (Limits<T>::has_infinity) {
      return f.max ? -Limits<T>::infinity() : Limits<T>::infinity();
    } else {
      return f.max ? Limits<T>::lowest() : Limits<T>::max();
    }
  }
  __device__ static void add(Acc& acc, T v, i64, const Flags& f) {
    acc = ((f.max ? v > acc : v < acc) || is_nan(v)) ? v : acc;
  }
  __device__ static Acc combine(Acc a, Acc b, const Flags& f) {
    add(a, b, 0, f);
    return a;
  }
  __device__ static Out finish(Acc acc, i64, const Flags&) { return acc; }
};

template <typename T>
struct ArgAcc {
  T value;
  i64 index;  // -1: nothing seen yet
};

// Index of the first max/min; the first NaN wins. better() is a total order, so neither the
// walk order nor the combine tree can change which index wins.
template <typename T>
struct ArgReducer {
  using Acc = ArgAcc<T>;
  using Out = i64;
  __device__ static Acc identity(const Flags&) { return {T{}, -1}; }
  __device__ static bool better(T v, i64 i, const Acc& acc, bool max) {
    if (acc.index < 0) return true;
    if (is_nan(acc.value)) return is_nan(v) && i < acc.index;
    if (is_nan(v)) return true;
    if (max ? v > acc.value : v < acc.value) return true;
    return v == acc.value && i < acc.index;
  }
  __device__ static void add(Acc& acc, T v, i64 i, const Flags& f) {
    if (better(v, i, acc, f.max)) acc = {v, i};
  }
  __device__ static Acc combine(Acc a, Acc b, const Flags& f) {
    return b.index >= 0 && better(b.value, b.index, a, f.max) ? b : a;
  }
  __device__ static Out finish(Acc acc, i64, const Flags&) { return acc.index; }
};

// ---- geometry (see Note [CUDA reduction plan]) ----

struct ReduceGeometry {
  int kn = 0, rn = 0;  // kept and reduced dims after dropping, sorting and merging
  i64 ksize[kMaxDims] = {}, kin[kMaxDims] = {}, kout[kMaxDims] = {};
  i64 rsize[kMaxDims] = {}, rin[kMaxDims] = {};
  i64 outputs = 1, count = 1;
  i64 chunk = 0;  // reduced indices per split (gridDim.y)
  int splits = 1;
  bool inner = true;
};

struct Dim {
  i64 size, in, out;
};

i64 abs64(i64 v) { return v < 0 ? -v : v; }

// Sorts by input stride, largest first (stable), then merges neighbours that form one run in
// memory (in both operands for kept dims).
int normalize_dims(Dim* dims, int n, bool sort) {
  if (sort) {
    std::stable_sort(dims, dims + n,
                     [](const Dim& a, const Dim& b) { return abs64(a.in) > abs64(b.in); });
  }
  int m = 0;
  for (int i = 0; i < n; ++i) {
    if (m > 0 && dims[m - 1].in == dims[i].in * dims[i].size &&
        dims[m - 1].out == dims[i].out * dims[i].size) {
      dims[m - 1] = {dims[m - 1].size * dims[i].size, dims[i].in, dims[i].out};
    } else {
      dims[m++] = dims[i];
    }
  }
  return m;
}

ReduceGeometry make_geometry(const KernelArg& in, std::uint32_t mask, const KernelArg& out,
                             bool keep_reduced_order) {
  Dim kept[kMaxDims], red[kMaxDims];
  int kn = 0, rn = 0;
  for (int d = 0; d < in.ndim; ++d) {
    if (in.sizes[d] == 1) continue;  // moves no pointer; a size-0 dim stays (count 0)
    if ((mask >> d) & 1u) {
      red[rn++] = {in.sizes[d], in.strides[d], 0};
    } else {
      kept[kn++] = {in.sizes[d], in.strides[d], out.strides[d]};
    }
  }
  // argmax's j must stay row-major over the reduced dims, so they are not reordered (the
  // front end hands it one dim anyway); merging neighbours keeps j as it is.
  kn = normalize_dims(kept, kn, true);
  rn = normalize_dims(red, rn, !keep_reduced_order);
  ReduceGeometry g;
  g.kn = kn;
  g.rn = rn;
  for (int d = 0; d < kn; ++d) {
    g.ksize[d] = kept[d].size;
    g.kin[d] = kept[d].in;
    g.kout[d] = kept[d].out;
    g.outputs *= kept[d].size;
  }
  i64 min_red = Limits<i64>::max(), min_kept = Limits<i64>::max();
  for (int d = 0; d < rn; ++d) {
    g.rsize[d] = red[d].size;
    g.rin[d] = red[d].in;
    g.count *= red[d].size;
    min_red = std::min(min_red, abs64(red[d].in));
  }
  for (int d = 0; d < kn; ++d) min_kept = std::min(min_kept, abs64(kept[d].in));
  g.inner = kn == 0 || (rn > 0 && min_red <= min_kept);
  return g;
}

// Input offset of output o; its output offset goes to out_off.
__device__ i64 kept_offset(const ReduceGeometry& g, i64 o, i64& out_off) {
  i64 in_off = 0;
  out_off = 0;
  for (int d = g.kn - 1; d >= 0; --d) {
    const i64 q = o / g.ksize[d], r = o - q * g.ksize[d];
    in_off += r * g.kin[d];
    out_off += r * g.kout[d];
    o = q;
  }
  return in_off;
}

// Input offset of reduced index j (more than one reduced dim).
__device__ i64 reduced_offset(const ReduceGeometry& g, i64 j) {
  i64 off = 0;
  for (int d = g.rn - 1; d >= 0; --d) {
    const i64 q = j / g.rsize[d];
    off += (j - q * g.rsize[d]) * g.rin[d];
    j = q;
  }
  return off;
}

// Shuffles any trivially copyable accumulator word by word.
template <typename A>
__device__ A shfl_down(const A& v, int offset) {
  constexpr int kWords = (sizeof(A) + 3) / 4;
  unsigned w[kWords] = {};
  memcpy(w, &v, sizeof(A));
#pragma unroll
  for (int i = 0; i < kWords; ++i) w[i] = __shfl_down_sync(0xffffffffu, w[i], offset);
  A r;
  memcpy(&r, w, sizeof(A));
  return r;
}

// Combines the reduction lanes of each output in a fixed order; the result is valid in the
// lane with red_lane == 0. Every thread of the block must call it.
template <typename R>
__device__ typename R::Acc block_combine(typename R::Acc acc, typename R::Acc* smem, bool inner,
                                         const Flags& f) {
  const int tx = threadIdx.x, ty = threadIdx.y, bx = blockDim.x, by = blockDim.y;
  if (inner && bx >= 32) {  // whole warps per output: shuffles, then one pass over the warps
#pragma unroll
    for (int off = 16; off > 0; off /= 2) acc = R::combine(acc, shfl_down(acc, off), f);
    if (bx == 32) return acc;
    const int warps = bx / 32;
    if (tx % 32 == 0) smem[ty * warps + tx / 32] = acc;
    __syncthreads();
    if (tx == 0) {
      for (int w = 1; w < warps; ++w) acc = R::combine(acc, smem[ty * warps + w], f);
    }
    return acc;
  }
  const int tid = ty * bx + tx;
  const int lanes = inner ? bx : by, lane = inner ? tx : ty, step = inner ? 1 : bx;
  smem[tid] = acc;
  __syncthreads();
  for (int off = lanes / 2; off > 0; off /= 2) {
    if (lane < off) smem[tid] = R::combine(smem[tid], smem[tid + off * step], f);
    __syncthreads();
  }
  return smem[tid];
}

template <typename R, typename T, int kBlock = kThreads>
__global__ void __launch_bounds__(kBlock)
    reduce_kernel(const T* __restrict__ in, typename R::Out* __restrict__ out,
                  typename R::Acc* __restrict__ partial, const ReduceGeometry g, const Flags f) {
  using Acc = typename R::Acc;
  __shared__ Acc smem[kBlock];
  const int red_lane = g.inner ? threadIdx.x : threadIdx.y;
  const int red_lanes = g.inner ? blockDim.x : blockDim.y;
  const int out_lane = g.inner ? threadIdx.y : threadIdx.x;
  const int out_lanes = g.inner ? blockDim.y : blockDim.x;
  const i64 o = static_cast<i64>(blockIdx.x) * out_lanes + out_lane;
  const bool active = o < g.outputs;
  Acc acc = R::identity(f);
  i64 out_off = 0;
  if (active) {
    const T* p = in + kept_offset(g, o, out_off);
    const i64 j0 = static_cast<i64>(blockIdx.y) * g.chunk;
    const i64 j1 = j0 + g.chunk < g.count ? j0 + g.chunk : g.count;
    i64 j = j0 + red_lane;
    if (g.rn <= 1) {  // one reduced run: no index arithmetic in the loop
      const i64 s = g.rn == 1 ? g.rin[0] : 0;
      for (; j + (kUnroll - 1) * red_lanes < j1; j += kUnroll * red_lanes) {
        T v[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) v[u] = p[(j + u * red_lanes) * s];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) R::add(acc, v[u], j + u * red_lanes, f);
      }
      for (; j < j1; j += red_lanes) R::add(acc, p[j * s], j, f);
    } else {
      for (; j + (kUnroll - 1) * red_lanes < j1; j += kUnroll * red_lanes) {
        T v[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) v[u] = p[reduced_offset(g, j + u * red_lanes)];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) R::add(acc, v[u], j + u * red_lanes, f);
      }
      for (; j < j1; j += red_lanes) R::add(acc, p[reduced_offset(g, j)], j, f);
    }
  }
  acc = block_combine<R>(acc, smem, g.inner, f);
  if (active && red_lane == 0) {
    if (g.splits == 1) {
      out[out_off] = R::finish(acc, g.count, f);
    } else {
      partial[static_cast<i64>(blockIdx.y) * g.outputs + o] = acc;
    }
  }
}

// Second pass of a split reduction: partial is [splits, outputs]; threadIdx.x picks the
// output, threadIdx.y walks the splits, combined in split order by the outer-mode tree.
template <typename R>
__global__ void __launch_bounds__(kThreads)
    combine_partials_kernel(const typename R::Acc* __restrict__ partial,
                            typename R::Out* __restrict__ out, const ReduceGeometry g,
                            const Flags f) {
  using Acc = typename R::Acc;
  __shared__ Acc smem[kThreads];
  const i64 o = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool active = o < g.outputs;
  Acc acc = R::identity(f);
  i64 out_off = 0;
  if (active) {
    kept_offset(g, o, out_off);
    for (int s = threadIdx.y; s < g.splits; s += blockDim.y) {
      acc = R::combine(acc, partial[s * g.outputs + o], f);
    }
  }
  acc = block_combine<R>(acc, smem, /*inner=*/false, f);
  if (active && threadIdx.y == 0) out[out_off] = R::finish(acc, g.count, f);
}

template <typename R, typename T>
void run_reduce(cudaStream_t stream, const KernelArg& in, std::uint32_t mask, const KernelArg& out,
                const Flags& f, bool keep_reduced_order) {
  using Acc = typename R::Acc;
  ReduceGeometry g = make_geometry(in, mask, out, keep_reduced_order);
  // Block shape: about kUnroll elements per reduction lane, the rest of the 256 threads on
  // outputs (and the other way round in outer mode, where a warp wants 32 outputs).
  int red_lanes, out_lanes;
  if (g.inner) {
    red_lanes = pow2_ceil(ceil_div(g.count, kUnroll));
    out_lanes = std::min(kThreads / red_lanes, pow2_ceil(g.outputs));
  } else {
    out_lanes = std::min(32, pow2_ceil(g.outputs));
    red_lanes = std::min(kThreads / out_lanes, pow2_ceil(ceil_div(g.count, kUnroll)));
  }
  const i64 blocks = ceil_div(g.outputs, out_lanes);
  // Split the reduction across blocks when the outputs leave the GPU mostly idle and each
  // thread would still get kMinPerThread elements.
  const i64 target = static_cast<i64>(multiprocessors()) * (2048 / kThreads);
  i64 splits = 1;
  if (blocks < target / 2) {
    splits = std::min(ceil_div(target, blocks),
                      ceil_div(g.count, static_cast<i64>(red_lanes) * kMinPerThread));
    splits = std::clamp<i64>(splits, 1, 65535);
    // A second kernel and its scratch cost more than a few blocks' worth of adds save.
    if (splits < 4) splits = 1;
  }
  g.chunk = std::max<i64>(ceil_div(g.count, splits), 1);
  g.splits = static_cast<int>(std::max<i64>(ceil_div(g.count, g.chunk), 1));
  const dim3 block = g.inner ? dim3(red_lanes, out_lanes) : dim3(out_lanes, red_lanes);
  const dim3 grid(grid_size(blocks, "reduce"), static_cast<unsigned>(g.splits));
  const T* src = static_cast<const T*>(in.data);
  auto* dst = static_cast<typename R::Out*>(out.data);
  if (g.splits == 1 && blocks == 1 && g.inner && red_lanes == kThreads) {
    // One output, too small to split (a norm of 100x100): a wider block has four times the
    // loads in flight, which is what such a reduction waits on.
    const int lanes = pow2_ceil(ceil_div(g.count, kUnroll), kWideThreads);
    reduce_kernel<R, T, kWideThreads><<<1, dim3(lanes, 1), 0, stream>>>(src, dst, nullptr, g, f);
    TESSERA_CUDA_CHECK_LAUNCH(stream, "reduce");
    return;
  }
  if (g.splits == 1) {
    reduce_kernel<R, T><<<grid, block, 0, stream>>>(src, dst, nullptr, g, f);
    TESSERA_CUDA_CHECK_LAUNCH(stream, "reduce");
    return;
  }
  // Stream-ordered scratch: freed in queue order after the second pass, so no wait.
  Acc* partial = nullptr;
  const std::size_t scratch = static_cast<std::size_t>(g.splits * g.outputs) * sizeof(Acc);
  const cudaError_t made = cudaMallocAsync(reinterpret_cast<void**>(&partial), scratch, stream);
  if (made == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // not sticky
    throw OutOfMemoryError("[reduce] the GPU has no room for the " + std::to_string(scratch) +
                           " bytes of a split reduction's partial sums; free tensors (or "
                           "call empty_cache(device)) and try again");
  }
  TESSERA_CUDA_CHECK(made);
  reduce_kernel<R, T><<<grid, block, 0, stream>>>(src, dst, partial, g, f);
  TESSERA_CUDA_CHECK_LAUNCH(stream, "reduce (partials)");
  const int cx = std::min(32, pow2_ceil(g.outputs));
  const int cy = std::min(kThreads / cx, pow2_ceil(g.splits));
  combine_partials_kernel<R>
      <<<static_cast<unsigned>(ceil_div(g.outputs, cx)), dim3(cx, cy), 0, stream>>>(partial, dst, g,
                                                                                    f);
  TESSERA_CUDA_CHECK_LAUNCH(stream, "reduce (combine partials)");
  TESSERA_CUDA_CHECK(cudaFreeAsync(partial, stream));
}

template <typename T>
void reduce_typed(cudaStream_t stream, ReduceOp op, const KernelArg& in, std::uint32_t mask,
                  const KernelArg& out) {
  Flags f;
  f.square = op == ReduceOp::kSumSquares || op == ReduceOp::kNorm;
  f.mean = op == ReduceOp::kMean;
  f.root = op == ReduceOp::kNorm;
  f.max = op == ReduceOp::kMax || op == ReduceOp::kArgMax;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMean:
    case ReduceOp::kSumSquares:
    case ReduceOp::kNorm:
      return run_reduce<SumReducer<T>, T>(stream, in, mask, out, f, false);
    case ReduceOp::kMax:
    case ReduceOp::kMin:
      return run_reduce<ExtremumReducer<T>, T>(stream, in, mask, out, f, false);
    case ReduceOp::kArgMax:
    case ReduceOp::kArgMin:
      return run_reduce<ArgReducer<T>, T>(stream, in, mask, out, f, true);
  }
}

// ---- softmax ----

__device__ float exp_of(float v) { return expf(v); }
__device__ double exp_of(double v) { return exp(v); }

// Max and sum over the threadIdx.x lanes of a row, the same in every lane: butterfly
// shuffles give every lane the same bits (each step adds the same two values), then the
// warps' results are combined in warp order. bx is 32 or a multiple of it (then by == 1).
template <typename T>
struct RowGroup {
  T* max_smem;       // [32]
  double* sum_smem;  // [32]
  __device__ T max(T v) const {
#pragma unroll
    for (int off = 16; off > 0; off /= 2) {
      const T o = __shfl_xor_sync(0xffffffffu, v, off);
      v = o > v ? o : v;
    }
    if (blockDim.x == 32) return v;
    if (threadIdx.x % 32 == 0) max_smem[threadIdx.x / 32] = v;
    __syncthreads();
    v = max_smem[0];
    for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) {
      v = max_smem[w] > v ? max_smem[w] : v;
    }
    return v;
  }
  __device__ double sum(double v) const {
#pragma unroll
    for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
    if (blockDim.x == 32) return v;
    if (threadIdx.x % 32 == 0) sum_smem[threadIdx.x / 32] = v;
    __syncthreads();
    v = sum_smem[0];
    for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) v += sum_smem[w];
    return v;
  }
};

// Softmax over contiguous rows (dim is the last): a warp per row (blockDim (32, 8)) or a
// block per long row (blockDim (256, 1)). Matches the CPU's arithmetic: max in T (NaNs lose
// the comparison, then turn the row to NaN through exp), exp(x - max) in T summed in double,
// then (x - max) - T(log(sum)) or exp(x - max) * T(1 / sum). exp is recomputed in the last
// pass rather than stored and re-read: one read of x costs less than a read of y.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    softmax_rows_kernel(const T* __restrict__ in, T* __restrict__ out, i64 rows, i64 len,
                        bool log) {
  __shared__ T max_smem[32];
  __shared__ double sum_smem[32];
  const RowGroup<T> group{max_smem, sum_smem};
  const i64 row = static_cast<i64>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool active = row < rows;  // inactive lanes still join the group reductions
  const T* x = in + (active ? row : 0) * len;
  T* y = out + (active ? row : 0) * len;
  T mx = -Limits<T>::infinity();
  if (active) {
    for (i64 i = threadIdx.x; i < len; i += blockDim.x) mx = x[i] > mx ? x[i] : mx;
  }
  mx = group.max(mx);
  double sum = 0;
  if (active) {
    for (i64 i = threadIdx.x; i < len; i += blockDim.x) sum += exp_of(x[i] - mx);
  }
  sum = group.sum(sum);
  if (!active) return;
  if (log) {
    const T shift = static_cast<T>(::log(sum));  // x - max is exact; keep it apart
    for (i64 i = threadIdx.x; i < len; i += blockDim.x) y[i] = (x[i] - mx) - shift;
  } else {
    const T scale = static_cast<T>(1.0 / sum);
    for (i64 i = threadIdx.x; i < len; i += blockDim.x) y[i] = exp_of(x[i] - mx) * scale;
  }
}

// Softmax along a dim with inner > 1 elements after it, the tensor seen as [outer, len,
// inner]: threadIdx.x picks a column (consecutive in memory), threadIdx.y walks len; the y
// lanes combine in a fixed tree and every lane reads the column's result back.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    softmax_cols_kernel(const T* __restrict__ in, T* __restrict__ out, i64 len, i64 inner,
                        i64 col_blocks, bool log) {
  __shared__ T max_smem[kThreads];
  __shared__ double sum_smem[kThreads];
  const int tx = threadIdx.x, ty = threadIdx.y, bx = blockDim.x, by = blockDim.y;
  const int tid = ty * bx + tx;
  const i64 o = blockIdx.x / col_blocks, col = (blockIdx.x % col_blocks) * bx + tx;
  const bool active = col < inner;
  const T* x = in + o * len * inner + (active ? col : 0);
  T* y = out + o * len * inner + (active ? col : 0);
  T mx = -Limits<T>::infinity();
  if (active) {
    for (i64 d = ty; d < len; d += by) mx = x[d * inner] > mx ? x[d * inner] : mx;
  }
  max_smem[tid] = mx;
  __syncthreads();
  for (int off = by / 2; off > 0; off /= 2) {
    if (ty < off) {
      const T other = max_smem[tid + off * bx];
      max_smem[tid] = other > max_smem[tid] ? other : max_smem[tid];
    }
    __syncthreads();
  }
  mx = max_smem[tx];
  double sum = 0;
  if (active) {
    for (i64 d = ty; d < len; d += by) sum += exp_of(x[d * inner] - mx);
  }
  sum_smem[tid] = sum;
  __syncthreads();
  for (int off = by / 2; off > 0; off /= 2) {
    if (ty < off) sum_smem[tid] += sum_smem[tid + off * bx];
    __syncthreads();
  }
  sum = sum_smem[tx];
  if (!active) return;
  if (log) {
    const T shift = static_cast<T>(::log(sum));
    for (i64 d = ty; d < len; d += by) y[d * inner] = (x[d * inner] - mx) - shift;
  } else {
    const T scale = static_cast<T>(1.0 / sum);
    for (i64 d = ty; d < len; d += by) y[d * inner] = exp_of(x[d * inner] - mx) * scale;
  }
}

template <typename T>
void softmax_typed(cudaStream_t stream, const KernelArg& in, int dim, bool log,
                   const KernelArg& out) {
  i64 outer = 1, inner = 1;
  for (int d = 0; d < dim; ++d) outer *= in.sizes[d];
  for (int d = dim + 1; d < in.ndim; ++d) inner *= in.sizes[d];
  const i64 len = in.sizes[dim];
  const T* x = static_cast<const T*>(in.data);
  T* y = static_cast<T*>(out.data);
  if (inner == 1) {
    // A warp per row up to 1024 elements (32 per lane); longer rows get a block each.
    const dim3 block = len <= 1024 ? dim3(32, kThreads / 32) : dim3(kThreads, 1);
    const unsigned blocks = grid_size(ceil_div(outer, block.y), "softmax");
    softmax_rows_kernel<T><<<blocks, block, 0, stream>>>(x, y, outer, len, log);
  } else {
    const int bx = std::min(32, pow2_ceil(inner));
    const int by = std::min(kThreads / bx, pow2_ceil(len));
    const i64 col_blocks = ceil_div(inner, bx);
    const unsigned blocks = grid_size(outer * col_blocks, "softmax");
    softmax_cols_kernel<T><<<blocks, dim3(bx, by), 0, stream>>>(x, y, len, inner, col_blocks, log);
  }
  TESSERA_CUDA_CHECK_LAUNCH(stream, log ? "log_softmax" : "softmax");
}

}  // namespace

void launch_reduce(StreamHandle s, ReduceOp op, const KernelArg& in, std::uint32_t dim_mask,
                   const KernelArg& out) {
  if (out.numel == 0) return;
  const auto stream = static_cast<cudaStream_t>(s);
  switch (in.dtype) {
    case Dtype::kBool:
      return reduce_typed<bool>(stream, op, in, dim_mask, out);
    case Dtype::kUInt8:
      return reduce_typed<std::uint8_t>(stream, op, in, dim_mask, out);
    case Dtype::kInt32:
      return reduce_typed<std::int32_t>(stream, op, in, dim_mask, out);
    case Dtype::kInt64:
      return reduce_typed<std::int64_t>(stream, op, in, dim_mask, out);
    case Dtype::kFloat32:
      return reduce_typed<float>(stream, op, in, dim_mask, out);
    case Dtype::kFloat64:
      return reduce_typed<double>(stream, op, in, dim_mask, out);
    case Dtype::kBFloat16:
    case Dtype::kFloat16:  // the front end reduces half types in float32
      half_reached_kernel(in.dtype);
  }
}

void launch_softmax(StreamHandle s, const KernelArg& in, int dim, bool log, const KernelArg& out) {
  if (in.numel == 0) return;
  const auto stream = static_cast<cudaStream_t>(s);
  if (is_half(in.dtype)) half_reached_kernel(in.dtype);
  if (in.dtype == Dtype::kFloat64) return softmax_typed<double>(stream, in, dim, log, out);
  softmax_typed<float>(stream, in, dim, log, out);
}

}  // namespace tessera::detail::cuda

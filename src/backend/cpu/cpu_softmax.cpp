// CPU softmax and log_softmax along one dim of a contiguous tensor, numerically stable: the
// max is subtracted before exp, and the sum of exps is accumulated in double.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/half_convert.h"
#include "backend/cpu/scratch_memory.h"
#include "backend/cpu/strided_loop.h"
#include "backend/cpu/vector_math.h"
#include "core/dispatch.h"
#include "core/tensor_impl.h"

namespace tessera::detail::TESSERA_CPU_ISA {  // built once per level: cpu_backend.h
namespace {

using i64 = std::int64_t;

// Columns handled together when the softmax dim is not the last: the loops then run along
// contiguous memory (the inner dims) and vectorize.
constexpr i64 kBlock = 256;

// e^x: float's vectorizes (std::exp is a libm call per element), double keeps libm's.
inline float exp_of(float x) { return exp_vectorizable(x); }
inline double exp_of(double x) { return std::exp(x); }

// Softmax over x[o, :, j] for the columns j in [j0, j1) of one outer index; `inner` is the
// distance between consecutive elements along the softmax dim.
template <typename T>
void softmax_block(const T* x, T* y, i64 len, i64 inner, i64 j0, i64 j1, bool log) {
  T mx[kBlock];
  double sum[kBlock];
  const i64 w = j1 - j0;
  for (i64 j = 0; j < w; ++j) {
    mx[j] = -std::numeric_limits<T>::infinity();
    sum[j] = 0;
  }
  for (i64 d = 0; d < len; ++d) {
    const T* row = x + d * inner + j0;
    for (i64 j = 0; j < w; ++j) mx[j] = row[j] > mx[j] ? row[j] : mx[j];
  }
  // softmax keeps exp(x - max) in y so exp runs once per element; log_softmax needs only
  // the sum.
  for (i64 d = 0; d < len; ++d) {
    const T* row = x + d * inner + j0;
    T* out = y + d * inner + j0;
#pragma omp simd simdlen(16)
    for (i64 j = 0; j < w; ++j) {
      const T e = exp_of(row[j] - mx[j]);
      sum[j] += static_cast<double>(e);
      if (!log) out[j] = e;
    }
  }
  T shift[kBlock];  // log: subtracted after the max (x - max is exact); softmax: 1 / sum
  for (i64 j = 0; j < w; ++j) shift[j] = static_cast<T>(log ? std::log(sum[j]) : 1.0 / sum[j]);
  for (i64 d = 0; d < len; ++d) {
    const T* row = x + d * inner + j0;
    T* out = y + d * inner + j0;
    if (log) {
      for (i64 j = 0; j < w; ++j) out[j] = (row[j] - mx[j]) - shift[j];
    } else {
      for (i64 j = 0; j < w; ++j) out[j] *= shift[j];
    }
  }
}

// Softmax over a contiguous row (the last dim).
template <typename T>
void softmax_row(const T* x, T* y, i64 len, bool log) {
  if constexpr (std::is_same_v<T, float>) {
    // The same steps, vectorized: the max in 16 lanes, exp_vectorizable, partial sums
    // (vector_math.h). A row of -inf stays NaN (-inf - -inf), a NaN makes its row NaN, and
    // an -inf among finite values gives 0.
    const float mx = max_vectorizable(x, len);
    const double sum = exp_sum_vectorizable(x, len, mx, log ? nullptr : y);
    if (log) {
      const float shift = static_cast<float>(std::log(sum));
      for (i64 i = 0; i < len; ++i) y[i] = (x[i] - mx) - shift;
    } else {
      const float scale = static_cast<float>(1.0 / sum);
      for (i64 i = 0; i < len; ++i) y[i] *= scale;
    }
    return;
  }
  T mx = -std::numeric_limits<T>::infinity();
  for (i64 i = 0; i < len; ++i) mx = x[i] > mx ? x[i] : mx;
  double sum = 0;
  if (log) {
    for (i64 i = 0; i < len; ++i) sum += static_cast<double>(std::exp(x[i] - mx));
    const T shift = static_cast<T>(std::log(sum));  // x - max is exact; keep it apart
    for (i64 i = 0; i < len; ++i) y[i] = (x[i] - mx) - shift;
  } else {
    for (i64 i = 0; i < len; ++i) {
      y[i] = std::exp(x[i] - mx);
      sum += static_cast<double>(y[i]);
    }
    const T scale = static_cast<T>(1.0 / sum);
    for (i64 i = 0; i < len; ++i) y[i] *= scale;
  }
}

// A softmax along `dim` of shape s as [outer, len, inner]: len the dim's size, inner the
// distance between its consecutive elements.
struct SoftmaxExtent {
  i64 outer, len, inner;
};
SoftmaxExtent softmax_extent(const Shape& s, int dim) {
  i64 outer = 1, inner = 1;
  for (int d = 0; d < dim; ++d) outer *= s[d];
  for (int d = dim + 1; d < s.size(); ++d) inner *= s[d];
  return {outer, s[dim], inner};
}

template <typename T>
void softmax_typed(const Tensor& in, int dim, bool log, const Tensor& out) {
  const SoftmaxExtent e = softmax_extent(in.shape(), dim);
  const i64 outer = e.outer, len = e.len, inner = e.inner;
  const T* x = reinterpret_cast<const T*>(impl_of(in).data());
  T* y = reinterpret_cast<T*>(impl_of(out).data());
  if (in.numel() == 0) return;
  // A small softmax enters no OpenMP region: `#pragma omp parallel for if (false)` cost
  // 0.35 us, twice the rest of a 2x3 softmax (for_range in strided_loop.h).
  const bool serial = in.numel() < kParallelGrain || omp_in_parallel();
  if (inner == 1) {
    if (serial) {
      for (i64 o = 0; o < outer; ++o) softmax_row(x + o * len, y + o * len, len, log);
      return;
    }
#pragma omp parallel for schedule(static)
    for (i64 o = 0; o < outer; ++o) softmax_row(x + o * len, y + o * len, len, log);
    return;
  }
  const i64 blocks = (inner + kBlock - 1) / kBlock, tasks = outer * blocks;
#pragma omp parallel for schedule(static) if (!serial)
  for (i64 t = 0; t < tasks; ++t) {
    const i64 o = t / blocks, j0 = (t % blocks) * kBlock;
    softmax_block(x + o * len * inner, y + o * len * inner, len, inner, j0,
                  std::min(j0 + kBlock, inner), log);
  }
}

// Note [Half softmax]
// A bfloat16 or float16 softmax that records no gradient (Backend::half_softmax) runs here
// instead of on float32 copies, in softmax_typed's units and with their steps on each value
// converted to float32, rounding each result once: bit for bit the copies' values. A row (the
// last dim) is converted into a buffer of its working thread (no more threads work than there
// are rows). A block of columns is walked three times over the half input itself, each row of
// the block converted on the stack, and softmax computes exp(x - max) again in the last walk
// rather than keeping it: the same float32 value, with no buffer the size of the dim (a first
// version kept [len, 256] floats per thread: a [20000, 256] softmax over dim 0 took 4x the
// copies' time in fresh memory, and 655 MB at 16 threads).
template <typename H>
void softmax_block_half(const H* x, H* y, i64 len, i64 inner, i64 w, bool log) {
  float mx[kBlock], v[kBlock], shift[kBlock];
  double sum[kBlock];
  for (i64 j = 0; j < w; ++j) {
    mx[j] = -std::numeric_limits<float>::infinity();
    sum[j] = 0;
  }
  for (i64 d = 0; d < len; ++d) {
    half_to_float(x + d * inner, v, w);
    for (i64 j = 0; j < w; ++j) mx[j] = v[j] > mx[j] ? v[j] : mx[j];
  }
  for (i64 d = 0; d < len; ++d) {
    half_to_float(x + d * inner, v, w);
#pragma omp simd simdlen(16)
    for (i64 j = 0; j < w; ++j) sum[j] += static_cast<double>(exp_of(v[j] - mx[j]));
  }
  for (i64 j = 0; j < w; ++j) {
    shift[j] = static_cast<float>(log ? std::log(sum[j]) : 1.0 / sum[j]);
  }
  for (i64 d = 0; d < len; ++d) {
    half_to_float(x + d * inner, v, w);
    if (log) {
      for (i64 j = 0; j < w; ++j) v[j] = (v[j] - mx[j]) - shift[j];
    } else {
#pragma omp simd simdlen(16)
      for (i64 j = 0; j < w; ++j) v[j] = exp_of(v[j] - mx[j]) * shift[j];
    }
    float_to_half(v, y + d * inner, w);
  }
}

template <typename H>
void softmax_half(const Tensor& in, int dim, bool log, const Tensor& out) {
  const SoftmaxExtent e = softmax_extent(in.shape(), dim);
  const i64 outer = e.outer, len = e.len, inner = e.inner;
  const H* x = reinterpret_cast<const H*>(impl_of(in).data());
  H* y = reinterpret_cast<H*>(impl_of(out).data());
  if (in.numel() == 0) return;
  const bool serial = in.numel() < kParallelGrain || omp_in_parallel();
  if (inner != 1) {
    const i64 blocks = (inner + kBlock - 1) / kBlock, tasks = outer * blocks;
#pragma omp parallel for schedule(static) if (!serial)
    for (i64 t = 0; t < tasks; ++t) {
      const i64 o = t / blocks, j0 = (t % blocks) * kBlock;
      softmax_block_half(x + o * len * inner + j0, y + o * len * inner + j0, len, inner,
                         std::min(kBlock, inner - j0), log);
    }
    return;
  }
  const int threads = serial ? 1 : static_cast<int>(std::min<i64>(omp_get_max_threads(), outer));
  // Allocated before the parallel region (a failed allocation inside one ends the process),
  // uninitialized: every value is written before it is read.
  const std::unique_ptr<float[]> buffers(new float[static_cast<std::size_t>(threads * 2 * len)]);
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    float* xs = buffers.get() + omp_get_thread_num() * 2 * len;
    float* ys = xs + len;
#pragma omp for schedule(static)
    for (i64 o = 0; o < outer; ++o) {
      half_to_float(x + o * len, xs, len);
      softmax_row(xs, ys, len, log);
      float_to_half(ys, y + o * len, len);
    }
  }
}

}  // namespace

void CpuBackend::softmax(const Tensor& in, int dim, bool log, const Tensor& out) {
  launch_with(
      out.device().index(),
      [dim, log](const Tensor& in, const Tensor& out) {
        if (is_half(in.dtype())) {  // buffers of its own: a failed allocation is OutOfMemoryError
          return with_scratch_memory(log ? "log_softmax" : "softmax", out.device(), [&] {
            if (in.dtype() == kBFloat16) return softmax_half<BFloat16>(in, dim, log, out);
            softmax_half<Float16>(in, dim, log, out);
          });
        }
        dispatch_floating(in.dtype(), [&](auto tag) {
          using T = typename decltype(tag)::type;
          softmax_typed<T>(in, dim, log, out);
        });
      },
      in, out);
}

}  // namespace tessera::detail::TESSERA_CPU_ISA

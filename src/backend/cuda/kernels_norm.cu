// CUDA batch normalization (Backend::batch_norm and batch_norm_backward), x seen as
// [N, C, S], and layer normalization (Backend::layer_norm, layer_norm_backward), x seen as
// [R, D]. One block per channel (per row) forms its sums in double, combined in a fixed tree
// in shared memory (so the result does not depend on timing); the batch norm passes that
// write x's shape are grid-stride loops over every element, and the layer norm parameters'
// gradients one thread per column summing the rows in order. The math is
// cpu_batch_norm.cpp's and cpu_layer_norm.cpp's.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/kernel_utils.cuh"
#include "core/dispatch.h"

namespace tessera::detail::cuda {
namespace {

using i64 = std::int64_t;

// The sum of every thread's v in the block (kThreads threads), read by all of them.
__device__ double block_sum(double v, double* smem) {
  smem[threadIdx.x] = v;
  __syncthreads();
  for (int off = kThreads / 2; off > 0; off /= 2) {
    if (threadIdx.x < off) smem[threadIdx.x] += smem[threadIdx.x + off];
    __syncthreads();
  }
  const double total = smem[0];
  __syncthreads();  // smem is reused by the next call
  return total;
}

struct Geometry {
  i64 n, c, s;
  __device__ i64 offset(i64 ch, i64 i) const {  // the i-th of channel ch's n x s values
    const i64 row = i / s;
    return (row * c + ch) * s + (i - row * s);
  }
};

// Blocks for a kernel whose blocks take rows (channels) r = blockIdx.x, blockIdx.x +
// gridDim.x, ...: one per row up to a cap, so that 2^31 rows or more (past a grid's x
// limit) still launch.
inline unsigned row_grid(i64 rows) {
  constexpr i64 kMaxBlocks = i64{1} << 20;
  return static_cast<unsigned>(rows < kMaxBlocks ? rows : kMaxBlocks);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    statistics_kernel(const T* __restrict__ x, Geometry g, T* running_mean, T* running_var,
                      T* __restrict__ save_mean, T* __restrict__ save_invstd, BatchNormParams p) {
  __shared__ double smem[kThreads];
  for (i64 ch = blockIdx.x; ch < g.c; ch += gridDim.x) {  // the block's channels (row_grid)
    if (!p.training) {                                    // the same for every thread of the block
      if (threadIdx.x == 0) {
        save_mean[ch] = running_mean[ch];
        save_invstd[ch] = static_cast<T>(1.0 / sqrt(static_cast<double>(running_var[ch]) + p.eps));
      }
      continue;
    }
    const i64 m = g.n * g.s;
    double sum = 0;
    for (i64 i = threadIdx.x; i < m; i += kThreads) sum += static_cast<double>(x[g.offset(ch, i)]);
    const double mean = block_sum(sum, smem) / static_cast<double>(m);
    double squares = 0;
    for (i64 i = threadIdx.x; i < m; i += kThreads) {
      const double v = static_cast<double>(x[g.offset(ch, i)]) - mean;
      squares += v * v;
    }
    const double var = block_sum(squares, smem) / static_cast<double>(m);
    if (threadIdx.x != 0) continue;
    save_mean[ch] = static_cast<T>(mean);
    save_invstd[ch] = static_cast<T>(1.0 / sqrt(var + p.eps));
    if (running_mean != nullptr) {
      const double unbiased = static_cast<double>(m) / static_cast<double>(m - 1);
      running_mean[ch] = static_cast<T>((1.0 - p.momentum) * static_cast<double>(running_mean[ch]) +
                                        p.momentum * mean);
      running_var[ch] = static_cast<T>((1.0 - p.momentum) * static_cast<double>(running_var[ch]) +
                                       p.momentum * var * unbiased);
    }
  }
}

template <typename T>
__global__ void normalize_kernel(const T* __restrict__ x, const T* __restrict__ weight,
                                 const T* __restrict__ bias, const T* __restrict__ save_mean,
                                 const T* __restrict__ save_invstd, T* __restrict__ y, Geometry g,
                                 i64 numel) {
  const i64 stride = static_cast<i64>(gridDim.x) * blockDim.x;
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < numel; i += stride) {
    const i64 ch = (i / g.s) % g.c;
    const T k = save_invstd[ch] * (weight != nullptr ? weight[ch] : T(1));
    y[i] = (x[i] - save_mean[ch]) * k + (bias != nullptr ? bias[ch] : T(0));
  }
}

// sums[ch] = sum grad_y, sums[c + ch] = sum grad_y (x - mean); grad_bias and grad_weight
// from them when wanted.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    gradient_sums_kernel(const T* __restrict__ x, const T* __restrict__ dy,
                         const T* __restrict__ save_mean, const T* __restrict__ save_invstd,
                         Geometry g, double* __restrict__ sums, T* grad_weight, T* grad_bias) {
  __shared__ double smem[kThreads];
  const i64 m = g.n * g.s;
  for (i64 ch = blockIdx.x; ch < g.c; ch += gridDim.x) {  // the block's channels (row_grid)
    const double mean = static_cast<double>(save_mean[ch]);
    double a = 0, b = 0;
    for (i64 i = threadIdx.x; i < m; i += kThreads) {
      const i64 at = g.offset(ch, i);
      const double grad = static_cast<double>(dy[at]);
      a += grad;
      b += grad * (static_cast<double>(x[at]) - mean);
    }
    const double sum_dy = block_sum(a, smem);
    const double sum_dy_xmu = block_sum(b, smem);
    if (threadIdx.x != 0) continue;
    sums[ch] = sum_dy;
    sums[g.c + ch] = sum_dy_xmu;
    if (grad_bias != nullptr) grad_bias[ch] = static_cast<T>(sum_dy);
    if (grad_weight != nullptr) {
      grad_weight[ch] = static_cast<T>(sum_dy_xmu * static_cast<double>(save_invstd[ch]));
    }
  }
}

template <typename T>
__global__ void input_gradient_kernel(const T* __restrict__ x, const T* __restrict__ weight,
                                      const T* __restrict__ dy, const T* __restrict__ save_mean,
                                      const T* __restrict__ save_invstd,
                                      const double* __restrict__ sums, bool training, Geometry g,
                                      i64 numel, T* __restrict__ dx) {
  const i64 stride = static_cast<i64>(gridDim.x) * blockDim.x;
  const double m = static_cast<double>(g.n * g.s);
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < numel; i += stride) {
    const i64 ch = (i / g.s) % g.c;
    const double invstd = static_cast<double>(save_invstd[ch]);
    const double k = invstd * (weight != nullptr ? static_cast<double>(weight[ch]) : 1.0);
    double grad = static_cast<double>(dy[i]);
    if (training) {
      const double xmu = static_cast<double>(x[i]) - static_cast<double>(save_mean[ch]);
      grad -= (sums[ch] + xmu * invstd * invstd * sums[g.c + ch]) / m;
    }
    dx[i] = static_cast<T>(k * grad);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    layer_norm_kernel(const T* __restrict__ x, const T* __restrict__ weight,
                      const T* __restrict__ bias, double eps, i64 rows, i64 d, T* __restrict__ y,
                      T* __restrict__ save_mean, T* __restrict__ save_invstd) {
  __shared__ double smem[kThreads];
  for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {  // the block's rows (row_grid)
    const T* in = x + r * d;
    T* out = y + r * d;
    double sum = 0;
    for (i64 j = threadIdx.x; j < d; j += kThreads) sum += static_cast<double>(in[j]);
    const double mean = block_sum(sum, smem) / static_cast<double>(d);
    double squares = 0;
    for (i64 j = threadIdx.x; j < d; j += kThreads) {
      const double v = static_cast<double>(in[j]) - mean;
      squares += v * v;
    }
    const double invstd = 1.0 / sqrt(block_sum(squares, smem) / static_cast<double>(d) + eps);
    if (threadIdx.x == 0) {
      save_mean[r] = static_cast<T>(mean);
      save_invstd[r] = static_cast<T>(invstd);
    }
    const T m = static_cast<T>(mean), k = static_cast<T>(invstd);
    for (i64 j = threadIdx.x; j < d; j += kThreads) {
      T v = (in[j] - m) * k;
      if (weight != nullptr) v *= weight[j];
      if (bias != nullptr) v += bias[j];
      out[j] = v;
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    layer_norm_input_gradient_kernel(const T* __restrict__ x, const T* __restrict__ weight,
                                     const T* __restrict__ dy, const T* __restrict__ save_mean,
                                     const T* __restrict__ save_invstd, i64 rows, i64 d,
                                     T* __restrict__ dx) {
  __shared__ double smem[kThreads];
  for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {  // the block's rows (row_grid)
    const i64 at = r * d;
    const double mean = static_cast<double>(save_mean[r]);
    const double invstd = static_cast<double>(save_invstd[r]);
    double a = 0, b = 0;  // sums of h = dy weight and of h xhat
    for (i64 j = threadIdx.x; j < d; j += kThreads) {
      const double h = static_cast<double>(dy[at + j]) *
                       (weight != nullptr ? static_cast<double>(weight[j]) : 1.0);
      a += h;
      b += h * (static_cast<double>(x[at + j]) - mean) * invstd;
    }
    const double mean_h = block_sum(a, smem) / static_cast<double>(d);
    const double mean_h_xhat = block_sum(b, smem) / static_cast<double>(d);
    for (i64 j = threadIdx.x; j < d; j += kThreads) {
      const double h = static_cast<double>(dy[at + j]) *
                       (weight != nullptr ? static_cast<double>(weight[j]) : 1.0);
      const double xhat = (static_cast<double>(x[at + j]) - mean) * invstd;
      dx[at + j] = static_cast<T>(invstd * (h - mean_h - xhat * mean_h_xhat));
    }
  }
}

// Note [Layer norm's parameter gradients on a GPU]
// dweight and dbias are sums over the rows. One thread per column summing every row in turn
// gave d threads in all (768 columns: 3 blocks on a 132-SM GPU, each thread thousands of
// dependent loads deep). The rows are cut into blocks fixed by the shape alone
// (layer_norm_row_blocks): a block of kTileColumns x kTileRows threads sums one block of rows
// for 32 columns (a warp reads 32 consecutive values of a row), its kTileRows row lanes
// combined in order in shared memory, into a partial per row block and column; a second
// kernel adds a column's partials in row-block order. The result depends on the shape only,
// never on timing: no atomics.
constexpr int kTileColumns = 32, kTileRows = 8;

template <typename T>
__global__ void __launch_bounds__(kTileColumns* kTileRows)
    layer_norm_parameter_partials_kernel(const T* __restrict__ x, const T* __restrict__ dy,
                                         const T* __restrict__ save_mean,
                                         const T* __restrict__ save_invstd, i64 rows, i64 d,
                                         i64 blocks, double* __restrict__ partials) {
  __shared__ double sw_lane[kTileRows][kTileColumns], sb_lane[kTileRows][kTileColumns];
  const i64 j = static_cast<i64>(blockIdx.x) * kTileColumns + threadIdx.x;
  const i64 b = blockIdx.y;
  const i64 r0 = rows * b / blocks, r1 = rows * (b + 1) / blocks;
  double sw = 0, sb = 0;
  if (j < d) {
    for (i64 r = r0 + threadIdx.y; r < r1; r += kTileRows) {
      const double g = static_cast<double>(dy[r * d + j]);
      sb += g;
      sw += g * (static_cast<double>(x[r * d + j]) - static_cast<double>(save_mean[r])) *
            static_cast<double>(save_invstd[r]);
    }
  }
  sw_lane[threadIdx.y][threadIdx.x] = sw;
  sb_lane[threadIdx.y][threadIdx.x] = sb;
  __syncthreads();
  if (threadIdx.y != 0 || j >= d) return;
  for (int k = 1; k < kTileRows; ++k) {
    sw += sw_lane[k][threadIdx.x];
    sb += sb_lane[k][threadIdx.x];
  }
  partials[b * d + j] = sw;
  partials[(blocks + b) * d + j] = sb;
}

template <typename T>
__global__ void layer_norm_parameter_sums_kernel(const double* __restrict__ partials, i64 d,
                                                 i64 blocks, T* grad_weight, T* grad_bias) {
  const i64 stride = static_cast<i64>(gridDim.x) * blockDim.x;
  for (i64 j = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; j < d; j += stride) {
    double sw = 0, sb = 0;
    for (i64 b = 0; b < blocks; ++b) {
      sw += partials[b * d + j];
      sb += partials[(blocks + b) * d + j];
    }
    if (grad_weight != nullptr) grad_weight[j] = static_cast<T>(sw);
    if (grad_bias != nullptr) grad_bias[j] = static_cast<T>(sb);
  }
}

Geometry geometry_of(const KernelArg& x) {
  i64 s = 1;
  for (int d = 2; d < x.ndim; ++d) s *= x.sizes[d];
  return {x.sizes[0], x.sizes[1], s};
}

int elementwise_grid(i64 numel) {
  return static_cast<int>(std::clamp<i64>((numel + kThreads - 1) / kThreads, 1, 65535));
}

}  // namespace

std::int64_t layer_norm_row_blocks(std::int64_t rows, std::int64_t d) {
  // Blocks of at least 64 rows, at most 256 of them (a y grid dimension holds 65535), and
  // at most 2^22 partials per gradient (32 MiB of doubles) however wide the rows.
  constexpr i64 kMinRows = 64, kMaxBlocks = 256, kMaxPartials = i64{1} << 22;
  const i64 by_rows = (rows + kMinRows - 1) / kMinRows;
  const i64 by_memory = kMaxPartials / (d > 0 ? d : 1);
  return std::max<i64>(1, std::min({by_rows, kMaxBlocks, by_memory}));
}

void launch_batch_norm(StreamHandle s, const KernelArg& x, void* weight, void* bias,
                       void* running_mean, void* running_var, const KernelArg& y, void* save_mean,
                       void* save_invstd, const BatchNormParams& p) {
  const Geometry g = geometry_of(x);
  if (g.c == 0 || x.numel == 0) return;
  const auto stream = static_cast<cudaStream_t>(s);
  dispatch_floating(x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    statistics_kernel<T><<<row_grid(g.c), kThreads, 0, stream>>>(
        static_cast<const T*>(x.data), g, static_cast<T*>(running_mean),
        static_cast<T*>(running_var), static_cast<T*>(save_mean), static_cast<T*>(save_invstd), p);
    TESSERA_CUDA_CHECK_LAUNCH(stream, "batch_norm");
    normalize_kernel<T><<<elementwise_grid(x.numel), kThreads, 0, stream>>>(
        static_cast<const T*>(x.data), static_cast<const T*>(weight), static_cast<const T*>(bias),
        static_cast<const T*>(save_mean), static_cast<const T*>(save_invstd),
        static_cast<T*>(y.data), g, x.numel);
    TESSERA_CUDA_CHECK_LAUNCH(stream, "batch_norm");
  });
}

void launch_batch_norm_backward(StreamHandle s, const KernelArg& x, void* weight,
                                const KernelArg& grad_y, void* save_mean, void* save_invstd,
                                bool training, void* sums, void* grad_x, void* grad_weight,
                                void* grad_bias) {
  const Geometry g = geometry_of(x);
  if (g.c == 0 || x.numel == 0) return;
  const auto stream = static_cast<cudaStream_t>(s);
  dispatch_floating(x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    gradient_sums_kernel<T><<<row_grid(g.c), kThreads, 0, stream>>>(
        static_cast<const T*>(x.data), static_cast<const T*>(grad_y.data),
        static_cast<const T*>(save_mean), static_cast<const T*>(save_invstd), g,
        static_cast<double*>(sums), static_cast<T*>(grad_weight), static_cast<T*>(grad_bias));
    TESSERA_CUDA_CHECK_LAUNCH(stream, "batch_norm_backward");
    if (grad_x == nullptr) return;
    input_gradient_kernel<T><<<elementwise_grid(x.numel), kThreads, 0, stream>>>(
        static_cast<const T*>(x.data), static_cast<const T*>(weight),
        static_cast<const T*>(grad_y.data), static_cast<const T*>(save_mean),
        static_cast<const T*>(save_invstd), static_cast<const double*>(sums), training, g, x.numel,
        static_cast<T*>(grad_x));
    TESSERA_CUDA_CHECK_LAUNCH(stream, "batch_norm_backward");
  });
}

void launch_layer_norm(StreamHandle s, const KernelArg& x, void* weight, void* bias, double eps,
                       const KernelArg& y, void* save_mean, void* save_invstd, std::int64_t rows) {
  if (rows == 0 || x.numel == 0) return;
  const auto stream = static_cast<cudaStream_t>(s);
  const i64 d = x.numel / rows;
  dispatch_floating(x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    layer_norm_kernel<T><<<row_grid(rows), kThreads, 0, stream>>>(
        static_cast<const T*>(x.data), static_cast<const T*>(weight), static_cast<const T*>(bias),
        eps, rows, d, static_cast<T*>(y.data), static_cast<T*>(save_mean),
        static_cast<T*>(save_invstd));
    TESSERA_CUDA_CHECK_LAUNCH(stream, "layer_norm");
  });
}

void launch_layer_norm_backward(StreamHandle s, const KernelArg& x, void* weight,
                                const KernelArg& grad_y, void* save_mean, void* save_invstd,
                                std::int64_t rows, void* grad_x, void* grad_weight, void* grad_bias,
                                void* partials) {
  if (rows == 0 || x.numel == 0) return;
  const auto stream = static_cast<cudaStream_t>(s);
  const i64 d = x.numel / rows;
  dispatch_floating(x.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xs = static_cast<const T*>(x.data);
    const T* dy = static_cast<const T*>(grad_y.data);
    const T* sm = static_cast<const T*>(save_mean);
    const T* si = static_cast<const T*>(save_invstd);
    if (grad_x != nullptr) {
      layer_norm_input_gradient_kernel<T><<<row_grid(rows), kThreads, 0, stream>>>(
          xs, static_cast<const T*>(weight), dy, sm, si, rows, d, static_cast<T*>(grad_x));
      TESSERA_CUDA_CHECK_LAUNCH(stream, "layer_norm_backward");
    }
    if (grad_weight != nullptr || grad_bias != nullptr) {
      // Note [Layer norm's parameter gradients on a GPU]
      const i64 blocks = layer_norm_row_blocks(rows, d);
      const i64 tiles = (d + kTileColumns - 1) / kTileColumns;
      TESSERA_CUDA_EXPECT(tiles <= 0x7fffffff, "layer_norm_backward: too many columns for a grid");
      const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(blocks));
      const dim3 block(kTileColumns, kTileRows);
      double* part = static_cast<double*>(partials);
      layer_norm_parameter_partials_kernel<T>
          <<<grid, block, 0, stream>>>(xs, dy, sm, si, rows, d, blocks, part);
      TESSERA_CUDA_CHECK_LAUNCH(stream, "layer_norm_backward");
      layer_norm_parameter_sums_kernel<T><<<elementwise_grid(d), kThreads, 0, stream>>>(
          part, d, blocks, static_cast<T*>(grad_weight), static_cast<T*>(grad_bias));
      TESSERA_CUDA_CHECK_LAUNCH(stream, "layer_norm_backward");
    }
  });
}

}  // namespace tessera::detail::cuda

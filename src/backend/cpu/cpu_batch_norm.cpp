// CPU batch normalization (Backend::batch_norm and batch_norm_backward): x seen as [N, C, S].
// Each channel's sums accumulate in double: with S = 1 (BatchNorm1d on [N, C]) the loops run
// over the channels innermost, so they vectorize across a row; otherwise over each row of S
// contiguous values of one channel, channels split across the OpenMP pool.
#include <omp.h>

#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernel_data.h"
#include "backend/cpu/strided_loop.h"
#include "core/dispatch.h"
#include "core/tensor_impl.h"

namespace tessera::detail::TESSERA_CPU_ISA {  // built once per level: cpu_backend.h
namespace {

using i64 = std::int64_t;

struct Dims {
  i64 n, c, s;
  i64 count() const { return n * s; }  // values per channel
};

Dims dims_of(const Tensor& x) {
  i64 s = 1;
  for (int d = 2; d < x.dim(); ++d) s *= x.size(d);
  return {x.size(0), x.size(1), s};
}

// Whether a pass over `numel` values should split across the pool.
bool parallel_for(i64 numel) { return numel >= kParallelGrain && !omp_in_parallel(); }

// Sums over one channel's values: sum f(x) over its rows of S. f runs in double.
template <typename T, typename F>
double channel_sum(const T* x, Dims d, i64 c, F f) {
  double total = 0;
  for (i64 n = 0; n < d.n; ++n) {
    const T* row = x + (n * d.c + c) * d.s;
    double sum = 0;
#pragma omp simd reduction(+ : sum)
    for (i64 j = 0; j < d.s; ++j) sum += f(static_cast<double>(row[j]));
    total += sum;
  }
  return total;
}

// The two sums of the backward pass over one channel: grad_y, and grad_y (x - mean).
template <typename T>
void channel_grad_sums(const T* x, const T* dy, Dims d, i64 c, double mean, double& sum_dy,
                       double& sum_dy_xmu) {
  sum_dy = sum_dy_xmu = 0;
  for (i64 n = 0; n < d.n; ++n) {
    const i64 at = (n * d.c + c) * d.s;
    double a = 0, b = 0;
#pragma omp simd reduction(+ : a, b)
    for (i64 j = 0; j < d.s; ++j) {
      const double g = static_cast<double>(dy[at + j]);
      a += g;
      b += g * (static_cast<double>(x[at + j]) - mean);
    }
    sum_dy += a;
    sum_dy_xmu += b;
  }
}

// The per-channel statistics (training: from x; evaluation: the running ones), with the
// running statistics moved toward the batch's.
template <typename T>
void statistics(const T* x, Dims d, const BatchNormParams& p, T* running_mean, T* running_var,
                std::vector<double>& mean, std::vector<double>& invstd) {
  const i64 m = d.count();
  if (!p.training) {
    for (i64 c = 0; c < d.c; ++c) {
      mean[c] = static_cast<double>(running_mean[c]);
      invstd[c] = 1.0 / std::sqrt(static_cast<double>(running_var[c]) + p.eps);
    }
    return;
  }
  std::vector<double> var(d.c);
  if (d.s == 1) {  // [N, C]: across each row, all channels at once
    std::vector<double> sum(d.c, 0.0), squares(d.c, 0.0);
    for (i64 n = 0; n < d.n; ++n) {
      const T* row = x + n * d.c;
#pragma omp simd
      for (i64 c = 0; c < d.c; ++c) sum[c] += static_cast<double>(row[c]);
    }
    for (i64 c = 0; c < d.c; ++c) mean[c] = sum[c] / static_cast<double>(m);
    for (i64 n = 0; n < d.n; ++n) {
      const T* row = x + n * d.c;
#pragma omp simd
      for (i64 c = 0; c < d.c; ++c) {
        const double v = static_cast<double>(row[c]) - mean[c];
        squares[c] += v * v;
      }
    }
    for (i64 c = 0; c < d.c; ++c) var[c] = squares[c] / static_cast<double>(m);
  } else {
#pragma omp parallel for schedule(static) if (parallel_for(d.n * d.c * d.s))
    for (i64 c = 0; c < d.c; ++c) {
      const double mu = channel_sum(x, d, c, [](double v) { return v; }) / static_cast<double>(m);
      mean[c] = mu;
      var[c] = channel_sum(x, d, c, [mu](double v) { return (v - mu) * (v - mu); }) /
               static_cast<double>(m);
    }
  }
  for (i64 c = 0; c < d.c; ++c) invstd[c] = 1.0 / std::sqrt(var[c] + p.eps);
  if (running_mean != nullptr) {
    const double unbiased = static_cast<double>(m) / static_cast<double>(m - 1);
    for (i64 c = 0; c < d.c; ++c) {
      running_mean[c] = static_cast<T>((1.0 - p.momentum) * static_cast<double>(running_mean[c]) +
                                       p.momentum * mean[c]);
      running_var[c] = static_cast<T>((1.0 - p.momentum) * static_cast<double>(running_var[c]) +
                                      p.momentum * var[c] * unbiased);
    }
  }
}

template <typename T>
void forward(const Tensor& xt, const Tensor& weight, const Tensor& bias, const Tensor& rm,
             const Tensor& rv, const Tensor& yt, const Tensor& save_mean, const Tensor& save_invstd,
             const BatchNormParams& p) {
  const Dims d = dims_of(xt);
  const T* x = data_of<T>(xt);
  T* y = data_of<T>(yt);
  std::vector<double> mean(d.c), invstd(d.c);
  statistics(x, d, p, data_of<T>(rm), data_of<T>(rv), mean, invstd);
  // y = x scale + shift per channel.
  std::vector<T> scale(d.c), shift(d.c);
  const T* w = data_of<T>(weight);
  const T* b = data_of<T>(bias);
  T* sm = data_of<T>(save_mean);
  T* si = data_of<T>(save_invstd);
  for (i64 c = 0; c < d.c; ++c) {
    const double k = invstd[c] * (w != nullptr ? static_cast<double>(w[c]) : 1.0);
    scale[c] = static_cast<T>(k);
    shift[c] = static_cast<T>((b != nullptr ? static_cast<double>(b[c]) : 0.0) - mean[c] * k);
    sm[c] = static_cast<T>(mean[c]);
    si[c] = static_cast<T>(invstd[c]);
  }
  if (d.s == 1) {
    for (i64 n = 0; n < d.n; ++n) {
#pragma omp simd
      for (i64 c = 0; c < d.c; ++c) y[n * d.c + c] = x[n * d.c + c] * scale[c] + shift[c];
    }
    return;
  }
#pragma omp parallel for schedule(static) if (parallel_for(d.n * d.c * d.s))
  for (i64 row = 0; row < d.n * d.c; ++row) {
    const T k = scale[row % d.c], s = shift[row % d.c];
    const T* in = x + row * d.s;
    T* out = y + row * d.s;
#pragma omp simd
    for (i64 j = 0; j < d.s; ++j) out[j] = in[j] * k + s;
  }
}

template <typename T>
void backward(const Tensor& xt, const Tensor& weight, const Tensor& dyt, const Tensor& save_mean,
              const Tensor& save_invstd, bool training, const Tensor& dxt, const Tensor& dwt,
              const Tensor& dbt) {
  const Dims d = dims_of(xt);
  const double m = static_cast<double>(d.count());
  const T* x = data_of<T>(xt);
  const T* dy = data_of<T>(dyt);
  const T* w = data_of<T>(weight);
  const T* sm = data_of<T>(save_mean);
  const T* si = data_of<T>(save_invstd);
  std::vector<double> sum_dy(d.c, 0.0), sum_dy_xmu(d.c, 0.0);
  if (d.s == 1) {
    for (i64 n = 0; n < d.n; ++n) {
#pragma omp simd
      for (i64 c = 0; c < d.c; ++c) {
        const double g = static_cast<double>(dy[n * d.c + c]);
        sum_dy[c] += g;
        sum_dy_xmu[c] += g * (static_cast<double>(x[n * d.c + c]) - static_cast<double>(sm[c]));
      }
    }
  } else {
#pragma omp parallel for schedule(static) if (parallel_for(d.n * d.c * d.s))
    for (i64 c = 0; c < d.c; ++c) {
      channel_grad_sums(x, dy, d, c, static_cast<double>(sm[c]), sum_dy[c], sum_dy_xmu[c]);
    }
  }
  if (T* db = data_of<T>(dbt)) {
    for (i64 c = 0; c < d.c; ++c) db[c] = static_cast<T>(sum_dy[c]);
  }
  if (T* dw = data_of<T>(dwt)) {
    for (i64 c = 0; c < d.c; ++c)
      dw[c] = static_cast<T>(sum_dy_xmu[c] * static_cast<double>(si[c]));
  }
  T* dx = data_of<T>(dxt);
  if (dx == nullptr) return;
  // dx = k dy + a x + b per channel: k = weight invstd; in training a = -k invstd^2
  // sum_dy_xmu / M and b = -k sum_dy / M - a mean.
  std::vector<T> k(d.c), a(d.c), b(d.c);
  for (i64 c = 0; c < d.c; ++c) {
    const double invstd = static_cast<double>(si[c]);
    const double kc = invstd * (w != nullptr ? static_cast<double>(w[c]) : 1.0);
    const double ac = training ? -kc * invstd * invstd * sum_dy_xmu[c] / m : 0.0;
    const double bc = training ? -kc * sum_dy[c] / m - ac * static_cast<double>(sm[c]) : 0.0;
    k[c] = static_cast<T>(kc);
    a[c] = static_cast<T>(ac);
    b[c] = static_cast<T>(bc);
  }
  if (d.s == 1) {
    for (i64 n = 0; n < d.n; ++n) {
      const i64 at = n * d.c;
#pragma omp simd
      for (i64 c = 0; c < d.c; ++c) dx[at + c] = k[c] * dy[at + c] + a[c] * x[at + c] + b[c];
    }
    return;
  }
#pragma omp parallel for schedule(static) if (parallel_for(d.n * d.c * d.s))
  for (i64 row = 0; row < d.n * d.c; ++row) {
    const i64 c = row % d.c;
    const T kc = k[c], ac = a[c], bc = b[c];
    const i64 at = row * d.s;
#pragma omp simd
    for (i64 j = 0; j < d.s; ++j) dx[at + j] = kc * dy[at + j] + ac * x[at + j] + bc;
  }
}

}  // namespace

void CpuBackend::batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                            const Tensor& running_mean, const Tensor& running_var, const Tensor& y,
                            const Tensor& save_mean, const Tensor& save_invstd,
                            const BatchNormParams& p) {
  launch_with(
      x.device().index(),
      [p](const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& rm,
          const Tensor& rv, const Tensor& y, const Tensor& sm, const Tensor& si) {
        dispatch_floating(x.dtype(), [&](auto tag) {
          forward<typename decltype(tag)::type>(x, weight, bias, rm, rv, y, sm, si, p);
        });
      },
      x, weight, bias, running_mean, running_var, y, save_mean, save_invstd);
}

void CpuBackend::batch_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& grad_y,
                                     const Tensor& save_mean, const Tensor& save_invstd,
                                     bool training, const Tensor& grad_x, const Tensor& grad_weight,
                                     const Tensor& grad_bias) {
  launch_with(
      x.device().index(),
      [training](const Tensor& x, const Tensor& weight, const Tensor& dy, const Tensor& sm,
                 const Tensor& si, const Tensor& dx, const Tensor& dw, const Tensor& db) {
        dispatch_floating(x.dtype(), [&](auto tag) {
          backward<typename decltype(tag)::type>(x, weight, dy, sm, si, training, dx, dw, db);
        });
      },
      x, weight, grad_y, save_mean, save_invstd, grad_x, grad_weight, grad_bias);
}

}  // namespace tessera::detail::TESSERA_CPU_ISA

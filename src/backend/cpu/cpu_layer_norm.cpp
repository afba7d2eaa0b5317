// CPU layer normalization (Backend::layer_norm and layer_norm_backward): x seen as [R, D],
// rows split across the OpenMP pool, each row's sums in double. The parameters' gradients
// are sums over rows: accumulated across D, row after row, so they vectorize.
#include <omp.h>

#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kernel_data.h"
#include "backend/cpu/strided_loop.h"
#include "core/dispatch.h"

namespace tessera::detail::TESSERA_CPU_ISA {  // built once per level: cpu_backend.h
namespace {

using i64 = std::int64_t;

bool split_rows(i64 numel) { return numel >= kParallelGrain && !omp_in_parallel(); }

template <typename T>
void forward(const Tensor& xt, const Tensor& weight, const Tensor& bias, double eps,
             const Tensor& yt, const Tensor& save_mean, const Tensor& save_invstd) {
  const i64 rows = save_mean.numel();
  const i64 d = xt.numel() / rows;  // R D > 0 (backend.h)
  const T* x = data_of<T>(xt);
  const T* w = data_of<T>(weight);
  const T* b = data_of<T>(bias);
  T* y = data_of<T>(yt);
  T* sm = data_of<T>(save_mean);
  T* si = data_of<T>(save_invstd);
#pragma omp parallel for schedule(static) if (split_rows(rows * d))
  for (i64 r = 0; r < rows; ++r) {
    const T* in = x + r * d;
    T* out = y + r * d;
    double sum = 0;
#pragma omp simd reduction(+ : sum)
    for (i64 j = 0; j < d; ++j) sum += static_cast<double>(in[j]);
    const double mean = sum / static_cast<double>(d);
    double squares = 0;
#pragma omp simd reduction(+ : squares)
    for (i64 j = 0; j < d; ++j) {
      const double v = static_cast<double>(in[j]) - mean;
      squares += v * v;
    }
    const double invstd = 1.0 / std::sqrt(squares / static_cast<double>(d) + eps);
    sm[r] = static_cast<T>(mean);
    si[r] = static_cast<T>(invstd);
    const T m = static_cast<T>(mean), k = static_cast<T>(invstd);
#pragma omp simd
    for (i64 j = 0; j < d; ++j) {
      T v = (in[j] - m) * k;
      if (w != nullptr) v *= w[j];
      if (b != nullptr) v += b[j];
      out[j] = v;
    }
  }
}

template <typename T>
void backward(const Tensor& xt, const Tensor& weight, const Tensor& dyt, const Tensor& save_mean,
              const Tensor& save_invstd, const Tensor& dxt, const Tensor& dwt, const Tensor& dbt) {
  const i64 rows = save_mean.numel();
  const i64 d = xt.numel() / rows;
  const T* x = data_of<T>(xt);
  const T* w = data_of<T>(weight);
  const T* dy = data_of<T>(dyt);
  const T* sm = data_of<T>(save_mean);
  const T* si = data_of<T>(save_invstd);
  if (T* dx = data_of<T>(dxt)) {
#pragma omp parallel for schedule(static) if (split_rows(rows * d))
    for (i64 r = 0; r < rows; ++r) {
      const i64 at = r * d;
      const double mean = static_cast<double>(sm[r]), invstd = static_cast<double>(si[r]);
      double sum_h = 0, sum_h_xhat = 0;  // h = grad_y weight
#pragma omp simd reduction(+ : sum_h, sum_h_xhat)
      for (i64 j = 0; j < d; ++j) {
        const double h =
            static_cast<double>(dy[at + j]) * (w != nullptr ? static_cast<double>(w[j]) : 1.0);
        sum_h += h;
        sum_h_xhat += h * (static_cast<double>(x[at + j]) - mean) * invstd;
      }
      const T k = static_cast<T>(invstd), mh = static_cast<T>(sum_h / static_cast<double>(d));
      const T mhx = static_cast<T>(sum_h_xhat / static_cast<double>(d));
      const T m = static_cast<T>(mean);
#pragma omp simd
      for (i64 j = 0; j < d; ++j) {
        const T h = w != nullptr ? dy[at + j] * w[j] : dy[at + j];
        const T xhat = (x[at + j] - m) * k;
        dx[at + j] = k * (h - mh - xhat * mhx);
      }
    }
  }
  T* dw = data_of<T>(dwt);
  T* db = data_of<T>(dbt);
  if (dw == nullptr && db == nullptr) return;
  std::vector<double> sum_w(static_cast<std::size_t>(d), 0.0),
      sum_b(static_cast<std::size_t>(d), 0.0);
  for (i64 r = 0; r < rows; ++r) {
    const i64 at = r * d;
    const double mean = static_cast<double>(sm[r]), invstd = static_cast<double>(si[r]);
#pragma omp simd
    for (i64 j = 0; j < d; ++j) {
      const double g = static_cast<double>(dy[at + j]);
      sum_b[j] += g;
      sum_w[j] += g * (static_cast<double>(x[at + j]) - mean) * invstd;
    }
  }
  for (i64 j = 0; j < d; ++j) {
    if (dw != nullptr) dw[j] = static_cast<T>(sum_w[j]);
    if (db != nullptr) db[j] = static_cast<T>(sum_b[j]);
  }
}

}  // namespace

void CpuBackend::layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                            const Tensor& y, const Tensor& save_mean, const Tensor& save_invstd) {
  launch_with(
      x.device().index(),
      [eps](const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y,
            const Tensor& sm, const Tensor& si) {
        dispatch_floating(x.dtype(), [&](auto tag) {
          forward<typename decltype(tag)::type>(x, weight, bias, eps, y, sm, si);
        });
      },
      x, weight, bias, y, save_mean, save_invstd);
}

void CpuBackend::layer_norm_backward(const Tensor& x, const Tensor& weight, const Tensor& grad_y,
                                     const Tensor& save_mean, const Tensor& save_invstd,
                                     const Tensor& grad_x, const Tensor& grad_weight,
                                     const Tensor& grad_bias) {
  launch_with(
      x.device().index(),
      [](const Tensor& x, const Tensor& weight, const Tensor& dy, const Tensor& sm,
         const Tensor& si, const Tensor& dx, const Tensor& dw, const Tensor& db) {
        dispatch_floating(x.dtype(), [&](auto tag) {
          backward<typename decltype(tag)::type>(x, weight, dy, sm, si, dx, dw, db);
        });
      },
      x, weight, grad_y, save_mean, save_invstd, grad_x, grad_weight, grad_bias);
}

}  // namespace tessera::detail::TESSERA_CPU_ISA

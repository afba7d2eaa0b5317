#pragma once
// The one backward pass of the CPU convolutions, into which the three algorithms (im2col +
// GEMM, flat planes, images in lanes) plug their kernels. See Note [Convolution backward
// driver].
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/conv_geometry.h"
#include "backend/cpu/conv/conv_threads.h"

// Note [Convolution backward driver]
// The algorithms differ in their unit of work (one image for im2col, a group of images for
// flat planes, kLanes images in lanes), in how they lay a unit out and in the kernels they
// run on it. The rest is the same for all three and lives here, once:
// - the units split across the OpenMP pool (schedule(static), when splits_images says so
//   and there are two units or more), or run on the calling thread;
// - each thread's scratch buffers (sizes from the algorithm) and its partial weight and bias
//   gradients, and the flipped weights wT when the input gradient is wanted and the
//   algorithm computes it as a convolution by them (Note [Direct convolution]);
// - per unit: the bias gradient (the sum of each output-gradient plane, in image order, by
//   the algorithm's sum), then the algorithm's start, weight_grad and input_grad, each of the
//   last two only when its gradient is wanted;
// - the partials summed in thread order into dw and db (deterministic for a given thread
//   count), which writes zeros when there were no images.
// An algorithm A is a class with
//   static constexpr std::size_t kBuffers;           its scratch buffers per thread
//   static constexpr bool kFlipsWeights;             whether input_grad reads unit.flipped
//   static T bias_sum(const T* plane, i64 n);        the sum of one output-gradient plane
//   i64 images_per_unit() const;
//   std::array<i64, kBuffers> buffer_sizes() const;  in elements, per thread
//   void start(const BackwardUnit&) const;           lays out the unit (may do nothing)
//   void weight_grad(const BackwardUnit&) const;     adds its weight gradient to unit.dw
//   void input_grad(const BackwardUnit&) const;      writes dx of the unit's images
// called from several threads at once (hence const), and built from the BackwardArgs.

namespace tessera::detail::TESSERA_CPU_ISA {  // kernels only: cpu_backend.h

// One convolution's backward pass: from gy [N, O, OH, OW], dx [N, C, H, W], dw [O, C, kH, kW]
// and db [O], each overwritten and skipped when null.
template <typename T>
struct BackwardArgs {
  const ConvGeometry& g;
  const T *x, *w, *gy;
  T *dx, *dw, *db;
};

// One unit of work as a thread hands it to the algorithm.
template <typename T, std::size_t N>
struct BackwardUnit {
  std::int64_t n0, count;    // images [n0, n0 + count)
  T* dw;                     // this thread's partial weight gradient [O, C, kH, kW], added to
  const T* flipped;          // wT [C][O][kH][kW], when kFlipsWeights and dx is wanted
  std::array<T*, N> buffer;  // this thread's scratch
};

// wT [C][O][kH][kW] = w [O][C][kH][kW] transposed and flipped: the input gradient is the
// convolution of the output gradient by wT (Note [Direct convolution]).
template <typename T>
void flip_weights(const T* w, std::int64_t o, std::int64_t c, std::int64_t kk, T* wt) {
  for (std::int64_t a = 0; a < o; ++a)
    for (std::int64_t b = 0; b < c; ++b)
      for (std::int64_t t = 0; t < kk; ++t)
        wt[(b * o + a) * kk + (kk - 1 - t)] = w[(a * c + b) * kk + t];
}

// dw [size] and db [o] (each skipped when null) = the per-thread partial sums laid out as
// [threads][size + o], added in thread order (deterministic for a given thread count).
template <typename T>
void sum_partials(const T* partial, int threads, std::int64_t size, std::int64_t o, T* dw, T* db) {
  for (int t = 0; t < threads; ++t) {
    const T* part = partial + t * (size + o);
    if (dw != nullptr) {
      for (std::int64_t k = 0; k < size; ++k) dw[k] = (t == 0 ? T{0} : dw[k]) + part[k];
    }
    if (db != nullptr) {
      for (std::int64_t k = 0; k < o; ++k) db[k] = (t == 0 ? T{0} : db[k]) + part[size + k];
    }
  }
}

// What the backward pass keeps across its threads: the thread count, each thread's partial
// weight and bias gradients, and (when asked) the flipped weights. finish() writes the
// ordered sums.
template <typename T>
class BackwardSums {
 public:
  // o x c x kk weights w; parallel says whether units are split across the pool.
  BackwardSums(const T* w, std::int64_t o, std::int64_t c, std::int64_t kk, bool flip,
               bool parallel)
      : threads_(parallel ? omp_get_max_threads() : 1), o_(o), wsize_(o * c * kk) {
    partial_.assign(static_cast<std::size_t>(threads_ * (wsize_ + o_)), T{0});
    if (flip) {
      flipped_.resize(static_cast<std::size_t>(wsize_));
      flip_weights(w, o, c, kk, flipped_.data());
    }
  }
  int threads() const { return threads_; }
  const T* flipped() const { return flipped_.data(); }
  T* weight_grad(int t) { return partial_.data() + t * (wsize_ + o_); }
  T* bias_grad(int t) { return weight_grad(t) + wsize_; }
  void finish(T* dw, T* db) const { sum_partials(partial_.data(), threads_, wsize_, o_, dw, db); }

 private:
  int threads_;
  std::int64_t o_, wsize_;
  std::vector<T> partial_, flipped_;
};

// The backward pass of args, by algorithm a (Note [Convolution backward driver]).
template <typename T, typename Algorithm>
void run_conv_backward(const BackwardArgs<T>& args, const Algorithm& a) {
  using i64 = std::int64_t;
  constexpr std::size_t N = Algorithm::kBuffers;
  const ConvGeometry& g = args.g;
  const i64 per_unit = a.images_per_unit();
  const i64 units = (g.n + per_unit - 1) / per_unit;
  const i64 p = g.positions();
  const bool parallel = splits_images(g) && units > 1;
  BackwardSums<T> sums(args.w, g.o, g.c, g.kh * g.kw,
                       Algorithm::kFlipsWeights && args.dx != nullptr, parallel);
  const int threads = sums.threads();
  ThreadBuffers<T, N> buffers(threads, a.buffer_sizes());
#pragma omp parallel num_threads(threads) if (parallel)
  {
    const int t = omp_get_thread_num();
    T* db = sums.bias_grad(t);
    BackwardUnit<T, N> unit{0, 0, sums.weight_grad(t), sums.flipped(), buffers.all(t)};
#pragma omp for schedule(static)
    for (i64 u = 0; u < units; ++u) {
      unit.n0 = u * per_unit;
      unit.count = std::min(per_unit, g.n - unit.n0);
      if (args.db != nullptr) {
        const T* gn = args.gy + unit.n0 * g.o * p;
        for (i64 k = 0; k < unit.count * g.o; ++k) {
          db[k % g.o] += Algorithm::bias_sum(gn + k * p, p);  // image-major, as every path did
        }
      }
      a.start(unit);
      if (args.dw != nullptr) a.weight_grad(unit);
      if (args.dx != nullptr) a.input_grad(unit);
    }
  }
  sums.finish(args.dw, args.db);
}

}  // namespace tessera::detail::TESSERA_CPU_ISA

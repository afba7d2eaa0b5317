#pragma once
// How every CPU convolution path (im2col, flat planes, images in lanes) uses the OpenMP pool:
// whether it splits the batch's images across threads, and each thread's scratch buffers.
#include <omp.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "backend/conv_geometry.h"

namespace tessera::detail::TESSERA_CPU_ISA {  // kernels only: cpu_backend.h

// Whether a convolution splits its images across the OpenMP pool: enough work, and not
// nested in another parallel region. (A path that takes images in groups also needs two.)
inline bool splits_images(const ConvGeometry& g) {
  return g.n > 1 && !omp_in_parallel() && g.n * g.o * g.ck() * g.positions() >= 32768;
}

// Whether a thread's buffers start as zeros, or as whatever memory held (for buffers every
// use writes in full before reading: im2col's columns, a product's sums). Zeroing megabytes
// per call is not free.
enum class BufferStart { kZeros, kUnset };

// Each thread's buffers, allocated before the parallel region that uses them: an allocation
// that failed inside one would end the process instead of throwing.
template <typename T, std::size_t N>
class ThreadBuffers {
 public:
  ThreadBuffers(int threads, const std::array<std::int64_t, N>& sizes,
                BufferStart start = BufferStart::kZeros)
      : sizes_(sizes) {
    for (std::int64_t size : sizes_) per_thread_ += size;
    const auto total = static_cast<std::size_t>(threads * per_thread_);
    data_.reset(start == BufferStart::kZeros ? new T[total]() : new T[total]);
  }
  // Buffer k of thread t.
  T* get(int t, std::size_t k) {
    std::int64_t offset = t * per_thread_;
    for (std::size_t j = 0; j < k; ++j) offset += sizes_[j];
    return data_.get() + offset;
  }
  // Every buffer of thread t.
  std::array<T*, N> all(int t) {
    std::array<T*, N> out{};
    for (std::size_t k = 0; k < N; ++k) out[k] = get(t, k);
    return out;
  }

 private:
  std::array<std::int64_t, N> sizes_;
  std::int64_t per_thread_ = 0;
  std::unique_ptr<T[]> data_;
};

}  // namespace tessera::detail::TESSERA_CPU_ISA

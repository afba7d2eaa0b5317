// Square float32 matmul: tessera::matmul against the BLAS it calls, called directly.
// tessera allocates its output per call (as users do); the BLAS rows reuse buffers, so
// the gap at small n is tessera's own overhead. bfloat16: tessera's matmul (oneDNN on the
// bfloat16 operands where the CPU multiplies them, Note [CPU bfloat16 GEMM]) against the
// float32 path it replaces (widen both operands, float32 GEMM, round the product).
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <dnnl.h>

#include <cstdint>
#include <random>
#include <vector>

#include "common.h"
#include "tessera/tessera.h"

namespace tessera::bench {
namespace {

std::vector<float> random_matrix(std::int64_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(0.0F, 1.0F);
  std::vector<float> m(static_cast<std::size_t>(n * n));
  for (float& x : m) x = dist(gen);
  return m;
}

void bm_matmul_tessera(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  manual_seed(0);
  const Tensor a = rand({n, n});
  const Tensor b = rand({n, n});
  benchmark::DoNotOptimize(matmul(a, b));  // warm-up: first-call JIT and allocator caches
  for (auto _ : state) {
    Tensor c = matmul(a, b);
    synchronize(c.device());  // a no-op on the plain CPU; keeps the timing honest elsewhere
    benchmark::DoNotOptimize(c);
  }
  set_matmul_counters(state, n);
}

void bm_matmul_dnnl_sgemm(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  const std::vector<float> a = random_matrix(n, 1);
  const std::vector<float> b = random_matrix(n, 2);
  std::vector<float> c(a.size());
  // Warm-up: oneDNN JIT-compiles a kernel for each new shape on its first call.
  dnnl_sgemm('N', 'N', n, n, n, 1.0F, a.data(), n, b.data(), n, 0.0F, c.data(), n);
  for (auto _ : state) {
    dnnl_status_t status =
        dnnl_sgemm('N', 'N', n, n, n, 1.0F, a.data(), n, b.data(), n, 0.0F, c.data(), n);
    if (status != dnnl_success) state.SkipWithError("dnnl_sgemm failed");
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  set_matmul_counters(state, n);
}

void bm_matmul_cblas_sgemm(benchmark::State& state) {
  const auto n = static_cast<blasint>(state.range(0));
  const std::vector<float> a = random_matrix(n, 1);
  const std::vector<float> b = random_matrix(n, 2);
  std::vector<float> c(a.size());
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0F, a.data(), n, b.data(), n,
              0.0F, c.data(), n);  // warm-up: OpenBLAS allocates its buffers on first use
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0F, a.data(), n, b.data(), n,
                0.0F, c.data(), n);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  set_matmul_counters(state, n);
}

void bm_matmul_bf16(benchmark::State& state, bool widened) {
  const std::int64_t n = state.range(0);
  manual_seed(0);
  const Tensor a = rand({n, n}).to(kBFloat16);
  const Tensor b = rand({n, n}).to(kBFloat16);
  const auto product = [&] {
    return widened ? matmul(a.to(kFloat32), b.to(kFloat32)).to(kBFloat16) : matmul(a, b);
  };
  benchmark::DoNotOptimize(product());  // warm-up: oneDNN makes a primitive per shape
  for (auto _ : state) {
    Tensor c = product();
    synchronize(c.device());
    benchmark::DoNotOptimize(c);
  }
  set_matmul_counters(state, n);
}

BENCHMARK(bm_matmul_tessera)->Name("matmul_f32/tessera")->Apply(matmul_sizes);
BENCHMARK_CAPTURE(bm_matmul_bf16, native, false)->Name("matmul_bf16/tessera")->Apply(matmul_sizes);
BENCHMARK_CAPTURE(bm_matmul_bf16, widened, true)
    ->Name("matmul_bf16/widened_f32")
    ->Apply(matmul_sizes);
BENCHMARK(bm_matmul_dnnl_sgemm)->Name("matmul_f32/dnnl_sgemm")->Apply(matmul_sizes);
BENCHMARK(bm_matmul_cblas_sgemm)->Name("matmul_f32/cblas_sgemm")->Apply(matmul_sizes);

}  // namespace
}  // namespace tessera::bench

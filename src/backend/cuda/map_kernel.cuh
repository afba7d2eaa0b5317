#pragma once
// The one elementwise kernel pair every launcher uses: out[i] = fn(x0[i], x1[i], x2[i]) over
// up to three inputs (fn() of the linear index for none: fill, arange, random).
//  - map_contiguous: out contiguous and each input contiguous or uniform (one value for
//    every element); 16-byte vector accesses when every pointer is aligned, 64-bit indices.
//  - map_strided: any strides (broadcast dims have stride 0), 32-bit offsets from the
//    linear index, four elements per thread in flight (Note [32-bit indexing]).
// Both are grid-stride loops over a grid that fills the GPU once.
#include <array>

#include "backend/cuda/kernel_utils.cuh"

namespace tessera::detail::cuda {
namespace {  // each .cu file gets its own instantiations

// An input: a tensor (ptr), or an immediate scalar (ptr == nullptr, `value`). `uniform`:
// every element reads the same value (a scalar, or a tensor whose strides are all 0).
template <typename T>
struct Input {
  const T* ptr = nullptr;
  T value{};
  bool uniform = true;

  __device__ __forceinline__ T uniform_value() const {
    return uniform && ptr != nullptr ? *ptr : value;
  }
};

// In0 is the first input's type (bool for where's condition), In the others'.
template <typename Out, typename In0, typename In, int N, typename Fn>
struct MapParams {
  Out* out;
  Input<In0> x0;
  Input<In> x1, x2;
  Fn fn;
};

template <typename Out, int N, typename Fn, typename In0, typename In>
__device__ __forceinline__ Out apply(const Fn& fn, std::int64_t i, In0 a, In b, In c) {
  if constexpr (N == 0) {
    return static_cast<Out>(fn(i));
  } else if constexpr (N == 1) {
    return static_cast<Out>(fn(a));
  } else if constexpr (N == 2) {
    return static_cast<Out>(fn(a, b));
  } else {
    return static_cast<Out>(fn(a, b, c));
  }
}

template <int V, typename T>
__device__ __forceinline__ void load_vec(const Input<T>& in, T u, std::int64_t v, T (&x)[V]) {
  if (in.uniform) {
#pragma unroll
    for (int j = 0; j < V; ++j) x[j] = u;
  } else {
    const Vec<T, V> loaded = reinterpret_cast<const Vec<T, V>*>(in.ptr)[v];
#pragma unroll
    for (int j = 0; j < V; ++j) x[j] = loaded.v[j];
  }
}

template <typename Out, typename In0, typename In, int N, typename Fn>
__global__ void __launch_bounds__(kThreads)
    map_contiguous(MapParams<Out, In0, In, N, Fn> p, std::int64_t n, bool vectorize) {
  constexpr int V = kVecWidth<Out, In0, In>;
  const In0 u0 = p.x0.uniform_value();
  const In u1 = p.x1.uniform_value(), u2 = p.x2.uniform_value();
  const std::int64_t stride = std::int64_t{gridDim.x} * blockDim.x;
  std::int64_t i = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (vectorize) {
    const std::int64_t vecs = n / V;
    for (std::int64_t v = i; v < vecs; v += stride) {
      In0 a[V]{};
      In b[V]{}, c[V]{};
      if constexpr (N >= 1) load_vec<V>(p.x0, u0, v, a);
      if constexpr (N >= 2) load_vec<V>(p.x1, u1, v, b);
      if constexpr (N >= 3) load_vec<V>(p.x2, u2, v, c);
      Vec<Out, V> o;
#pragma unroll
      for (int j = 0; j < V; ++j) o.v[j] = apply<Out, N>(p.fn, v * V + j, a[j], b[j], c[j]);
      reinterpret_cast<Vec<Out, V>*>(p.out)[v] = o;
    }
    i += vecs * V;  // the tail
  }
  for (; i < n; i += stride) {
    const In0 a = N >= 1 && !p.x0.uniform ? p.x0.ptr[i] : u0;
    const In b = N >= 2 && !p.x1.uniform ? p.x1.ptr[i] : u1;
    const In c = N >= 3 && !p.x2.uniform ? p.x2.ptr[i] : u2;
    p.out[i] = apply<Out, N>(p.fn, i, a, b, c);
  }
}

template <typename T>
__device__ __forceinline__ T load_at(const Input<T>& in, T u, std::int32_t off) {
  return in.uniform ? u : in.ptr[off];
}

template <typename Out, typename In0, typename In, int N, typename Fn>
__global__ void __launch_bounds__(kThreads)
    map_strided(MapParams<Out, In0, In, N, Fn> p, Indexer<N + 1> ix, std::uint32_t n) {
  constexpr int kUnroll = 4;
  const In0 u0 = p.x0.uniform_value();
  const In u1 = p.x1.uniform_value(), u2 = p.x2.uniform_value();
  const std::uint32_t step = gridDim.x * blockDim.x * kUnroll;  // < 2^31: the grid is capped
  for (std::uint32_t base = blockIdx.x * blockDim.x * kUnroll; base < n; base += step) {
    std::int32_t out_off[kUnroll];
    In0 a[kUnroll]{};
    In b[kUnroll]{}, c[kUnroll]{};
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {  // all loads first, so they overlap
      const std::uint32_t i = base + u * blockDim.x + threadIdx.x;
      if (i >= n) break;
      std::int32_t off[N + 1];
      ix.offsets(i, off);
      out_off[u] = off[0];
      if constexpr (N >= 1) a[u] = load_at(p.x0, u0, off[1]);
      if constexpr (N >= 2) b[u] = load_at(p.x1, u1, off[2]);
      if constexpr (N >= 3) c[u] = load_at(p.x2, u2, off[3]);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const std::uint32_t i = base + u * blockDim.x + threadIdx.x;
      if (i >= n) break;
      p.out[out_off[u]] = apply<Out, N>(p.fn, i, a[u], b[u], c[u]);
    }
  }
}

// A launcher's operand: a tensor, or an immediate scalar when `arg` is nullptr.
template <typename T>
struct Operand {
  const KernelArg* arg = nullptr;
  T value{};
};

template <typename T>
Input<T> make_input(const Operand<T>& op) {
  Input<T> in;
  in.ptr = op.arg ? static_cast<const T*>(op.arg->data) : nullptr;
  in.value = op.value;
  in.uniform = true;
  if (op.arg && op.arg->numel > 1) {
    for (int d = 0; d < op.arg->ndim; ++d) {
      if (op.arg->sizes[d] > 1 && op.arg->strides[d] != 0) in.uniform = false;
    }
  }
  return in;
}

// A generator of the linear index (arange, random) declares `using Indexed = void;`.
template <typename Fn>
constexpr bool kIndexed = requires { typename Fn::Indexed; };

// Queues out = fn(inputs...) on `stream`. An Indexed fn (a function of the linear index:
// arange, random) needs a contiguous out, which is all the front end ever gives them.
template <typename Out, typename In0, typename In, int N, typename Fn>
void launch_map(cudaStream_t stream, const char* what, Fn fn, const KernelArg& out,
                Operand<In0> op0 = {}, Operand<In> op1 = {}, Operand<In> op2 = {}) {
  if (out.numel == 0) return;
  MapParams<Out, In0, In, N, Fn> p{static_cast<Out*>(out.data), make_input(op0), make_input(op1),
                                   make_input(op2), fn};
  const Input<In0>* x0 = &p.x0;
  const Input<In>* xs[2] = {&p.x1, &p.x2};
  const KernelArg* args[3] = {op0.arg, op1.arg, op2.arg};
  bool contiguous = out.contiguous,
       aligned = aligned_to(out.data, sizeof(Out) * kVecWidth<Out, In0, In>);
  for (int k = 0; k < N; ++k) {
    TESSERA_CUDA_EXPECT(!args[k] || args[k]->ndim == out.ndim, "an input is not broadcast to out");
    const bool uniform = k == 0 ? x0->uniform : xs[k - 1]->uniform;
    if (uniform) continue;
    contiguous = contiguous && args[k]->contiguous;
    aligned = aligned && aligned_to(args[k]->data,
                                    (k == 0 ? sizeof(In0) : sizeof(In)) * kVecWidth<Out, In0, In>);
  }
  if constexpr (kIndexed<Fn>) {
    TESSERA_CUDA_EXPECT(contiguous, "an indexed generator got a non-contiguous output");
  }
  if (contiguous) {
    constexpr auto kernel = map_contiguous<Out, In0, In, N, Fn>;
    const std::int64_t threads = aligned ? out.numel / kVecWidth<Out, In0, In> + 1 : out.numel;
    kernel<<<grid_for<kernel>(threads), kThreads, 0, stream>>>(p, out.numel, aligned);
    TESSERA_CUDA_CHECK_LAUNCH(stream, what);
    return;
  }
  if constexpr (!kIndexed<Fn>) {
    const KernelArg* all[N + 1];
    std::int64_t item[N + 1];
    all[0] = &out;
    item[0] = sizeof(Out);
    for (int k = 0; k < N; ++k) {
      all[k + 1] = args[k];
      item[k + 1] = k == 0 ? sizeof(In0) : sizeof(In);
    }
    for_each_int32_piece(Layout<N + 1>(out, all, item), [&](const Layout<N + 1>& piece) {
      MapParams<Out, In0, In, N, Fn> q = p;
      q.out = reinterpret_cast<Out*>(piece.ptrs[0]);
      if constexpr (N >= 1) q.x0.ptr = reinterpret_cast<const In0*>(piece.ptrs[1]);
      if constexpr (N >= 2) q.x1.ptr = reinterpret_cast<const In*>(piece.ptrs[2]);
      if constexpr (N >= 3) q.x2.ptr = reinterpret_cast<const In*>(piece.ptrs[3]);
      const auto n = static_cast<std::uint32_t>(piece.numel());
      constexpr auto kernel = map_strided<Out, In0, In, N, Fn>;
      kernel<<<grid_for<kernel>((n + 3) / 4), kThreads, 0, stream>>>(q, piece.indexer(), n);
      TESSERA_CUDA_CHECK_LAUNCH(stream, what);
    });
  }
}

}  // namespace
}  // namespace tessera::detail::cuda

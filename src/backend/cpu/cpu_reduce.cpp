// CPU reductions: sum, mean, sum of squares, max/min and argmax/argmin over any dims of any
// strided input. See Note [Reduction loop].
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>
#include <type_traits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_reducers.h"
#include "backend/cpu/scratch_memory.h"
#include "backend/cpu/strided_loop.h"
#include "core/check.h"
#include "core/dispatch.h"
#include "core/half.h"
#include "core/tensor_impl.h"

// Note [Reduction loop]
// Every reduction is one strided loop over the input with three operands per element: the
// input, the accumulator slot (keepdim-shaped, contiguous, stride 0 along reduced dims) and
// the element's row-major index within the reduced dims (argmax needs it). Dims are sorted
// by input stride so the loop walks memory in order, then merged. The innermost row is a
// reduction row (slot stride 0: one accumulator, a tight loop) or a kept row (every element
// its own slot: vectorizes along the output, e.g. column sums). Threads split a kept dim
// when one is large enough (they write disjoint slots), else a reduced dim with per-thread
// accumulators combined in thread order, so results never depend on scheduling. argmax
// compares (value, index) pairs, so the walk order cannot change which index wins.

// Note [Half reductions]
// A bfloat16 or float16 input is reduced as it is (Backend::half_reduce): each element is
// converted to float32 where it is read, exactly as the copy to float32 converts it, and the
// float32 reduction runs on those values in the same walk, into a float32 output that the
// front end rounds once (Note [Half precision]). Contiguous runs (long rows, column panels,
// long kept rows) are converted in blocks on the stack (half_convert.h: F16C for float16,
// whose element-by-element conversion is about ten integer operations); short rows and
// strided walks convert element by element. The results are the float32 copy's, bit for
// bit, for a dense input; the copy (a float32 temporary twice the input's size, written and
// read again) was 60% of a bfloat16 sum's time, 2.5x PyTorch's.

namespace tessera::detail::TESSERA_CPU_ISA {  // built once per level: cpu_backend.h
namespace {

using i64 = std::int64_t;
using Layout = StridedLayout<3>;  // operands: input, slot, index; strides in elements
using reducers::ArgReducer;
using reducers::ExtremumReducer;
using reducers::SumReducer;

// Moves the three operands to the next position of `l`'s dims [0, dims) (an odometer over
// the dims outside the ones a loop walks itself).
template <typename T, typename Acc>
void next_row(const Layout& l, int dims, i64* index, const T*& p, Acc*& a, i64& x) {
  for (int d = dims - 1; d >= 0; --d) {
    p += l.strides[0][d];
    a += l.strides[1][d];
    x += l.strides[2][d];
    if (++index[d] < l.sizes[d]) return;
    p -= l.strides[0][d] * l.sizes[d];
    a -= l.strides[1][d] * l.sizes[d];
    x -= l.strides[2][d] * l.sizes[d];
    index[d] = 0;
  }
}

// Note [Column panels]
// A reduction over a middle dim ([64, 256, 64] summed over dim 1) has a contiguous kept row
// inside a reduced dim: walked row by row, every element loads and stores its accumulator
// slot (2.9x PyTorch's time for that sum, 1.8x the panels'). When the innermost dim is a contiguous
// kept row and the next one is reduced, the two are walked together a panel of kPanel columns at a
// time, the panel's accumulators in a local array (registers) across all the reduced rows.
// Each slot still takes its elements in the same order, so results are bit for bit the
// ones of the row-by-row walk. Only for rows shorter than kPanelRowsBelow: a longer row's
// slots stay in the L1 cache anyway, and its panels walk down the reduced rows a page
// apart (a [1024, 1024] column sum took 2.5x the row-by-row walk's time; at 64 columns the
// panels take half of it, and they break even near 128).
constexpr i64 kPanel = 32;
constexpr i64 kPanelRowsBelow = 128;

template <typename R, typename S>
void reduce_panels(const S* p, typename R::Acc* a, i64 x, i64 n, i64 xs, i64 m, i64 is2, i64 xs2) {
  using Acc = typename R::Acc;
  using T = typename R::Value;
  T block[kPanel];  // a half panel's row as float32 (Note [Half reductions])
  for (i64 j0 = 0; j0 < n; j0 += kPanel) {
    const i64 w = std::min(kPanel, n - j0);
    Acc local[kPanel];
    for (i64 j = 0; j < w; ++j) local[j] = a[j0 + j];
    if (w == kPanel) {
      for (i64 r = 0; r < m; ++r) {
        const T* row = reducers::read_as(p + r * is2 + j0, kPanel, block);
        const i64 xr = x + r * xs2 + j0 * xs;
        for (i64 j = 0; j < kPanel; ++j) R::add(local[j], row[j], xr + j * xs);
      }
    } else {
      for (i64 r = 0; r < m; ++r) {
        const T* row = reducers::read_as(p + r * is2 + j0, w, block);
        const i64 xr = x + r * xs2 + j0 * xs;
        for (i64 j = 0; j < w; ++j) R::add(local[j], row[j], xr + j * xs);
      }
    }
    for (i64 j = 0; j < w; ++j) a[j0 + j] = local[j];
  }
}

// Note [Short rows]
// A reduction row shorter than a vector ([65536, 10] summed over its last dim: a loss's per
// example sums, a softmax's classes) spent its time in one chain of dependent additions per
// row (each waits for the last: 5.2x PyTorch's time for that sum; a max 2.9x). Such rows are
// reduced kShortRowBlock at a time, one accumulator per row, so the chains run side by side.
// Each row still takes its elements in order from the identity and is then combined into its
// slot, as R::row does for a row this short: the same values, bit for bit.
constexpr i64 kShortRowBelow = 16;
constexpr i64 kShortRowBlock = 16;

template <typename R, typename T>
void reduce_short_rows(const T* p, typename R::Acc* a, i64 x, i64 n, i64 xs, i64 m, i64 is2,
                       i64 ss2, i64 xs2) {
  using Acc = typename R::Acc;
  for (i64 r0 = 0; r0 < m; r0 += kShortRowBlock) {
    const i64 w = std::min(kShortRowBlock, m - r0);
    Acc local[kShortRowBlock];
    for (i64 k = 0; k < w; ++k) local[k] = R::identity();
    for (i64 i = 0; i < n; ++i) {
      for (i64 k = 0; k < w; ++k)
        R::add(local[k], p[(r0 + k) * is2 + i], x + (r0 + k) * xs2 + i * xs);
    }
    for (i64 k = 0; k < w; ++k) a[(r0 + k) * ss2] = R::combine(a[(r0 + k) * ss2], local[k]);
  }
}

// Calls two_dims(p, a, x) at every position of `l`'s dims [0, outer), where a loop of its own
// walks the two innermost dims.
template <typename T, typename Acc, typename F>
void for_each_outer(const Layout& l, int outer, const T* in, Acc* acc, i64 index0, F&& two_dims) {
  i64 rows = 1;
  for (int d = 0; d < outer; ++d) rows *= l.sizes[d];
  i64 index[kMaxDims] = {};
  const T* p = in;
  Acc* a = acc;
  i64 x = index0;
  for (i64 r = 0; r < rows; ++r) {
    two_dims(p, a, x);
    next_row(l, outer, index, p, a, x);
  }
}

// Runs the loop of Note [Reduction loop] over `l` (strides in elements).
template <typename R, typename T>
void run_layout(const Layout& l, const T* in, typename R::Acc* acc, i64 index0) {
  if (l.ndim >= 2) {
    const int inner = l.ndim - 1, outer = l.ndim - 2;
    const i64 n = l.sizes[inner], m = l.sizes[outer];
    const i64 xs = l.strides[2][inner];
    const i64 is2 = l.strides[0][outer], ss2 = l.strides[1][outer], xs2 = l.strides[2][outer];
    if (l.strides[0][inner] == 1 && l.strides[1][inner] == 0 && n < kShortRowBelow && m >= 2) {
      // Note [Short rows]: the innermost reduction rows a block at a time along the next dim.
      for_each_outer(l, outer, in, acc, index0, [&](const T* p, typename R::Acc* a, i64 x) {
        reduce_short_rows<R>(p, a, x, n, xs, m, is2, ss2, xs2);
      });
      return;
    }
    if (l.strides[0][inner] == 1 && l.strides[1][inner] == 1 && ss2 == 0 && n < kPanelRowsBelow) {
      // Note [Column panels]: the two innermost dims at once, the rest as below.
      for_each_outer(l, outer, in, acc, index0, [&](const T* p, typename R::Acc* a, i64 x) {
        reduce_panels<R>(p, a, x, n, xs, m, is2, xs2);
      });
      return;
    }
  }
  const int inner = l.ndim - 1;
  const i64 n = l.sizes[inner];
  const i64 is = l.strides[0][inner], ss = l.strides[1][inner], xs = l.strides[2][inner];
  i64 rows = 1;
  for (int d = 0; d < inner; ++d) rows *= l.sizes[d];
  i64 index[kMaxDims] = {};
  const T* p = in;
  typename R::Acc* a = acc;
  i64 x = index0;
  for (i64 r = 0; r < rows; ++r) {
    if (ss == 0) {
      R::row(*a, p, n, is, x, xs);
    } else if (ss == 1 && is == 1) {  // contiguous kept row (column sums): vectorizes
      if constexpr (std::is_same_v<T, typename R::Value>) {
        for (i64 j = 0; j < n; ++j) R::add(a[j], p[j], x + j * xs);
      } else {  // a half row, a block at a time as float32 (Note [Half reductions])
        constexpr i64 kBlock = 512;
        typename R::Value block[kBlock];
        for (i64 j0 = 0; j0 < n; j0 += kBlock) {
          const i64 w = std::min(kBlock, n - j0);
          const auto* q = reducers::read_as(p + j0, w, block);
          for (i64 j = 0; j < w; ++j) R::add(a[j0 + j], q[j], x + (j0 + j) * xs);
        }
      }
    } else {
      for (i64 j = 0; j < n; ++j) R::add(a[j * ss], p[j * is], x + j * xs);
    }
    next_row(l, inner, index, p, a, x);
  }
}

// `l` restricted to [begin, end) along dim d, and the operand offsets that implies.
Layout narrow_layout(const Layout& l, int d, i64 begin, i64 end, std::array<i64, 3>& offsets) {
  Layout sub = l;
  sub.sizes[d] = end - begin;
  for (int k = 0; k < 3; ++k) offsets[k] = begin * l.strides[k][d];
  return sub;
}

template <typename R, typename T>
void run_parallel(const Layout& l, const T* in, typename R::Acc* acc, i64 slots, i64 numel) {
  using Acc = typename R::Acc;
  const int threads = omp_get_max_threads();
  if (numel < kParallelGrain || threads == 1 || omp_in_parallel()) {
    run_layout<R>(l, in, acc, 0);
    return;
  }
  int kept = -1, reduced = -1;
  for (int d = 0; d < l.ndim; ++d) {
    int& best = l.strides[1][d] != 0 ? kept : reduced;
    if (best < 0 || l.sizes[d] > l.sizes[best]) best = d;
  }
  if (kept >= 0 && l.sizes[kept] >= threads) {
    // Disjoint slots per thread: write straight into acc.
#pragma omp parallel
    {
      const i64 nt = omp_get_num_threads(), t = omp_get_thread_num(), size = l.sizes[kept];
      const i64 begin = size * t / nt, end = size * (t + 1) / nt;
      if (begin < end) {
        std::array<i64, 3> off;
        const Layout sub = narrow_layout(l, kept, begin, end, off);
        run_layout<R>(sub, in + off[0], acc + off[1], off[2]);
      }
    }
    return;
  }
  if (reduced < 0 || l.sizes[reduced] < 2) {
    run_layout<R>(l, in, acc, 0);
    return;
  }
  // One partial result per chunk of the reduced dim, allocated before the parallel region:
  // an allocation that failed inside it ended the process (std::terminate) instead of
  // throwing. unique_ptr rather than vector: vector<bool> has no data().
  const i64 size = l.sizes[reduced];
  const i64 chunks = std::min<i64>(threads, size);
  const auto partial = std::make_unique<Acc[]>(static_cast<std::size_t>(chunks * slots));
  std::fill(partial.get(), partial.get() + chunks * slots, R::identity());
#pragma omp parallel for schedule(static)
  for (i64 c = 0; c < chunks; ++c) {
    std::array<i64, 3> off;
    const Layout sub = narrow_layout(l, reduced, size * c / chunks, size * (c + 1) / chunks, off);
    run_layout<R>(sub, in + off[0], partial.get() + c * slots, off[2]);
  }
  for (i64 c = 0; c < chunks; ++c) {
    const Acc* part = partial.get() + c * slots;
    for (i64 k = 0; k < slots; ++k) acc[k] = R::combine(acc[k], part[k]);
  }
}

template <typename R, typename T>
void reduce_typed(const Tensor& in, std::uint32_t mask, const Tensor& out) {
  using Acc = typename R::Acc;
  using Out = typename R::Out;
  TESSERA_INTERNAL_ASSERT(out.dtype() == dtype_of<Out>, "reduce output dtype");
  const Shape& shape = in.shape();
  const int r = shape.size();
  const Strides& in_strides = impl_of(in).strides;
  Strides slot_strides, index_strides;
  slot_strides.resize(r);
  index_strides.resize(r);
  i64 slot = 1, index = 1;
  for (int d = r - 1; d >= 0; --d) {
    const bool reduced = (mask >> d) & 1u;
    slot_strides[d] = reduced ? 0 : slot;
    index_strides[d] = reduced ? index : 0;
    // Saturating: an empty input may have huge sizes beside its zero (then either no slot
    // or no element per slot is visited, so the saturated value is never walked).
    i64& product = reduced ? index : slot;
    if (__builtin_mul_overflow(product, shape[d], &product)) product = INT64_MAX;
  }
  if (in.numel() == 0 && index == INT64_MAX) index = 0;
  const i64 count = index, slots = out.numel();
  const T* data = reinterpret_cast<const T*>(impl_of(in).data());
  Out* o = reinterpret_cast<Out*>(impl_of(out).data());
  if (in.numel() == 0) {  // nothing to walk: every slot is the reduction of no element
    for (i64 k = 0; k < slots; ++k) o[k] = R::finish(R::identity(), count);
    return;
  }
  // Walk memory in order: dims by input stride, largest first (stable).
  std::array<int, kMaxDims> order;
  std::iota(order.begin(), order.begin() + r, 0);
  std::stable_sort(order.begin(), order.begin() + r,
                   [&](int a, int b) { return in_strides[a] > in_strides[b]; });
  Shape sorted_shape;
  Strides s_in, s_slot, s_index;
  for (int k = 0; k < r; ++k) {
    sorted_shape.push_back(shape[order[k]]);
    s_in.push_back(in_strides[order[k]]);
    s_slot.push_back(slot_strides[order[k]]);
    s_index.push_back(index_strides[order[k]]);
  }
  const Layout l = make_layout<3>(sorted_shape, {&s_in, &s_slot, &s_index}, {1, 1, 1});
  if constexpr (std::is_same_v<Acc, Out>) {
    std::fill(o, o + slots, R::identity());  // accumulate in the output itself
    run_parallel<R>(l, data, o, slots, in.numel());
    for (i64 k = 0; k < slots; ++k) o[k] = R::finish(o[k], count);
  } else {
    std::vector<Acc> acc(static_cast<std::size_t>(slots), R::identity());
    run_parallel<R>(l, data, acc.data(), slots, in.numel());
    for (i64 k = 0; k < slots; ++k) o[k] = R::finish(acc[k], count);
  }
}

// The op a user called, for a message.
const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMean:
      return "mean";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kArgMax:
      return "argmax";
    case ReduceOp::kArgMin:
      return "argmin";
    case ReduceOp::kSumSquares:
      return "sum of squares";
    case ReduceOp::kNorm:
      return "norm";
  }
  return "reduction";
}

// Reduces storage type S computed as T (S is T, or a half type for T = float).
template <typename T, typename S>
void reduce_as(ReduceOp op, std::uint32_t dim_mask, const Tensor& in, const Tensor& out) {
  switch (op) {
    case ReduceOp::kSum:
      return reduce_typed<SumReducer<T, false, false>, S>(in, dim_mask, out);
    case ReduceOp::kMax:
      return reduce_typed<ExtremumReducer<T, true>, S>(in, dim_mask, out);
    case ReduceOp::kMin:
      return reduce_typed<ExtremumReducer<T, false>, S>(in, dim_mask, out);
    case ReduceOp::kArgMax:
      return reduce_typed<ArgReducer<T, true>, S>(in, dim_mask, out);
    case ReduceOp::kArgMin:
      return reduce_typed<ArgReducer<T, false>, S>(in, dim_mask, out);
    case ReduceOp::kMean:
    case ReduceOp::kSumSquares:
    case ReduceOp::kNorm:
      if constexpr (std::is_floating_point_v<T>) {
        if (op == ReduceOp::kMean) {
          return reduce_typed<SumReducer<T, false, true>, S>(in, dim_mask, out);
        }
        if (op == ReduceOp::kNorm) {
          return reduce_typed<SumReducer<T, true, false, true>, S>(in, dim_mask, out);
        }
        return reduce_typed<SumReducer<T, true, false>, S>(in, dim_mask, out);
      }
      TESSERA_INTERNAL_ASSERT(false, "mean/norm of a non-floating tensor reached the kernel");
  }
}

void reduce_any(ReduceOp op, std::uint32_t dim_mask, const Tensor& in, const Tensor& out) {
  // Note [Half reductions]
  if (in.dtype() == kBFloat16) return reduce_as<float, BFloat16>(op, dim_mask, in, out);
  if (in.dtype() == kFloat16) return reduce_as<float, Float16>(op, dim_mask, in, out);
  dispatch_dtype(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    reduce_as<T, T>(op, dim_mask, in, out);
  });
}

}  // namespace

void CpuBackend::reduce(ReduceOp op, const Tensor& in, std::uint32_t dim_mask, const Tensor& out) {
  launch_with(
      out.device().index(),
      [op, dim_mask](const Tensor& in, const Tensor& out) {
        with_scratch_memory(reduce_op_name(op), out.device(),
                            [&] { reduce_any(op, dim_mask, in, out); });
      },
      in, out);
}

}  // namespace tessera::detail::TESSERA_CPU_ISA

#pragma once
// The accumulators of the CPU reductions (see Note [Reduction loop] in cpu_reduce.cpp). Each
// has Acc (running state), Out (what is written), identity(), add() for one element,
// combine() for two partial results, row() for a strided run, and finish(). T is the type
// computed in; row() reads elements of a storage type S that converts to T (S is T, or
// bfloat16 or float16 for T = float: Note [Half reductions]).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "backend/cpu/half_convert.h"

namespace tessera::detail::TESSERA_CPU_ISA::reducers {  // kernels only: cpu_backend.h

using i64 = std::int64_t;

// p[0, n) as T: p itself when S is T, else converted into `block` (Note [Half reductions]).
template <typename T, typename S>
const T* read_as(const S* p, i64 n, T* block) {
  if constexpr (std::is_same_v<S, T>) {
    return p;
  } else {
    half_to_float(p, block, n);
    return block;
  }
}

// Calls f(q, m) on consecutive pieces of p[0, n) read as T: p itself when S is T, else blocks
// converted on the stack (Note [Half reductions]). Every block but
// the last holds a multiple of any lane count below, so lane accumulators see their elements
// in the same order as in a float32 row.
template <typename T, typename S, typename F>
void over_blocks_as(const S* p, i64 n, F&& f) {
  if constexpr (std::is_same_v<S, T>) {
    f(p, n);
  } else {
    constexpr i64 kBlock = 512;
    T block[kBlock];
    for (i64 i = 0; i < n; i += kBlock) {
      const i64 m = std::min(kBlock, n - i);
      half_to_float(p + i, block, m);
      f(static_cast<const T*>(block), m);
    }
  }
}

template <typename T>
bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::isnan(v);
  } else {
    return false;
  }
}

// The rounding error of a + b, exactly, with no branch (Knuth's TwoSum): it vectorizes.
inline double two_sum_error(double a, double b, double sum) {
  const double b_part = sum - a;
  return (a - (sum - b_part)) + (b - b_part);
}

// A compensated float64 sum: float64 inputs have no wider type to be summed in, and a plain
// running sum loses about n ulps (a column of 1e7 values was 1.6e-10 off; PyTorch's cascade
// sum: 1e-15). An infinite or NaN sum is returned as it is (the compensation of an infinity
// is NaN).
struct CompensatedSum {
  double sum = 0, comp = 0;
  CompensatedSum() = default;
  CompensatedSum(double v) : sum(v) {}  // NOLINT(google-explicit-constructor): identity()
  void add(double v) {
    const double t = sum + v;
    comp += two_sum_error(sum, v, t);
    sum = t;
  }
  double value() const { return std::isfinite(sum) ? sum + comp : sum; }
};

// Sum (or sum of squares, or its square root: the 2-norm) in double for floating inputs
// (compensated for float64 ones), int64 for bool and integers.
template <typename T, bool kSquare, bool kMean, bool kRoot = false>
struct SumReducer {
  using Value = T;  // the type computed in
  static constexpr bool kCompensated = std::is_same_v<T, double>;
  using Term = std::conditional_t<std::is_floating_point_v<T>, double, i64>;
  using Acc = std::conditional_t<kCompensated, CompensatedSum, Term>;
  using Out = std::conditional_t<std::is_floating_point_v<T>, T, i64>;
  static Acc identity() { return Acc(0); }
  static Term term(T v) {
    const Term a = static_cast<Term>(v);
    return kSquare ? a * a : a;
  }
  static void add(Acc& acc, T v, i64) {
    if constexpr (kCompensated) {
      acc.add(term(v));
    } else {
      acc += term(v);
    }
  }
  static Acc combine(Acc a, Acc b) {
    if constexpr (kCompensated) {
      a.add(b.sum);
      a.comp += b.comp;
      return a;
    } else {
      return a + b;
    }
  }
  template <typename S>
  static void row(Acc& acc, const S* p, i64 n, i64 s, i64, i64) {
    if constexpr (kCompensated) {
      // Blocks of 256 summed as below (eight plain lanes: the loop vectorizes; a compensated
      // step per element ran 6x slower), each block's sum added with compensation: an error
      // of a few ulps per block, which does not grow with the number of blocks.
      constexpr i64 kBlock = 256;
      i64 i = 0;
      if (s == 1) {
        for (; i + kBlock <= n; i += kBlock) {
          double part[8] = {};
          for (i64 j = i; j < i + kBlock; j += 8) {
            for (int k = 0; k < 8; ++k) part[k] += term(static_cast<T>(p[j + k]));
          }
          acc.add(((part[0] + part[1]) + (part[2] + part[3])) +
                  ((part[4] + part[5]) + (part[6] + part[7])));
        }
      }
      for (; i < n; ++i) acc.add(term(static_cast<T>(p[i * s])));
      return;
    }
    // Sixteen partial sums break the dependency chain so the contiguous loop vectorizes: two
    // AVX-512 registers of doubles hide the add's latency (eight took 2x PyTorch's time for
    // a float32 row sum), combined pairwise.
    constexpr int kLanes = 16;
    Acc part[kLanes] = {};
    i64 i = 0;
    if (s == 1) {
      i = n - n % kLanes;
      over_blocks_as<T>(p, i, [&](const T* q, i64 m) {
        Acc lanes[kLanes];  // a local copy stays in registers (the captured array did not)
        std::copy_n(part, kLanes, lanes);
        for (i64 j = 0; j < m; j += kLanes) {
          for (int k = 0; k < kLanes; ++k) add(lanes[k], q[j + k], 0);
        }
        std::copy_n(lanes, kLanes, part);
      });
    }
    for (; i < n; ++i) add(part[0], static_cast<T>(p[i * s]), 0);
    for (int width = kLanes / 2; width >= 1; width /= 2) {
      for (int k = 0; k < width; ++k) part[k] = combine(part[k], part[k + width]);
    }
    acc = combine(acc, part[0]);
  }
  static Out finish(Acc acc, i64 count) {
    double total = 0;
    if constexpr (kCompensated) {
      total = acc.value();
    } else {
      total = static_cast<double>(acc);
    }
    if constexpr (kMean) {
      return static_cast<Out>(total / static_cast<double>(count));
    } else if constexpr (kRoot) {
      return static_cast<Out>(std::sqrt(total));
    } else if constexpr (kCompensated) {
      return static_cast<Out>(total);
    } else {
      return static_cast<Out>(acc);
    }
  }
};

// Max/min; a NaN wins and stays (NumPy semantics).
template <typename T, bool kMax>
struct ExtremumReducer {
  using Value = T;  // the type computed in
  using Acc = T;
  using Out = T;
  static Acc identity() {
    // Floating types start at -/+inf so a row of infinities reduces to an infinity.
    if constexpr (std::numeric_limits<T>::has_infinity) {
      return kMax ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity();
    } else {
      return kMax ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
    }
  }
  static void add(Acc& acc, T v, i64) {
    // Branch-free (`|`, a select) so the lane loop in row() vectorizes.
    acc = ((kMax ? v > acc : v < acc) | is_nan(v)) ? v : acc;
  }
  static Acc combine(Acc a, Acc b) {
    add(a, b, 0);
    return a;
  }
  // 32 running extrema as plain compare-selects (`a < v ? v : a` is exactly a max
  // instruction's choice, NaN included) and a flag lane per extremum for any NaN, an integer
  // of T's width: the select that also tested for NaN compiled to a branch per element (a row
  // max took 13x PyTorch's time), and one int flag for all lanes, or 16 lanes, kept GCC 12
  // from vectorizing the loop at all (5.7x). A row with a NaN is walked again for its first
  // NaN, which wins and stays. Out of line, so that row() stays small enough to inline for
  // short rows.
  template <typename S>
  [[gnu::noinline]] static void long_row(Acc& acc, const S* p, i64 n) {
    constexpr int kLanes = 32;
    using Flag = std::conditional_t<sizeof(T) == 4, std::int32_t, std::int64_t>;
    T part[kLanes];
    Flag nan[kLanes];
    for (int k = 0; k < kLanes; ++k) {
      part[k] = static_cast<T>(p[k]);
      nan[k] = 0;
    }
    const i64 i = n - n % kLanes;
    over_blocks_as<T>(p, i, [&](const T* q, i64 m) {
      T lanes[kLanes];  // local copies stay in registers (the captured arrays did not)
      Flag nans[kLanes];
      std::copy_n(part, kLanes, lanes);
      std::copy_n(nan, kLanes, nans);
      for (i64 j = 0; j < m; j += kLanes) {
        for (int k = 0; k < kLanes; ++k) {
          const T v = q[j + k];
          lanes[k] = kMax ? (lanes[k] < v ? v : lanes[k]) : (v < lanes[k] ? v : lanes[k]);
          nans[k] |= v != v ? Flag(-1) : Flag(0);
        }
      }
      std::copy_n(lanes, kLanes, part);
      std::copy_n(nans, kLanes, nan);
    });
    Flag any_nan = 0;
    for (int k = 0; k < kLanes; ++k) any_nan |= nan[k];
    if (any_nan != 0) {
      for (i64 j = 0; j < i; ++j) {
        const T v = static_cast<T>(p[j]);
        if (is_nan(v)) {
          add(acc, v, 0);
          break;
        }
      }
    } else {  // no NaN: a tree of plain compare-selects, which vectorizes too
      for (int width = kLanes / 2; width >= 1; width /= 2) {
        for (int k = 0; k < width; ++k) {
          const T v = part[k + width];
          part[k] = kMax ? (part[k] < v ? v : part[k]) : (v < part[k] ? v : part[k]);
        }
      }
      add(acc, part[0], 0);
    }
    for (i64 j = i; j < n; ++j) add(acc, static_cast<T>(p[j]), 0);
  }
  template <typename S>
  static void row(Acc& acc, const S* p, i64 n, i64 s, i64, i64) {
    if constexpr (std::is_floating_point_v<T>) {
      if (s == 1 && n >= 64) return long_row(acc, p, n);
    }
    i64 i = 0;
    // Eight running extrema break the dependency chain; combining them keeps NaN semantics.
    if (s == 1 && n >= 8) {
      Acc part[8];
      for (int k = 0; k < 8; ++k) part[k] = static_cast<T>(p[k]);
      for (i = 8; i + 8 <= n; i += 8) {
        for (int k = 0; k < 8; ++k) add(part[k], static_cast<T>(p[i + k]), 0);
      }
      for (int k = 0; k < 8; ++k) add(acc, part[k], 0);
    }
    for (; i < n; ++i) add(acc, static_cast<T>(p[i * s]), 0);
  }
  static Out finish(Acc acc, i64) { return acc; }
};

// Index of the first max/min; the first NaN wins (NumPy semantics).
template <typename T, bool kMax>
struct ArgReducer {
  using Value = T;  // the type computed in
  struct Acc {
    T value;
    i64 index;  // -1: nothing seen yet
  };
  using Out = i64;
  static Acc identity() { return {T{}, -1}; }
  // Whether (v, i) beats acc: a total order, so the walk order never matters.
  static bool better(T v, i64 i, const Acc& acc) {
    if (acc.index < 0) return true;
    if (is_nan(acc.value)) return is_nan(v) && i < acc.index;
    if (is_nan(v)) return true;
    if (kMax ? v > acc.value : v < acc.value) return true;
    return v == acc.value && i < acc.index;
  }
  static void add(Acc& acc, T v, i64 i) {
    if (better(v, i, acc)) acc = {v, i};
  }
  static Acc combine(Acc a, Acc b) { return b.index >= 0 && better(b.value, b.index, a) ? b : a; }
  template <typename S>
  static void row(Acc& acc, const S* p, i64 n, i64 s, i64 x, i64 xs) {
    for (i64 i = 0; i < n; ++i) add(acc, static_cast<T>(p[i * s]), x + i * xs);
  }
  static Out finish(Acc acc, i64) { return acc.index; }
};

}  // namespace tessera::detail::TESSERA_CPU_ISA::reducers

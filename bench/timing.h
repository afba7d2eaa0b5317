#pragma once
// How every benchmark is timed (bench/, and `tessera bench` in tools/): see Note [Timing].
// Plain C++17 (the LibTorch peers include it too) with no Google Benchmark, so gpu_bench, the
// MPI benchmark and the tool use it alone.
#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

// Note [Timing]
// One method for every harness: the wall clock (std::chrono::steady_clock, the clock Google
// Benchmark's real time reads too), untimed warm-up calls first, then repetitions of `inner`
// calls back to back, each repetition ending with one wait for the device so that queued
// work is counted; the figure is the median over repetitions of (repetition time / inner).
// - Google Benchmark rows (tessera_bench, with its LibTorch peers) register with
//   wall_time<unit> (common.h): Google Benchmark picks `inner` (its iterations; one epoch for
//   the training rows), --benchmark_repetitions the repetitions, and the median aggregate is
//   the figure. Each body makes its warm-up call and waits inside its loop.
// - Plain programs call time_calls(): gpu/gpu_bench.cpp, mpi/all_reduce_bench.cpp, and
//   `tessera bench` (tools/bench/method.cpp, which sizes `inner` from one timed call).
// One kind of row reads the clock before the wait on purpose, and says so: an issue time,
// the host's cost of queueing calls (gpu_bench's add.small and issue.* rows, time_calls'
// `issue`; add_small/* in tessera_bench, where the plain CPU runs ops inline anyway).

namespace tessera::bench {

using Clock = std::chrono::steady_clock;

/// Seconds from t0 to now.
inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// Per-call seconds over repetitions: the median (the figure), the fastest and the slowest.
struct Timing {
  double median = 0, min = 0, max = 0;
  int reps = 0, inner = 0;  // repetitions, and calls in each

  /// The same timing per op when each call ran `ops` ops (a graph replay, say).
  Timing per_op(int ops) const { return {median / ops, min / ops, max / ops, reps, inner * ops}; }
};

/// The statistics of per-call seconds (one entry per repetition) of `inner` calls each.
inline Timing summarize(std::vector<double> per_call, int inner) {
  Timing t;
  if (per_call.empty()) return t;
  std::sort(per_call.begin(), per_call.end());
  const std::size_t n = per_call.size();
  t.median = n % 2 ? per_call[n / 2] : 0.5 * (per_call[n / 2 - 1] + per_call[n / 2]);
  t.min = per_call.front();
  t.max = per_call.back();
  t.reps = static_cast<int>(n);
  t.inner = inner;
  return t;
}

/// Note [Timing] for plain programs: `warmup` calls and a wait, then `reps` repetitions of
/// `inner` calls each followed by one wait(). When `issue` is not null it gets the timing up
/// to the last call of each repetition, before its wait (the host's cost of issuing them).
template <typename Call, typename Wait>
Timing time_calls(int warmup, int reps, int inner, Call&& call, Wait&& wait,
                  Timing* issue = nullptr) {
  for (int i = 0; i < warmup; ++i) call();
  wait();
  std::vector<double> total, issued;
  for (int r = 0; r < reps; ++r) {
    const Clock::time_point t0 = Clock::now();
    for (int i = 0; i < inner; ++i) call();
    if (issue != nullptr) issued.push_back(seconds_since(t0) / inner);
    wait();
    total.push_back(seconds_since(t0) / inner);
  }
  if (issue != nullptr) *issue = summarize(std::move(issued), inner);
  return summarize(std::move(total), inner);
}

}  // namespace tessera::bench

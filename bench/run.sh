#!/usr/bin/env bash
# Builds tessera_bench (Release) in build-bench/, runs it and prints the markdown tables
# for docs/benchmarks.md. Extra arguments go to tessera_bench, e.g.
#   bench/run.sh --benchmark_min_time=0.05 --benchmark_repetitions=3   (a quick check)
#   bench/run.sh --benchmark_filter=matmul                            (one family)
# Environment: BUILD_DIR (default build-bench), OUT (default $BUILD_DIR/bench.json).
# Thread settings are left as a user gets them (OMP_NUM_THREADS unset = every core);
# see Note [Threads] in bench/main.cpp.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build-bench}"
out="${OUT:-$build/bench.json}"

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_BUILD_BENCH=ON >&2
ninja -C "$build" tessera_bench >&2

"$build/bench/tessera_bench" \
  --benchmark_repetitions=5 \
  --benchmark_report_aggregates_only=true \
  --benchmark_out="$out" \
  --benchmark_out_format=json \
  "$@" >&2  # human-readable progress on stderr; the JSON file is what summarize.py reads
echo "raw results: $out" >&2
python3 "$root/bench/summarize.py" "$out"

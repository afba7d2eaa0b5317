#!/usr/bin/env bash
# tessera's CPU ops against PyTorch at one thread, case by case, runs interleaved:
#   bench/cpu_ops/compare.sh [rounds] [case...]     (default: 3 rounds, the cases below)
# Installs build/ into build/cpu-ops-prefix, builds ops.cpp against it, and prints a table of
# medians (microseconds) with the ratio. Needs .bench-venv (bench/peers/torch-env).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
rounds="${1:-3}"
shift || true
cases=("$@")
if [[ ${#cases[@]} -eq 0 ]]; then
  cases=(softmax_last_1024sq log_softmax_last_1024sq xent_fwdbwd_256x1000 exp_1M tanh_1M pow2_1M
    conv3x3_p1_8x64x32 conv3x3_p1_fwdbwd_8x64x32 conv1x1_8x64x32_to128 max_last_1024sq
    contig_T_2048sq relu_T_1024sq add_transposed_1024sq add_both_transposed_1024sq
    sigmoid_T_1024sq)
fi
prefix="$root/build/cpu-ops-prefix"
cmake --install "$root/build" --prefix "$prefix" > /dev/null
cmake -S "$root/bench/cpu_ops" -B "$root/build/cpu-ops" -DCMAKE_PREFIX_PATH="$prefix" > /dev/null
cmake --build "$root/build/cpu-ops" > /dev/null
export OMP_NUM_THREADS=1
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
for c in "${cases[@]}"; do
  for _ in $(seq "$rounds"); do
    "$root/build/cpu-ops/cpu_ops" "$c" | sed 's/^/tessera /' >> "$out"
    "$root/.bench-venv/bin/python" "$root/bench/peers/pytorch_cpu_ops.py" "$c" | sed 's/^/torch /' >> "$out"
  done
done
python3 - "$out" <<'PY'
import collections, statistics, sys
d = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1]):
    who, name, us = line.split()
    d[name][who].append(float(us))
print("| case | tessera (us) | PyTorch (us) | tessera / PyTorch |")
print("|---|---:|---:|---:|")
for name, x in d.items():
    t, p = statistics.median(x["tessera"]), statistics.median(x["torch"])
    print(f"| {name} | {t:.0f} | {p:.0f} | {t / p:.2f} |")
PY

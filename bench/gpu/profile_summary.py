#!/usr/bin/env python3
"""One recorded training step, kernel by kernel: tessera next to PyTorch.

    python3 bench/gpu/profile_summary.py DIR [--models mlp,lenet]

Reads what `scripts/gpu-check --profile` leaves in DIR for each model: ncu_tessera_MODEL.csv
and ncu_pytorch_MODEL.csv (`ncu --csv --metrics gpu__time_duration.sum`, the default
details page: one row per kernel and metric, after ncu's own ==PROF== lines), and
profile_tessera_MODEL.json and profile_pytorch_MODEL.json (gpu_bench's and
pytorch_gpu.py's `--profile-step MODEL`, whose `train.MODEL.graph.replay` is one replay
timed alone). Prints markdown: per model, the kernel count, the sum of the kernels' own
durations (ncu runs them one at a time), the replay's time and their difference (what the
GPU spends between kernels), then each side's kernels in launch order.
"""
import argparse
import csv
import json
import os
import sys

METRIC = "gpu__time_duration.sum"
TO_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3,
         "second": 1e6, "s": 1e6}


def read_kernels(path):
    """[(name, grid, block, us)] in launch order, or None when the file has no such rows."""
    if not os.path.exists(path):
        return None
    with open(path, newline="", errors="replace") as f:
        lines = f.read().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return None
    kernels = []
    for row in csv.DictReader(lines[start:]):
        if row.get("Metric Name") != METRIC:
            continue
        unit = (row.get("Metric Unit") or "").strip()
        value = (row.get("Metric Value") or "").replace(",", "").strip()
        try:
            us = float(value) * TO_US[unit]
        except (KeyError, ValueError):
            continue
        kernels.append((row.get("Kernel Name", "?"), row.get("Grid Size", ""),
                        row.get("Block Size", ""), us))
    return kernels or None


def replay_us(path, model):
    try:
        with open(path) as f:
            results = json.load(f).get("results", {})
        return float(results[f"train.{model}.graph.replay"]["value"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def short(name, width=72):
    """A kernel's name without its return type and parameter list, cut to `width`."""
    name = name.strip().replace("(anonymous namespace)::", "")
    if name.startswith("void "):
        name = name[5:]
    depth, cut = 0, len(name)
    for i, c in enumerate(name):  # the parameter list: the first '(' outside template args
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif c == "(" and depth == 0:
            cut = i
            break
    name = name[:cut]
    return name if len(name) <= width else name[:width - 3] + "..."


def fmt(v, digits=1):
    return "n/a" if v is None else f"{v:,.{digits}f}"


def summarize(directory, model):
    sides = {}
    for impl in ("tessera", "pytorch"):
        sides[impl] = (read_kernels(os.path.join(directory, f"ncu_{impl}_{model}.csv")),
                       replay_us(os.path.join(directory, f"profile_{impl}_{model}.json"), model))
    out = [f"### {model}: one recorded training step, kernel by kernel "
           f"(ncu {METRIC}, clocks not locked)", "",
           "| | tessera | PyTorch | tessera/PyTorch |", "|---|---:|---:|---:|"]

    def row(label, values, digits=1):
        t, p = values
        ratio = f"{t / p:.2f}" if t is not None and p else ""
        out.append(f"| {label} | {fmt(t, digits)} | {fmt(p, digits)} | {ratio} |")

    counts = [len(k) if k else None for k, _ in sides.values()]
    sums = [sum(us for *_, us in k) if k else None for k, _ in sides.values()]
    replays = [r for _, r in sides.values()]
    gaps = [r - s if r is not None and s is not None else None for r, s in zip(replays, sums)]
    row("kernels in the step", counts, 0)
    row("sum of the kernels' durations (us)", sums)
    row("one replay, timed alone (us)", replays)
    row("replay minus kernels: time between kernels (us)", gaps)
    for impl, (kernels, _) in sides.items():
        out += ["", f"{impl}'s kernels in launch order:", ""]
        if not kernels:
            out.append(f"(none read from ncu_{impl}_{model}.csv)")
            continue
        out += ["| # | kernel | grid | block | us |", "|---:|---|---|---|---:|"]
        for i, (name, grid, block, us) in enumerate(kernels, 1):
            out.append(f"| {i} | `{short(name)}` | {grid} | {block} | {us:.2f} |")
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir")
    parser.add_argument("--models", default="mlp,lenet")
    args = parser.parse_args()
    print("\n\n".join(summarize(args.dir, m) for m in args.models.split(",") if m))
    return 0


if __name__ == "__main__":
    sys.exit(main())

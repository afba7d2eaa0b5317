#!/usr/bin/env python3
"""Turn tessera_bench's Google Benchmark JSON into the markdown tables of docs/benchmarks.md.

Usage: python3 bench/summarize.py build-bench/bench.json > tables.md

Uses the median aggregate of each benchmark (or the single run when the JSON has no
aggregates). Every ratio is tessera / peer on the table's own metric: for GFLOP/s and GB/s
above 1.00 means tessera is faster, for nanoseconds below 1.00 does.
"""
import json
import sys

MATMUL_PEERS = ["dnnl_sgemm", "cblas_sgemm", "libtorch"]
SMALL_PEERS = ["libtorch", "libtorch_inference_mode"]
LARGE_PEERS = ["libtorch", "stream"]
TO_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


def load(path):
    """Returns (context, {(family, impl, arg): median row}, {(family, impl, arg): cv row})."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    rows = data.get("benchmarks", [])
    has_aggregates = any(r.get("run_type") == "aggregate" for r in rows)
    medians, cvs = {}, {}
    for r in rows:
        if r.get("error_occurred"):
            continue
        if has_aggregates:
            if r.get("run_type") != "aggregate":
                continue
            target = {"median": medians, "cv": cvs}.get(r.get("aggregate_name"))
            if target is None:
                continue
        else:
            target = medians
        parts = [p for p in r.get("run_name", r["name"]).split("/") if p != "real_time"]
        family, impl = parts[0], parts[1] if len(parts) > 1 else ""
        arg = parts[2] if len(parts) > 2 else ""
        target[(family, impl, arg)] = r
    return data.get("context", {}), medians, cvs


def ns(row):
    return row["real_time"] * TO_NS[row.get("time_unit", "ns")]


def fmt(x, digits=1):
    return "n/a" if x is None else f"{x:,.{digits}f}"


def ratio(a, b):
    return "n/a" if a is None or b in (None, 0) else f"{a / b:.2f}"


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def noise_note(cvs, family):
    vals = [r["real_time"] for k, r in cvs.items() if k[0] == family and "real_time" in r]
    if not vals:
        return ""
    # Google Benchmark reports cv as a fraction of the mean.
    return f"\nLargest coefficient of variation of a row's time: {100 * max(vals):.1f}%.\n"


def matmul_section(medians, cvs, peak):
    sizes = sorted({int(k[2]) for k in medians if k[0] == "matmul_f32" and k[2]})
    if not sizes:
        return ""

    def gflops(impl, n):
        r = medians.get(("matmul_f32", impl, str(n)))
        return None if r is None else r.get("GFLOPS")

    peers = [p for p in MATMUL_PEERS if any(gflops(p, n) is not None for n in sizes)]
    header = ["n", "tessera GFLOP/s", "% of peak"] + [f"{p} GFLOP/s" for p in peers]
    header += [f"tessera/{p}" for p in peers]
    rows = []
    for n in sizes:
        t = gflops("tessera", n)
        pct = None if t is None or not peak else 100.0 * t / peak
        row = [str(n), fmt(t), fmt(pct)] + [fmt(gflops(p, n)) for p in peers]
        row += [ratio(t, gflops(p, n)) for p in peers]
        rows.append(row)
    return (f"### matmul, float32, square n x n (GFLOP/s = 2n^3 / time; peak {fmt(peak, 0)} "
            "GFLOP/s)\n\n" + table(header, rows) + "\n" + noise_note(cvs, "matmul_f32"))


def small_section(medians, cvs):
    t = medians.get(("add_small", "tessera", ""))
    if t is None:
        return ""
    peers = [p for p in SMALL_PEERS if ("add_small", p, "") in medians]
    # Queued on a logical CPU device: present when run with TESSERA_CPU_DEVICES=2 or more.
    queued = ["tessera_queued"] if ("add_small", "tessera_queued", "") in medians else []
    header = ["implementation", "time (ns)", "CPU time (ns)", "tessera/impl (time)"]
    rows = []
    for impl in ["tessera"] + queued + peers:
        r = medians[("add_small", impl, "")]
        cpu = r["cpu_time"] * TO_NS[r.get("time_unit", "ns")]
        rows.append([impl, fmt(ns(r), 0), fmt(cpu, 0), ratio(ns(t), ns(r))])
    return ("### per-op overhead: `a + b`, 2x3 float32 (target: tessera <= 300 ns)\n\n"
            + table(header, rows) + "\n" + noise_note(cvs, "add_small"))


def large_section(medians, cvs):
    t = medians.get(("add_16M", "tessera", ""))
    if t is None:
        return ""
    peers = [p for p in LARGE_PEERS if ("add_16M", p, "") in medians]
    header = ["implementation", "time (us)", "GB/s", "tessera/impl (GB/s)"]
    rows = []
    for impl in ["tessera"] + peers:
        r = medians[("add_16M", impl, "")]
        rows.append([impl, fmt(ns(r) / 1e3, 0), fmt(r.get("GBps")),
                     ratio(t.get("GBps"), r.get("GBps"))])
    return ("### elementwise `a + b`, 16 Mi float32 (3 x 64 MiB moved per call; output "
            "allocated per call except STREAM)\n\n" + table(header, rows) + "\n"
            + noise_note(cvs, "add_16M"))


CONV_LAYERS = {"1": "1 -> 6, 28x28, padding 2", "2": "6 -> 16, 14x14 (also the input gradient)"}


def conv_section(medians, cvs):
    """LeNet's convolutions, forward + backward per call: tessera against LibTorch."""
    rows = []
    for arg, label in CONV_LAYERS.items():
        mine = medians.get(("conv_lenet", "tessera", arg))
        peer = medians.get(("conv_lenet", "libtorch", arg))
        if mine is None:
            continue
        rows.append([label, fmt(ns(mine) / 1e3, 0), fmt(ns(peer) / 1e3, 0) if peer else "n/a",
                     ratio(ns(mine), ns(peer) if peer else None)])
    if not rows:
        return ""
    header = ["layer (batch 256, 5x5)", "tessera us", "LibTorch us", "tessera/LibTorch"]
    return ("### LeNet's convolutions: forward + backward per call, CPU (time: lower is better)"
            "\n\n" + table(header, rows) + "\n" + noise_note(cvs, "conv_lenet"))


TRAIN_MODELS = [("train_mlp", "MLP 784-256-10", 0.8), ("train_lenet", "LeNet-5 (d2l)", 0.5)]


def train_section(medians, cvs):
    """Epoch times: tessera at its defaults against LibTorch at each thread setting."""
    def rows_of(family, impl):
        return {k[2]: r for k, r in medians.items() if k[0] == family and k[1] == impl}

    rows = []
    for family, label, target in TRAIN_MODELS:
        mine = list(rows_of(family, "tessera").values())
        peers = rows_of(family, "libtorch")
        if not mine:
            continue
        t = mine[0]
        by_threads = {k.split(":")[1]: r for k, r in peers.items() if k.startswith("threads:")}
        best = min(by_threads.values(), key=ns) if by_threads else None
        peer_cells = ", ".join(f"{fmt(ns(r) / 1e6, 0)} ms ({n} thr)"
                               for n, r in sorted(by_threads.items()))
        rows.append([label, fmt(ns(t) / 1e6, 0), fmt(t.get("images_per_s", 0) / 1e3, 1),
                     peer_cells or "n/a", ratio(ns(t), ns(best) if best else None),
                     f"<= {target}", fmt(t.get("step_peak_MiB"), 1),
                     fmt(best.get("step_peak_MiB") if best else None, 1)])
    if not rows:
        return ""
    header = ["model", "tessera epoch", "tessera k images/s", "LibTorch epoch",
              "tessera/LibTorch best", "target", "tessera step peak MiB",
              "LibTorch step peak MiB (sampled)"]
    return ("### training epochs: 60,000 synthetic 28x28 images, batch 256, SGD, CPU (time: "
            "lower is better)\n\n" + table(header, rows) + "\n" + noise_note(cvs, "train_mlp")
            + noise_note(cvs, "train_lenet"))


def loader_section(medians, cvs):
    """The MLP epoch fed by the DataLoader (with and without its prefetch thread) against the
    same epoch on resident float32 data, from the same run."""
    def find(family, arg=None):
        for k, r in medians.items():
            if k[0] == family and k[1] == "tessera" and (arg is None or k[2] == arg):
                return r
        return None

    resident = find("train_mlp")
    if resident is None:
        return ""
    rows = []
    for arg, label, target in (("prefetch:0", "DataLoader, prefetch 0 (the default without a GPU)",
                                "<= 1.15"),
                               ("prefetch:2", "DataLoader, prefetch 2 (the default with a GPU)", "—")):
        r = find("train_mlp_loader", arg)
        if r is None:
            continue
        rows.append([label, fmt(ns(r) / 1e6, 0), ratio(ns(r), ns(resident)),
                     fmt(r["cpu_time"] * TO_NS[r.get("time_unit", "ns")] / 1e6, 0),
                     ratio(r["cpu_time"], resident["cpu_time"]), target])
    if not rows:
        return ""
    rows.insert(0, ["resident float32 (train_mlp)", fmt(ns(resident) / 1e6, 0), "1.00",
                    fmt(resident["cpu_time"] * TO_NS[resident.get("time_unit", "ns")] / 1e6, 0),
                    "1.00", ""])
    header = ["MLP epoch fed by", "wall ms", "wall / resident", "training thread CPU ms",
              "CPU / resident", "target (wall)"]
    return ("### loader-fed vs resident MLP epoch, CPU (time: lower is better)\n\n"
            + table(header, rows) + "\n" + noise_note(cvs, "train_mlp_loader"))


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    context, medians, cvs = load(argv[1])
    try:
        peak = float(context.get("peak_gflops", "0"))
    except ValueError:
        peak = 0.0
    reps = sorted({r.get("repetitions", 1) for r in medians.values()}, key=str)
    shown = (f"medians of {'/'.join(str(x) for x in reps)} repetitions" if cvs
             else "one run per benchmark (no repetitions, so no medians)")
    print(f"Run: {context.get('date', '?')} on {context.get('host_name', '?')}, "
          f"{context.get('num_cpus', '?')} CPUs, "
          f"OMP_NUM_THREADS={context.get('OMP_NUM_THREADS', '?')}; {shown}.  ")
    print(f"Peer: {context.get('peer', '?')}.  ")
    load_avg = context.get("load_avg")
    if load_avg:
        print(f"Load average at start: {', '.join(f'{x:.2f}' for x in load_avg)}.")
    print()
    for section in (matmul_section(medians, cvs, peak), small_section(medians, cvs),
                    large_section(medians, cvs), conv_section(medians, cvs),
                    train_section(medians, cvs), loader_section(medians, cvs)):
        if section:
            print(section)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

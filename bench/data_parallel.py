#!/usr/bin/env python3
"""Issue 12's targets for data-parallel training on logical CPU devices, in one run.

Each configuration trains on Fashion-MNIST for --epochs epochs; the first is warm-up and the
rest give the time of the training pass alone (metrics' train_seconds). Configurations run
in turn, --reps times, and the table shows medians, so a noisy moment hits all of them:

  one    1 logical device that owns 1 core        TESSERA_CPU_DEVICES=1 TESSERA_CPU_THREADS=1
  two    2 logical devices that own 1 core each   TESSERA_CPU_DEVICES=2 TESSERA_CPU_THREADS=1
  ddp    PyTorch DDP, gloo, 2 processes of 1 thread (bench/peers/pytorch_ddp.py), when
         .bench-venv exists (bench/peers/torch-env)
  queue  cpu:1 of 2 with its work queue, against the same without (TESSERA_CPU_ASYNC=0):
         the cost of the queues (target: within 10%)
  rank1  mpirun -np 1, 1 thread (OMP_NUM_THREADS=1), the plain CPU
  rank2  mpirun -np 2, 1 thread each, bound to a core each (issue 13's target)
  one_g, two_g, rank1_g, rank2_g
         the same with --graph: the training step recorded once and replayed (issue 16)

  python3 bench/data_parallel.py [--reps 5] [--epochs 3] [--models mlp lenet]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "build", "tools", "tessera")
PEER_PY = os.path.join(ROOT, ".bench-venv", "bin", "python")


def tessera_epochs(model, epochs, env, devices):
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as metrics:
        cmd = [TOOL, "train", "--model", model, "--epochs", str(epochs), "--quiet",
               "--metrics", metrics.name] + devices
        subprocess.run(cmd, env={**os.environ, **env}, check=True, stdout=subprocess.DEVNULL)
        rows = [json.loads(line) for line in open(metrics.name)]
    return [r["train_seconds"] for r in rows[1:]]


def ranks_epochs(model, epochs, np, extra=()):
    """`np` ranks of 1 thread each on the plain CPU, launched by mpirun."""
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as metrics:
        cmd = ["mpirun", "-np", str(np), "--oversubscribe", "--bind-to", "core",
               "-x", "OMP_NUM_THREADS=1", TOOL, "train", "--model", model, "--epochs",
               str(epochs), "--quiet", "--metrics", metrics.name, "--device", "cpu", *extra]
        env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
        rows = [json.loads(line) for line in open(metrics.name)]
    return [r["train_seconds"] for r in rows[1:]]


def ddp_epochs(model, epochs):
    out = subprocess.run([PEER_PY, os.path.join(ROOT, "bench", "peers", "pytorch_ddp.py"),
                          "--model", model, "--epochs", str(epochs), "--world", "2"],
                         check=True, capture_output=True, text=True).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return [r["train_seconds"] for r in rows[1:]]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--models", nargs="+", default=["mlp", "lenet"])
    p.add_argument("--only", nargs="+", help="run these configurations alone (one two ...)")
    args = p.parse_args()
    # The first epoch of each run is dropped as warm-up: a median needs one more.
    if args.epochs < 2 or args.reps < 1:
        p.error("--epochs must be at least 2 (the first is warm-up) and --reps at least 1")
    have_peer = os.path.exists(PEER_PY)
    configs = {
        "one": lambda m: tessera_epochs(m, args.epochs, {"TESSERA_CPU_DEVICES": "1",
                                                         "TESSERA_CPU_THREADS": "1"},
                                        ["--device", "cpu:0"]),
        "two": lambda m: tessera_epochs(m, args.epochs, {"TESSERA_CPU_DEVICES": "2",
                                                         "TESSERA_CPU_THREADS": "1"},
                                        ["--devices", "cpu:0,cpu:1"]),
        "queue": lambda m: tessera_epochs(m, args.epochs, {"TESSERA_CPU_DEVICES": "2"},
                                          ["--device", "cpu:1"]),
        "inline": lambda m: tessera_epochs(m, args.epochs, {"TESSERA_CPU_DEVICES": "2",
                                                            "TESSERA_CPU_ASYNC": "0"},
                                           ["--device", "cpu:1"]),
        "rank1": lambda m: ranks_epochs(m, args.epochs, 1),
        "rank2": lambda m: ranks_epochs(m, args.epochs, 2),
        "one_g": lambda m: tessera_epochs(m, args.epochs, {"TESSERA_CPU_DEVICES": "1",
                                                           "TESSERA_CPU_THREADS": "1"},
                                          ["--device", "cpu:0", "--graph"]),
        "two_g": lambda m: tessera_epochs(m, args.epochs, {"TESSERA_CPU_DEVICES": "2",
                                                           "TESSERA_CPU_THREADS": "1"},
                                          ["--devices", "cpu:0,cpu:1", "--graph"]),
        "rank1_g": lambda m: ranks_epochs(m, args.epochs, 1, ["--graph"]),
        "rank2_g": lambda m: ranks_epochs(m, args.epochs, 2, ["--graph"]),
    }
    if have_peer:
        configs["ddp"] = lambda m: ddp_epochs(m, args.epochs)
    if args.only:
        configs = {c: f for c, f in configs.items() if c in args.only}
    times = {(m, c): [] for m in args.models for c in configs}
    for rep in range(args.reps):
        for m in args.models:
            for c, run in configs.items():
                epoch_times = run(m)
                times[(m, c)].append(statistics.median(epoch_times))
                print(f"rep {rep + 1} {m:5} {c:6} {times[(m, c)][-1]:.3f} s", file=sys.stderr)
    med = {k: statistics.median(v) for k, v in times.items()}
    if args.only:
        for (m, c), t in sorted(med.items()):
            print(f"| {m} | {c} | {t:.3f} |")
        return
    print("| model | 1 device, 1 core (s) | 2 devices, 1 core each (s) | throughput x "
          "(target >= 1.8) | PyTorch DDP 2x1 (s) | tessera/DDP time (target <= 0.5) | "
          "cpu:1 queued (s) | inline (s) | queued/inline (target <= 1.10) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for m in args.models:
        one, two, ddp = med[(m, "one")], med[(m, "two")], med.get((m, "ddp"))
        queued, inline = med[(m, "queue")], med[(m, "inline")]
        peer = ["", ""] if ddp is None else [f"{ddp:.3f}", f"{two / ddp:.2f}"]
        cells = [m, f"{one:.3f}", f"{two:.3f}", f"{one / two:.2f}", *peer,
                 f"{queued:.3f}", f"{inline:.3f}", f"{queued / inline:.2f}"]
        print("| " + " | ".join(cells) + " |")
    print("\n| model | 1 rank of 1 core (s) | 2 ranks of 1 core (s) | throughput x (target >= 1.8) "
          "| PyTorch DDP 2x1 (s) | tessera 2 ranks / DDP time (target <= 0.5) |")
    print("|---|---|---|---|---|---|")
    for m in args.models:
        one, two, ddp = med[(m, "rank1")], med[(m, "rank2")], med.get((m, "ddp"))
        peer = ["", ""] if ddp is None else [f"{ddp:.3f}", f"{two / ddp:.2f}"]
        print("| " + " | ".join([m, f"{one:.3f}", f"{two:.3f}", f"{one / two:.2f}", *peer]) + " |")
    print("\nWith --graph (the step recorded once and replayed):\n")
    print("| model | 1 device (s) | 2 devices (s) | throughput x (target >= 1.8) | "
          "1 rank (s) | 2 ranks (s) | throughput x (target >= 1.8) | "
          "1 device eager / graph time |")
    print("|---|---|---|---|---|---|---|---|")
    for m in args.models:
        o, t = med[(m, "one_g")], med[(m, "two_g")]
        r1, r2 = med[(m, "rank1_g")], med[(m, "rank2_g")]
        print("| " + " | ".join([m, f"{o:.3f}", f"{t:.3f}", f"{o / t:.2f}", f"{r1:.3f}",
                                 f"{r2:.3f}", f"{r1 / r2:.2f}",
                                 f"{med[(m, 'one')] / o:.2f}"]) + " |")
    print(f"\nmedians of {args.reps} runs, each the median of epochs 2..{args.epochs}'s "
          "training pass", file=sys.stderr)


if __name__ == "__main__":
    main()

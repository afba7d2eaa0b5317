#!/usr/bin/env python3
"""Puts gpu_bench's (tessera) and pytorch_gpu.py's results side by side as a markdown table.

    python3 bench/gpu/summarize.py TESSERA.json PYTORCH.json

Either file may be missing or broken: its column then reads n/a. Prints a few context lines
(devices, versions, errors) and then the table, last. Exit status 0 unless no targets could be
judged at all because both files are unreadable.
"""
import json
import sys

MATMUL_SIZES = (256, 512, 1024, 2048, 4096, 8192)


def load(path):
    try:
        with open(path) as f:
            return json.load(f), None
    except (OSError, ValueError) as e:
        return {}, f"{path}: {e}"


def fmt(v, unit=""):
    if v is None:
        return "n/a"
    if unit == "us":
        return f"{v:.2f}"
    if unit == "nodes":
        return f"{v:.0f}"
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    tess, tess_err = load(argv[1])
    torch, torch_err = load(argv[2])
    tr = tess.get("results", {}) or {}
    pr = torch.get("results", {}) or {}

    def val(results, key):
        r = results.get(key)
        return None if r is None else r.get("value")

    def wrong(results, key):
        r = results.get(key)
        return r is not None and r.get("ok") is False

    rows = []  # (label, tessera, pytorch, t/p, reference, t/reference, target, met)

    def row(label, key, unit, ref_key=None, target=None, ref_name="cudaMemcpy D2D"):
        """target: (kind, bound): peer>= / peer<= compare tessera/PyTorch, ref>= / ref<=
        tessera/reference (ref_key, a tessera row), abs<= tessera's own value."""
        t, p = val(tr, key), val(pr, key)
        ref = val(tr, ref_key) if ref_key else None
        t_p, t_ref = ratio(t, p), ratio(t, ref)
        met = ""
        if target is not None:
            kind, bound = target
            x = {"peer": t_p, "ref": t_ref, "abs": t}[kind[:-2]]
            if x is None:
                met = "n/a"
            elif kind.endswith(">="):
                met = "yes" if x >= bound else "NO"
            else:
                met = "yes" if x <= bound else "NO"
        if wrong(tr, key):
            met = "WRONG result"
        if target is None:
            target_text = ""
        else:
            kind, bound = target
            sign = "≥" if kind.endswith(">=") else "≤"
            if kind.startswith("abs"):
                target_text = f"{sign} {fmt(bound, unit)} {unit}"
            else:
                what = "PyTorch" if kind.startswith("peer") else ref_name
                target_text = f"{sign} {bound:g} × {what}"
        ref_text = "" if not ref_key else f"{fmt(ref, unit)} ({ref_name})"
        rows.append((label, fmt(t, unit), fmt(p, unit), fmt(t_p), ref_text,
                     "" if not ref_key else fmt(t_ref), target_text, met))

    for mode, name in (("fp32", "float32"), ("tf32", "TF32"), ("bf16", "bfloat16")):
        for n in MATMUL_SIZES:
            # Issue 17 sets the bfloat16 target at n = 4096 and 8192 only.
            target = ("peer>=", 0.95) if mode != "bf16" or n >= 4096 else None
            row(f"matmul {name} n={n} (TFLOP/s)", f"matmul.{mode}.{n}", "TFLOP/s",
                target=target)
    for direction, label in (("h2d", "host→device"), ("d2h", "device→host")):
        for kind in ("pinned", "pageable"):
            row(f"{label} 256 MiB, {kind} (GB/s)", f"copy.{direction}.{kind}", "GB/s",
                ref_key=f"raw.{direction}.{kind}", ref_name="cudaMemcpy")
    row("device→device copy 1 GiB (GB/s, read+write)", "copy.d2d", "GB/s", ref_key="raw.d2d")
    row("a + b, 256 Mi float32 (GB/s, 3 GiB moved)", "add.large", "GB/s", ref_key="raw.d2d",
        target=("ref>=", 0.85))
    row("a + b, 2x3: host time per op (µs)", "add.small", "us", target=("peer<=", 0.5))
    row("a + b, 2x3: per op with the wait (µs)", "add.small.sync", "us")
    for model, name in (("mlp", "MLP"), ("lenet", "LeNet-5")):
        row(f"{name} epoch, 60k images, batch 256 (s)", f"train.{model}", "s",
            target=("peer<=", 1.0))
        row(f"{name} epoch, steps replayed from a graph (s)", f"train.{model}.graph", "s",
            target=("peer<=", 1.0))
        if model == "mlp":
            row("MLP epoch, steps replayed from a graph (s), absolute", "train.mlp.graph", "s",
                target=("abs<=", 0.010))
        row(f"{name}: operations in the recorded step (graph nodes)", f"train.{model}.graph.nodes",
            "nodes")
        row(f"{name}: one replay of the recorded step alone (µs)", f"train.{model}.graph.replay",
            "us")
        row(f"{name} epoch under bfloat16 autocast (s)", f"train.{model}.bf16", "s",
            ref_key=f"train.{model}", ref_name="its float32 epoch")
    row("MLP epoch fed by the DataLoader from host memory (s)", "train.mlp.loader", "s",
        ref_key="train.mlp", target=("ref<=", 1.15), ref_name="data resident on the GPU")
    row("MLP 4096-4096-4096-10 step, batch 512, float32 (ms)", "step.mlp4096.fp32", "ms")
    row("the same step under bfloat16 autocast (ms)", "step.mlp4096.bf16", "ms",
        target=("peer<=", 1.0))
    row("the same step, bfloat16 against float32 (ms)", "step.mlp4096.bf16", "ms",
        ref_key="step.mlp4096.fp32", target=("ref<=", 0.5), ref_name="tessera float32")
    # No issue sets a target; PyTorch's peer is its fused kernel, its fastest step.
    row("SGD step, momentum 0.9, MLP's 203,530 parameters (µs)", "optim.sgd_momentum", "us")
    row("Adam step, the same parameters (µs)", "optim.adam", "us")

    print(f"tessera {tess.get('version', '?')} on {tess.get('device', '?')}"
          f"{' (quick)' if tess.get('quick') else ''}; PyTorch {torch.get('version', '?')}"
          f" (CUDA {torch.get('cuda', '?')}) on {torch.get('device', '?')}")
    for label, err, data in (("tessera", tess_err, tess), ("PyTorch", torch_err, torch)):
        if err:
            print(f"{label}: results unreadable: {err}")
        for e in data.get("errors", []) or []:
            print(f"{label} error: {e}")
        for n in data.get("notes", []) or []:
            print(f"{label} note: {n}")
    print("Medians; tessera/PyTorch > 1 means tessera is faster for rates, slower for times. "
          "Reference columns: another row of gpu_bench (the CUDA runtime alone for copies, "
          "same sizes), named in brackets.")
    print()
    header = ("measurement", "tessera", "PyTorch", "tessera/PyTorch", "reference",
              "tessera/reference", "target", "met")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    return 0 if (tr or pr) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))

#!/usr/bin/env python3
"""PyTorch peer of `tessera bench`: the four exercises of the "GPUs" section of Dive into Deep
Learning, timed as the C++ side times tessera. Writes JSON for bench/exercises/compare.py.

    python3 bench/peers/pytorch_exercises.py [--out FILE.json] [--quick]
        [--exercises matmul,checkpoint,norm_log,parallel] [--max-n-cpu 4096] [--dir /tmp]

Timing: see `measure` (repetitions of `inner` calls) and `measure_runs` (whole runs). Without a
GPU the GPU rows are skipped (with a note) and the CPU rows still run. Exit status: 1 if an
exercise failed or the norm_log variants disagree, else 0.
"""
import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import time
import warnings

import torch

ALL_EXERCISES = ("matmul", "checkpoint", "norm_log", "parallel")
MATMUL_SIZES = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
PARALLEL_SIZES = (256, 1024, 4096)
STEPS = 1000  # norm_log steps per run
HIDDEN, LAYERS = 2048, 6  # checkpoint model: 6 x Linear(2048, 2048) = 100,712,448 bytes


def say(line=""):
    print(line, flush=True)  # the machine runs us under a time limit: keep partial output


def sync(devices):
    for d in devices:
        if d.type == "cuda":
            torch.cuda.synchronize(d)


def measure(op, devices, target_s, reps):
    """The repetition method shared with the C++ side: 3 warm-up calls, one timed call to size
    `inner` (1..1000) so a repetition lasts ~target_s, then `reps` repetitions of `inner` calls
    + a synchronize of every GPU involved. Returns (median, min, inner), seconds per call."""
    for _ in range(3):
        op()
    sync(devices)
    t0 = time.perf_counter()
    op()
    sync(devices)
    one = time.perf_counter() - t0
    inner = max(1, min(1000, round(target_s / max(one, 1e-9))))
    per_call = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(inner):
            op()
        sync(devices)
        per_call.append((time.perf_counter() - t0) / inner)
    return statistics.median(per_call), min(per_call), inner


def measure_runs(run, reps):
    """Whole-run timing for ops too long for an inner loop: 1 warm-up, median/min of `reps`.
    `run` synchronizes itself (its own host wait is part of what is measured)."""
    run()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times)


def cpu_name():
    # platform.processor() is usually just "x86_64" on Linux, so prefer the model name.
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def exact_fp32():
    # Newer releases deprecate allow_tf32 (warning) in favour of fp32_precision.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
        except (AttributeError, RuntimeError):
            torch.backends.cuda.matmul.fp32_precision = "ieee"
            torch.backends.cudnn.conv.fp32_precision = "ieee"


def ex_matmul(ctx, devs):
    say(f"{'device':<8} {'n':>5} {'copy':>5} {'seconds':>11} {'GFLOP/s':>10} {'inner':>5}")
    for dev in devs:
        gpu = dev.type == "cuda"
        cap = (4096 if gpu else min(2048, ctx.max_n_cpu)) if ctx.quick else \
            (8192 if gpu else ctx.max_n_cpu)
        for n in (n for n in MATMUL_SIZES if n <= cap):
            a, b = torch.randn(n, n, device=dev), torch.randn(n, n, device=dev)
            cases = [(False, lambda: a @ b)]
            if gpu:
                # Copies from ordinary pageable host memory, as a naive user would write it.
                ah, bh = torch.randn(n, n), torch.randn(n, n)
                cases.append((True, lambda: (ah.to(dev) @ bh.to(dev)).cpu()))
            for with_copy, op in cases:
                med, mn, inner = measure(op, [dev], ctx.target_s, ctx.reps)
                gflops = 2 * n ** 3 / med / 1e9
                ctx.row(exercise="matmul", device=str(dev), n=n, with_copy=with_copy,
                        seconds=med, min_seconds=mn, gflops=gflops)
                say(f"{str(dev):<8} {n:>5} {str(with_copy):>5} {med:>11.4g} {gflops:>10.1f} "
                    f"{inner:>5}")


def ex_checkpoint(ctx, devs):
    import safetensors.torch as st  # only this exercise needs it

    if not any(d.type == "cuda" for d in devs):
        ctx.note("checkpoint: skipped, no GPU (it saves and loads a model held on cuda:0)")
        say("skipped: no GPU")
        return
    dev = torch.device("cuda:0")
    model = torch.nn.Sequential(*[torch.nn.Linear(HIDDEN, HIDDEN) for _ in range(LAYERS)]).to(dev)
    nbytes = sum(p.numel() * p.element_size() for p in model.state_dict().values())
    path = os.path.join(ctx.dir, f"pytorch_exercises_{os.getpid()}.safetensors")

    def save():
        st.save_file(model.state_dict(), path)
        # tessera's save is atomic and fsyncs: pay for the same durability here.
        fd = os.open(path, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)

    def load():
        model.load_state_dict(st.load_file(path, device=str(dev)))
        torch.cuda.synchronize(dev)

    say(f"{'what':<16} {'bytes':>11} {'seconds':>11} {'GB/s':>8}")

    def emit(what, med, mn):
        ctx.row(exercise="checkpoint", device=str(dev), what=what, bytes=nbytes,
                seconds=med, min_seconds=mn, gbps=nbytes / med / 1e9)
        say(f"{what:<16} {nbytes:>11} {med:>11.4g} {nbytes / med / 1e9:>8.2f}")

    try:
        emit("save", *measure_runs(save, ctx.reps))
        emit("load", *measure_runs(load, ctx.reps))
    finally:
        if os.path.exists(path):
            os.remove(path)
    # The bus alone for the same bytes in one tensor: the floor under save and load.
    pinned = torch.empty(nbytes // 4, pin_memory=True)
    on_gpu = torch.empty(nbytes // 4, device=dev)
    for what, op in (("raw_h2d_pinned", lambda: on_gpu.copy_(pinned)),
                     ("raw_d2h_pinned", lambda: pinned.copy_(on_gpu))):
        emit(what, *measure(op, [dev], ctx.target_s, ctx.reps)[:2])


def ex_norm_log(ctx, devs):
    say(f"{'device':<8} {'variant':<15} {'s/step':>11} {'host_waits':>10}")
    for dev in devs:
        # graph capture and replay() act on the current device's current stream
        with torch.cuda.device(dev) if dev.type == "cuda" else contextlib.nullcontext():
            norm_log_on(ctx, dev)


def norm_log_on(ctx, dev):
    x = torch.randn(100, 100, device=dev) * 0.1
    w = torch.randn(100, 100, device=dev) * 0.1
    y = torch.empty(100, 100, device=dev)
    logs = {}  # variant -> the norms it logged, for the agreement check

    def host_each_step():
        logs["host_each_step"] = torch.tensor(
            [torch.linalg.matrix_norm(x @ w).item() for _ in range(STEPS)])

    def fill(log):
        for i in range(STEPS):
            log[i] = torch.linalg.matrix_norm(x @ w)

    def device_log():
        log = torch.empty(STEPS, device=dev)
        fill(log)
        logs["device_log"] = log.cpu()

    def matmuls():
        for _ in range(STEPS):
            torch.matmul(x, w, out=y)

    variants = [("host_each_step", host_each_step, STEPS), ("device_log", device_log, 1)]
    if dev.type == "cuda":
        glog = torch.empty(STEPS, device=dev)
        graph, mm_graph = capture(dev, lambda: fill(glog)), capture(dev, matmuls)

        def graph_run():
            graph.replay()
            logs["graph"] = glog.cpu()

        def matmul_only():
            mm_graph.replay()
            torch.cuda.synchronize(dev)

        variants += [("graph", graph_run, 1), ("matmul_only", matmul_only, None)]
    else:
        variants.append(("matmul_only", matmuls, None))
    for name, run, waits in variants:
        med, mn = measure_runs(run, ctx.reps)
        ctx.row(exercise="norm_log", device=str(dev), variant=name, steps=STEPS,
                seconds_per_step=med / STEPS, min_seconds_per_step=mn / STEPS, host_waits=waits)
        say(f"{str(dev):<8} {name:<15} {med / STEPS:>11.4g} {str(waits):>10}")
    first_name, first = next(iter(logs.items()))
    for name, log in logs.items():
        rel = ((log - first).abs() / first.abs().clamp_min(1e-30)).max().item()
        if not rel < 1e-4:  # also catches NaN
            ctx.fail(f"FAIL norm_log {dev}: {name} differs from {first_name} "
                     f"(max relative difference {rel:.3g})")


def capture(dev, body):
    """A CUDA graph of body(), after the side-stream warm-up PyTorch's docs ask for."""
    side = torch.cuda.Stream(dev)
    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side):
        body()
    torch.cuda.current_stream(dev).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()
    torch.cuda.synchronize(dev)
    return graph


def ex_parallel(ctx, devs):
    gpus = [d for d in devs if d.type == "cuda"]
    if not gpus:
        ctx.note("parallel: skipped, no GPU")
        say("skipped: no GPU")
        return
    g0 = gpus[0]
    if len(gpus) >= 2:
        mode, g1 = "two GPUs", gpus[1]
    else:
        mode, g1 = "two streams on one GPU", g0
        streams = (torch.cuda.Stream(g0), torch.cuda.Stream(g0))
    say(f"mode: {mode}")
    say(f"{'n':>5} {'sequential s':>13} {'parallel s':>11} {'scaling':>8}")
    for n in PARALLEL_SIZES:
        a1, b1 = torch.randn(n, n, device=g0), torch.randn(n, n, device=g0)
        a2, b2 = torch.randn(n, n, device=g1), torch.randn(n, n, device=g1)
        a2s, b2s = a2.to(g0), b2.to(g0)  # the second product's inputs, for the one-device run

        def sequential():
            a1 @ b1
            a2s @ b2s

        if mode == "two GPUs":
            def parallel():
                a1 @ b1  # each product runs on its tensors' device, asynchronously
                a2 @ b2
        else:
            for s in streams:
                s.wait_stream(torch.cuda.current_stream(g0))  # inputs were made on the default

            def parallel():
                with torch.cuda.stream(streams[0]):
                    a1 @ b1
                with torch.cuda.stream(streams[1]):
                    a2 @ b2
        both = sorted({g0, g1}, key=str)
        sync(both)
        seq = measure(sequential, both, ctx.target_s, ctx.reps)[0]
        par = measure(parallel, both, ctx.target_s, ctx.reps)[0]
        ctx.row(exercise="parallel", mode=mode, devices=[str(g0), str(g1)], n=n,
                sequential_seconds=seq, parallel_seconds=par, scaling=seq / par)
        say(f"{n:>5} {seq:>13.4g} {par:>11.4g} {seq / par:>8.2f}")


class Context:
    """Options and results shared by the exercises."""

    def __init__(self, args):
        self.quick, self.max_n_cpu, self.dir = args.quick, args.max_n_cpu, args.dir
        self.target_s = 0.010 if args.quick else 0.020
        self.reps = 3 if args.quick else 5
        self.rows, self.notes, self.failed = [], [], False

    def row(self, **fields):
        self.rows.append(fields)

    def note(self, text):
        self.notes.append(text)

    def fail(self, text):
        say(text)
        self.note(text)
        self.failed = True


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="pytorch_exercises.json")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--exercises", default=",".join(ALL_EXERCISES))
    p.add_argument("--max-n-cpu", type=int, default=4096)
    p.add_argument("--dir", default="/tmp", help="where the checkpoint file goes")
    args = p.parse_args()
    chosen = [e.strip() for e in args.exercises.split(",") if e.strip()]
    unknown = [e for e in chosen if e not in ALL_EXERCISES]
    if unknown or not chosen:
        p.error(f"unknown exercise(s) {unknown}; choose from {','.join(ALL_EXERCISES)}")

    torch.manual_seed(0)
    exact_fp32()
    ctx = Context(args)
    devs = [torch.device("cpu")]
    devices = [{"device": "cpu", "name": cpu_name()}]
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            devs.append(torch.device(f"cuda:{i}"))
            devices.append({"device": f"cuda:{i}", "name": torch.cuda.get_device_name(i)})
    else:
        ctx.note("no GPU visible: GPU rows skipped, CPU rows only")
        say("note: no GPU visible; GPU rows are skipped, CPU rows still run")
    ctx.note(f"CPU ops use {torch.get_num_threads()} threads")
    say(f"pytorch {torch.__version__}; devices: " +
        ", ".join(f"{d['device']} ({d['name']})" for d in devices))

    for name in chosen:
        say(f"\n== {name}")
        try:
            globals()[f"ex_{name}"](ctx, devs)
        except Exception as e:  # one broken exercise must not lose the others' rows
            ctx.fail(f"FAIL {name}: {e!r}")
        # Rewritten after every exercise, so a run cut off by a time limit still leaves rows.
        with open(args.out, "w") as f:
            json.dump({"framework": "pytorch", "version": torch.__version__, "devices": devices,
                       "notes": ctx.notes, "rows": ctx.rows}, f, indent=1)
    say(f"\nwrote {args.out}")
    return 1 if ctx.failed else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""PyTorch on one GPU, measured the way bench/gpu/gpu_bench.cpp measures tessera.

    python3 bench/peers/pytorch_gpu.py [--out FILE.json] [--quick] [--device DEV] [--only ...]
                                       [--profile-step mlp|lenet]

Same sizes, repetitions, warm-up and input distributions as gpu_bench, and the same timing:
each timed repetition runs `inner` ops back to back and ends with torch.cuda.synchronize();
the host clock (time.perf_counter) is read after it; the figure is the median over
repetitions of (repetition time / inner). The JSON has gpu_bench's keys (see the comment at
the top of gpu_bench.cpp), so bench/gpu/summarize.py can put the two side by side.
Exit status: 0 when everything ran and every check passed, 1 otherwise, 2 without a GPU.
"""
import argparse
import json
import math
import statistics
import sys
import time
import warnings

import torch

COPY_ELEMS = 64 << 20  # 256 MiB of float32
COPY_BYTES = COPY_ELEMS * 4
LARGE_ELEMS = 256 << 20  # 256 Mi float32 = 1 GiB
LARGE_BYTES = LARGE_ELEMS * 4


DEVICE = None  # set by main(): cuda:0, or cpu to try the script without a GPU


def sync():
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()


def summarize(per_op, inner):
    return {
        "seconds": statistics.median(per_op),
        "min_seconds": min(per_op),
        "max_seconds": max(per_op),
        "reps": len(per_op),
        "inner": inner,
    }


def time_op(warmup, reps, inner, body):
    for _ in range(warmup):
        body()
    sync()
    per_op = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(inner):
            body()
        sync()
        per_op.append((time.perf_counter() - t0) / inner)
    return summarize(per_op, inner)


class Report:
    def __init__(self):
        self.results = {}
        self.errors = []
        self.notes = []

    def record(self, key, timing, value, unit, **extra):
        r = dict(value=value, unit=unit, **timing, **extra)
        self.results[key] = r
        line = (f"{key:<22} {value:10.3f} {unit:<8} (median {timing['seconds']:.3g} s/op over "
                f"{timing['reps']} x {timing['inner']}")
        if "rel_err" in extra:
            line += f", rel_err {extra['rel_err']:.2e}" + ("" if extra["ok"] else " FAILED")
        print(line + ")", flush=True)

    def section(self, name, fn):
        print(f"-- {name}", flush=True)
        try:
            fn()
        except Exception as e:  # one failing section must not hide the others
            print(f"   ERROR in {name}: {e!r}", flush=True)
            self.errors.append(f"{name}: {e!r}")


def set_tf32(on):
    """torch.backends.cuda.matmul.allow_tf32 = on (newer releases deprecate it in favour of
    fp32_precision, which is the fallback)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.backends.cuda.matmul.allow_tf32 = on
        except (AttributeError, RuntimeError):
            torch.backends.cuda.matmul.fp32_precision = "tf32" if on else "ieee"


def bench_small_add(rep, dev, quick):
    a = torch.rand(2, 3).to(dev)
    b = torch.rand(2, 3).to(dev)
    inner = 200
    reps = 7 if quick else 31
    c = None
    for _ in range(2000):
        c = a + b
    sync()
    issue, total = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(inner):
            c = a + b
        issue.append((time.perf_counter() - t0) / inner)
        sync()
        total.append((time.perf_counter() - t0) / inner)
    ti, tt = summarize(issue, inner), summarize(total, inner)
    rep.record("add.small", ti, ti["seconds"] * 1e6, "us")
    rep.record("add.small.sync", tt, tt["seconds"] * 1e6, "us")
    if not torch.equal(c.cpu(), a.cpu() + b.cpu()):
        rep.errors.append("add.small: wrong sum")


def bench_issue_costs(rep, dev, quick):
    """Host time to issue one of exercise 3's ops (no wait inside the timed loop), us."""
    x = torch.rand(100, 100).to(dev)
    w = torch.rand(100, 100).to(dev)
    log = torch.zeros(1000, device=dev)
    one = torch.zeros((), device=dev)

    def copy1():
        log[7] = one

    ops = [("issue.matmul100", lambda: x @ w),
           ("issue.norm100", lambda: torch.linalg.matrix_norm(x)),
           ("issue.copy1", copy1)]
    inner = 200
    for name, op in ops:
        for _ in range(500):
            op()
        sync()
        issue = []
        for _ in range(7 if quick else 21):
            t0 = time.perf_counter()
            for _ in range(inner):
                op()
            issue.append((time.perf_counter() - t0) / inner)
            sync()
        t = summarize(issue, inner)
        rep.record(name, t, t["seconds"] * 1e6, "us")


def bench_matmul(rep, dev, quick):
    plans = [(256, 100, 15), (512, 50, 15), (1024, 20, 11), (2048, 5, 11), (4096, 2, 9),
             (8192, 1, 7)]
    if quick:
        plans = [(256, 20, 5), (1024, 5, 5)]
    try:
        for n, inner, reps in plans:
            gen = torch.Generator().manual_seed(n)
            a = torch.randn(n, n, generator=gen).to(dev)
            b = torch.randn(n, n, generator=gen).to(dev)
            flops = 2.0 * n * n * n
            a16, b16 = a.bfloat16(), b.bfloat16()
            for mode in ("fp32", "tf32", "bf16"):
                tf32, bf16 = mode == "tf32", mode == "bf16"
                set_tf32(tf32)
                key = f"matmul.{mode}.{n}"
                x, w = (a16, b16) if bf16 else (a, b)
                out = [None]

                def body():
                    out[0] = torch.mm(x, w)

                t = time_op(2, reps, inner, body)
                extra = {}
                if n <= 1024:
                    ref = x.cpu().double() @ w.cpu().double()
                    err = ((out[0].cpu().double() - ref).norm() / ref.norm()).item()
                    ok = err == err and err < (1e-2 if bf16 else 5e-3 if tf32 else 1e-4)
                    extra = dict(rel_err=err, ok=ok)
                    if not ok:
                        rep.errors.append(f"{key}: relative error {err:.3g}")
                rep.record(key, t, flops / t["seconds"] / 1e12, "TFLOP/s", **extra)
    finally:
        set_tf32(False)
        torch.cuda.empty_cache()


def bench_copies(rep, dev, quick):
    reps = 5 if quick else 11
    pageable = torch.rand(COPY_ELEMS)
    pinned = pageable.pin_memory()
    on_gpu = torch.empty(COPY_ELEMS, device=dev)
    for kind, host in (("pinned", pinned), ("pageable", pageable)):
        t = time_op(2, reps, 1, lambda: on_gpu.copy_(host))
        rep.record(f"copy.h2d.{kind}", t, COPY_BYTES / t["seconds"] / 1e9, "GB/s",
                   bytes=COPY_BYTES)
        back = torch.empty(COPY_ELEMS, pin_memory=(kind == "pinned"))
        t = time_op(2, reps, 1, lambda: back.copy_(on_gpu))
        rep.record(f"copy.d2h.{kind}", t, COPY_BYTES / t["seconds"] / 1e9, "GB/s",
                   bytes=COPY_BYTES)
        if not torch.equal(back, host):
            rep.errors.append(f"copy round trip ({kind}) changed the data")
    del on_gpu
    torch.cuda.empty_cache()


def bench_device_bandwidth(rep, dev, quick):
    reps = 5 if quick else 11
    gen = torch.Generator(device=dev).manual_seed(1)
    a = torch.rand(LARGE_ELEMS, device=dev, generator=gen)
    b = torch.rand(LARGE_ELEMS, device=dev, generator=gen)
    dst = torch.empty(LARGE_ELEMS, device=dev)
    t = time_op(3, reps, 10, lambda: dst.copy_(a))
    rep.record("copy.d2d", t, 2 * LARGE_BYTES / t["seconds"] / 1e9, "GB/s", bytes=2 * LARGE_BYTES)
    del dst
    out = [None]

    def body():
        out[0] = a + b

    t = time_op(3, reps, 10, body)
    c = out[0]
    err = 0.0
    for start in (0, LARGE_ELEMS - 4096):
        x, y, z = (v[start:start + 4096].cpu() for v in (a, b, c))
        err = max(err, ((z - (x + y)).abs() / (x + y).abs().clamp_min(1e-30)).max().item())
    ok = err == 0
    if not ok:
        rep.errors.append(f"add.large: wrong sum, max rel err {err:.3g}")
    rep.record("add.large", t, 3 * LARGE_BYTES / t["seconds"] / 1e9, "GB/s",
               bytes=3 * LARGE_BYTES, rel_err=err, ok=ok)
    del a, b, c, out
    torch.cuda.empty_cache()


def book_model(name):
    if name == "mlp":
        return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 256),
                                   torch.nn.ReLU(), torch.nn.Linear(256, 10))
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 6, 5, padding=2), torch.nn.Sigmoid(), torch.nn.AvgPool2d(2, 2),
        torch.nn.Conv2d(6, 16, 5), torch.nn.Sigmoid(), torch.nn.AvgPool2d(2, 2),
        torch.nn.Flatten(), torch.nn.Linear(400, 120), torch.nn.Sigmoid(),
        torch.nn.Linear(120, 84), torch.nn.Sigmoid(), torch.nn.Linear(84, 10))


def bench_epoch(rep, dev, quick, name, autocast=False, graph=False, profile=False):
    """One epoch of the book's MLP or LeNet-5, as gpu_bench's train.* rows: eager, under
    bfloat16 autocast, or with each full batch's step replayed from a CUDA graph (PyTorch's
    whole-network capture: static inputs, warm-up on a side stream, torch.cuda.graph). With
    a graph, also one replay alone (`.replay`, us), and with `profile` one more replay
    between torch.cuda.profiler.start() and stop() (gpu_bench's --profile-step)."""
    n, batch = 60000, 256
    key = f"train.{name}" + (".bf16" if autocast else "") + (".graph" if graph else "")
    torch.manual_seed(0)
    x = torch.rand(n, 784, device=dev) if name == "mlp" else torch.rand(n, 1, 28, 28, device=dev)
    net = book_model(name).to(dev)
    y = torch.randint(10, (n,), device=dev)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    loss_sum = torch.zeros((), device=dev)

    def step(xb, yb):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=autocast):
            loss = torch.nn.functional.cross_entropy(net(xb), yb)
        loss.backward()
        opt.step()
        loss_sum.add_(loss.detach())

    g = None
    x_in, y_in = x[:batch].clone(), y[:batch].clone()
    if graph:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                step(x_in, y_in)
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(g):
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=autocast):
                static_loss = torch.nn.functional.cross_entropy(net(x_in), y_in)
            static_loss.backward()
            opt.step()
            loss_sum.add_(static_loss.detach())
    last = [0.0]

    def epoch():
        loss_sum.zero_()
        for start in range(0, n, batch):
            xb, yb = x[start:start + batch], y[start:start + batch]
            if g is not None and len(xb) == batch:
                x_in.copy_(xb)
                y_in.copy_(yb)
                g.replay()
            else:
                step(xb, yb)
        last[0] = loss_sum.item() / ((n + batch - 1) // batch)

    t = time_op(1, 1 if quick else 3, 1, epoch)
    ok = math.isfinite(last[0]) and 1.0 < last[0] < 3.0
    if not ok:
        rep.errors.append(f"{key}: mean loss {last[0]:.4g} per step")
    rep.record(key, t, t["seconds"], "s/epoch", rel_err=0.0, ok=ok)
    if g is not None:  # after the epochs, as gpu_bench: these replays train on
        rt = time_op(3, 3 if quick else 11, 50, g.replay)
        rep.record(key + ".replay", rt, rt["seconds"] * 1e6, "us")
        if profile:
            sync()
            torch.cuda.profiler.start()
            g.replay()
            sync()
            torch.cuda.profiler.stop()


def bench_train(rep, dev, quick):
    for name in ("mlp", "lenet"):
        bench_epoch(rep, dev, quick, name)
        bench_epoch(rep, dev, quick, name, autocast=True)
        if dev.type == "cuda":
            bench_epoch(rep, dev, quick, name, graph=True)


def bench_autocast_step(rep, dev, quick):
    """gpu_bench's step.mlp4096.*: MLP 4096-4096-4096-10, batch 512, SGD, ms per step."""
    width, batch = 4096, 512
    for bf16 in (False, True):
        torch.manual_seed(3)
        net = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(),
                                  torch.nn.Linear(width, width), torch.nn.ReLU(),
                                  torch.nn.Linear(width, 10)).to(dev)
        opt = torch.optim.SGD(net.parameters(), lr=0.01)
        x = torch.randn(batch, width, device=dev)
        y = torch.randint(10, (batch,), device=dev)
        last = [None]

        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
                loss = torch.nn.functional.cross_entropy(net(x), y)
            loss.backward()
            opt.step()
            last[0] = loss

        t = time_op(3, 3 if quick else 11, 2 if quick else 10, step)
        key = f"step.mlp4096.{'bf16' if bf16 else 'fp32'}"
        ok = math.isfinite(last[0].item())
        if not ok:
            rep.errors.append(f"{key}: the loss is not finite")
        rep.record(key, t, t["seconds"] * 1e3, "ms", rel_err=0.0, ok=ok)
        del net, opt
    if dev.type == "cuda":
        torch.cuda.empty_cache()


def bench_optimizer_steps(rep, dev, quick):
    """gpu_bench's optim.*: one step of SGD (momentum 0.9) and of Adam over the book MLP's
    parameters with gradients in place, PyTorch's fused kernels (one launch per step, its
    fastest), us per step."""
    torch.manual_seed(0)
    params = []
    for shape in [(256, 784), (256,), (10, 256), (10,)]:
        p = torch.randn(shape, device=dev, requires_grad=True)
        p.grad = torch.randn(shape, device=dev)
        params.append(p)
    for key, opt in (("optim.sgd_momentum", torch.optim.SGD(params, lr=0.01, momentum=0.9,
                                                             fused=True)),
                     ("optim.adam", torch.optim.Adam(params, lr=1e-3, fused=True))):
        before = params[0].detach().clone()
        t = time_op(20, 7 if quick else 31, 100, opt.step)
        ok = bool(torch.isfinite(params[0]).all()) and not torch.equal(before, params[0])
        if not ok:
            rep.errors.append(f"{key}: the weights did not move or are not finite")
        rep.record(key, t, t["seconds"] * 1e6, "us", rel_err=0.0, ok=ok)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repetitions")
    parser.add_argument("--device", default="cuda:0",
                        help="cpu tries the script without a GPU (copies and graphs skipped)")
    parser.add_argument("--only", default="",
                        help="comma-separated sections, as gpu_bench's --only")
    parser.add_argument("--profile-step", choices=("mlp", "lenet"),
                        help="only that model's recorded step, one replay of it profiled, as "
                             "gpu_bench's --profile-step")
    args = parser.parse_args()
    only = set(filter(None, args.only.split(",")))
    global DEVICE
    DEVICE = torch.device(args.device)

    rep = Report()
    info = {"impl": "pytorch", "version": torch.__version__, "device": "none",
            "quick": args.quick,
            "timing": "median over reps of (rep time / inner); host clock, "
                      "torch.cuda.synchronize before reading it"}
    status = 0
    if DEVICE.type == "cuda" and not torch.cuda.is_available():
        print("pytorch_gpu: torch.cuda.is_available() is False", flush=True)
        rep.errors.append("no GPU: torch.cuda.is_available() is False")
        status = 2
    else:
        dev = DEVICE
        if dev.type == "cuda":
            info["device"] = torch.cuda.get_device_name(dev)
            info["cuda"] = torch.version.cuda
        else:
            info["device"] = "cpu"
        print(f"pytorch_gpu: torch {torch.__version__} (CUDA {torch.version.cuda}) on "
              f"{info['device']}{', quick' if args.quick else ''}", flush=True)

        def run(section_id, name, fn):
            if not args.profile_step and (not only or section_id in only):
                rep.section(name, fn)

        if args.profile_step and dev.type == "cuda":
            rep.section("one recorded training step, profiled",
                        lambda: bench_epoch(rep, dev, True, args.profile_step, graph=True,
                                            profile=True))

        t0 = time.perf_counter()
        run("small_add", "per-op overhead (a + b on 2x3)",
            lambda: bench_small_add(rep, dev, args.quick))
        run("issue", "issue cost of exercise 3's ops", lambda: bench_issue_costs(rep, dev, args.quick))
        run("matmul", "matmul float32 / TF32 / bfloat16", lambda: bench_matmul(rep, dev, args.quick))
        if dev.type == "cuda":
            run("copies", "host <-> device copies", lambda: bench_copies(rep, dev, args.quick))
            run("bandwidth", "device bandwidth (copy_, a + b on 256 Mi)",
                lambda: bench_device_bandwidth(rep, dev, args.quick))
        run("train", "training epochs (MLP, LeNet: float32, bfloat16 autocast, graphs)",
            lambda: bench_train(rep, dev, args.quick))
        run("autocast", "MLP 4096-4096-4096-10 step, float32 and bfloat16 autocast",
            lambda: bench_autocast_step(rep, dev, args.quick))
        run("optim", "optimizer steps over the MLP's parameters (SGD momentum, Adam)",
            lambda: bench_optimizer_steps(rep, dev, args.quick))
        print(f"pytorch_gpu: done in {time.perf_counter() - t0:.1f} s, "
              f"{len(rep.errors)} error(s)", flush=True)
        for e in rep.errors:
            print(f"  error: {e}", flush=True)
        status = 0 if not rep.errors else 1
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(info, results=rep.results, errors=rep.errors, notes=rep.notes), f,
                      indent=2)
    return status


if __name__ == "__main__":
    sys.exit(main())

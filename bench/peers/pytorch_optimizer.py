"""PyTorch's optimizer step on the CPU over the book's MLP parameters (784x256, 256, 256x10,
10) with gradients in place: the peer of tessera_bench's optimizer_step/tessera rows. SGD
with momentum 0.9 and Adam, each with PyTorch's for-each implementation (its default) and,
where PyTorch has one, its fused CPU kernel. Benchmarks only (bench/peers/torch-env):
   .bench-venv/bin/python bench/peers/pytorch_optimizer.py --threads 1"""
import argparse
import statistics
import time

import torch


def median_us(step, reps, inner):
    step()  # warm-up: the first step makes the optimizer's state
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        for _ in range(inner):
            step()
        times.append((time.perf_counter() - start) / inner)
    return statistics.median(times) * 1e6


def mlp_parameters_with_grads():
    torch.manual_seed(0)
    params = []
    for shape in [(256, 784), (256,), (10, 256), (10,)]:
        p = torch.randn(shape, requires_grad=True)
        p.grad = torch.randn(shape)
        params.append(p)
    return params


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--inner", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s); median microseconds per step")
    rows = [
        ("sgd_momentum foreach", lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9, foreach=True)),
        ("sgd_momentum fused", lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9, fused=True)),
        ("adam foreach", lambda p: torch.optim.Adam(p, lr=1e-3, foreach=True)),
        ("adam fused", lambda p: torch.optim.Adam(p, lr=1e-3, fused=True)),
    ]
    for name, make in rows:
        try:
            opt = make(mlp_parameters_with_grads())
        except (RuntimeError, ValueError) as e:  # a fused kernel this build lacks on the CPU
            print(f"{name:24s} not available: {e}")
            continue
        print(f"{name:24s} {median_us(opt.step, args.reps, args.inner):9.1f} us")


if __name__ == "__main__":
    main()

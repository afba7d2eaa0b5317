"""PyTorch's CPU torch.mm in float32 and bfloat16, square n x n: the peer of tessera_bench's
matmul_f32/tessera and matmul_bf16/tessera rows. Benchmarks only (bench/peers/torch-env).
   .bench-venv/bin/python bench/peers/pytorch_cpu_matmul.py --threads 2"""
import argparse
import statistics
import time

import torch


def median_time(f, reps):
    f()  # warm-up
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        f()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sizes", type=int, nargs="*", default=[64, 256, 1024, 4096])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {args.threads} threads; median seconds per call")
    for n in args.sizes:
        a, b = torch.rand(n, n), torch.rand(n, n)
        a16, b16 = a.bfloat16(), b.bfloat16()
        reps = 5 if n >= 2048 else 50
        f32 = median_time(lambda: torch.mm(a, b), reps)
        bf16 = median_time(lambda: torch.mm(a16, b16), reps)
        print(f"n={n} float32 {f32 * 1e6:.1f} us  bfloat16 {bf16 * 1e6:.1f} us  bf16/f32 {bf16 / f32:.2f}")


if __name__ == "__main__":
    main()

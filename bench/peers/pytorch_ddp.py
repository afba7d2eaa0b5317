"""PyTorch DistributedDataParallel, the peer of `tessera train --devices cpu:0,cpu:1`.

Trains the same model on Fashion-MNIST the way tessera's data-parallel Trainer does: one
process per replica (gloo, 1 thread each), the global batch split evenly, SGD with the same
learning rate and momentum, shuffled per epoch with a seed. Prints one JSON line per epoch
with the time of the training pass alone (as tessera's metrics' train_seconds).
With --world 1 it is plain single-process PyTorch on 1 thread (no DDP).

  bench/peers/torch-env
  .bench-venv/bin/python bench/peers/pytorch_ddp.py --model mlp --epochs 3 --world 2
"""
import argparse
import gzip
import json
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

DATA = os.environ.get("TESSERA_DATA_DIR", "/usr/share/datasets/fashion-mnist")


def read_idx(name):
    with gzip.open(os.path.join(DATA, name), "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def model(name):
    if name == "mlp":  # tessera's nn::models::mlp
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    if name == "lenet-bn":  # tessera's nn::models::lenet_batch_norm, the book's BNLeNet
        return nn.Sequential(
            nn.Conv2d(1, 6, 5), nn.BatchNorm2d(6), nn.Sigmoid(), nn.AvgPool2d(2),
            nn.Conv2d(6, 16, 5), nn.BatchNorm2d(16), nn.Sigmoid(), nn.AvgPool2d(2), nn.Flatten(),
            nn.Linear(256, 120), nn.BatchNorm1d(120), nn.Sigmoid(),
            nn.Linear(120, 84), nn.BatchNorm1d(84), nn.Sigmoid(), nn.Linear(84, 10))
    # tessera's nn::models::lenet(book=false): ReLU and max pooling
    return nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))


def run(rank, args):
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    if args.world > 1:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29533")
        dist.init_process_group("gloo", rank=rank, world_size=args.world)
    torch.manual_seed(0)
    images = torch.from_numpy(read_idx("train-images-idx3-ubyte.gz").copy())
    labels = torch.from_numpy(read_idx("train-labels-idx1-ubyte.gz").astype(np.int64))
    x_all = (images.float() / 255.0).unsqueeze(1)  # [60000, 1, 28, 28], as tessera's loader
    net = model(args.model)
    if args.world > 1:
        net = nn.parallel.DistributedDataParallel(net)
    lr = args.lr if args.lr else (0.05 if args.model.startswith("lenet") else 0.1)
    momentum = args.momentum if args.momentum is not None else (0.9 if args.model.startswith("lenet") else 0.0)
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=momentum)
    for epoch in range(1, args.epochs + 1):
        order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(epoch))
        start = time.perf_counter()
        loss_sum = torch.zeros(())
        for first in range(0, len(labels), args.batch):  # the short last batch too, as tessera
            idx = order[first:first + args.batch].tensor_split(args.world)[rank]
            x, y = x_all[idx], labels[idx]
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(net(x), y)
            loss.backward()
            opt.step()
            loss_sum += loss.detach()
        seconds = time.perf_counter() - start
        if rank == 0:
            print(json.dumps({"epoch": epoch, "train_seconds": round(seconds, 3),
                              "train_loss": round(loss_sum.item() / -(-len(labels) // args.batch), 4),
                              "world": args.world, "model": args.model}), flush=True)
    if args.world > 1:
        dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["mlp", "lenet", "lenet-bn"], default="mlp")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--momentum", type=float, default=None)
    args = p.parse_args()
    if args.world == 1:
        run(0, args)
    else:
        mp.spawn(run, args=(args,), nprocs=args.world)


if __name__ == "__main__":
    main()

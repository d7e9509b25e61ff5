#!/usr/bin/env python3
"""Distributed data-parallel training with sluice under torchrun.

    torchrun --nproc_per_node 2 examples/ddp_torchrun.py DATA [--steps 20] [--batch 64]

Each rank makes its own sluice.torch.Loader: rank and world size come from
torchrun's RANK / WORLD_SIZE (sluice reads them itself), so every rank reads a
disjoint shard of one seeded permutation per epoch (DistributedSampler's
order), decodes it with its own threads inside its own budget, and delivers to
its own GPU (LOCAL_RANK). Nothing is forked; there is no sampler to wrap and
no set_epoch to forget: each `for` is the next epoch, the same on every rank.

--dump FILE writes, per rank, the dataset indices the rank trained on in the
first epoch (the tests check that the shards are disjoint and together complete).
"""
import argparse
import json
import os

import torch
import torch.distributed as dist
from torch import nn

import sluice.torch as st


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("data")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--budget", default="1G")
    p.add_argument("--workers", type=int, default=None, help="decode threads per rank (default: its share of the CPUs)")
    p.add_argument("--dump", default=None)
    a = p.parse_args()

    cuda = torch.cuda.is_available()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if cuda:
        torch.cuda.set_device(local)
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if a.workers is None:
        a.workers = max(1, (len(os.sched_getaffinity(0)) // int(os.environ.get("LOCAL_WORLD_SIZE", "1"))))

    model = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(16, a.classes)).to(device)
    model = nn.parallel.DistributedDataParallel(model, device_ids=[local] if cuda else None)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    seen = []
    # fields= makes each batch a dict, which carries "index" (the dataset index of each sample)
    fields = {"image": {"kind": "image", "preset": "train", "size": a.size}, "label": {"kind": "label"}}
    with st.Loader(a.data, batch_size=a.batch, budget=a.budget, workers=a.workers, device=str(device),
                   dtype=torch.float32, drop_last=True, fields=fields) as loader:
        for epoch in range(a.epochs):
            for batch in loader:
                loss = nn.functional.cross_entropy(model(batch["image"]), batch["label"])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                if epoch == 0:
                    seen += batch["index"].tolist()
        stats = loader.stats()
    if a.dump:
        with open(f"{a.dump}.{rank}", "w") as f:
            json.dump({"rank": rank, "world": world, "indices": seen, "samples": stats["samples"]}, f)
    print(f"rank {rank}/{world}: {stats['samples']} samples, {stats['samples_per_s']:.0f}/s, "
          f"loss {loss.item():.3f}")
    # Every rank done with its collectives, and DDP's reducer gone, before
    # the group is torn down. (On the CPU, torch 2.13's gloo still aborts a
    # rank at exit now and then, "terminate called without an active
    # exception", without sluice too: tests/python/test_examples.py.)
    dist.barrier()
    del model, opt
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

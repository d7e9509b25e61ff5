#!/usr/bin/env python3
"""Train ResNet-18 with Ray Train's TorchTrainer, fed by sluice.ray.Loader.

    python examples/ray_train_resnet.py DATA --num-workers 8 --gpu --epochs 2 --budget 4G
    python examples/ray_train_resnet.py DATA --num-workers 2 --model tiny --size 32 --batch 16   # CPU try-out

Each Ray Train worker makes a sluice.ray.Loader: its rank and the world size
come from Ray Train's context, its device from ray.train.torch.get_device(),
its decode threads are its share of the node's CPUs. Every --ckpt-every steps
(and at each epoch's end) it reports a checkpoint holding the model, the
optimizer and the loader's state (sluice.ray.report); when a worker dies Ray
Train restarts the group (--max-failures) and every worker resumes from that
checkpoint at the batch after it: no sample of the epoch skipped or seen twice.
The cluster: RAY_ADDRESS, else a local one. --model tiny is a small CNN for a
CPU try-out; resnet18 comes from torchvision.
"""
import argparse
import json
import os
import tempfile

import ray
import ray.train
import torch
from ray.train import FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchConfig, TorchTrainer
from torch import nn


def make_model(name, classes):
    if name == "resnet18":
        import torchvision

        return torchvision.models.resnet18(num_classes=classes)
    return nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(16, classes))


def train_loop_per_worker(cfg):
    import ray.train.torch

    import sluice.ray

    dtype = torch.float32 if cfg["model"] == "tiny" else torch.float16
    loader = sluice.ray.Loader(cfg["data"], batch_size=cfg["batch"], size=cfg["size"], budget=cfg["budget"],
                               dtype=dtype, channels_last=cfg["model"] != "tiny", seed=cfg["seed"])
    model = ray.train.torch.prepare_model(make_model(cfg["model"], cfg["classes"]))
    if cfg["model"] != "tiny":
        model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-5)
    ckpt = ray.train.get_checkpoint()  # the loader resumed from it already (resume=True)
    if ckpt is not None:
        with ckpt.as_directory() as d:
            saved = torch.load(os.path.join(d, "model.pt"), map_location="cpu")
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["opt"])
    amp = loader.stats()["device"].startswith("cuda") and cfg["model"] != "tiny"
    ctx = loader.context
    step = 0
    for epoch in range(loader.epoch, cfg["epochs"]):
        seen = 0
        for i, (images, labels) in enumerate(loader):
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
                loss = nn.functional.cross_entropy(model(images), labels)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            seen += len(labels)
            step += 1
            last = i + 1 == len(loader)
            if last or (cfg["ckpt_every"] and step % cfg["ckpt_every"] == 0):
                with tempfile.TemporaryDirectory() as d:
                    if ctx.rank == 0:  # the model is the same on every rank: rank 0 saves it
                        torch.save({"model": model.state_dict(), "opt": opt.state_dict()},
                                   os.path.join(d, "model.pt"))
                    sluice.ray.report({"epoch": epoch, "step": step, "loss": loss.item()}, loader, checkpoint_dir=d)
        st = loader.stats()
        print(json.dumps({"rank": ctx.rank, "world": ctx.world_size, "epoch": epoch, "samples": seen,
                          "samples_per_s": round(st["samples_per_s"], 1), "workers": st["workers"],
                          "peak_accounted_bytes": st["peak_accounted_bytes"]}), flush=True)
    loader.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("data")
    p.add_argument("--num-workers", type=int, default=2, help="Ray Train workers")
    p.add_argument("--gpu", action="store_true", help="one GPU a worker (NCCL); else CPU workers (gloo)")
    p.add_argument("--model", default="resnet18", choices=["resnet18", "tiny"])
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--budget", default="2G", help="each worker's loader budget")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ckpt-every", type=int, default=0, help="steps between checkpoints (0: each epoch's end)")
    p.add_argument("--max-failures", type=int, default=1)
    p.add_argument("--storage", default=os.path.join(tempfile.gettempdir(), "sluice-ray-results"))
    p.add_argument("--object-store-memory", type=int, default=None,
                   help="bytes, for a local cluster (no RAY_ADDRESS): Ray's default otherwise")
    a = p.parse_args()
    if os.environ.get("RAY_ADDRESS"):
        ray.init(address=os.environ["RAY_ADDRESS"])
    else:
        ray.init(object_store_memory=a.object_store_memory, include_dashboard=False)
    trainer = TorchTrainer(
        train_loop_per_worker,
        train_loop_config={"data": os.path.abspath(a.data), "model": a.model, "epochs": a.epochs, "batch": a.batch,
                           "size": a.size, "classes": a.classes, "budget": a.budget, "seed": a.seed,
                           "ckpt_every": a.ckpt_every},
        scaling_config=ScalingConfig(num_workers=a.num_workers, use_gpu=a.gpu),
        torch_config=TorchConfig(backend="nccl" if a.gpu else "gloo"),
        run_config=RunConfig(storage_path=a.storage, name="sluice-resnet",
                             failure_config=FailureConfig(max_failures=a.max_failures)),
    )
    result = trainer.fit()
    print(json.dumps({"metrics": result.metrics, "checkpoint": result.checkpoint.path if result.checkpoint else None}))


if __name__ == "__main__":
    main()

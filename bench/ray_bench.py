#!/usr/bin/env python3
"""Ray Data ingest for a training loop: sluice.ray.read vs Ray Data's read_images vs a plain loader.

    python bench/ray_bench.py DATA [--rows sluice_ray,ray_data,sluice] [--model resnet18|tiny|none]
        [--device cuda|cpu] [--batch 256] [--size 224] [--steps 100] [--warmup 10]
        [--workers 4] [--leases N] [--budget 1G] [--num-cpus N] [--object-store-memory BYTES]

Rows, each in a process of its own (a local Ray cluster of its own for the Ray rows):
  sluice_ray  sluice.ray.read(DATA, preset="train") + ds.iter_torch_batches(device=...)
  ray_data    ray.data.read_images(DATA) + map_batches(RandomResizedCrop + horizontal flip, the
              torchvision PIL recipe: crop box, bilinear resize, flip p=0.5) + iter_torch_batches
  sluice      sluice.torch.Loader(DATA, preset="train"), no Ray
The consumer: ResNet-18 forward/backward (torchvision, bf16 autocast on CUDA), a tiny CNN, or none
(the batch is only touched). Each row prints one JSON line: images_per_s over --steps after
--warmup, time_to_first_batch_s (from making the dataset/loader to the first batch on the
device), object_store_peak_mb (pages of the local raylets' /dev/shm plasma files) and spilled_mb
(the session's spill folders), sampled every 0.25 s,
tree_pss_peak_mb (PSS of this process and all its descendants: the local Ray cluster's
processes included, sampled every 0.25 s), and the run's settings.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proc_tree import pids as tree, pss_mb as tree_pss_mb  # noqa: E402

ROWS = ("sluice_ray", "ray_data", "sluice")


def object_store_mb(pids):
    """MiB of memory the plasma stores of these processes' raylets hold: the pages of
    each /dev/shm/plasma* file (tmpfs, found through an open descriptor)."""
    seen, total = set(), 0
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            path = f"/proc/{pid}/fd/{fd}"
            try:
                if "/dev/shm/plasma" not in os.readlink(path):
                    continue
                st = os.stat(path)
            except OSError:
                continue
            if st.st_ino not in seen:
                seen.add(st.st_ino)
                total += st.st_blocks * 512
    return total / 2**20


def spilled_mb(session_dir):
    """MiB in the session's spill folders."""
    total = 0
    for d in glob.glob(os.path.join(session_dir, "ray_spilled_objects*")):
        for base, _, files in os.walk(d):
            for f in files:
                try:
                    total += os.stat(os.path.join(base, f)).st_size
                except OSError:
                    pass
    return total / 2**20


class Sampler(threading.Thread):
    def __init__(self, session_dir):
        super().__init__(daemon=True)
        self.session_dir, self.stop, self.pss, self.store, self.spilled = session_dir, False, 0.0, 0.0, 0.0

    def run(self):
        while not self.stop:
            pids = tree(os.getpid())
            self.pss = max(self.pss, tree_pss_mb(pids))
            if self.session_dir:
                self.store = max(self.store, object_store_mb(pids))
                self.spilled = max(self.spilled, spilled_mb(self.session_dir))
            time.sleep(0.25)


def make_model(name, device):
    import torch
    from torch import nn

    if name == "none":
        return None, None
    if name == "resnet18":
        import torchvision

        m = torchvision.models.resnet18(num_classes=1000)
    else:
        m = nn.Sequential(nn.Conv2d(3, 16, 3, stride=4, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(16, 1000))
    m = m.to(device, memory_format=torch.channels_last)
    return m, torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)


def step(model, opt, images, labels, device):
    import torch

    if model is None:
        return float(images.view(-1)[0])  # touch it
    x = images.to(torch.float32).div_(255).contiguous(memory_format=torch.channels_last)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
        loss = torch.nn.functional.cross_entropy(model(x), labels.long() % 1000)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss


def rrc_flip(batch, size, rng):
    """RandomResizedCrop(size, scale 0.08-1, ratio 3/4-4/3) + horizontal flip, as torchvision's
    PIL path does it, on a batch of HWC uint8 images -> uint8 [N, 3, size, size]."""
    import math

    import numpy as np
    from PIL import Image

    out = np.empty((len(batch["image"]), 3, size, size), dtype=np.uint8)
    for n, img in enumerate(batch["image"]):
        h, w = img.shape[:2]
        area = h * w
        box = (0, 0, w, h)
        for _ in range(10):
            target = area * rng.uniform(0.08, 1.0)
            ar = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
            cw, ch = int(round(math.sqrt(target * ar))), int(round(math.sqrt(target / ar)))
            if 0 < cw <= w and 0 < ch <= h:
                x, y = rng.integers(0, w - cw + 1), rng.integers(0, h - ch + 1)
                box = (x, y, x + cw, y + ch)
                break
        im = Image.fromarray(img).resize((size, size), Image.BILINEAR, box=box)
        a = np.asarray(im)
        if rng.random() < 0.5:
            a = a[:, ::-1]
        out[n] = a.transpose(2, 0, 1)
    classes = {}
    labels = np.array([classes.setdefault(os.path.basename(os.path.dirname(p)), len(classes)) for p in batch["path"]])
    return {"image": out, "label": labels}


def run_row(a):
    import torch

    device = torch.device(a.device if a.device != "cuda" or torch.cuda.is_available() else "cpu")
    model, opt = make_model(a.model, device)
    ray_on = a.row != "sluice"
    session_dir = None
    if ray_on:
        import ray

        ray.init(num_cpus=a.num_cpus, object_store_memory=a.object_store_memory, include_dashboard=False,
                 log_to_driver=False, configure_logging=False)
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        session_dir = ray._private.worker._global_node.get_session_dir_path()
    sampler = Sampler(session_dir)
    sampler.start()
    t0 = time.perf_counter()
    if a.row == "sluice_ray":
        import sluice.ray

        ds = sluice.ray.read(a.data, batch_size=a.batch, size=a.size, budget=a.budget, workers=a.workers,
                             leases=a.leases)
        it = ds.iter_torch_batches(batch_size=a.batch, device=device, drop_last=True)
        batches = ((b["image"], b["label"]) for b in it)
    elif a.row == "ray_data":
        import numpy as np
        import ray

        rng = np.random.default_rng(0)
        ds = ray.data.read_images(a.data, mode="RGB", include_paths=True)
        ds = ds.map_batches(rrc_flip, fn_kwargs={"size": a.size, "rng": rng}, batch_size=64, batch_format="numpy")
        it = ds.iter_torch_batches(batch_size=a.batch, device=device, drop_last=True)
        batches = ((b["image"], b["label"]) for b in it)
    else:
        import sluice.torch

        ld = sluice.torch.Loader(a.data, batch_size=a.batch, size=a.size, budget=a.budget, workers=a.workers,
                                 device=str(device), dtype=torch.uint8, drop_last=True)
        batches = (b for epoch in range(1000) for b in ld)
    ttfb = None
    done, t_start = 0, None
    for i, (images, labels) in enumerate(batches):
        step(model, opt, images, labels, device)
        if ttfb is None:
            if device.type == "cuda":
                torch.cuda.synchronize()
            ttfb = time.perf_counter() - t0
        if i == a.warmup:
            if device.type == "cuda":
                torch.cuda.synchronize()
            t_start = time.perf_counter()
        elif i > a.warmup:
            done += len(labels)
        if i >= a.warmup + a.steps:
            break
    if device.type == "cuda":
        torch.cuda.synchronize()
    secs = time.perf_counter() - t_start if t_start else float("nan")
    sampler.stop = True
    sampler.join()
    res = {"row": a.row, "model": a.model, "device": str(device), "batch": a.batch, "size": a.size,
           "steps": a.steps, "images": done, "images_per_s": round(done / secs, 1) if done else 0.0,
           "time_to_first_batch_s": round(ttfb, 2) if ttfb is not None else None,
           "object_store_peak_mb": round(sampler.store, 1) if ray_on else None,
           "spilled_mb": round(sampler.spilled, 1) if ray_on else None,
           "tree_pss_peak_mb": round(sampler.pss, 1), "workers": a.workers, "budget": a.budget,
           "leases": a.leases, "cpus": os.cpu_count()}
    print(json.dumps(res), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("data")
    p.add_argument("--rows", default=",".join(ROWS))
    p.add_argument("--row", default=None, help=argparse.SUPPRESS)  # one row, in this process
    p.add_argument("--model", default="resnet18", choices=["resnet18", "tiny", "none"])
    p.add_argument("--device", default="cuda")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--workers", type=int, default=4, help="decode threads a read task (sluice_ray) / the loader")
    p.add_argument("--leases", type=int, default=None, help="sluice_ray read tasks (None: as Ray asks)")
    p.add_argument("--budget", default="1G", help="a read task's budget (sluice_ray) / the loader's")
    p.add_argument("--num-cpus", type=int, default=None, help="the local Ray cluster's CPUs (None: all)")
    p.add_argument("--object-store-memory", type=int, default=None, help="bytes (None: Ray's default)")
    a = p.parse_args()
    if a.row:
        return run_row(a)
    for row in a.rows.split(","):
        if row not in ROWS:
            sys.exit(f"unknown row {row!r}: one of {ROWS}")
        cmd = [sys.executable, os.path.abspath(__file__), *sys.argv[1:], "--row", row]
        r = subprocess.run(cmd, capture_output=True, text=True)
        lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
        if r.returncode != 0 or not lines:
            print(json.dumps({"row": row, "error": (r.stderr or r.stdout)[-2000:]}), flush=True)
        else:
            print(lines[-1], flush=True)


if __name__ == "__main__":
    main()

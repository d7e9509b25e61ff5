#!/usr/bin/env python3
"""Train a torchvision ResNet on an image folder and measure the input pipeline.

    python examples/train_imagenet.py DATA --arch resnet50 --loader sluice --steps 200
    python examples/train_imagenet.py DATA --arch resnet50 --loader torch  --steps 200
    python examples/train_imagenet.py DATA --arch resnet50 --loader synthetic --steps 200

DATA is an ImageFolder tree (class folders), or a folder holding one under
train/ (what bench/make_imagenet_like.py writes).

--loader
  sluice     sluice.torch.Loader: decode threads inside the budget, pinned slots,
             uint8 -> dtype + normalization on the GPU, one batch staged ahead
  torch      torch.utils.data.DataLoader over torchvision ImageFolder with
             RandomResizedCrop + RandomHorizontalFlip + ToTensor + Normalize,
             --workers processes (16), pin_memory, persistent workers
  synthetic  one random batch already on the GPU, reused: the ceiling

Every step: forward + backward + SGD under AMP (bf16 by default, or fp16 with
a GradScaler), channels_last. After --warmup steps, --steps steps are timed
between two cuda synchronizations. A sampler thread records the peak RSS and
PSS of the whole process tree (the DataLoader's worker processes included;
PSS splits shared pages fairly, RSS counts them in every process).

Prints one JSON line: images_per_s, step_ms, peak memory (process, tree RSS,
tree PSS, GPU allocated/reserved) and the loader's settings.
"""
import argparse
import json
import os
import threading
import time

import torch


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("data")
    p.add_argument("--arch", default="resnet50", choices=["resnet18", "resnet50"])
    p.add_argument("--loader", default="sluice", choices=["sluice", "torch", "synthetic"])
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--steps", type=int, default=200, help="timed steps (after warm-up)")
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--workers", type=int, default=None,
                   help="torch: worker processes (16); sluice: decode threads (all CPUs)")
    p.add_argument("--budget", default="4G", help="sluice memory budget")
    p.add_argument("--prefetch", type=int, default=None, help="sluice batch slots (auto)")
    p.add_argument("--amp", default="bf16", choices=["bf16", "fp16", "off"])
    p.add_argument("--no-channels-last", dest="channels_last", action="store_false")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sample-interval", type=float, default=0.5, help="memory sampler period, s")
    return p.parse_args()


# ---- memory of the process tree ------------------------------------------------
def _children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


def _tree(pid):
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(_children(p))
    return out


def _rollup(pid):
    """(rss, pss) in bytes from smaps_rollup, (0, 0) for a process that is gone."""
    rss = pss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Rss:"):
                    rss = int(line.split()[1]) * 1024
                elif line.startswith("Pss:"):
                    pss = int(line.split()[1]) * 1024
    except OSError:
        pass
    return rss, pss


class TreeMemory(threading.Thread):
    """Samples RSS and PSS summed over this process and its descendants."""

    def __init__(self, interval):
        super().__init__(daemon=True)
        self.interval = interval
        self.peak_rss = self.peak_pss = 0
        self.procs = 1
        self._stop_evt = threading.Event()

    def sample(self):
        rss = pss = 0
        pids = _tree(os.getpid())
        for pid in pids:
            r, p = _rollup(pid)
            rss += r
            pss += p
        self.peak_rss = max(self.peak_rss, rss)
        self.peak_pss = max(self.peak_pss, pss)
        self.procs = max(self.procs, len(pids))

    def run(self):
        while not self._stop_evt.wait(self.interval):
            self.sample()

    def stop(self):
        self._stop_evt.set()
        self.join()
        self.sample()


def peak_rss_self():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


# ---- input pipelines ---------------------------------------------------------------
def train_root(data):
    sub = os.path.join(data, "train")
    return sub if os.path.isdir(sub) else data


def count_classes(root):
    return sum(1 for e in os.scandir(root) if e.is_dir())


def sluice_batches(args, root, dtype, info):
    import sluice.torch

    loader = sluice.torch.Loader(
        root, batch_size=args.batch, preset="train", size=args.size, seed=args.seed,
        drop_last=True, budget=args.budget, workers=args.workers, prefetch=args.prefetch,
        device="cuda", dtype=dtype, channels_last=args.channels_last)
    info["loader"] = loader
    epoch = 0
    while True:
        loader.set_epoch(epoch)
        for images, labels in loader:
            yield images, labels
        epoch += 1


def torch_batches(args, root, info):
    import torchvision.datasets as tvd
    import torchvision.transforms as T

    tf = T.Compose([
        T.RandomResizedCrop(args.size),
        T.RandomHorizontalFlip(),
        T.ToTensor(),
        T.Normalize(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)),
    ])
    ds = tvd.ImageFolder(root, transform=tf)
    workers = 16 if args.workers is None else args.workers
    dl = torch.utils.data.DataLoader(
        ds, batch_size=args.batch, shuffle=True, num_workers=workers, pin_memory=True,
        drop_last=True, persistent_workers=workers > 0,
        prefetch_factor=2 if workers > 0 else None)
    info["workers"] = workers
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    while True:
        for images, labels in dl:
            yield (images.cuda(non_blocking=True).contiguous(memory_format=fmt),
                   labels.cuda(non_blocking=True))


def synthetic_batches(args, ncls, dtype):
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    g = torch.Generator(device="cuda").manual_seed(args.seed)
    images = torch.randn(args.batch, 3, args.size, args.size, device="cuda", generator=g)
    images = images.to(dtype).contiguous(memory_format=fmt)
    labels = torch.randint(0, ncls, (args.batch,), device="cuda", generator=g)
    while True:
        yield images, labels


# ---- training ------------------------------------------------------------------
def main():
    args = parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("train_imagenet.py needs a CUDA GPU")
    import torchvision

    torch.manual_seed(args.seed)
    torch.backends.cudnn.benchmark = True
    root = train_root(args.data)
    ncls = count_classes(root)
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "off": torch.float32}[args.amp]

    mem = TreeMemory(args.sample_interval)
    mem.start()
    info = {}
    if args.loader == "sluice":
        batches = sluice_batches(args, root, amp_dtype, info)
    elif args.loader == "torch":
        batches = torch_batches(args, root, info)
    else:
        batches = synthetic_batches(args, ncls, amp_dtype)

    model = getattr(torchvision.models, args.arch)(num_classes=ncls).cuda()
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    scaler = torch.amp.GradScaler("cuda", enabled=args.amp == "fp16")
    criterion = torch.nn.CrossEntropyLoss()

    def step(images, labels):
        with torch.autocast("cuda", dtype=amp_dtype, enabled=args.amp != "off"):
            loss = criterion(model(images), labels)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss

    model.train()
    for _ in range(args.warmup):
        loss = step(*next(batches))
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    wait = 0.0
    t0 = time.perf_counter()
    for _ in range(args.steps):
        w0 = time.perf_counter()
        images, labels = next(batches)
        wait += time.perf_counter() - w0
        loss = step(images, labels)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    mem.stop()

    gib = float(1 << 30)
    result = {
        "arch": args.arch,
        "loader": args.loader,
        "batch": args.batch,
        "size": args.size,
        "steps": args.steps,
        "warmup": args.warmup,
        "amp": args.amp,
        "channels_last": args.channels_last,
        "images_per_s": round(args.steps * args.batch / seconds, 1),
        "step_ms": round(1000 * seconds / args.steps, 2),
        "data_wait_s": round(wait, 3),
        "loss": round(float(loss.item()), 4),
        "peak_rss_gb": round(peak_rss_self() / gib, 3),
        "peak_tree_rss_gb": round(mem.peak_rss / gib, 3),
        "peak_tree_pss_gb": round(mem.peak_pss / gib, 3),
        "processes": mem.procs,
        "gpu_peak_allocated_gb": round(torch.cuda.max_memory_allocated() / gib, 3),
        "gpu_peak_reserved_gb": round(torch.cuda.max_memory_reserved() / gib, 3),
        "gpu": torch.cuda.get_device_name(),
        "cpus": len(os.sched_getaffinity(0)),
        "classes": ncls,
    }
    if args.loader == "torch":
        result["workers"] = info["workers"]
    if args.loader == "sluice":
        s = info["loader"].stats()
        result.update({
            "workers": s["workers"],
            "slots": s["slots"],
            "budget_gb": round(s["budget_bytes"] / gib, 3),
            "peak_accounted_gb": round(s["peak_accounted_bytes"] / gib, 3),
            "pinned_gb": round(s["pinned_bytes"] / gib, 3),
            "consumer_wait_s": round(s["consumer_wait_s"], 3),
            "loader_samples_per_s": round(s["samples_per_s"], 1),
            "errors": s["errors"],
            "error_samples": [{"path": e.get("path"), "reason": e.get("reason")}
                              for e in info["loader"].errors()[:3]],
        })
        info["loader"].close()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Issue 12 on a node: epoch time and bytes read from storage, sluice's sample
cache against no cache and against the incident's per-worker LRU in a PyTorch
DataLoader, one rank or several sharing a node.

Loaders (one JSON line per epoch, per rank; epoch 0 fills the caches):
  sluice       sluice.Loader(..., cache=CACHE, cache_share="node", cache_what="encoded")
  sluice-none  sluice.Loader without a cache
  torch-lru    DataLoader(16 workers, pin_memory, persistent workers), a Dataset
               reading files through an LRU of CACHE / workers bytes per worker
               process (the same total memory; the incident's cap multiplied
               instead with --lru-per-worker CACHE), Pillow decode,
               RandomResizedCrop(224) + flip done with Pillow (no torchvision)
  torch-none   the same DataLoader without a cache

    cache_bench.py DATA --loader sluice --cache 20G --ranks 2 --epochs 3
    cache_bench.py DATA --loader torch-lru --cache 20G --ranks 2 --workers 16

With --ranks R, R processes are started as torchrun would (RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR/PORT: one job key) and each takes
its DistributedSampler shard. Storage bytes are the sum of read_bytes in
/proc/PID/io over every process of the run (device reads only: page-cache
hits excluded), plus the cgroup's io.stat where one is given (--cgroup DIR);
file bytes are the sum of rchar (every byte read(), page cache or not: what
the loader asked of the files); node memory is the summed PSS of the tree,
sampled every 0.5 s. --drop evicts each file from the page cache once read:
the torch Dataset right after its read, sluice once the file's sample is
delivered (every rank's files), so both see a dataset far larger than memory.

On the GPU host (2 ranks sharing a node cache against the incident's
per-worker LRU; one command, results in $OUT/results.jsonl):

    IMAGES=200000 bench/cache_bench.sh data && CACHE=6G MEMLIMIT=24G \
        LOADERS="sluice-none:2 sluice:2 torch-lru:2 torch-none:2" bench/cache_bench.sh loader
Run it inside a memory cgroup whose limit is below the dataset's size, or with
storage throttled (cgroup io.max): bench/cache_bench.sh sets both up.
"""
import argparse
import collections
import json
import math
import os
import random
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from image_folder import walk  # noqa: E402
from proc_tree import pids as tree_pids, pss_kb  # noqa: E402


def proc_field(pid, name, key):
    try:
        with open(f"/proc/{pid}/{name}") as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree_read_bytes(root):
    return sum(proc_field(p, "io", "read_bytes:") for p in tree_pids(root))


def tree_file_bytes(root):
    return sum(proc_field(p, "io", "rchar:") for p in tree_pids(root))


def evict(paths):
    for p in paths:
        try:
            fd = os.open(p, os.O_RDONLY)
        except OSError:
            continue
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def tree_pss(root):
    return pss_kb(tree_pids(root)) * 1024


def cgroup_read_bytes(cg):
    if not cg:
        return None
    try:
        with open(os.path.join(cg, "io.stat")) as f:
            return sum(int(kv.split("=")[1]) for line in f for kv in line.split() if kv.startswith("rbytes="))
    except OSError:
        return None


class PeakPss(threading.Thread):
    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.peak, self.stop = pid, 0, False

    def run(self):
        while not self.stop:
            self.peak = max(self.peak, tree_pss(self.pid))
            time.sleep(0.5)


# ---- the torch peer: the incident's Dataset ----------------------------------
class LruBytes:
    """Encoded bytes by path, at most cap bytes, least recently used out."""

    def __init__(self, cap):
        self.cap, self.used, self.d = cap, 0, collections.OrderedDict()

    def get(self, key):
        v = self.d.get(key)
        if v is not None:
            self.d.move_to_end(key)
        return v

    def put(self, key, v):
        if len(v) > self.cap:
            return
        while self.used + len(v) > self.cap:
            _, old = self.d.popitem(last=False)
            self.used -= len(old)
        self.d[key] = v
        self.used += len(v)


class FolderDataset:
    def __init__(self, items, size, lru_bytes, drop):
        self.items, self.size, self.lru_bytes, self.lru, self.drop = items, size, lru_bytes, None, drop
        self.hits = self.lookups = 0

    def __len__(self):
        return len(self.items)

    def read(self, path):
        if self.lru_bytes and self.lru is None:
            self.lru = LruBytes(self.lru_bytes)  # one per worker process: made after the fork
        v = self.lru.get(path) if self.lru else None
        self.lookups += 1
        if v is None:
            with open(path, "rb") as f:
                v = f.read()
                if self.drop:  # as if the dataset were far larger than memory
                    os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            if self.lru:
                self.lru.put(path, v)
        else:
            self.hits += 1
        return v

    def __getitem__(self, i):
        import io
        import numpy as np
        import torch
        from PIL import Image
        path, label = self.items[i]
        im = Image.open(io.BytesIO(self.read(path))).convert("RGB")
        w, h = im.size
        box = (0, 0, w, h)
        for _ in range(10):  # RandomResizedCrop(scale 0.08-1, ratio 3/4-4/3), torchvision's sampling
            area = w * h * random.uniform(0.08, 1.0)
            ratio = math.exp(random.uniform(math.log(3 / 4), math.log(4 / 3)))
            cw, ch = int(round(math.sqrt(area * ratio))), int(round(math.sqrt(area / ratio)))
            if 0 < cw <= w and 0 < ch <= h:
                x, y = random.randint(0, w - cw), random.randint(0, h - ch)
                box = (x, y, x + cw, y + ch)
                break
        im = im.resize((self.size, self.size), Image.BILINEAR, box=box)
        if random.random() < 0.5:
            im = im.transpose(Image.FLIP_LEFT_RIGHT)
        return torch.from_numpy(np.asarray(im).transpose(2, 0, 1).copy()), label


def run_torch(a, rank, world):
    import torch
    from torch.utils.data import DataLoader, DistributedSampler
    torch.set_num_threads(1)
    _, items = walk(a.data)
    # the same total memory as the node cache: cache / (workers x ranks) each
    per_worker = a.lru_per_worker or (a.cache // (a.workers * world) if a.loader == "torch-lru" else 0)
    ds = FolderDataset(items, a.size, per_worker, a.drop)
    sampler = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=True, seed=a.seed)
    dl = DataLoader(ds, batch_size=a.batch, sampler=sampler, num_workers=a.workers, pin_memory=True,
                    persistent_workers=True, prefetch_factor=2)
    for e in range(a.epochs):
        sampler.set_epoch(e)
        t0, io0, f0 = time.time(), tree_read_bytes(os.getpid()), tree_file_bytes(os.getpid())
        n = 0
        for x, _ in dl:
            n += len(x)
        yield e, time.time() - t0, n, tree_read_bytes(os.getpid()) - io0, {
            "file_bytes": tree_file_bytes(os.getpid()) - f0}


def run_sluice(a, rank, world):
    import sluice
    kw = dict(batch_size=a.batch, size=a.size, seed=a.seed, budget=a.budget, rank=rank, world_size=world)
    if a.loader == "sluice":
        kw.update(cache=a.cache, cache_share=a.share, cache_what="encoded")
    if a.sluice_workers:
        kw["workers"] = a.sluice_workers
    ld = sluice.Loader(a.data, **kw)
    with ld:
        last = {}
        for e in range(a.epochs):
            ld.set_epoch(e)
            t0, io0, f0 = time.time(), tree_read_bytes(os.getpid()), tree_file_bytes(os.getpid())
            n = 0
            for b in ld:
                n += len(b["label"])
                if a.drop:  # the files just delivered leave the page cache, as the torch Dataset's do
                    evict(ld.sample_path(i) for i in memoryview(b["index"]).tolist())
            st = ld.stats()
            keep = {k: st[k] - last.get(k, 0) for k in ("cache_hits", "cache_misses", "cache_evictions",
                                                        "storage_bytes_read")}
            keep.update({k: st[k] for k in ("cache_bytes", "cache_capacity", "cache_processes", "workers")})
            keep["cache_hit_rate"] = round(keep["cache_hits"] / max(1, keep["cache_hits"] + keep["cache_misses"]), 4)
            keep["file_bytes"] = tree_file_bytes(os.getpid()) - f0
            last = st
            yield e, time.time() - t0, n, tree_read_bytes(os.getpid()) - io0, keep


def rank_main(a):
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    run = run_torch if a.loader.startswith("torch") else run_sluice
    for e, sec, n, read, extra in run(a, rank, world):
        line = dict(loader=a.loader, rank=rank, ranks=world, epoch=e, seconds=round(sec, 3), samples=n,
                    samples_per_s=round(n / sec, 1), storage_bytes=read, cache=a.cache, **extra)
        print(json.dumps(line), flush=True)


def launch(a):
    """Start the ranks as torchrun would and report the node: summed storage
    reads, peak summed PSS, the slowest rank's epoch time."""
    port = str(29500 + os.getpid() % 1000)
    procs, t0 = [], time.time()
    cg0 = cgroup_read_bytes(a.cgroup)
    peak = PeakPss(os.getpid())
    peak.start()
    for r in range(a.ranks):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(a.ranks), LOCAL_RANK=str(r),
                   LOCAL_WORLD_SIZE=str(a.ranks), MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        procs.append(subprocess.Popen([sys.executable, __file__, "--as-rank"] + sys.argv[1:], env=env,
                                      stdout=subprocess.PIPE, text=True))
    lines = []
    for p in procs:
        for line in p.stdout:
            print(line, end="", flush=True)
            lines.append(json.loads(line))
        p.wait()
    peak.stop = True
    cg1 = cgroup_read_bytes(a.cgroup)
    by_epoch = collections.defaultdict(list)
    for l in lines:
        by_epoch[l["epoch"]].append(l)
    for e in sorted(by_epoch):
        ls = by_epoch[e]
        print(json.dumps(dict(loader=a.loader, node=True, ranks=a.ranks, epoch=e,
                              seconds=max(l["seconds"] for l in ls), samples=sum(l["samples"] for l in ls),
                              storage_bytes=sum(l["storage_bytes"] for l in ls),
                              file_bytes=sum(l.get("file_bytes", 0) for l in ls), cache=a.cache,
                              peak_node_pss=peak.peak)), flush=True)
    if cg0 is not None and cg1 is not None:
        print(json.dumps(dict(loader=a.loader, cgroup_read_bytes=cg1 - cg0, seconds=round(time.time() - t0, 3))))
    return max(p.returncode for p in procs)


def parse_size(s):
    s = str(s).strip().upper().rstrip("B").rstrip("I")
    mul = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(s[-1:], 1)
    return int(float(s[:-1] if mul > 1 else s) * mul)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data")
    ap.add_argument("--loader", choices=["sluice", "sluice-none", "torch-lru", "torch-none"], default="sluice")
    ap.add_argument("--cache", type=parse_size, default=parse_size("1G"), help="cache bytes for the node")
    ap.add_argument("--share", choices=["node", "none"], default="node", help="sluice: cache_share")
    ap.add_argument("--lru-per-worker", type=parse_size, default=0, help="torch-lru: bytes per worker (the incident)")
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--workers", type=int, default=16, help="DataLoader workers per rank")
    ap.add_argument("--sluice-workers", type=int, default=0, help="sluice workers per rank (0: its default)")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--budget", default="4G", help="sluice: each rank's budget")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--drop", action="store_true",
                    help="evict each file from the page cache once read (dataset >> memory)")
    ap.add_argument("--cgroup", default="", help="cgroup v2 folder whose io.stat counts the run's reads")
    ap.add_argument("--as-rank", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.as_rank:
        rank_main(a)
        return 0
    return launch(a)


if __name__ == "__main__":
    sys.exit(main())

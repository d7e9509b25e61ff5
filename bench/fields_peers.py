#!/usr/bin/env python3
"""Fields benchmark (issue 10): sluice against a PyTorch DataLoader doing
what users write today, side by side in one run, plus the page-cache read
rate of the same files (`cat`), on the datasets of make_fields_bench.py.

  pairs: blur + sharp (720x1280x3 f32) + events (32x720x1280 f32), one
         random 256x256 crop for all three (aligned)
  lidar: 8 raw scans of 100k-120k points, 16384 random points each (zero
         padded when fewer) + the true counts

The DataLoader: 16 workers, pin_memory, batch 8, shuffle, np.load /
np.fromfile of whole files then crop / np.random.choice (the usual code).
sluice: sluice.Loader(JSONL, batch_size=8, budget=..., fields={...}) as
DESIGN.md shows (skipped, with the reason, where this build has no fields=).

Each loader prints one JSON line: samples/s, MB/s of file bytes consumed,
peak tree PSS (main process + workers, from /proc/PID/smaps_rollup, through
the shared peer_torch.py's sampler), and loader_pss_mb: that peak less the
tree's PSS before the loader (torch imported), what the loader itself holds;
then the ratios.

    SHARED=/work/shared bench/fields_peers.py DATA --case pairs [--batches 60] [--workers 16]
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.environ.get("SHARED", "/work/shared"), "bench"))
from peer_torch import PeakSampler, tree_pss_bytes  # noqa: E402  (the shared tree-PSS sampler)

CROP, POINTS, SEQ = 256, 16384, 8


def rows(data, case):
    with open(os.path.join(data, f"{case}.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def file_bytes(data, row):
    paths = row["lidar"] if "lidar" in row else [row[k] for k in ("blur", "sharp", "events")]
    return sum(os.path.getsize(os.path.join(data, p)) for p in paths)


# ---- the DataLoader side (what users write) -----------------------------------

def torch_dataset(data, case):
    import torch

    class Pairs(torch.utils.data.Dataset):
        def __init__(self):
            self.rows = rows(data, "pairs")

        def __len__(self):
            return len(self.rows)

        def __getitem__(self, i):
            r = self.rows[i]
            blur = np.load(os.path.join(data, r["blur"]))
            sharp = np.load(os.path.join(data, r["sharp"]))
            events = np.load(os.path.join(data, r["events"]))
            y = np.random.randint(0, blur.shape[0] - CROP + 1)
            x = np.random.randint(0, blur.shape[1] - CROP + 1)
            return {"blur": torch.from_numpy(np.ascontiguousarray(blur[y:y + CROP, x:x + CROP])),
                    "sharp": torch.from_numpy(np.ascontiguousarray(sharp[y:y + CROP, x:x + CROP])),
                    "events": torch.from_numpy(np.ascontiguousarray(events[:, y:y + CROP, x:x + CROP]))}

    class Lidar(torch.utils.data.Dataset):
        def __init__(self):
            self.rows = rows(data, "lidar")

        def __len__(self):
            return len(self.rows)

        def __getitem__(self, i):
            out = np.zeros((SEQ, POINTS, 4), np.float32)
            lens = np.zeros(SEQ, np.int64)
            for k, p in enumerate(self.rows[i]["lidar"]):
                pts = np.fromfile(os.path.join(data, p), dtype=np.float32).reshape(-1, 4)
                if len(pts) > POINTS:
                    pts = pts[np.random.choice(len(pts), POINTS, replace=False)]
                out[k, :len(pts)] = pts
                lens[k] = len(pts)
            return {"lidar": torch.from_numpy(out), "lidar_len": torch.from_numpy(lens)}

    return Pairs() if case == "pairs" else Lidar()


def run_torch(a, per_sample_bytes):
    import torch

    ds = torch_dataset(a.data, a.case)
    dl = torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.workers, pin_memory=True,
                                     drop_last=True, worker_init_fn=lambda w: np.random.seed(1234 + w))
    return measure("torch DataLoader (np.load, %d workers, pin_memory)" % a.workers, epochs(dl), a, per_sample_bytes)


# ---- the sluice side -------------------------------------------------------------

def sluice_fields(case):
    if case == "pairs":
        crop = {"crop": [CROP, CROP], "crop_group": "xy"}
        return {"blur": dict(kind="array", layout="HWC", **crop), "sharp": dict(kind="array", layout="HWC", **crop),
                "events": dict(kind="array", layout="CHW", **crop)}
    return {"lidar": {"kind": "sequence", "of": {"kind": "array", "format": "raw", "dtype": "float32",
                                                  "shape": [-1, 4], "points": POINTS}}}


def run_sluice(a, per_sample_bytes):
    import sluice

    try:
        ld = sluice.Loader(os.path.join(a.data, f"{a.case}.jsonl"), batch_size=a.batch, budget=a.budget,
                           fields=sluice_fields(a.case), workers=a.workers)
    except TypeError as e:
        print(json.dumps({"loader": "sluice", "skipped": f"this build has no fields= ({e})"}))
        return None
    except ValueError as e:  # a kind this build does not have yet (array: issue 10's second half)
        print(json.dumps({"loader": "sluice", "skipped": str(e)}))
        return None
    return measure("sluice (%s budget)" % a.budget, epochs(ld), a, per_sample_bytes)


# ---- measuring ----------------------------------------------------------------------

def epochs(loader):
    """Batches of epoch after epoch (small datasets end before the run does)."""
    while True:
        yield from loader


def measure(name, it, a, per_sample_bytes):
    sampler = PeakSampler(os.getpid())
    sampler.start()
    for _ in range(a.warmup):
        next(it)
    t0 = time.perf_counter()
    for _ in range(a.batches):
        b = next(it)
        sum(int(np.prod(v.shape)) for v in b.values())  # touch nothing heavy: the consumer is a GPU that waits
    dt = time.perf_counter() - t0
    sampler.stop = True
    sampler.join()
    n = a.batches * a.batch
    res = {"loader": name, "case": a.case, "samples": n, "seconds": round(dt, 3), "samples_per_s": round(n / dt, 2),
           "file_mb_per_s": round(n * per_sample_bytes / dt / 1e6, 1), "peak_tree_pss_mb": round(sampler.peak / 2**20, 1),
           "base_pss_mb": round(a.base_pss / 2**20, 1), "loader_pss_mb": round((sampler.peak - a.base_pss) / 2**20, 1)}
    print(json.dumps(res), flush=True)
    return res


def run_cat(a, files):
    """Page-cache read rate of the files: `cat` twice (the second is warm)."""
    total = sum(os.path.getsize(f) for f in files)
    best = 1e9
    for _ in range(2):
        t0 = time.perf_counter()
        for i in range(0, len(files), 256):
            subprocess.run(["cat"] + files[i:i + 256], stdout=subprocess.DEVNULL, check=True)
        best = min(best, time.perf_counter() - t0)
    res = {"loader": "cat (page cache)", "case": a.case, "bytes": total, "seconds": round(best, 3),
           "file_mb_per_s": round(total / best / 1e6, 1)}
    print(json.dumps(res), flush=True)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data")
    ap.add_argument("--case", choices=["pairs", "lidar"], default="pairs")
    ap.add_argument("--loaders", default="cat,torch,sluice")
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--batches", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--budget", default="8G")
    a = ap.parse_args()
    # torch first, for every loader (sluice's too): a training process has it,
    # so each tree's PSS starts from the same base when loaders run one a process
    import torch  # noqa: F401

    # the process before any loader (torch imported): loader_pss_mb is the
    # peak above it, what the loader itself holds (workers included)
    a.base_pss = tree_pss_bytes(os.getpid())
    rs = rows(a.data, a.case)
    if len(rs) < a.batch:  # the loaders drop the last partial batch: an epoch would be empty
        sys.exit(f"fields_peers.py: {len(rs)} {a.case} samples, fewer than a batch of {a.batch}")
    per_sample = float(np.mean([file_bytes(a.data, r) for r in rs[:200]]))
    files = sorted({os.path.join(a.data, p) for r in rs for p in (r["lidar"] if "lidar" in r else
                                                                  [r["blur"], r["sharp"], r["events"]])})
    out = {}
    for name in a.loaders.split(","):
        out[name] = {"cat": lambda: run_cat(a, files), "torch": lambda: run_torch(a, per_sample),
                     "sluice": lambda: run_sluice(a, per_sample)}[name]()
    if out.get("torch") and out.get("sluice"):
        t, s = out["torch"], out["sluice"]
        print(json.dumps({"sluice_vs_torch_throughput": round(s["samples_per_s"] / t["samples_per_s"], 2),
                          "sluice_vs_torch_peak_pss": round(s["peak_tree_pss_mb"] / t["peak_tree_pss_mb"], 3),
                          "sluice_vs_torch_loader_pss": round(s["loader_pss_mb"] / max(t["loader_pss_mb"], 0.1), 3)}))
    if out.get("cat") and out.get("sluice"):
        print(json.dumps({"sluice_vs_cat_bytes_per_s": round(out["sluice"]["file_mb_per_s"] / out["cat"]["file_mb_per_s"], 2)}))


if __name__ == "__main__":
    main()

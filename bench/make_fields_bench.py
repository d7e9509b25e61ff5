#!/usr/bin/env python3
"""Make the GPU-host benchmark datasets of issue 10 (fields):

  deblurring-like pairs: SAMPLES samples of 3 float32 .npy arrays,
      blur   720x1280x3 (HWC), sharp = blur + 1, events 32x720x1280 (CHW);
      ~140 MB a sample; --pairs-gb sizes it (default 20 GB: 143 samples)
  KITTI-like LiDAR: SCANS raw float32 scans of 100,000-120,000 points
      (x, y, z, intensity rows, ~1.7 MB each), in sequences of 8
      consecutive scans a sample (stride 1, as sliding windows over a drive)

    bench/make_fields_bench.py OUT [--pairs-gb 20] [--scans 2000] [--seed 0]

Writes OUT/pairs/*.npy, OUT/pairs.jsonl ({"blur", "sharp", "events"} paths),
OUT/lidar/*.bin, OUT/lidar.jsonl ({"lidar": [8 paths]}). Arrays are made by
adding a per-sample offset to one random base (fast to write; the bytes still
differ per sample, so nothing dedups or compresses). Check the disk first:
`df -h OUT` (a 64 GB-disk host holds the default 20 GB + 3.4 GB of scans).
"""
import argparse
import json
import os
import sys
import time

import numpy as np

H, W, C, T = 720, 1280, 3, 32


def make_pairs(out, gb, rng):
    os.makedirs(os.path.join(out, "pairs"), exist_ok=True)
    per = (2 * H * W * C + T * H * W) * 4
    n = max(1, int(gb * 1e9 // per))
    base = rng.standard_normal((H, W, C)).astype(np.float32)
    ev = rng.standard_normal((T, H, W)).astype(np.float32)
    rows = []
    t0 = time.time()
    for i in range(n):
        blur = base + np.float32(i * 1e-3)
        names = {k: f"pairs/{i:06d}_{k}.npy" for k in ("blur", "sharp", "events")}
        np.save(os.path.join(out, names["blur"]), blur)
        np.save(os.path.join(out, names["sharp"]), blur + np.float32(1))
        np.save(os.path.join(out, names["events"]), np.roll(ev, i, axis=0))
        rows.append(names)
        if i % 10 == 9:
            print(f"pairs: {i + 1}/{n} ({(i + 1) * per / 1e9:.1f} GB, {time.time() - t0:.0f} s)", file=sys.stderr)
    with open(os.path.join(out, "pairs.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return n, n * per


def make_lidar(out, scans, rng, seq=8):
    os.makedirs(os.path.join(out, "lidar"), exist_ok=True)
    base = rng.standard_normal((120_000, 4)).astype(np.float32) * np.float32(20)
    paths, total = [], 0
    for i in range(scans):
        n = int(rng.integers(100_000, 120_001))
        pts = base[:n] + np.float32(i * 0.01)
        paths.append(f"lidar/{i:06d}.bin")
        pts.tofile(os.path.join(out, paths[-1]))
        total += pts.nbytes
    with open(os.path.join(out, "lidar.jsonl"), "w") as f:
        for i in range(scans - seq + 1):
            f.write(json.dumps({"lidar": paths[i:i + seq]}) + "\n")
    return scans - seq + 1, total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--pairs-gb", type=float, default=20.0)
    ap.add_argument("--scans", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    os.makedirs(a.out, exist_ok=True)
    n_pairs, b_pairs = make_pairs(a.out, a.pairs_gb, rng) if a.pairs_gb > 0 else (0, 0)
    n_lidar, b_lidar = make_lidar(a.out, a.scans, rng) if a.scans > 0 else (0, 0)
    print(json.dumps({"pairs_samples": n_pairs, "pairs_bytes": b_pairs, "lidar_samples": n_lidar,
                      "lidar_scan_bytes": b_lidar, "out": a.out}))


if __name__ == "__main__":
    main()

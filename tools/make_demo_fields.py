#!/usr/bin/env python3
"""Make sluice's demo data for samples with fields (issue 10): small paired
arrays, LiDAR-like scan sequences and WebDataset tar shards, with the
`.jsonl` manifests and the `--fields` schemas that load them.

    tools/make_demo_fields.py OUT [--pairs 16] [--scans 40] [--images DEMO_DIR] [--seed 0]

Writes (a few MB in all):
  OUT/pairs/NNNNNN_{blur,sharp}.npy   float32 HWC 64x96x3, sharp = blur + 1 exactly
  OUT/pairs/NNNNNN_events.npy         float32 CHW 8x64x96 (event voxels)
  OUT/pairs.jsonl                     {"blur": ..., "sharp": ..., "events": ..., "label": k}
  OUT/pairs.fields.json               crop 32x32, one crop group for all three
  OUT/lidar/scan_NNNNNN.bin           raw float32 rows (x, y, z, intensity), 2000-3000 rows each
  OUT/lidar.jsonl                     {"lidar": [8 consecutive scans], "label": k}
  OUT/lidar.fields.json               a sequence of raw arrays, points 2048
  OUT/shards/train-NNNNNN.tar         WebDataset shards: KEY.jpg + KEY.cls per sample
  OUT/shards.txt                      the brace pattern of the shard list

The shards hold the images of DEMO_DIR (tools/make_demo_data.py's layout,
its manifest.csv) when --images is given, else 48 small images made here.
Needs numpy and Pillow. Deterministic for a given --seed.
"""
import argparse
import io
import json
import os
import sys
import tarfile

import numpy as np

MTIME = 1_700_000_000


def smooth(rng, h, w, c):
    """A smooth float32 field (sums of random sinusoids) in about [-2, 2]."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    out = np.zeros((h, w, c), np.float32)
    for k in range(c):
        for _ in range(3):
            fy, fx, ph = rng.uniform(0.02, 0.2), rng.uniform(0.02, 0.2), rng.uniform(0, 6.3)
            out[..., k] += np.sin(fy * y + fx * x + ph).astype(np.float32)
    return out / 1.5


def make_pairs(out, n, rng):
    os.makedirs(os.path.join(out, "pairs"), exist_ok=True)
    rows = []
    for i in range(n):
        blur = smooth(rng, 64, 96, 3)
        sharp = blur + np.float32(1)  # exactly +1 in float32: the alignment check
        events = rng.standard_normal((8, 64, 96)).astype(np.float32)
        names = {}
        for key, a in (("blur", blur), ("sharp", sharp), ("events", events)):
            names[key] = f"pairs/{i:06d}_{key}.npy"
            np.save(os.path.join(out, names[key]), a)
        rows.append(dict(names, label=i % 4))
    write_jsonl(os.path.join(out, "pairs.jsonl"), rows)
    crop = {"crop": [32, 32], "crop_group": "xy"}
    write_json(os.path.join(out, "pairs.fields.json"), {
        "blur": dict(kind="array", layout="HWC", **crop),
        "sharp": dict(kind="array", layout="HWC", **crop),
        "events": dict(kind="array", layout="CHW", **crop),
        "label": {"kind": "label"}})


def make_lidar(out, scans, rng, seq=8):
    os.makedirs(os.path.join(out, "lidar"), exist_ok=True)
    paths = []
    for i in range(scans):
        n = int(rng.integers(2000, 3001))
        ang = rng.uniform(0, 2 * np.pi, n)
        dist = rng.uniform(2, 60, n)
        pts = np.stack([dist * np.cos(ang), dist * np.sin(ang), rng.normal(-1.5, 0.5, n),
                        rng.uniform(0, 1, n)], -1).astype(np.float32)
        paths.append(f"lidar/scan_{i:06d}.bin")
        pts.tofile(os.path.join(out, paths[-1]))
    rows = [{"lidar": paths[i:i + seq], "label": i % 3} for i in range(0, scans - seq + 1, seq // 2)]
    write_jsonl(os.path.join(out, "lidar.jsonl"), rows)
    write_json(os.path.join(out, "lidar.fields.json"), {
        "lidar": {"kind": "sequence", "of": {"kind": "array", "format": "raw", "dtype": "float32",
                                             "shape": [-1, 4], "points": 2048}},
        "label": {"kind": "label"}})


def image_samples(images_dir, rng):
    """(key, jpeg bytes, label) from a demo image dataset, or made here."""
    if images_dir:
        with open(os.path.join(images_dir, "manifest.csv")) as f:
            lines = [ln.strip().rsplit(",", 1) for ln in f if ln.strip() and not ln.startswith("path,")]
        for k, (path, label) in enumerate(lines):
            with open(os.path.join(images_dir, path), "rb") as f:
                yield f"{k:06d}", f.read(), int(label)
        return
    from PIL import Image
    for k in range(48):
        pix = ((smooth(rng, 120, 160, 3) + 2) * 60).clip(0, 255).astype(np.uint8)
        b = io.BytesIO()
        Image.fromarray(pix).save(b, "JPEG", quality=90)
        yield f"{k:06d}", b.getvalue(), k % 4


def make_shards(out, images_dir, rng, per_shard=16):
    os.makedirs(os.path.join(out, "shards"), exist_ok=True)
    tf, shard = None, -1
    for i, (key, data, label) in enumerate(image_samples(images_dir, rng)):
        if i % per_shard == 0:
            if tf:
                tf.close()
            shard += 1
            tf = tarfile.open(os.path.join(out, "shards", f"train-{shard:06d}.tar"), "w", format=tarfile.USTAR_FORMAT)
        for ext, payload in (("jpg", data), ("cls", str(label).encode())):
            ti = tarfile.TarInfo(f"{key}.{ext}")
            ti.size, ti.mtime, ti.mode = len(payload), MTIME, 0o644
            tf.addfile(ti, io.BytesIO(payload))
    if tf:
        tf.close()
    with open(os.path.join(out, "shards.txt"), "w") as f:
        f.write(f"shards/train-{{000000..{shard:06d}}}.tar\n")


def write_jsonl(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--pairs", type=int, default=16)
    ap.add_argument("--scans", type=int, default=40)
    ap.add_argument("--images", default=None, help="a make_demo_data.py folder to pack into shards")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    make_pairs(a.out, a.pairs, rng)
    make_lidar(a.out, a.scans, rng)
    make_shards(a.out, a.images, rng)
    total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(a.out) for f in fs)
    print(f"demo fields in {a.out}: {a.pairs} pairs, {a.scans} scans, shards; {total / 2**20:.1f} MiB", file=sys.stderr)


if __name__ == "__main__":
    main()

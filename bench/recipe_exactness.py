#!/usr/bin/env python3
"""How far sluice's presets are from Pillow (what torchvision does on PIL
images), per recipe, exact (the default) beside fast=True, on a dataset's
JPEGs: the mean abs difference per image (0..255 scale), its mean, its
worst, and the images over 1.0.

    PYTHONPATH=python python3 bench/recipe_exactness.py DATA [--images 300] [--size 224]

References (full-resolution decode by Pillow, then):
  train  crop(box of sluice.train_crop) + resize(size, filter) + flip
  val    resize(short side to size * 256 // 224, filter) + centre crop
Both with Pillow's own pass order (reducing_gap=None, as torchvision).
"""
import argparse
import glob
import io
import os

import numpy as np
from PIL import Image

import sluice

FILTERS = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC}


def val_ref(im, size, filt):
    w, h = im.size
    short = size * 256 // 224
    rs = (short, int(short * h / w)) if w <= h else (int(short * w / h), short)
    a = np.asarray(im.resize(rs, FILTERS[filt], reducing_gap=None))
    t, l = int(round((a.shape[0] - size) / 2.0)), int(round((a.shape[1] - size) / 2.0))
    return a[t:t + size, l:l + size].transpose(2, 0, 1)


def train_ref(im, box, flip, size, filt):
    x, y, w, h = box
    a = np.asarray(im.crop((x, y, x + w, y + h)).resize((size, size), FILTERS[filt], reducing_gap=None))
    a = a.transpose(2, 0, 1)
    return a[:, :, ::-1] if flip else a


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data")
    ap.add_argument("--images", type=int, default=300)
    ap.add_argument("--size", type=int, default=224)
    a = ap.parse_args()
    files = sorted(glob.glob(os.path.join(a.data, "**", "*.JPEG"), recursive=True) +
                   glob.glob(os.path.join(a.data, "**", "*.jpg"), recursive=True))[:a.images]
    rows = {}
    for path in files:
        data = open(path, "rb").read()
        if sluice.probe_image(data)["format"] not in ("jpeg", 1):
            continue
        im = Image.open(io.BytesIO(data)).convert("RGB")
        if min(im.size) < a.size:
            continue
        x, y, w, h, flip = sluice.train_crop(im.width, im.height, 0, 0, 0)
        for filt in FILTERS:
            refs = {"val": val_ref(im, a.size, filt), "train": train_ref(im, (x, y, w, h), flip, a.size, filt)}
            for preset, ref in refs.items():
                for fast in (False, True):
                    got = sluice.decode_image(data, preset=preset, size=a.size, interpolation=filt, fast=fast)
                    rows.setdefault((preset, filt, fast), []).append(np.abs(got.astype(np.float64) - ref).mean())
    print(f"mean abs diff from Pillow per image, {len(rows[('val', 'bilinear', False)])} JPEGs of {a.data}, "
          f"size {a.size}")
    for (preset, filt, fast), v in sorted(rows.items()):
        v = np.array(v)
        print(f"{preset:5s} {filt:8s} {'fast ' if fast else 'exact'}  mean {v.mean():.3f}  worst {v.max():.3f}  "
              f"over 1.0: {(v > 1.0).sum()}")


if __name__ == "__main__":
    main()

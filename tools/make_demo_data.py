#!/usr/bin/env python3
"""Make sluice's built-in demo dataset: varied, photo-like images, no photos.

Each image is procedural texture: a smooth colour gradient, value noise at
several scales (coarse blotches to fine grain), a few soft-edged shapes and
per-pixel sensor noise, so JPEG entropy and decode cost are close to a
photograph's. The mix holds the quirks real datasets hold:

  sizes     mostly ~500x375 (landscape and portrait), ~8% small (64x48 to
            160x120), ~7% large (~1600x1200)
  JPEG      quality 85-95, 4:2:0 mostly, some 4:4:4; ~10% progressive;
            ~3% grayscale; one CMYK
  PNG       one RGB PNG saved under a .JPEG name (format by content), and one
            16-bit RGB PNG (.png)

Layout (torchvision ImageFolder):
    OUT/train/<class>/<name>.JPEG
    OUT/manifest.csv          path,label  (paths relative to OUT)

Needs numpy and Pillow only. Deterministic for a given --seed (and
independent of --jobs). 2000 images take a few seconds on 2 cores.

    tools/make_demo_data.py OUT --images 2000 --classes 10 --seed 0
"""
import argparse
import io
import multiprocessing as mp
import os
import sys

import numpy as np
from PIL import Image, ImageDraw, ImageFilter


def _value_noise(rng, h, w, cell, ch):
    """Smooth noise with features about `cell` pixels wide, in [-1, 1]."""
    gh, gw = max(2, h // cell + 2), max(2, w // cell + 2)
    g = rng.uniform(-1.0, 1.0, (gh, gw, ch)).astype(np.float32)
    out = np.empty((h, w, ch), np.float32)
    for c in range(ch):
        im = Image.fromarray(g[..., c], "F").resize((w, h), Image.BICUBIC)
        out[..., c] = np.asarray(im)
    return out


def _texture(rng, w, h, tint):
    """Photo-like RGB image (no grain yet)."""
    y = np.linspace(0.0, 1.0, h, dtype=np.float32)[:, None]
    x = np.linspace(0.0, 1.0, w, dtype=np.float32)[None, :]
    ang = rng.uniform(0, 2 * np.pi)
    t = (np.cos(ang) * x + np.sin(ang) * y)
    t = (t - t.min()) / max(1e-6, float(t.max() - t.min()))
    c0 = rng.uniform(0, 255, 3).astype(np.float32) * 0.6 + tint * 0.4
    c1 = rng.uniform(0, 255, 3).astype(np.float32)
    img = c0 + (c1 - c0) * t[..., None]
    # value noise at several scales: blotches, texture, grain
    for cell, amp in ((max(w, h) // 3, 45.0), (48, 25.0), (12, 14.0), (3, 8.0)):
        mono = rng.uniform() < 0.5
        n = _value_noise(rng, h, w, max(2, cell), 1 if mono else 3)
        img += amp * n
    # soft-edged shapes
    base = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")
    layer = Image.new("RGB", (w, h))
    mask = Image.new("L", (w, h), 0)
    dl, dm = ImageDraw.Draw(layer), ImageDraw.Draw(mask)
    for _ in range(int(rng.integers(3, 12))):
        x0, y0 = rng.uniform(-0.2, 1.0) * w, rng.uniform(-0.2, 1.0) * h
        sw, sh = rng.uniform(0.05, 0.6) * w, rng.uniform(0.05, 0.6) * h
        box = [x0, y0, x0 + sw, y0 + sh]
        col = tuple(int(v) for v in rng.integers(0, 256, 3))
        alpha = int(rng.integers(90, 230))
        kind = rng.integers(0, 3)
        if kind == 0:
            dl.ellipse(box, fill=col)
            dm.ellipse(box, fill=alpha)
        elif kind == 1:
            dl.rectangle(box, fill=col)
            dm.rectangle(box, fill=alpha)
        else:
            pts = [(float(rng.uniform(0, w)), float(rng.uniform(0, h))) for _ in range(int(rng.integers(3, 7)))]
            dl.polygon(pts, fill=col)
            dm.polygon(pts, fill=alpha)
    mask = mask.filter(ImageFilter.GaussianBlur(radius=float(rng.uniform(0.5, 3.0))))
    base.paste(layer, (0, 0), mask)
    return base


_GRAIN = {}


def _grain(seed):
    """A 256x256 tile of unit Gaussian noise (int16, x16), one per seed."""
    if seed not in _GRAIN:
        g = np.random.default_rng([seed, 99]).standard_normal((256, 256, 3), dtype=np.float32)
        _GRAIN[seed] = np.rint(g * 16).astype(np.int16)
    return _GRAIN[seed]


def _photo(rng, w, h, tint, seed):
    """uint8 (h, w, 3): texture (rendered at half size and upscaled for
    large images, as their detail is coarser anyway) + sensor grain."""
    if max(w, h) > 800:
        im = _texture(rng, w // 2, h // 2, tint).resize((w, h), Image.BICUBIC)
    else:
        im = _texture(rng, w, h, tint)
    pix = np.asarray(im).astype(np.int16)
    tile = _grain(seed)
    tile = np.roll(tile, (int(rng.integers(0, 256)), int(rng.integers(0, 256))), (0, 1))
    reps = (-(-h // 256), -(-w // 256), 1)
    amp = int(rng.integers(2, 7))  # sensor noise sigma, in levels
    pix += (np.tile(tile, reps)[:h, :w] * amp) >> 4
    return np.clip(pix, 0, 255).astype(np.uint8)


def _size(rng):
    r = rng.uniform()
    if r < 0.08:  # small
        w = int(rng.integers(64, 161))
        h = max(16, int(round(w * 0.75)))
    elif r < 0.15:  # large
        w = int(rng.integers(1400, 1601))
        h = int(round(w * rng.choice([0.75, 0.66, 0.5625])))
    else:  # ImageNet-like: long side ~500
        w = int(rng.integers(400, 501)) if rng.uniform() < 0.3 else 500
        h = int(round(w * rng.choice([0.75, 0.75, 0.666, 0.8, 0.5625])))
    if rng.uniform() < 0.25:  # portrait
        w, h = h, w
    return w, h


def _one(job):
    out, i, label, seed, special = job
    rng = np.random.default_rng([seed, i])
    tint = np.random.default_rng([seed, 1 << 20, label]).uniform(0, 255, 3).astype(np.float32)
    w, h = _size(rng)
    if special == "png16":
        w, h = 320, 240
    pix = _photo(rng, w, h, tint, seed)
    cls = "class_%02d" % label
    name = "img_%06d" % i
    kind = special
    if kind is None:
        r = rng.uniform()
        kind = "gray" if r < 0.03 else ("progressive" if r < 0.13 else "baseline")
    q = int(rng.integers(85, 96))
    buf = io.BytesIO()
    ext = ".JPEG"
    if kind == "png_as_jpeg":
        Image.fromarray(pix, "RGB").save(buf, "PNG", compress_level=1)
    elif kind == "png16":
        # 16-bit RGB: Pillow cannot write it, so encode by hand
        import struct
        import zlib
        v = pix.astype(np.uint16) * 257
        raw = b"".join(b"\x00" + v[r].astype(">u2").tobytes() for r in range(h))
        def chunk(t, d):
            return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
        buf.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0))
                  + chunk(b"IDAT", zlib.compress(raw, 1)) + chunk(b"IEND", b""))
        ext = ".png"
    elif kind == "cmyk":
        Image.fromarray(pix, "RGB").convert("CMYK").save(buf, "JPEG", quality=q)
    elif kind == "gray":
        Image.fromarray(pix, "RGB").convert("L").save(buf, "JPEG", quality=q)
    else:
        sub = 0 if rng.uniform() < 0.1 else 2
        Image.fromarray(pix, "RGB").save(buf, "JPEG", quality=q, subsampling=sub,
                                         progressive=(kind == "progressive"))
    rel = os.path.join("train", cls, name + ext)
    with open(os.path.join(out, rel), "wb") as f:
        f.write(buf.getvalue())
    return rel, label, kind


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    a = ap.parse_args()
    if a.images < 1 or a.classes < 1:
        ap.error("--images and --classes must be >= 1")
    for c in range(a.classes):
        os.makedirs(os.path.join(a.out, "train", "class_%02d" % c), exist_ok=True)
    # The special files sit at fixed, seed-chosen indices.
    srng = np.random.default_rng([a.seed, 7])
    specials = {}
    for kind in ("cmyk", "png_as_jpeg", "png16"):
        if len(specials) < a.images:
            i = int(srng.integers(0, a.images))
            while i in specials:
                i = (i + 1) % a.images
            specials[i] = kind
    jobs = [(a.out, i, i % a.classes, a.seed, specials.get(i)) for i in range(a.images)]
    if a.jobs > 1:
        with mp.Pool(a.jobs) as pool:
            rows = pool.map(_one, jobs, chunksize=16)
    else:
        rows = [_one(j) for j in jobs]
    with open(os.path.join(a.out, "manifest.csv"), "w") as f:
        f.write("path,label\n")
        for rel, label, _ in rows:
            f.write("%s,%d\n" % (rel, label))
    kinds = {}
    for _, _, k in rows:
        kinds[k] = kinds.get(k, 0) + 1
    total = sum(os.path.getsize(os.path.join(a.out, r)) for r, _, _ in rows)
    print("wrote %d images in %d classes to %s: %.1f MB (%s)" % (
        len(rows), a.classes, a.out, total / 1e6,
        ", ".join("%s %d" % kv for kv in sorted(kinds.items()))), file=sys.stderr)


if __name__ == "__main__":
    main()

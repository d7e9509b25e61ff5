#!/usr/bin/env python3
"""Make an ImageNet-like image-folder dataset: the benchmark sets of bench/ and docs/.

Each image is a photo-like picture at an ImageNet-like size (long side 500 px
for 70 %, else 200-1200; 4:3 mostly, some 3:2, 1:1, 16:9; a quarter
portrait), colour and brightness varied, with sensor noise, re-encoded as JPEG
at quality 88-96, so that decode cost per image is that of real training data.
The mix holds the quirks of real datasets: progressive JPEGs, grayscale and
CMYK JPEGs, and a few PNG files saved under a .JPEG name.

Pictures come from tools/make_demo_data.py's procedural texture (gradients,
value noise at several scales, soft-edged shapes, grain): nothing outside the
repository is needed. With --photos DIR, they are random crops of the
photographs (*.jpg, *.jpeg, *.png) in a folder you have instead; given the
photographs the sets of bench/README.md and docs/ were first made from
(../shared/data/photos, not in the repository), the same files byte for byte.

Layout written (the torchvision ImageFolder convention):
    OUT/train/<class>/<name>.JPEG
    OUT/manifest.csv            path,label   (one line per image)

Needs Pillow and numpy. Deterministic for a given --seed (and --photos
folder), whatever --jobs.

    bench/make_imagenet_like.py OUT --images 10000 --classes 100 --seed 0 [--photos DIR]
"""
import argparse
import multiprocessing as mp
import os
import random
import sys

import numpy as np
from PIL import Image, ImageEnhance

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import make_demo_data  # noqa: E402  (the procedural texture)

_PHOTOS = None  # (folder, [RGB images]) once loaded, per worker process


def _photos(folder):
    global _PHOTOS
    if _PHOTOS is None or _PHOTOS[0] != folder:
        ims = []
        for name in sorted(os.listdir(folder)):
            if name.lower().endswith((".jpg", ".jpeg", ".png")):
                im = Image.open(os.path.join(folder, name)).convert("RGB")
                im.thumbnail((2048, 2048), Image.LANCZOS)
                ims.append(im)
        if not ims:
            raise SystemExit(f"make_imagenet_like.py: no .jpg, .jpeg or .png photos in {folder}")
        _PHOTOS = (folder, ims)
    return _PHOTOS[1]


def _size(rng):
    aspect = rng.choice([4 / 3, 4 / 3, 4 / 3, 3 / 2, 3 / 2, 1.0, 16 / 9])
    long_side = 500 if rng.random() < 0.7 else rng.randint(200, 1200)
    short_side = max(32, int(round(long_side / aspect)))
    if rng.random() < 0.25:  # portrait
        return short_side, long_side
    return long_side, short_side


def _crop_of_photo(rng, src, w, h):
    """A random crop of src with the aspect of w x h, at a random scale, resized to w x h."""
    scale = rng.uniform(0.25, 1.0)
    cw = int(min(src.width, src.height * w / h) * scale)
    ch = int(cw * h / w)
    cw, ch = max(cw, 16), max(ch, 16)
    x0 = rng.randint(0, src.width - cw)
    y0 = rng.randint(0, src.height - ch)
    return src.crop((x0, y0, x0 + cw, y0 + ch)).resize((w, h), Image.LANCZOS)


def _picture(rng, w, h, seed, index, photo):
    """The RGB picture of image `index` (a crop of photo, else procedural), before its quirks."""
    if photo:
        im = _crop_of_photo(rng, photo, w, h)
        if rng.random() < 0.5:
            im = im.transpose(Image.FLIP_LEFT_RIGHT)
    else:
        nrng = np.random.default_rng([seed, index, 3])
        tint = nrng.uniform(0, 255, 3).astype(np.float32)
        im = Image.fromarray(make_demo_data._photo(nrng, w, h, tint, seed), "RGB")
    im = ImageEnhance.Color(im).enhance(rng.uniform(0.6, 1.4))
    im = ImageEnhance.Brightness(im).enhance(rng.uniform(0.7, 1.3))
    # sensor noise, so that entropy-coded size per pixel is that of real photos (the texture
    # has grain of its own: less is added to it; measured, the JPEGs' bytes per pixel then
    # come within 3 % of the photos')
    nrng = np.random.default_rng(seed * 1_000_003 + index)
    arr = np.asarray(im, dtype=np.float32)
    sigma = rng.uniform(3.0, 8.0) if photo else rng.uniform(2.0, 5.0)
    arr += nrng.normal(0.0, sigma, size=arr.shape).astype(np.float32)
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8), "RGB")


def _one(job):
    out_dir, index, label, seed, frac, photos = job
    rng = random.Random(seed * 1_000_003 + index)
    photo = rng.choice(_photos(photos)) if photos else None  # drawn first: the order of the shared script's draws
    w, h = _size(rng)
    im = _picture(rng, w, h, seed, index, photo)
    rel = os.path.join("train", "n%08d" % label, "img_%08d.JPEG" % index)
    path = os.path.join(out_dir, rel)
    if rng.random() < frac["png"]:
        im.save(path, format="PNG")  # a PNG under a .JPEG name, as in real datasets
    else:
        kw = {"quality": rng.randint(88, 96)}
        if rng.random() < frac["progressive"]:
            kw["progressive"] = True
        r2 = rng.random()
        if r2 < frac["gray"]:
            im = im.convert("L")
        elif r2 < frac["gray"] + frac["cmyk"]:
            im = im.convert("CMYK")
        im.save(path, format="JPEG", **kw)
    return rel, label


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--images", type=int, default=10000)
    ap.add_argument("--classes", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--photos", default=None,
                    help="a folder of photographs to crop the pictures from (default: procedural pictures)")
    ap.add_argument("--png-frac", type=float, default=0.005)
    ap.add_argument("--progressive-frac", type=float, default=0.1)
    ap.add_argument("--gray-frac", type=float, default=0.02)
    ap.add_argument("--cmyk-frac", type=float, default=0.002)
    a = ap.parse_args()
    if a.images < 1 or a.classes < 1 or a.jobs < 1:
        ap.error("--images, --classes and --jobs must be >= 1")
    photos = os.path.abspath(a.photos) if a.photos else None
    if photos:
        _photos(photos)  # a folder without photos fails here, before any work
    frac = {"png": a.png_frac, "progressive": a.progressive_frac, "gray": a.gray_frac, "cmyk": a.cmyk_frac}
    for c in range(a.classes):
        os.makedirs(os.path.join(a.out, "train", "n%08d" % c), exist_ok=True)
    jobs = [(a.out, i, i % a.classes, a.seed, frac, photos) for i in range(a.images)]
    if a.jobs > 1:
        with mp.Pool(a.jobs) as pool:
            rows = pool.map(_one, jobs, chunksize=16)
    else:
        rows = [_one(j) for j in jobs]
    with open(os.path.join(a.out, "manifest.csv"), "w") as f:
        f.write("path,label\n")
        for rel, label in rows:
            f.write("%s,%d\n" % (rel, label))
    total = sum(os.path.getsize(os.path.join(a.out, r)) for r, _ in rows)
    print("wrote %d images in %d classes to %s (%s), %.1f MB, mean %.1f KB"
          % (len(rows), a.classes, a.out, "photos of " + photos if photos else "procedural", total / 1e6,
             total / 1e3 / len(rows)), file=sys.stderr)


if __name__ == "__main__":
    main()

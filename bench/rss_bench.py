#!/usr/bin/env python3
"""Resident memory against the budget (issue 8): the process's RSS growth over
its level before the loader, for 1, 4, 8, 16, 32 workers, on large images and
on an ImageNet-like set. Prints one table per dataset; nothing is asserted.

Each run is `sluice bench DATA --budget B --workers N --epochs E --json` in its
own process, which reports `rss_growth_bytes` (VmHWM at the end minus VmRSS
before the loader) beside `peak_accounted_bytes`. With --baseline BIN (another
build of `sluice`, e.g. one made from an older commit) every row is run with it
too, in the same invocation, side by side.

    bench/rss_bench.py [--sluice build/sluice] [--baseline /tmp/old/build/sluice]
                       [--workers 1,4,8,16,32] [--budget 80M] [--epochs 2]
                       [--large-images 16] [--imagenet-images 2000] [--photos DIR]
                       [--work /tmp/rss_bench] [--jsonl results.jsonl]

Datasets (made once under --work, reused):
  large     progressive 4:4:4 JPEGs of 3000x2000 (36 MB of decoder memory each),
            two 40 Mpx PNGs, a few tiny JPEGs
  imagenet  bench/make_imagenet_like.py: --imagenet-images images in 100 classes
            (procedural pictures, or crops of the photographs in --photos DIR)
  webp      (--only webp) 8 valid lossless WebPs of 1024x1024 whose meta-Huffman
            image names 65,536 groups (295 KB each; libwebp 1.2.4 allocates ~780 MiB
            of tables for one before reading them), 8 ordinary lossless WebPs and
            8 JPEGs (Pillow); run with --max-error-rate 1 (the first 8 are error
            records): bench/rss_bench.py --only webp --budget 128M --workers 1,2,16 --epochs 1
"""
import argparse
import json
import os
import subprocess
import sys

MIB = 1 << 20
HERE = os.path.dirname(os.path.abspath(__file__))

MAKE_LARGE = r"""
import os, sys
import numpy as np
from PIL import Image
root, n = sys.argv[1], int(sys.argv[2])
d = os.path.join(root, "c0")
os.makedirs(d, exist_ok=True)
rng = np.random.default_rng(0)
def img(w, h):
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255 // w, y * 255 // h, (x + y) * 255 // (w + h)], -1).astype(np.int16)
    noise = rng.integers(-30, 30, size=(h // 4 + 1, w // 4 + 1, 3)).repeat(4, 0).repeat(4, 1)[:h, :w]
    return Image.fromarray(np.clip(base + noise, 0, 255).astype(np.uint8))
for i in range(n):
    img(3000, 2000).save(os.path.join(d, f"p{i:03d}.jpg"), quality=90, progressive=True, subsampling=0)
for i in range(2):
    img(8000, 5000).save(os.path.join(d, f"big{i}.png"), compress_level=1)
for i in range(8):
    img(48, 32).save(os.path.join(d, f"t{i}.jpg"), quality=90)
"""


def make_large(work, n):
    root = os.path.join(work, f"large{n}")
    if not os.path.exists(os.path.join(root, ".done")):
        subprocess.run([sys.executable, "-c", MAKE_LARGE, root, str(n)], check=True)
        open(os.path.join(root, ".done"), "w").close()
    return root


def make_imagenet(work, n, photos):
    root = os.path.join(work, f"imagenet{n}" + ("-photos" if photos else ""))
    if not os.path.exists(os.path.join(root, ".done")):
        script = os.path.join(HERE, "make_imagenet_like.py")
        subprocess.run([sys.executable, script, root, "--images", str(n), "--classes", "100", "--seed", "0"]
                       + (["--photos", photos] if photos else []), check=True)
        open(os.path.join(root, ".done"), "w").close()
    return root


def groups_webp(width, height, groups):
    """tests/c/webpw.h's file in Python: a one-colour lossless WebP whose 4-pixel meta-Huffman tiles name
    `groups` groups in turn, every group's codes of one symbol (the pixels take no bits)."""
    bits = []

    def put(v, k):
        bits.extend((v >> i) & 1 for i in range(k))

    def code(c, n):  # a prefix code word, first bit first
        bits.extend((c >> i) & 1 for i in range(n - 1, -1, -1))

    def single(sym):
        put(1, 1), put(0, 1), put(int(sym > 1), 1), put(sym, 8 if sym > 1 else 1)

    def flat8(n):
        order = [17, 18, 0, 1, 2, 3, 4, 5, 16, 6, 7, 8]
        put(0, 1), put(12 - 4, 4)
        for o in order:
            put(int(o in (0, 8)), 3)
        put(0, 1)
        bits.extend(int(s < 256) for s in range(n))

    hx, hy = (width + 3) // 4, (height + 3) // 4
    put(0x2F, 8), put(width - 1, 14), put(height - 1, 14), put(0, 1), put(0, 3)
    put(0, 1), put(0, 1), put(1, 1), put(0, 3), put(0, 1)
    flat8(280), flat8(256), single(0), single(0), single(0)
    for i in range(hx * hy):
        g = i % groups
        code(g & 0xFF, 8), code(g >> 8, 8)
    for _ in range(groups * 5):
        single(0)
    bits.extend([0] * (-len(bits) % 8))
    payload = bytes(sum(bits[i + k] << k for k in range(8)) for i in range(0, len(bits), 8))
    chunk = b"VP8L" + len(payload).to_bytes(4, "little") + payload + b"\0" * (len(payload) & 1)
    return b"RIFF" + (4 + len(chunk)).to_bytes(4, "little") + b"WEBP" + chunk


MAKE_WEBP_PEERS = r"""
import os, sys
import numpy as np
from PIL import Image
d = sys.argv[1]
rng = np.random.default_rng(1)
for i in range(8):
    a = np.clip(np.mgrid[0:768, 0:1024][1][..., None] // 4 + rng.integers(0, 40, (768, 1024, 3)), 0, 255)
    Image.fromarray(a.astype(np.uint8)).save(os.path.join(d, f"lossless{i}.webp"), lossless=True)
    Image.fromarray(a.astype(np.uint8)).save(os.path.join(d, f"photo{i}.jpg"), quality=90)
"""


def make_webp(work):
    root = os.path.join(work, "webp")
    d = os.path.join(root, "c0")
    if not os.path.exists(os.path.join(root, ".done")):
        os.makedirs(d, exist_ok=True)
        hostile = groups_webp(1024, 1024, 65536)
        for i in range(8):
            with open(os.path.join(d, f"groups{i}.webp"), "wb") as f:
                f.write(hostile)
        subprocess.run([sys.executable, "-c", MAKE_WEBP_PEERS, d], check=True)
        open(os.path.join(root, ".done"), "w").close()
    return root


def run(binary, data, workers, budget, epochs, batch, extra=()):
    cmd = [binary, "bench", data, "--budget", budget, "--workers", str(workers), "--epochs", str(epochs),
           "--batch", str(batch), "--json", *extra]
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    return json.loads(out)


def row(label, r):
    budget = r["budget_bytes"]
    return (f"{label:>9} {r['workers']:>7} {budget / MIB:>8.0f} {r['peak_accounted_bytes'] / MIB:>10.1f} "
            f"{r['rss_growth_bytes'] / MIB:>10.1f} {r['rss_growth_bytes'] / budget:>8.2f} "
            f"{r['samples_per_s']:>9.1f} {r['errors']:>6}")


def table(name, data, args, extra=()):
    print(f"\n## {name}: {data}  (budget {args.budget}, {args.epochs} epochs, batch {args.batch})")
    print(f"{'build':>9} {'workers':>7} {'budget':>8} {'accounted':>10} {'rss_grow':>10} {'grow/bud':>8} "
          f"{'img/s':>9} {'errors':>6}")
    print(f"{'':>9} {'':>7} {'MiB':>8} {'peak MiB':>10} {'MiB':>10} {'':>8} {'':>9} {'':>6}")
    for w in args.workers:
        r = run(args.sluice, data, w, args.budget, args.epochs, args.batch, extra)
        print(row("this", r), flush=True)
        if args.jsonl:
            with open(args.jsonl, "a") as f:
                f.write(json.dumps({"run": f"rss_{name.split()[0].lower()}_w{w}", "result": r}) + "\n")
        if args.baseline:
            b = run(args.baseline, data, w, args.budget, args.epochs, args.batch, extra)
            print(row("baseline", b) + f"   rss growth this/baseline {r['rss_growth_bytes'] / max(1, b['rss_growth_bytes']):.2f}",
                  flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sluice", default=os.path.join(HERE, "..", "build", "sluice"))
    ap.add_argument("--baseline", default=None, help="another sluice binary to run beside it")
    ap.add_argument("--workers", default="1,4,8,16,32", type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--budget", default="256M")
    ap.add_argument("--epochs", default=2, type=int)
    ap.add_argument("--batch", default=8, type=int)
    ap.add_argument("--large-images", default=16, type=int)
    ap.add_argument("--imagenet-images", default=2000, type=int)
    ap.add_argument("--photos", default=None, help="photographs for the ImageNet-like set (default: procedural)")
    ap.add_argument("--work", default="/tmp/rss_bench")
    ap.add_argument("--only", choices=["large", "imagenet", "webp"], default=None)
    ap.add_argument("--jsonl", default=None, help="also append each run's JSON (this build's) to this file")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    with open("/proc/cpuinfo") as f:
        cpus = sum(1 for line in f if line.startswith("processor"))
    print(f"# rss_bench: {cpus} CPUs, {args.sluice}" + (f" vs {args.baseline}" if args.baseline else ""))
    if args.only in (None, "large"):
        table("large images", make_large(args.work, args.large_images), args)
    if args.only in (None, "imagenet"):
        table("ImageNet-like", make_imagenet(args.work, args.imagenet_images, args.photos), args)
    if args.only == "webp":
        table("WebP Huffman groups", make_webp(args.work), args, ("--max-error-rate", "1"))


if __name__ == "__main__":
    main()

"""Is crop-in-decode exact? The train preset's output for each of the first N JPEGs of DATA, against a
full decode (sluice's own, no window) cropped to the same box and resized with Pillow (BILINEAR,
reducing_gap=None: the resize sluice reproduces byte for byte), flipped the same way.

    python3 bench/crop_exact.py DATA [--n 400] [--size 224] [--seed 0]

Prints how many samples differ at all, by more than 1, the worst pixel and the mean absolute
difference over every pixel. Boxes that DCT scaling shrinks (at least 6x the output on both sides:
the scaled box stays 3x the output; none for ImageNet-sized photos) are left out and counted: their
reference is a different decode.
Needs numpy and Pillow >= 13 (the pass order sluice follows); PYTHONPATH=python after make."""
import argparse
import os
import sys

import numpy as np
from PIL import Image

import sluice


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data")
    ap.add_argument("--n", type=int, default=400)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(a.data) for f in fs if f.lower().endswith((".jpeg", ".jpg")))
    files = files[:a.n]
    compared = differ = over1 = scaled = 0
    worst, total, pixels = 0, 0, 0
    for i, path in enumerate(files):
        data = open(path, "rb").read()
        full = sluice.decode_image(data)                      # HWC, the whole image
        h, w = full.shape[:2]
        x, y, bw, bh, flip = sluice.train_crop(w, h, seed=a.seed, index=i)
        if bw >= 6 * a.size and bh >= 6 * a.size:  # DCT-scaled by 1/2 or more (plan.c: >= 3x the output after it)
            scaled += 1
            continue
        got = sluice.decode_image(data, preset="train", size=a.size, seed=a.seed, index=i)  # CHW
        ref = Image.fromarray(full).crop((x, y, x + bw, y + bh)).resize((a.size, a.size), Image.BILINEAR,
                                                                          reducing_gap=None)
        ref = np.asarray(ref)
        if flip:
            ref = ref[:, ::-1]
        d = np.abs(got.transpose(1, 2, 0).astype(np.int16) - ref.astype(np.int16))
        compared += 1
        differ += int(d.max() > 0)
        over1 += int(d.max() > 1)
        worst = max(worst, int(d.max()))
        total += int(d.sum())
        pixels += d.size
    print(f"{compared} train crops of {len(files)} JPEGs in {a.data} (size {a.size}, seed {a.seed}; "
          f"{scaled} DCT-scaled boxes left out): {differ} differ from decode-then-crop, {over1} by more than 1; "
          f"worst {worst}/255, mean abs difference {total / max(pixels, 1):.4f}")
    return 0 if differ == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

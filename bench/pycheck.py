#!/usr/bin/env python3
"""One epoch through the Python loader in a process that also loaded
torchvision and Pillow first (their wheels bring their own libjpeg, as in a
training script). Prints one JSON line: samples, rate, errors, which libjpeg
files are mapped.

    PYTHONPATH=python bench/pycheck.py DATA
"""
import json
import sys
import time

import PIL.Image  # noqa: F401
try:
    import torchvision  # noqa: F401
except ImportError:
    pass
import sluice

ld = sluice.Loader(sys.argv[1], batch_size=256, budget="2G", drop_last=True)
n, t = 0, time.perf_counter()
for b in ld:
    n += len(b["label"])
dt = time.perf_counter() - t
libs = sorted(set(line.split()[-1] for line in open("/proc/self/maps") if "jpeg" in line))
print(json.dumps({"run": "python_epoch", "samples": n, "samples_per_s": round(n / dt, 1),
                  "errors": ld.stats()["errors"], "first_errors": ld.errors()[:3], "libjpeg_mapped": libs}))

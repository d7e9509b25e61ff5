#!/usr/bin/env bash
# Indexing 1,000,000 files: sluice's folder index vs torchvision-style
# Python indexing (os.walk + sort, as ImageFolder's make_dataset does,
# without importing torchvision).
#
#   bench/index_1m.sh [WORKDIR] [CLASSES] [FILES_PER_CLASS]
#
# Creates CLASSES x FILES empty img_N.JPEG files under WORKDIR/ds/train
# (default /tmp/sluice-index-1m, 1000 x 1000; kept for reruns, delete it
# yourself), builds bench/index_time.c against the library, and prints the
# timings: a first run (nothing dropped from the page cache: "cold-ish",
# the tree was just written) and a warm run, with 1 thread and with one
# thread per CPU, then the Python baseline. Wall seconds and CPU seconds
# are both printed: on a busy machine wall time includes waiting for a CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${1:-/tmp/sluice-index-1m}
CLASSES=${2:-1000}
FILES=${3:-1000}
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-python3}
NCPU=$(nproc 2>/dev/null || echo 2)

if [ ! -f "$BUILD/libsluice.a" ]; then
  cmake -S . -B "$BUILD" >/dev/null
  cmake --build "$BUILD" --target sluice_static -j "$NCPU" >/dev/null
fi
mkdir -p "$WORK"
LIBS="-ljpeg -lm -lpthread"
if pkg-config --exists spng 2>/dev/null; then LIBS="$LIBS $(pkg-config --libs spng)"; fi
gcc -std=gnu11 -O2 -Iinclude -Isrc bench/index_time.c "$BUILD/libsluice.a" $LIBS -o "$WORK/index_time"

DS="$WORK/ds"
want=$((CLASSES * FILES))
if [ ! -f "$DS/.made-$CLASSES-$FILES" ]; then
  rm -rf "$DS"
  t0=$(date +%s%N)
  "$WORK/index_time" make "$DS" "$CLASSES" "$FILES"
  touch "$DS/.made-$CLASSES-$FILES"
  t1=$(date +%s%N)
  echo "created $want files in $(( (t1 - t0) / 1000000 )) ms"
fi

echo "sluice index, first run (1 thread):  $("$WORK/index_time" time "$DS" 1)"
echo "sluice index, warm run (1 thread):   $("$WORK/index_time" time "$DS" 1)"
echo "sluice index, warm run ($NCPU threads):  $("$WORK/index_time" time "$DS" "$NCPU")"

"$PYTHON" - "$DS/train" <<'PY'
import os, sys, time
root = sys.argv[1]
EXT = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
t0 = time.perf_counter()
c0 = time.process_time()
# torchvision.datasets.folder.find_classes + make_dataset, inlined
classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
idx = {c: i for i, c in enumerate(classes)}
samples = []
for c in sorted(idx):
    d = os.path.join(root, c)
    for r, _, fnames in sorted(os.walk(d, followlinks=True)):
        for f in sorted(fnames):
            if f.lower().endswith(EXT):
                samples.append((os.path.join(r, f), idx[c]))
dt = time.perf_counter() - t0
cpu = time.process_time() - c0
print('python os.walk+sort (torchvision-style): {"samples": %d, "classes": %d, "seconds": %.4f, "cpu_s": %.3f}'
      % (len(samples), len(classes), dt, cpu))
PY

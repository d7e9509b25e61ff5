#!/usr/bin/env bash
# Windowed array reads (bench/array_read.c): one pread per run vs coalesced
# spans vs the whole file, from the page cache.
#   bench/array_read.sh [DIR] [REPEATS]     (default /tmp/sluice-array-read, 50)
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-/tmp/sluice-array-read}
BUILD=${BUILD:-build}
if [ ! -f "$BUILD/libsluice.a" ]; then
  cmake -S . -B "$BUILD" >/dev/null
  cmake --build "$BUILD" --target sluice_static -j "$(nproc)" >/dev/null
fi
mkdir -p "$DIR"
LIBS="-ljpeg -lm -lpthread"
for pc in spng libwebp; do
  if pkg-config --exists $pc 2>/dev/null; then LIBS="$LIBS $(pkg-config --libs $pc)"; fi
done
gcc -std=gnu11 -O2 -Iinclude -Isrc bench/array_read.c "$BUILD/libsluice.a" $LIBS -o "$DIR/array_read"
"$DIR/array_read" "$DIR" "${2:-50}"

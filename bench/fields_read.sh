#!/usr/bin/env bash
# Build bench/fields_read.c, statically (no libspng: PNG is not needed here),
# so it runs on a bare GPU host; then run it if DATA is given.
#   bench/fields_read.sh [DATA pairs|lidar [THREADS] [SAMPLES]]
# The binary: build-static/fields_read.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD_STATIC:-build-static}
cmake -S . -B "$B" -DSL_WITH_PNG=OFF -DSL_WITH_PYTHON=OFF >/dev/null
cmake --build "$B" --target sluice_static -j "$(nproc)" >/dev/null
gcc -std=gnu11 -O2 -static -Iinclude -Isrc bench/fields_read.c "$B/libsluice.a" -ljpeg -lwebp -lm -lpthread \
  -o "$B/fields_read"
if [ $# -ge 2 ]; then "$B/fields_read" "$@"; fi

#!/usr/bin/env bash
# What merging the ranks' states for a resume on another number of ranks costs (bench/state_merge.c):
# ImageNet's 1,281,167 samples and a 100M-sample set, 8 -> 6 and 64 -> 48 ranks, batches of 256,
# no bad samples and 1 % of those consumed refilled. One JSON line per merge.
#
#   bench/state_merge.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
[ -f "$BUILD/libsluice.so" ] || make all >/dev/null
OUT=${TMPDIR:-/tmp}/sluice-state-merge
# the shared library: the public API is all it uses
gcc -std=gnu11 -O2 -Iinclude bench/state_merge.c -L"$BUILD" -lsluice -Wl,-rpath,"$(cd "$BUILD" && pwd)" -o "$OUT"
for n in 1281167 100000000; do
  for ranks in "8 6" "64 48"; do
    for bad in 0 0.01; do
      "$OUT" "$n" $ranks 256 "$bad"
    done
  done
done

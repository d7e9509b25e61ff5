#!/usr/bin/env bash
# Windowed array reads (bench/array_read.c): one pread per run vs coalesced
# spans vs the whole file, from the page cache.
#   bench/array_read.sh [DIR] [REPEATS]     (default /tmp/sluice-array-read, 50)
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-/tmp/sluice-array-read}
. bench/lib.sh
mkdir -p "$DIR"
gcc -std=gnu11 -O2 -Iinclude -Isrc bench/array_read.c $SL_LINK -o "$DIR/array_read"
"$DIR/array_read" "$DIR" "${2:-50}"

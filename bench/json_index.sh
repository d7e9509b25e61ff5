#!/usr/bin/env bash
# The JSON library decision: parse a 1,000,000-row .jsonl manifest with the
# built-in subset parser, jansson and cJSON, against sluice's index time.
#   bench/json_index.sh [DIR] [ROWS] [REPEATS]   (default /tmp/sluice-json, 1000000, 3)
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-/tmp/sluice-json}
ROWS=${2:-1000000}
. bench/lib.sh
mkdir -p "$DIR"
gcc -std=gnu11 -O2 -Iinclude -Isrc bench/json_index.c $SL_LINK -ljansson -lcjson \
  -o "$DIR/json_index"
M="$DIR/manifest-$ROWS.jsonl"
[ -f "$M" ] || "$DIR/json_index" make "$M" "$ROWS"
mkdir -p "$DIR/train"  # the manifest's paths are relative; indexing does not open them
"$DIR/json_index" "$M" "${3:-3}"

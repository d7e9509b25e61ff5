#!/usr/bin/env bash
# The schema-source index on a million rows, before/after: bench/table_index.c
# linked against this tree's libsluice.a, and against BASE's (a commit, built
# in DIR/base from `git archive`) when given. Best of REPEATS; CPU seconds are
# the number to compare on a shared machine (wall time waits for a core).
#   bench/table_index.sh [DIR] [ROWS] [REPEATS] [BASE]   (default /tmp/sluice-table, 1000000, 5)
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-/tmp/sluice-table}
ROWS=${2:-1000000}
REP=${3:-5}
BASE=${4:-}
mkdir -p "$DIR"
. bench/lib.sh
gcc -std=gnu11 -O2 -Iinclude -Isrc bench/table_index.c $SL_LINK -o "$DIR/table_index"
[ -f "$DIR/rows.jsonl" ] || "$DIR/table_index" make "$DIR/rows.jsonl" "$ROWS"
[ -f "$DIR/rows.csv" ] || "$DIR/table_index" make "$DIR/rows.csv" "$ROWS"
echo "this tree:"
"$DIR/table_index" time "$DIR/rows.jsonl" "$REP"
"$DIR/table_index" time "$DIR/rows.csv" "$REP"
if [ -n "$BASE" ]; then
  if [ ! -f "$DIR/base/build/libsluice.a" ]; then
    rm -rf "$DIR/base" && mkdir -p "$DIR/base"
    git archive "$BASE" | tar -x -C "$DIR/base"
    cmake -S "$DIR/base" -B "$DIR/base/build" -DSL_WITH_PYTHON=OFF >/dev/null
    cmake --build "$DIR/base/build" --target sluice_static -j "$(nproc)" >/dev/null
  fi
  gcc -std=gnu11 -O2 -I"$DIR/base/include" -I"$DIR/base/src" bench/table_index.c \
    "$DIR/base/build/libsluice.a" -ljpeg -lm -lpthread $(pkg-config --libs jansson spng libwebp 2>/dev/null) \
    -o "$DIR/table_index_base"
  echo "base $BASE (jansson rows; .csv tables were path,label only then):"
  "$DIR/table_index_base" time "$DIR/rows.jsonl" "$REP"
fi

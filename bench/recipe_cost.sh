#!/usr/bin/env bash
# Instructions a sample costs under each recipe (callgrind, decode_all
# only), exact (the default) beside --fast, train and val, bilinear and
# bicubic, on the first N JPEGs of DATA. Instruction counts are stable
# where timings are not (a shared machine); the ratio is what --fast saves.
#
#   bench/recipe_cost.sh DATA [N=100] [SIZE=224]
#
# Needs valgrind and a built tree (make). Prints one line per recipe.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${1:?usage: bench/recipe_cost.sh DATA [N] [SIZE]}
N=${2:-100}
SIZE=${3:-224}
BIN=build/recipe_cost
. bench/link.sh # sl_libs
cc -O2 -g bench/recipe_cost.c -Iinclude build/libsluice.a $(sl_libs) -o "$BIN"
LIST=$(mktemp)
trap 'rm -f "$LIST" "$LIST".cg' EXIT
# (sed reads its input whole: head would make sort die of SIGPIPE, fatal under pipefail)
find "$DATA" -name '*.JPEG' -o -name '*.jpg' | sort | sed -n "1,${N}p" >"$LIST"
ir() { # args: recipe flags -> instructions per sample
  valgrind --tool=callgrind --toggle-collect=decode_all --callgrind-out-file="$LIST".cg \
    "$BIN" --size "$SIZE" "$@" <"$LIST" >/dev/null 2>&1
  local total
  total=$(callgrind_annotate "$LIST".cg 2>/dev/null | awk '/PROGRAM TOTALS/ && !done {gsub(",", "", $1); print $1; done = 1}')
  echo $((total / $(wc -l <"$LIST")))
}
echo "instructions per sample, $(wc -l <"$LIST") files of $DATA, size $SIZE"
for preset in train val; do
  for interp in "" --bicubic; do
    exact=$(ir --preset $preset $interp)
    fast=$(ir --preset $preset $interp --fast)
    awk -v p=$preset -v i="${interp:-bilinear}" -v e="$exact" -v f="$fast" \
      'BEGIN { printf "%-5s %-9s exact %11d  fast %11d  exact/fast %.2f\n", p, (i == "--bicubic" ? "bicubic" : i), e, f, e / f }'
  done
done

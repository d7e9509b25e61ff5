#!/bin/sh
# Refills are parallel work (issue 9). Throughput of `sluice bench` over a folder where 30 % of the
# files cannot be decoded (each hole is refilled from the tail of the epoch's order), beside the
# same good files without the bad ones, at 1..N workers: samples/s and the speedup over 1 worker.
# Before refills became claims, the committer decoded them one at a time, which capped the
# speedup of the 30 % folder near 2.3x on 16 cores.
#
#   bench/refill_parallel.sh [WORKERS...]        (default: 1 2 4 8 16)
#   SLUICE=build/sluice OLD=/path/to/other/sluice DATA=/tmp/sl_refill_bench IMAGES=1400
#
# OLD: a second binary measured in the same run, side by side (e.g. one built from 1663da0).
set -eu
SLUICE=${SLUICE:-build/sluice}
DATA=${DATA:-/tmp/sl_refill_bench}
IMAGES=${IMAGES:-1400}
WORKERS=${*:-1 2 4 8 16}
HERE=$(cd "$(dirname "$0")/.." && pwd)

if [ ! -d "$DATA/good/train" ]; then
    python3 "$HERE/tools/make_demo_data.py" "$DATA/good" --images "$IMAGES" --classes 10 --seed 0 >/dev/null
fi
if [ ! -d "$DATA/bad/train" ]; then
    # the same files (hard links) plus 3 garbage files for every 7 good ones: 30 % bad
    mkdir -p "$DATA/bad"
    cp -al "$DATA/good/train" "$DATA/bad/train"
    python3 - "$DATA/bad/train" <<'PY'
import os, random, sys
root = sys.argv[1]
rng = random.Random(0)
classes = sorted(os.listdir(root))
n = sum(len(os.listdir(os.path.join(root, c))) for c in classes)
for i in range(n * 3 // 7):
    with open(os.path.join(root, classes[i % len(classes)], f"bad_{i:05d}.JPEG"), "wb") as f:
        f.write(bytes(rng.randrange(256) for _ in range(4096)))
PY
fi

rate() { # binary folder workers -> samples/s
    guard=   # the 30 % folder is over the default max_error_rate; older builds have no guard
    "$1" bench --help | grep -q max-error-rate && guard="--max-error-rate 1"
    "$1" bench "$2" --workers "$3" --batch 64 --budget 1G --epochs 2 $guard --json 2>/dev/null |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["samples_per_s"])'
}

printf "%-8s %-7s %12s %8s %12s %8s\n" binary workers "good/s" speedup "30%bad/s" speedup
for bin in "$SLUICE" ${OLD:-}; do
    g1= b1=
    for w in $WORKERS; do
        g=$(rate "$bin" "$DATA/good" "$w")
        b=$(rate "$bin" "$DATA/bad" "$w")
        [ -n "$g1" ] || g1=$g b1=$b
        printf "%-8s %-7s %12.1f %8.2f %12.1f %8.2f\n" "$([ "$bin" = "$SLUICE" ] && echo new || echo old)" "$w" \
            "$g" "$(python3 -c "print($g/$g1)")" "$b" "$(python3 -c "print($b/$b1)")"
    done
done

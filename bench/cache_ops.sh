#!/bin/sh
# A node cache's own costs (bench/cache_ops.c): attach + detach beside OTHERS attached processes, a
# hit, an insert that evicts; this tree and, with OLD=, a tree built from another commit, run in
# turns on the same machine (RUNS times each) so that both see the same load.
#
#   bench/cache_ops.sh                       this tree's build/libsluice.a
#   OLD=/tmp/base bench/cache_ops.sh         also OLD/build/libsluice.a (e.g. git archive main | tar -x -C /tmp/base,
#                                            then cmake -S /tmp/base -B /tmp/base/build && cmake --build /tmp/base/build --target sluice_static)
#   OTHERS=7 RUNS=5 ARGS="--rounds 9 --attach 200" bench/cache_ops.sh
#
# One JSON line a run, with "tree": "this" or "old". bench/cache_ops.c compiles against either tree
# (it uses only cache/cache.h, which kept its interface).
set -eu
HERE=$(cd "$(dirname "$0")/.." && pwd)
OTHERS=${OTHERS:-7}
RUNS=${RUNS:-5}
ARGS=${ARGS:-}
LIBS="-ljpeg -lspng -lwebp -ljansson -lpthread -lm -ldl"
build() { # tree out
    cc -O2 -I"$1/include" -I"$1/src" "$HERE/bench/cache_ops.c" "$1/build/libsluice.a" $LIBS -o "$2"
}
build "$HERE" /tmp/sl_cache_ops_this
[ -n "${OLD:-}" ] && build "$OLD" /tmp/sl_cache_ops_old
for i in $(seq "$RUNS"); do
    printf '{"tree": "this", "run": %s, "result": %s}\n' "$i" "$(/tmp/sl_cache_ops_this --others "$OTHERS" $ARGS)"
    if [ -n "${OLD:-}" ]; then
        printf '{"tree": "old", "run": %s, "result": %s}\n' "$i" "$(/tmp/sl_cache_ops_old --others "$OTHERS" $ARGS)"
    fi
done

#!/usr/bin/env bash
# Issue 12: the sample cache where storage is the limit. A dataset larger than
# the memory the job may use for page cache (a memory cgroup whose limit is
# below the dataset's size), optionally storage throttled (cgroup io.max);
# epoch time and bytes read from storage for: no cache, sluice's cache, an LRU
# of the same size; one rank, and 2 ranks sharing one node cache against the
# incident's per-worker LRU in a DataLoader (16 workers).
#
#   bench/cache_bench.sh build     build sluice and build/cache_io
#   bench/cache_bench.sh data      make the dataset (tools/make_demo_data.py; IMAGES, default 40000)
#   bench/cache_bench.sh io        the cache alone on real files (build/cache_io): none / lru / sluice,
#                                  1 and 2 ranks, read only and with decode
#   bench/cache_bench.sh loader    through the Python loaders (bench/cache_bench.py): sluice with and
#                                  without its cache, DataLoader with per-worker LRU and without
#
# DATA (default .data/cache40k), CACHE (default a quarter of the dataset), MEMLIMIT (the cgroup's
# memory limit; default CACHE + a quarter of the dataset... always below the dataset's size),
# IOMAX (read bytes/s for the dataset's device, e.g. 200M; default none), THREADS (reader threads
# per rank, default CPUs / 2), EPOCHS (3), OUT (/tmp/sluice-cache-bench: results.jsonl),
# DROP=1 (evict each file from the page cache after reading it: a dataset far larger than memory,
# without a memory limit; MEMLIMIT=max then), DECODES ("none decode": cache_io without and with
# decode), LOADERS ("sluice-none:1 sluice:1 torch-none:1 torch-lru:1 sluice:2 torch-lru:2").
# Where no cgroup can be made, `io` falls back to --drop, which models the same thing.
set -uo pipefail
cd "$(dirname "$0")/.."
DATA=${DATA:-.data/cache40k}
OUT=${OUT:-/tmp/sluice-cache-bench}
EPOCHS=${EPOCHS:-3}
THREADS=${THREADS:-$(( $(nproc) / 2 > 0 ? $(nproc) / 2 : 1 ))}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
log() { echo "== $*" >&2; }
bytes() { $PY -c "import sys; s=sys.argv[1].upper().rstrip('B').rstrip('I'); m={'K':1<<10,'M':1<<20,'G':1<<30,'T':1<<40}.get(s[-1:],1); print(int(float(s[:-1] if m>1 else s)*m))" "$1"; }

dataset_bytes() { du -sb "$DATA" | cut -f1; }

# ---- a cgroup for the run: memory limit (+ io.max) ---------------------------
CG=""
cg_make() {
  local mem=$1 name=sluice-cache-bench-$$
  if [ -f /sys/fs/cgroup/cgroup.controllers ]; then # v2
    CG=/sys/fs/cgroup/$name
    echo "+memory +io" >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null
    mkdir -p "$CG" && echo "$mem" >"$CG/memory.max" || { CG=""; return 1; }
    [ "$mem" = max ] || echo 0 >"$CG/memory.swap.max" 2>/dev/null
    if [ -n "${IOMAX:-}" ]; then
      local dev; dev=$(findmnt -no MAJ:MIN -T "$DATA" | head -1)
      echo "$dev rbps=$(bytes "$IOMAX")" >"$CG/io.max" || log "io.max not set for $dev"
    fi
  elif [ -d /sys/fs/cgroup/memory ]; then # v1
    CG=/sys/fs/cgroup/memory/$name
    [ "$mem" = max ] && mem=-1
    mkdir -p "$CG" && echo "$mem" >"$CG/memory.limit_in_bytes" || { CG=""; return 1; }
    if [ -n "${IOMAX:-}" ]; then log "io.max needs cgroup v2: storage not throttled"; fi
  else
    return 1
  fi
}
cg_run() { # run a command inside the cgroup
  if [ -n "$CG" ]; then
    sh -c "echo \$\$ >'$CG/cgroup.procs' && exec \"\$@\"" sh "$@"
  else
    "$@"
  fi
}
cg_drop() { [ -n "$CG" ] && rmdir "$CG" 2>/dev/null; CG=""; }
evict_page_cache() { # the dataset out of the page cache, without dropping everyone's
  find "$DATA" -type f -print0 | xargs -0 -r $PY -c '
import os, sys
for p in sys.argv[1:]:
    fd = os.open(p, os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)'
}

rec() { tee -a "$OUT/results.jsonl"; }

sizes() {
  DS=$(dataset_bytes)
  CACHE=${CACHE:-$((DS / 4))}
  MEMLIMIT=${MEMLIMIT:-$((CACHE + DS / 4))}
  DROPFLAG=""
  [ "${DROP:-0}" = 1 ] && DROPFLAG=--drop
  [ "$MEMLIMIT" = max ] || [ "$(bytes "$MEMLIMIT")" -lt "$DS" ] ||
    log "warning: MEMLIMIT $MEMLIMIT is not below the dataset ($DS bytes)"
  log "dataset $DS bytes, cache $CACHE, memory limit $MEMLIMIT, io.max ${IOMAX:-none}"
}

case "${1:-}" in
build)
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE="$(command -v $PY)" >/dev/null &&
    cmake --build build -j "$(nproc)" 2>&1 | grep -E "error|warning" | head -20
  spng=""
  grep -q SL_HAVE_SPNG build/CMakeFiles/sluice_obj.dir/flags.make 2>/dev/null && spng=-lspng
  cc -O2 -Iinclude -Isrc bench/cache_io.c build/libsluice.a -ljpeg $spng -lpthread -lm -o build/cache_io &&
    echo "built build/cache_io"
  ;;
data)
  [ -f "$DATA/manifest.csv" ] || $PY tools/make_demo_data.py "$DATA" --images "${IMAGES:-40000}" --classes 100 --seed 0 --jobs "$(nproc)"
  find "$DATA" -type f -name '*.JPEG' | sort >"$DATA.list"
  du -sh "$DATA"
  ;;
io)
  sizes
  find "$DATA" -type f -name '*.JPEG' | sort >"$DATA.list"
  for decode in ${DECODES:-none decode}; do
    [ "$decode" = decode ] && decode=--decode || decode=""
    for ranks in 1 2; do
      for policy in none lru sluice; do
        evict_page_cache
        drop=$DROPFLAG
        cg_make "$MEMLIMIT" || drop=--drop
        log "cache_io $policy ranks $ranks $decode ${drop:-(cgroup $CG)}"
        cg_run build/cache_io "$DATA.list" --policy "$policy" --cache "$CACHE" --ranks "$ranks" \
          --threads "$((THREADS / ranks > 0 ? THREADS / ranks : 1))" --epochs "$EPOCHS" $decode $drop | rec
        cg_drop
      done
    done
  done
  ;;
loader)
  sizes
  for run in ${LOADERS:-sluice-none:1 sluice:1 torch-none:1 torch-lru:1 sluice:2 torch-lru:2}; do
    set -- ${run/:/ }
    evict_page_cache
    cg_make "$MEMLIMIT" || log "no cgroup: the page cache may hold the dataset"
    log "loader $1 ranks $2 (cgroup ${CG:-none})"
    cg_run $PY bench/cache_bench.py "$DATA" --loader "$1" --ranks "$2" --cache "$CACHE" --epochs "$EPOCHS" \
      --workers 16 $DROPFLAG ${CG:+--cgroup "$CG"} | rec
    cg_drop
  done
  ;;
*)
  sed -n '2,22p' "$0"
  exit 2
  ;;
esac

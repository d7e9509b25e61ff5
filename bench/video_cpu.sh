#!/usr/bin/env bash
# The CPU video path against its CPU peers, on one machine, in one run (issue 23, item 2):
#   1. the clip decoder alone (bench/video_cpu.c: CPU ms a clip, early end of a pass on and off,
#      the same bytes), where this build links it;
#   2. ROUNDS rounds of bench/video_peers.py, one process per pipeline, the pipelines in turn
#      within each round (so that a machine loaded by others weighs on all of them alike):
#      sluice.Loader on the CPU, DataLoader + PyAV, DataLoader + torchcodec (CPU), those that import
#      (and, named in PEERS, sluice-decode: sluice's clip decoder inside the same DataLoader, one
#      process a worker, which tells the loader's threads apart from the decoder);
#   3. the medians: clips/s, CPU ms a clip, the share of the cores kept busy, and sluice over the
#      best peer.
# The clip spec is bench/gpu_host.sh videogpu's: 16 frames every 2, train crop to 224 (one
# RandomResizedCrop box and flip a clip), a random offset; one JSON line a run, then the summary
# (also in OUT/video_cpu.jsonl).
#
#   bench/video_cpu.sh SET [ROUNDS]
#     SET: class folders of clips (bench/make_video_set.py SET --clips 24 --classes 4 --size 1280x720
#     --seconds 5-10, the GPU host's 720p set)
#   environment: WORKERS (nproc) BATCH (8) WARMUP (2 x WORKERS: a DataLoader with prefetch 2 has that
#   many batches in flight, all of them done before the timed ones start) BATCHES (4 x WORKERS)
#   PEERS ("sluice pyav torchcodec") FRAMES (16) STRIDE (2) SIZE (224) BUDGET (4G) OUT (/tmp/video_cpu)
#   PY (python3) BUILD (build) TABLE_DIR (OUT: the sluice runs' .jsonl tables) VIDEO_CPU_BIN
#   (bench/video_cpu.c built already: bench/gpu_host.sh videocpu links it against the bundle)
#   TORCHCODEC_LD (a folder put first on the torchcodec peer's LD_LIBRARY_PATH only: the shared
#   FFmpeg it loads)
set -uo pipefail
cd "$(dirname "$0")/.."
SET=${1:?usage: bench/video_cpu.sh SET [ROUNDS]}
ROUNDS=${2:-3}
PY=${PY:-python3}
W=${WORKERS:-$(nproc)}
BATCH=${BATCH:-8}
WARMUP=${WARMUP:-$((2 * W))}
BATCHES=${BATCHES:-$((4 * W))}
FRAMES=${FRAMES:-16} STRIDE=${STRIDE:-2} SIZE=${SIZE:-224}
OUT=${OUT:-/tmp/video_cpu}
TABLE_DIR=${TABLE_DIR:-$OUT}
mkdir -p "$OUT" "$TABLE_DIR"
RES=$OUT/video_cpu.jsonl
: >"$RES"
log() { echo "== video_cpu: $*" >&2; }

# 1. the decoder alone (needs FFmpeg's libraries where pkg-config finds them)
BIN=${VIDEO_CPU_BIN:-}
if [ -z "$BIN" ]; then
  . bench/lib.sh
  BIN=$OUT/video_cpu
  gcc -std=gnu11 -O2 -Iinclude -Isrc bench/video_cpu.c $SL_LINK \
    -o "$BIN" 2>"$OUT/video_cpu_build.log" || BIN=
fi
if [ -n "$BIN" ]; then
  log "the decoder alone, one thread, early end on and off"
  find "$SET/" -type f \( -name '*.mp4' -o -name '*.mkv' -o -name '*.avi' -o -name '*.webm' -o -name '*.mov' \) |
    sort | xargs "$BIN" --frames "$FRAMES" --stride "$STRIDE" --size "$SIZE" |
    sed 's/^{/{"step": "decoder alone", /' | tee -a "$RES"
else
  log "bench/video_cpu.c does not link here ($OUT/video_cpu_build.log): the decoder alone is not measured"
fi

# 2. the loaders, in turn, ROUNDS times
for r in $(seq "$ROUNDS"); do
  for peer in ${PEERS:-sluice pyav torchcodec}; do
    log "round $r: $peer"
    ld=
    case $peer in torchcodec*) ld=${TORCHCODEC_LD:-};; esac
    LD_LIBRARY_PATH=${ld:+$ld:}${LD_LIBRARY_PATH:-} PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH} \
      $PY bench/video_peers.py "$SET" --peers "$peer" \
      --frames "$FRAMES" --stride "$STRIDE" --size "$SIZE" --workers "$W" --batch "$BATCH" --warmup "$WARMUP" \
      --batches "$BATCHES" --epochs 1 --budget "${BUDGET:-4G}" --table-dir "$TABLE_DIR" 2>"$TABLE_DIR/peer.err" |
      grep '^{' | sed "s/^{/{\"round\": $r, /" | tee -a "$RES"
  done
done

# 3. medians and the ratio
$PY - "$RES" <<'EOF'
import json, statistics, sys
runs = {}
rows = [json.loads(line) for line in open(sys.argv[1])]
for r in rows:
    if "clips_per_s" in r:
        runs.setdefault(r["loader"], []).append(r)
    elif "skipped" in r and r["loader"] not in runs:
        runs[r["loader"]] = []
        print("%-24s skipped: %s" % (r["loader"], r["skipped"]))
    elif "decode_ms" in r:
        print("decoder alone: %d clips, %.1f CPU ms a clip (reading on after the last target: %.1f, %.3fx), "
              "probe + plan %.2f ms, same bytes: %s" % (r["clips"], r["decode_ms"], r["decode_ms_read_on"],
              r["read_on_over_early"], r["probe_plan_ms"], r["same_bytes"]))
rounds = {}  # the ratio within each round, where the pipelines ran side by side
for r in rows:
    if "clips_per_s" in r:
        rounds.setdefault(r["round"], {})[r["loader"]] = r["clips_per_s"]
paired = [r["sluice"] / max(v for k, v in r.items() if "sluice" not in k)
          for r in rounds.values() if "sluice" in r and any("sluice" not in k for k in r)]
med = {}
for name, rs in runs.items():
    if not rs:
        continue
    m = {k: statistics.median(x[k] for x in rs if x.get(k) is not None) for k in ("clips_per_s", "cpu_ms_per_clip", "cpu_util")}
    med[name] = m
    print("%-24s %7.2f clips/s  %6.1f CPU ms a clip  cores busy %.2f  (%d runs: %s)" % (
        name, m["clips_per_s"], m["cpu_ms_per_clip"], m["cpu_util"], len(rs), ", ".join("%.2f" % x["clips_per_s"] for x in rs)))
peers = {k: v for k, v in med.items() if "sluice" not in k}  # sluice-decode: sluice's decoder in a DataLoader
if "sluice" in med and peers:
    best = max(peers, key=lambda k: peers[k]["clips_per_s"])
    s, p = med["sluice"], peers[best]
    print("sluice CPU / best CPU peer (%s): %.2fx clips/s, %.2fx less CPU a clip" % (
        best, s["clips_per_s"] / p["clips_per_s"], p["cpu_ms_per_clip"] / s["cpu_ms_per_clip"]))
    print("within each round: %s (median %.2fx)" % (", ".join("%.2fx" % x for x in paired), statistics.median(paired)))
EOF

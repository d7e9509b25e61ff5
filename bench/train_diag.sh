#!/usr/bin/env bash
# Issue 20: where a training row fed by sluice loses images/s against its synthetic ceiling, in one
# device call (bench/README.md, "GPU host, 2026-11-27, second session"). Every row is one
# bench/gpu_decode.py process (ResNet-18, bf16 autocast, channels_last, batch 256) printing one JSON
# line with, over its timed window: the CPU each thread group kept busy and the share of the wall it
# waited on the run queue (runq:NAME), the GPU phases' time per second and per engine call, the
# samples the GPU and the CPU decoded per second, and the consumer's wait.
#
#   DIAG_STEPS="rows trace nice" bench/train_diag.sh
#     rows   synthetic, decode gpu and auto at 8/16/auto workers, gpu with two engines, and `contend`:
#            the model on synthetic data while a thread drains the loader (each slowing the other,
#            neither waiting for the other)
#     trace  the same loop TRACE_STEPS (12) steps more under torch.profiler: per step, the GPU time
#            of the model's kernels, nvJPEG's, sluice's (sl_*) and the copies, the union of all GPU
#            activity (busy) against the wall; rows TRACE_LOADERS (comma-separated, as ENGINE_LOADERS)
#     nice   the CPU-heavy rows at worker_nice 10 (the default) and 19
#     pin    the rows that upload CPU-decoded samples (decode auto, the default) with the slots'
#            host memory page-locked (the library's default) and pageable (SLUICE_GPU_PIN_SLOTS=0),
#            in turns, twice
#     ab     the rows that upload CPU-decoded samples (auto 16 workers, the default) with this tree's
#            library beside BASE's (a `git archive` tarball of an older commit, built in /tmp/sluice-base
#            with the same bundle, once a machine): BASE as it is, BASE with SLUICE_GPU_PIN_SLOTS=0, this
#            tree, in turns, AB_ROUNDS (2) times
#     engines  the default, decode gpu at 8 workers and decode auto at 16 (ENGINE_LOADERS, comma-
#            separated) with each count of GPU engines in ENGINES ("1 2"), in turns, twice (whether
#            the default should take two where the cores allow)
#     turns  the loaders TURN_LOADERS (comma-separated, each "[VAR=VALUE ...] NAME --option ..."), in turns,
#            ROUNDS (2) times, after the synthetic ceiling: a sweep of one setting (--prefetch,
#            --gpu-budget, --workers) side by side
#     probe  bench/offcpu.py with bench/stackprobe.c over 1,200-step rows (synthetic, auto 16 workers
#            pinned and pageable, gpu 16 workers with two engines; or PROBE_LOADERS, comma-separated):
#            the main thread's state and, each time it sleeps in a futex, its native stack (whose
#            lock); JSON in offcpu.jsonl. PROBE_ARGS adds offcpu.py options, e.g. "--threads main,sl-gpu
#            --probe-threads sl-gpu --probe-when any": where the GPU engine's thread spends its wall
#
# Environment: DEPS (the bundle, .devvideo), OUT (/tmp/train-diag), IMAGES (6,000: the set made by
# gpu_check.sh's data step), STEPS (60 timed steps a row), ROW_T (90 s a row at most), BASE (ab).
set -uo pipefail
cd "$(dirname "$0")/.."
export DEPS=${DEPS:-.devvideo} OUT=${OUT:-/tmp/train-diag}
mkdir -p "$OUT"
lscpu | grep -E 'Model name|Thread|Core|Socket|^CPU\(s\)' >"$OUT/lscpu.txt"
OUT=$OUT/check IMAGES=${IMAGES:-6000} CHECK_STEPS='build data' bench/gpu_check.sh all >"$OUT/setup.log" 2>&1 ||
  { tail -20 "$OUT/setup.log"; exit 1; }
SET=.data/check${IMAGES:-6000}
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
G="timeout -k 5 ${ROW_T:-90} python3 bench/gpu_decode.py $SET"
TR="--arch resnet18 --batch 256 --steps ${STEPS:-60} --warmup 10"
R=$OUT/rows.jsonl
row() { echo "== $*" >&2; "$@" 2>>"$OUT/err.log" | tee -a "$R"; }
# The synthetic ceiling, then ROUNDS rounds in which every loader given ("NAME --option ...") runs
# through VARIANTS, a function that takes the loader and runs its rows side by side
in_turns() {
  local rounds=$1 variants=$2 l _
  shift 2
  row $G train $TR --loaders synthetic
  for _ in $(seq "$rounds"); do
    for l in "$@"; do "$variants" "$l"; done
  done
}
pin_rows() { row $G train $TR --loaders $1; row env SLUICE_GPU_PIN_SLOTS=0 $G train $TR --loaders $1; }
ab_rows() {
  row env PYTHONPATH=$B/python SLUICE_AB=base $G train $TR --loaders $1
  row env PYTHONPATH=$B/python SLUICE_AB=base SLUICE_GPU_PIN_SLOTS=0 $G train $TR --loaders $1
  row env SLUICE_AB=new $G train $TR --loaders $1
}
plain_row() { # "[VAR=VALUE ...] NAME --option ...": the row under those variables
  local envs=()
  set -- $1
  while [[ $1 == *=* ]]; do envs+=("$1"); shift; done
  row env "${envs[@]}" $G train $TR --loaders "$@"
}
engine_rows() { for n in ${ENGINES:-1 2}; do row $G train $TR --loaders $1 --gpu-engines $n; done; }
for step in ${DIAG_STEPS:-rows trace nice}; do
  case $step in
  rows)
    row $G train $TR --loaders synthetic
    row $G loaders --loaders sluice-gpuonly --workers 8 --batches 60
    for w in 8 16 0; do
      row $G train $TR --loaders sluice-gpuonly --workers $w
      row $G train $TR --loaders sluice-gpu --workers $w
    done
    row $G train $TR --loaders sluice-gpuonly --workers 8 --gpu-engines 2
    row $G contend $TR --loaders sluice-gpuonly --workers 8
    ;;
  trace)
    IFS=, read -ra loaders <<<"${TRACE_LOADERS:-synthetic,sluice-gpuonly --workers 8,sluice-gpu --workers 16,sluice --workers 16,sluice-gpuonly --workers 16 --gpu-engines 2}"
    for l in "${loaders[@]}"; do
      row $G train $TR --trace-steps "${TRACE_STEPS:-12}" --loaders $l
    done
    ;;
  nice)
    for n in 10 19; do
      for l in "sluice-gpu --workers 16" "sluice --workers 16" "sluice-gpuonly --workers 8" "sluice-gpu --workers 0"; do
        row $G train $TR --worker-nice $n --loaders $l
      done
    done
    ;;
  pin)
    in_turns 2 pin_rows "sluice-gpu --workers 16" "sluice-default --workers 0" "sluice-gpuonly --workers 8"
    ;;
  ab)
    [ -f "${BASE:-}" ] || { echo "train_diag.sh ab: BASE names no tarball" >&2; exit 2; }
    B=/tmp/sluice-base sum=$(sha256sum <"$BASE")
    if [ "$(cat $B/.from 2>/dev/null)" != "$sum" ]; then # built once a machine
      rm -rf $B && mkdir -p $B && tar -xzf "$BASE" -C $B || exit 1
      (. bench/host_env.sh && cmake -S $B -B $B/build -DCMAKE_BUILD_TYPE=Release \
        -DPython3_EXECUTABLE="$(command -v python3)" >"$OUT/base-build.log" 2>&1 &&
        cmake --build $B/build -j "$(nproc)" --target _sluice _gpu >>"$OUT/base-build.log" 2>&1) ||
        { tail -20 "$OUT/base-build.log"; exit 1; }
      echo "$sum" >$B/.from
    fi
    in_turns "${AB_ROUNDS:-2}" ab_rows "sluice-gpu --workers 16" "sluice-default --workers 0"
    ;;
  engines)
    IFS=, read -ra loaders <<<"${ENGINE_LOADERS:-sluice-default --workers 0,sluice-gpuonly --workers 8,sluice-gpu --workers 16}"
    in_turns 2 engine_rows "${loaders[@]}"
    ;;
  turns)
    IFS=, read -ra loaders <<<"${TURN_LOADERS:?train_diag.sh turns: TURN_LOADERS names the rows}"
    in_turns "${ROUNDS:-2}" plain_row "${loaders[@]}"
    ;;
  probe)
    cc -O2 -shared -fPIC -o /tmp/stackprobe.so bench/stackprobe.c -ldl || exit 1
    P="timeout -k 5 100 python3 bench/offcpu.py --delay 22 --seconds 6 --probe /tmp/stackprobe.so ${PROBE_ARGS:-} --"
    T="python3 bench/gpu_decode.py $SET train --arch resnet18 --batch 256 --steps 1200 --warmup 10"
    IFS=, read -ra loaders <<<"${PROBE_LOADERS:-synthetic,sluice-gpu --workers 16,sluice-gpuonly --workers 16 --gpu-engines 2}"
    for l in "${loaders[@]}"; do
      $P $T --loaders $l 2>>"$OUT/err.log" | tee -a "$OUT/offcpu.jsonl"
    done
    [ -n "${PROBE_LOADERS:-}" ] ||
      SLUICE_GPU_PIN_SLOTS=0 $P $T --loaders sluice-gpu --workers 16 2>>"$OUT/err.log" | tee -a "$OUT/offcpu.jsonl"
    ;;
  *) echo "train_diag.sh: unknown step $step" >&2; exit 2;;
  esac
done
python3 - "$R" <<'EOF' | tee "$OUT/summary.txt"
import json, sys
keys = ["run", "ab", "loader", "workers", "gpu_engines", "worker_nice", "pin_slots", "images_per_s", "model_images_per_s",
        "loader_images_per_s", "consumer_wait_fraction", "gpu_share", "win_gpu_samples_per_s",
        "win_cpu_samples_per_s", "win_gpu_hw_s", "win_gpu_copy_s", "win_ms_per_hw_call", "win_gpu_thread", "cores", "slots",
        "workers_active_mean", "passes", "trace"]
for line in open(sys.argv[1]):
    try:
        d = json.loads(line)
    except ValueError:
        continue
    print({k: d[k] for k in keys if d.get(k) is not None})
EOF

#!/usr/bin/env bash
# Issue 17's checks on a GPU host (items 4, 5, 7), in one run; each step under its
# own time limit, logs and results.jsonl under OUT, a summary at the end.
#
#   bench/gpu_check.sh build        the dependency bundle (DEPS, default .devcarry) and the build
#                                   (bench/gpu_host.sh build)
#   bench/gpu_check.sh data         an ImageNet-like set of IMAGES (2000) images, and a copy with a
#                                   JPEG that fails to decode and a truncated one added
#   bench/gpu_check.sh determinism  the default decode's device bytes, CHECK_BATCHES (30) batches of
#                                   CHECK_BATCH (64): `sluice bench --decode prefer-gpu` checksums
#                                   (device bytes included) and sluice.torch.Loader's device hashes
#                                   at 16, 4 and 16 workers, on the set and on its corrupt copy
#   bench/gpu_check.sh rss          RSS growth against the budget: `sluice bench --decode gpu|auto`
#                                   at 256M and 512M, the same through sluice.torch.Loader in a
#                                   process where torch made the CUDA context, decode=gpu again at the
#                                   minimum its refusal at 256M named, and what each step of the
#                                   engine's create adds (kernel cache cold, then warm)
#   bench/gpu_check.sh share        issue 20 item 2: ResNet-18 (bf16, channels_last, batch 256) fed by
#                                   the default decode with 1 and 2 engines at SHARE_WORKERS (16 8)
#                                   workers, and once with the model's stream at the greatest priority,
#                                   beside its synthetic ceiling: images/s and where the GPU's time went
#                                   (hardware, hybrid, resize, copies; bench/gpu_decode.py train)
#   bench/gpu_check.sh failed       what failed on the host at 27a162c, alone (OUT/failed.txt; put it after
#                                   data in CHECK_STEPS)
#   bench/gpu_check.sh suite_c      make test's C suite (ctest -j NWORK): OUT/suite_c.txt, the log beside
#   bench/gpu_check.sh suite_python make test's Python suite (pytest): OUT/suite_python.txt, the log
#   bench/gpu_check.sh suites       both
#   bench/gpu_check.sh summary      the table of OUT/results.jsonl (bench/gpu_check_summary.py)
#   bench/gpu_check.sh all          CHECK_STEPS (build data determinism rss suite_c suite_python), then
#                                   the summary, all inside CHECK_END (560) s of the start: one
#                                   10-minute call on a 16-core host (bench/README.md); then OUT holds
#                                   results.jsonl, summary.txt, suite_c.txt, suite_python.txt and
#                                   every log in logs.tgz (a device call returns 8 files)
# Environment: OUT (/tmp/sluice-check), WORK (.data), DEPS, NWORK ($(nproc)), STEP_TIMEOUT (240 s a
# step; a suite: SUITE_TIMEOUT + 30), RUN_TIMEOUT (90 s a process), SUITE_TIMEOUT (300 s a suite),
# SUITE_STALL (120 s: a Python test running longer has its stacks in the log), SUITE_PYTEST_ARGS.
# Every limit is cut to what is left before CHECK_STOP_AT (epoch seconds; `all` sets it from
# CHECK_END), so a step that runs out leaves nothing running behind it and the summary still prints.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/sluice-check}
WORK=${WORK:-.data}
export OUT WORK
NWORK=${NWORK:-$(nproc)}
PY=${PYTHON:-python3}
DEPS_SITE=${DEPS_SITE:-/tmp/sluice-deps-site}
export PYTHONPATH=$PWD/python:$DEPS_SITE:/tmp/site${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
SET=$WORK/check${IMAGES:-2000}
BAD=$SET-corrupt
B=${CHECK_BATCH:-64}
N=${CHECK_BATCHES:-30}
RT=${RUN_TIMEOUT:-90}
mkdir -p "$OUT" "$WORK"
. bench/host_env.sh # the bundle's prefix (build, suites: the same environment)
. bench/results.sh
cap() { # seconds: at most that, and no later than CHECK_STOP_AT (at least 1)
  local t=$1
  if [ -n "${CHECK_STOP_AT:-}" ]; then
    local left=$((CHECK_STOP_AT - $(date +%s)))
    [ "$left" -lt "$t" ] && t=$left
  fi
  [ "$t" -lt 1 ] && t=1
  echo "$t"
}
run() { # name, command...: one process under RUN_TIMEOUT; its JSON lines kept, the rest in OUT/name.log
  local name=$1; shift
  timeout -k 5 "$(cap "$RT")" "$@" 2>"$OUT/$name.log" | keep "$name"
  local rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] && return
  $PY - "$name" "$rc" "$OUT/$name.log" <<'EOF' | tee -a "$OUT/results.jsonl"
import json, sys
name, rc, log = sys.argv[1], int(sys.argv[2]), sys.argv[3]
lines = [l.strip() for l in open(log, errors="replace") if l.strip()]
print(json.dumps({"run": name, "result": {"failed": rc, "log": log, "last_line": lines[-1][-400:] if lines else ""}}))
EOF
}

min_named() { # the minimum budget a refusal on stdin named ("... at least 313.9 MiB ..."), in MiB rounded up
  grep -oE "at least [0-9.]+ [MG]iB" | tail -1 | awk '{ printf "%d", ($4 == "GiB" ? 1024 : 1) * $3 + 1 }'
}

case "${1:-}" in
build)
  OUT=$OUT bench/gpu_host.sh build
  ;;
data)
  [ -f "$SET/manifest.csv" ] || IMAGES=${IMAGES:-2000} DATA=$SET bench/gpu_host.sh data || exit 1
  [ -d "$BAD" ] || $PY bench/gpu_check.py corrupt "$SET" "$BAD" | keep corrupt_set
  ;;
determinism)
  for set in "$SET" "$BAD"; do
    tag=$([ "$set" = "$BAD" ] && echo corrupt || echo clean)
    for w in 16 4 16; do
      run "bench_prefer_gpu_${tag}_w$w" build/sluice bench "$set" --decode prefer-gpu --workers "$w" --batch "$B" \
        --batches "$N" --json
      run "torch_default_${tag}_w$w" $PY bench/gpu_check.py hash "$set" --workers "$w" --batch "$B" --batches "$N"
    done
  done
  ;;
rss)
  for d in gpu auto; do
    for budget in 256M 512M; do
      run "bench_rss_${d}_$budget" build/sluice bench "$SET" --decode "$d" --budget "$budget" --workers "$NWORK" \
        --batch "$B" --batches "$N" --json
      run "python_rss_${d}_$budget" $PY bench/gpu_check.py rss "$SET" --decode "$d" --budget "$budget" \
        --workers "$NWORK" --batch "$B" --batches "$N"
    done
  done
  # decode=gpu refuses a budget that cannot hold the GPU stage, naming the minimum (correct): the
  # same run again at that minimum (MiB, rounded up), the GPU path's growth under the tightest budget
  m=$(min_named <"$OUT/bench_rss_gpu_256M.log")
  [ -n "$m" ] && run bench_rss_gpu_min build/sluice bench "$SET" --decode gpu --budget "${m}M" --workers "$NWORK" \
    --batch "$B" --batches "$N" --json
  m=$(grep -h '"run": "python_rss_gpu_256M"' "$OUT/results.jsonl" | tail -1 | min_named)
  [ -n "$m" ] && run python_rss_gpu_min $PY bench/gpu_check.py rss "$SET" --decode gpu --budget "${m}M" \
    --workers "$NWORK" --batch "$B" --batches "$N"
  cold=$(mktemp -d)
  run engine_parts_cold_cache $PY bench/gpu_check.py parts --kernel-cache "$cold"
  run engine_parts_warm_cache $PY bench/gpu_check.py parts --kernel-cache "$cold"
  rm -rf "$cold"
  ;;
share)
  T="$PY bench/gpu_decode.py $SET train --arch resnet18 --batch 256 --steps ${SHARE_STEPS:-30} --warmup ${SHARE_WARMUP:-8}"
  run share_synthetic $T --loaders synthetic
  for e in 1 2; do
    for w in ${SHARE_WORKERS:-16 8}; do
      run "share_default_e${e}_w$w" $T --loaders sluice-default --gpu-engines "$e" --workers "$w"
    done
  done
  # the model on a stream of the greatest priority: the GPU runs its kernels before the engine's
  run share_default_e1_w16_model_high $T --loaders sluice-default --gpu-engines 1 --workers 16 --model-priority high
  ;;
failed)
  # what failed at 27a162c on the H100/H200 host (issue 17, item 7), alone and first: the C cases with
  # their output, the Python tests under faulthandler (test_gpu.py whole: it segfaulted), and what
  # each was fixed with tests for (OUT/failed.txt: the summary lines; the logs beside)
  (cd build && timeout -k 5 "$(cap 240)" ctest -j "$NWORK" --timeout 120 --output-on-failure -R \
    'padding_ranks_resume_exactly_decode_auto|gpu_again_when_the_pool_is_full_now|gpu_loader_same_batches_and_records_as_the_cpu|jpeg_max_scans_boundary|known_sizes_json|table_and_refusal|cli_recipe_flags|new_header_old_library|gpu_loader_default_decides_before_opening|test_default_workers') \
    >"$OUT/failed_c.log" 2>&1
  echo "rc $?" >>"$OUT/failed_c.log"
  SLUICE_BUILD=$PWD/build SL_GPU_TEST_DATA=$SET timeout -k 5 "$(cap 240)" $PY -X faulthandler -m pytest -q \
    -p no:cacheprovider -rfE tests/python/test_gpu.py tests/python/test_dataloader_habits.py \
    tests/python/test_cache.py::test_torchrun_two_ranks_one_node_cache \
    tests/python/test_cli.py::test_binary_size_units_are_taken tests/python/test_recipes.py::test_loader_val_crop_pct \
    tests/python/test_webp.py::test_loader_reads_a_webp_folder >"$OUT/failed_python.log" 2>&1
  echo "rc $?" >>"$OUT/failed_python.log"
  { grep -E "tests passed|tests failed|^\s+[0-9]+ - |\*\*\*|^rc " "$OUT/failed_c.log" | sed 's/^/C: /'
    grep -E "^(FAILED|ERROR) |Fatal Python error|^rc " "$OUT/failed_python.log" | sed 's/^/Python: /'
    tail -2 "$OUT/failed_python.log" | head -1 | sed 's/^/Python: /'; } | tee "$OUT/failed.txt"
  ;;
suite_c|suites)
  # make test's C suite (its set-up and sanitizer builds are CI's); a GPU makes the GPU cases
  # run instead of skipping
  (cd build && timeout -k 5 "$(cap "${SUITE_TIMEOUT:-300}")" ctest -j "$NWORK" --timeout 240 --output-on-failure) \
    >"$OUT/suite_c.log" 2>&1
  echo "rc $?" >>"$OUT/suite_c.log"
  { grep -E "tests passed|tests failed|^\s+[0-9]+ - " "$OUT/suite_c.log"; tail -1 "$OUT/suite_c.log"; } |
    tee "$OUT/suite_c.txt"
  if [ "$1" = suites ]; then "$0" suite_python; fi # (a false test as the case's last command made its rc 1)
  ;;
suite_python)
  SLUICE_BUILD=$PWD/build SL_GPU_TEST_DATA=$SET timeout -k 5 "$(cap "${SUITE_TIMEOUT:-300}")" $PY -m pytest -q \
    -p no:cacheprovider -rfE -o faulthandler_timeout="${SUITE_STALL:-120}" --durations=12 ${SUITE_PYTEST_ARGS:-} tests/python \
    >"$OUT/suite_python.log" 2>&1
  echo "rc $?" >>"$OUT/suite_python.log"
  # failures, the slowest tests, the summary; a test past SUITE_STALL seconds has its threads' stacks in the log
  { grep -E "^(FAILED|ERROR) " "$OUT/suite_python.log"; sed -n '/slowest .*durations/,/^$/p' "$OUT/suite_python.log";
    grep -m3 -E "^Timeout \(|^Thread 0x|^Current thread" "$OUT/suite_python.log"; tail -2 "$OUT/suite_python.log"; } |
    tee "$OUT/suite_python.txt"
  ;;
summary)
  $PY bench/gpu_check_summary.py "$OUT" | tee "$OUT/summary.txt"
  ;;
all|"")
  log "host: $(nproc) CPUs ($(lscpu 2>/dev/null | awk -F: '/^Thread\(s\) per core/ {gsub(/ /, "", $2); print $2}') threads a core), $(nvidia-smi -L 2>/dev/null | tr '\n' ' ')"
  start=$(date +%s)
  export CHECK_STOP_AT=$((start + ${CHECK_END:-560}))
  for s in ${CHECK_STEPS:-build data determinism rss suite_c suite_python}; do
    left=$((CHECK_STOP_AT - $(date +%s)))
    if [ "$left" -lt 15 ]; then
      echo "{\"step\": \"$s\", \"skipped\": \"${left} s left of CHECK_END=${CHECK_END:-560} s\"}" | keep step
      continue
    fi
    log "step $s"
    t0=$(date +%s.%N)
    lim=${STEP_TIMEOUT:-240}
    case $s in suite_*) lim=$((${SUITE_TIMEOUT:-300} + 30));; suites) lim=$((2 * ${SUITE_TIMEOUT:-300} + 30));; esac
    timeout -k 5 "$(cap "$lim")" "$0" "$s"
    rc=$?
    echo "{\"step\": \"$s\", \"seconds\": $(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $t0}"), \"rc\": $rc}" | keep step
    [ "$s" = build ] && [ $rc != 0 ] && { log "build failed: nothing else runs"; break; }
  done
  "$0" summary
  # what comes back from a device call is at most 8 files: the results, the summary and the suites'
  # lines as they are, every log in one archive
  list=$(mktemp)
  (cd "$OUT" && find . -mindepth 1 -maxdepth 1 ! -name results.jsonl ! -name summary.txt ! -name suite_c.txt \
    ! -name suite_python.txt ! -name failed.txt ! -name logs.tgz -printf '%P\n' >"$list" &&
    tar -czf logs.tgz -T "$list" && xargs -d '\n' rm -rf <"$list")
  rm -f "$list"
  ;;
*)
  sed -n "2,/^set -uo/{/^set/!p}" "$0"; exit 2 ;;
esac

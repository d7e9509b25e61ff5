#!/usr/bin/env bash
# The benchmark tables of issues 3, 4, 5, 8, 10, 11 and 13 on a GPU host, in
# one run, every loader measured on the same machine and dataset. Prints JSON
# lines and a summary; writes them under OUT (results.jsonl) too.
#
#   bench/gpu_host.sh deps      the bundle of tools/host_deps.sh (DEPS, default .devcarry): its
#                               prefix (jansson, libspng, libwebp, static FFmpeg) for every step, its
#                               wheels (PyAV) installed into DEPS_SITE unless the host has them
#   bench/gpu_host.sh build     deps, then build sluice (+ libspng from SPNG_ROOT if given)
#   bench/gpu_host.sh data      make the IMAGES-image dataset (bench/make_imagenet_like.py; PHOTOS)
#   bench/gpu_host.sh images    issue 3: decode ceilings, sluice 1 and 16 workers, DataLoader pil/tvio
#   bench/gpu_host.sh top       issue 5: `sluice top` on a running peer_torch.py vs smaps_rollup
#   bench/gpu_host.sh plan      issue 5: `sluice plan` predictions beside bench and peer measurements
#   bench/gpu_host.sh pycheck   an epoch through the Python loader beside torchvision and Pillow
#   bench/gpu_host.sh train     issue 4: train_imagenet.py, ResNet-18/50 x synthetic/torch/sluice
#   bench/gpu_host.sh gpu       issue 13: GPU decode engine alone, pixel differences, device memory
#                               (SKIP_ENGINE=1: not these), `sluice bench --decode cpu|auto|gpu`,
#                               loaders (sluice CPU, sluice GPU+CPU by the C scheduler, decode=gpu,
#                               torchvision.io, decode_jpeg cuda), ResNet-18/50 fed by each
#                               (bench/gpu_decode.py, one process per run; TRAIN_WORKERS="16 12 8":
#                               each loader fed by each worker count)
#   bench/gpu_host.sh gputests  the GPU tests (ctest test_gpu*, tests/python/test_gpu.py) and the
#                               integration examples (tests/python/test_examples.py) on the GPU
#   bench/gpu_host.sh video     issue 11: UCF101-like sets (make_video_set.sh, through PyAV where
#                               there is no ffmpeg CLI), video_peers.py: sluice vs DataLoader + PyAV,
#                               torchvision.io, torchcodec, OpenCV (those present), one process each
#   bench/gpu_host.sh videogpu  issue 23 in one call: what the driver offers for NVDEC (printed first:
#                               ldconfig, /usr/local/nvidia/lib64, nvidia-smi), build, the GPU video
#                               tests (ctest test_video_gpu, tests/python/test_video_gpu.py), 720p and
#                               1080p sets (make_video_set.py), then at each size VIDEOGPU_REPS times:
#                               the engine alone (bench/video_engine.py: NVDEC decoders made and
#                               kept, flushes, ms per clip waiting, decoding, in the kernels), then
#                               sluice GPU, sluice CPU, torchcodec CPU and CUDA (the bundle's shared
#                               FFmpeg on their LD_LIBRARY_PATH only), DataLoader + PyAV; bundle:
#                               tools/host_deps.sh --torchcodec (or DEPS=.devcarry/video from
#                               tools/host_deps.sh --out .devcarry/video --no-shared --torchcodec)
#   bench/gpu_host.sh videocpu  issue 23, item 2: the CPU path against its CPU peers on the videogpu
#                               step's 720p set (VIDEOCPU_SET, made if missing): bench/video_cpu.sh,
#                               the clip decoder alone on one thread (early end on and off), then
#                               VIDEOCPU_ROUNDS (2) rounds of VIDEOCPU_PEERS (sluice CPU, DataLoader +
#                               PyAV, DataLoader + torchcodec CPU, DataLoader + sluice.decode_video) in
#                               turn (NWORK workers, warm-up 2 x NWORK batches, 4 x NWORK timed),
#                               medians and sluice over the best peer
#   bench/gpu_host.sh fields    issue 10: make_fields_bench.py pairs + LiDAR; fields_peers.py: `cat`,
#                               DataLoader np.load/np.fromfile, sluice.Loader(fields=), one process
#                               each
#   bench/gpu_host.sh ray       issue 22: bench/ray_bench.py, ResNet-18 fed through sluice.ray.read,
#                               Ray Data read_images + map_batches, a plain loader: img/s, time to
#                               first batch, object store peak, tree PSS (RAY_MODEL RAY_STEPS
#                               RAY_WORKERS RAY_BUDGET RAY_FLAGS); installs Ray from the parts of
#                               tools/host_ray_wheels.sh (its stash, /tmp/sluice-ray-parts) when the host lacks it
#   bench/gpu_host.sh peers     issue 20: bench/gpu_peers.py, every loader side by side in one table
#                               per mode (PEERS_MODES, default "loaders": loader-only img/s,
#                               tree PSS and device memory; ResNet fed by each loader beside the
#                               synthetic ceiling; "ddp": torchrun on PEERS_NPROC GPUs), rounds
#                               alternating; DALI and nvImageCodec from the parts of
#                               tools/host_gpu_peers.sh stashed in PEERS_PARTS (/tmp/gpupeers-parts);
#                               sizes and rows: the PEERS_* variables of gpu_peers.py
#   bench/gpu_host.sh syncprobe issue 20: bench/gpu_sync_probe.py, the engine alone in each hardware mode
#                               while other work is queued on the GPU (a spinning kernel or matmuls, on
#                               the legacy default stream or a stream of their own): what its call waits for,
#                               with CUDA's 8 hardware queues and with 32
#   bench/gpu_host.sh remote    issue 21: REMOTE_IMAGES of DATA as tar shards over http:// from loopback,
#                               20-50 ms added per request, --io-requests REMOTE_REQUESTS, beside the
#                               same shards local (bench/remote_bench.py; stdlib servers, no network)
#   bench/gpu_host.sh rss       issue 8: rss_bench.py, RSS growth vs budget, large and ImageNet-like
#   bench/gpu_host.sh shards    issue 10: tar shards (sluice pack) vs the same SHARDS_IMAGES images
#                               of DATA as a folder, sluice bench on each, twice
#   bench/gpu_host.sh all       ALL_STEPS (default: build video fields rss data shards images plan:
#                               the steps with no earlier GPU-host numbers first), each timed; a step
#                               is skipped once ALL_DEADLINE (500) s have passed; then the summary
#   bench/gpu_host.sh summary   the table of $OUT/results.jsonl
#
# Sizes (environment; the defaults fit one 10-minute call on 16 cores):
#   IMAGES=20000 NWORK=$(nproc) IMAGES_REPS=3 W1_BATCHES=16 PEER_BATCHES=100 (images step)
#   VIDEO_SETS="320x240:200 1280x720:32" (size:clips) VIDEO_CASES="320x240:112 1280x720:224" (set:crop)
#   VIDEO_PEERS="sluice pyav tvio torchcodec opencv" VIDEO_BATCH=8 VIDEO_WARMUP=NWORK
#   VIDEO_BATCHES=2*NWORK (timed; the clip list is repeated until an epoch holds them) VIDEO_EPOCHS=2
#   VIDEOGPU_SETS="1280x720:224:24:5-10 1920x1080:224:16:5-8" (size:crop:clips:seconds)
#   VIDEOGPU_PEERS="sluice-gpu sluice torchcodec torchcodec-cuda pyav" VIDEOGPU_REPS=2 VIDEOGPU_WARMUP=NWORK
#   VIDEOGPU_BATCHES=16 VIDEOGPU_BUDGET=4G VIDEOGPU_GPU_BUDGET=3G VIDEOGPU_DEADLINE=450 (s from the
#   step's start: later runs are skipped, the summary still prints) VIDEOGPU_TESTS=1 (0: no tests first)
#   RUN_TIMEOUT=100 (each process)
#   FIELDS_PAIRS_GB=3 FIELDS_SCANS=800 FIELDS_PAIRS_BATCHES=40 FIELDS_LIDAR_BATCHES=150 FIELDS_BUDGET=8G
#   SHARDS_IMAGES=5000 (0: no shards row)
#   RSS_WORKERS=1,4,8,16,32 RSS_LARGE=16 RSS_IMAGENET=2000 RSS_BUDGET=256M RSS_EPOCHS=2
#   REMOTE_IMAGES=5000 REMOTE_REQUESTS=4,16,64,128 REMOTE_EPOCHS=3 (remote step)
# SHARED: the folder holding peer_torch.py and decode_ceiling.py (default ../shared/bench, else the
# copy in DEPS/shared/bench). PHOTOS: a folder of photographs the ImageNet-like set is cropped from
# (default none: bench/make_imagenet_like.py's procedural pictures; ../shared/data/photos gives the
# sets of the results below byte for byte). DATA: the image set (default WORK/inet20k); WORK:
# datasets (default .data).
set -uo pipefail
cd "$(dirname "$0")/.."
DEPS=${DEPS:-.devcarry} # (bench/host_env.sh, sourced below, takes the same default)
SHARED=${SHARED:-$([ -d ../shared/bench ] && echo ../shared/bench || echo "$DEPS/shared/bench")}
WORK=${WORK:-.data}
DATA=${DATA:-$WORK/inet20k}
NWORK=${NWORK:-$(nproc)}
OUT=${OUT:-/tmp/sluice-bench}
mkdir -p "$OUT" "$WORK"
PY=${PYTHON:-python3}
DEPS_SITE=${DEPS_SITE:-/tmp/sluice-deps-site}
export PYTHONPATH=$PWD/python:$DEPS_SITE:/tmp/site${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
. bench/host_env.sh # the bundle's prefix for pkg-config, the linker and the rpath
. bench/results.sh
rec() { # name, then a command printing one JSON line last: keep that line
  local name=$1; shift
  local line
  line=$("$@" | tail -1)
  echo "{\"run\": \"$name\", \"result\": ${line:-null}}" | tee -a "$OUT/results.jsonl"
}
quiet() { grep -v -e UserWarning -e 'super().__init__' -e 'warnings.warn' >&2; }
ff_shared_lib() { # the bundle's shared FFmpeg for the torchcodec peers (never for sluice), unpacked once: its lib folder
  if [ -f "$DEPS/ffmpeg-shared.tar.xz" ] && [ ! -d "$DEPS/ffmpeg-shared/lib" ]; then
    tar -xJf "$DEPS/ffmpeg-shared.tar.xz" -C "$DEPS"
  fi
  (cd "$DEPS/ffmpeg-shared/lib" 2>/dev/null && pwd)
}
. bench/link.sh # sl_libs: what a program linked with build/libsluice.a needs

case "${1:-}" in
deps)
  [ -d "$DEPS/root/usr" ] || log "no bundle in $DEPS (tools/host_deps.sh makes it): the system's libraries"
  mkdir -p "$DEPS_SITE"
  for w in "$DEPS"/wheels/*.whl; do
    [ -f "$w" ] || continue
    name=$(basename "$w" | cut -d- -f1)
    case $name in opencv*) mod=cv2;; *) mod=$name;; esac
    PYTHONPATH= $PY -c "import $mod" 2>/dev/null && continue # the host's own copy wins
    [ -d "$DEPS_SITE/$mod" ] || $PY -m pip install -q --no-index --no-deps --target "$DEPS_SITE" "$w" ||
      log "$w did not install"
  done
  $PY - <<'EOF' | keep deps
import importlib, json, os, platform
out = {"python": platform.python_version(), "cpus": os.cpu_count()}
for m in ("torch", "torchvision", "av", "cv2", "torchcodec", "numpy", "PIL"):
    try:
        out[m] = importlib.import_module(m).__version__
    except Exception as e:  # a peer that cannot run is skipped by its script, with this reason
        out[m] = "missing (%s)" % str(e).split("\n")[0][:80]
print(json.dumps(out))
EOF
  ;;
build)
  "$0" deps || exit 1
  flags=()
  [ -n "${SPNG_ROOT:-}" ] && flags+=(-DSPNG_ROOT="$SPNG_ROOT")
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE="$(command -v $PY)" "${flags[@]}" \
    >"$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
  grep -E "^-- (PNG|WebP|Video|Remote)" "$OUT/build.log" >&2
  log "pkg-config: $(command -v pkg-config) $(pkg-config --version)"
  # keep going past a test that does not build here (reported), as long as the library, the command
  # and the Python extension did
  cmake --build build -j "$(nproc)" -- -k >>"$OUT/build.log" 2>&1 ||
    { grep -E "error|undefined" "$OUT/build.log" | head -20; }
  [ -x build/sluice ] && ls build/libsluice.a >/dev/null || { log "the library or the command did not build"; exit 1; }
  ls python/sluice/_sluice*.so >/dev/null 2>&1 || $PY -m pip install -q --no-build-isolation --target /tmp/site . ||
    echo "python extension not built"
  cc -O2 bench/jpeg_loop.c -Iinclude build/libsluice.a ${SPNG_ROOT:+-L$SPNG_ROOT/usr/lib/x86_64-linux-gnu} \
    $(sl_libs) ${LDFLAGS:-} -o build/jpeg_loop || exit 1
  build/sluice version
  if build/sluice version | grep "video=off" >/dev/null; then log "this build has no video (FFmpeg not found)"; exit 1; fi
  $PY -c "import sluice; print(sluice.build_info())" || exit 1
  ;;
data)
  [ -f "$DATA/manifest.csv" ] || $PY bench/make_imagenet_like.py "$DATA" --images "${IMAGES:-20000}" --classes 100 \
    --seed 0 --jobs "$(nproc)" ${PHOTOS:+--photos "$PHOTOS"} >/dev/null
  ;;
images)
  find "$DATA" -name '*.JPEG' | sort | head -1000 >"$WORK/files1000"
  rec decode_ceiling_py $PY "$SHARED/decode_ceiling.py" "$DATA" --images 1000
  rec decode_loop_c build/jpeg_loop <"$WORK/files1000"
  for rep in $(seq "${IMAGES_REPS:-3}"); do
    rec "sluice_train_w1_r$rep" build/sluice bench "$DATA" --workers 1 --batches "${W1_BATCHES:-16}" --json
    rec "sluice_train_w${NWORK}_r$rep" build/sluice bench "$DATA" --workers "$NWORK" --epochs 1 --json
  done
  rec "sluice_val_w${NWORK}" build/sluice bench "$DATA" --preset val --workers "$NWORK" --epochs 1 --json
  rec "sluice_train_w${NWORK}_budget256M" build/sluice bench "$DATA" --workers "$NWORK" --budget 256M --epochs 1 --json
  for p in pil tvio; do
    rec "peer_${p}_w${NWORK}" $PY "$SHARED/peer_torch.py" "$DATA" --pipeline $p --workers "$NWORK" --batch 256 \
      --batches "${PEER_BATCHES:-100}" 2> >(quiet)
  done
  ;;
top)
  $PY "$SHARED/peer_torch.py" "$DATA" --pipeline pil --workers "$NWORK" --batch 256 --batches 400 >/dev/null 2>&1 &
  peer=$!
  sleep "${TOP_WAIT:-25}"
  $PY - "$peer" <<'EOF' | tee -a "$OUT/results.jsonl"
import json, os, subprocess, sys
pid = int(sys.argv[1])
def tree(root):
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        p = todo.pop(); out.append(p); todo += kids.get(p, [])
    return out
def pss(p):
    try:
        for line in open(f"/proc/{p}/smaps_rollup"):
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return 0
    return 0
before = sum(pss(p) for p in tree(pid))
top = json.loads(subprocess.run(["build/sluice", "top", "--once", "--json", str(pid)], capture_output=True, text=True).stdout)
pids = tree(pid)
after = sum(pss(p) for p in pids)
direct = (before + after) / 2
t = top["tree"]["pss_bytes"]
print(json.dumps({"run": "top_vs_smaps", "top_tree_pss": t, "direct_pss_before": before, "direct_pss_after": after,
                  "rel_diff": round(abs(t - direct) / direct, 4), "processes_top": len(top["tree"]["processes"]),
                  "processes_direct": len(pids),
                  "names": sorted(set(p["name"] for p in top["tree"]["processes"]))}))
EOF
  kill "$peer" 2>/dev/null; wait "$peer" 2>/dev/null || true
  ;;
plan)
  build/sluice plan "$DATA" --batch 256 --budget 2G --sample 200 | tee "$OUT/plan.txt"
  build/sluice plan "$DATA" --batch 256 --budget 2G --sample 200 --json > "$OUT/plan.json"
  for w in 4 8; do
    rec "sluice_train_w${w}_p4" build/sluice bench "$DATA" --workers $w --prefetch 4 --budget 2G --batches 40 --json
    rec "peer_pil_w${w}_p2" $PY "$SHARED/peer_torch.py" "$DATA" --pipeline pil --workers $w --batch 256 --batches 40 --prefetch 2
  done
  ;;
pycheck)
  $PY bench/pycheck.py "$DATA" | tee -a "$OUT/results.jsonl"
  ;;
train)
  for arch in ${ARCHS:-resnet50 resnet18}; do
    for ld in synthetic sluice torch; do
      rec "train_${arch}_$ld" $PY examples/train_imagenet.py "$DATA" --arch "$arch" --loader "$ld" \
        --steps "${STEPS:-60}" --warmup "${WARMUP:-15}" --budget 4G ${TRAIN_FLAGS:-}
    done
  done
  ;;
gpu)
  # every process under a time limit (RUN_TIMEOUT s): a hang costs one row, not the call
  G="timeout ${RUN_TIMEOUT:-150} $PY bench/gpu_decode.py $DATA"
  if [ -z "${SKIP_ENGINE:-}" ]; then
    $G diff --images 2000 | tee -a "$OUT/results.jsonl"
    $G memory | tee -a "$OUT/results.jsonl"
    for e in 1 2; do $G engine --engines $e --epochs 2 | tee -a "$OUT/results.jsonl"; done
  fi
  # the CLI: the loader alone, batches thrown away (GPU batches stay in device memory)
  for d in cpu auto gpu; do
    rec "cli_bench_decode_$d" timeout "${RUN_TIMEOUT:-150}" build/sluice bench "$DATA" --decode "$d" --workers "$NWORK" \
      --batch 256 --budget 4G --epochs "${CLI_EPOCHS:-2}" --json
  done
  for l in ${GPU_LOADERS:-sluice sluice-gpu sluice-gpuonly tvio tvcuda}; do
    $G loaders --loaders $l --batches "${BATCHES:-40}" | tee -a "$OUT/results.jsonl"
  done
  # TRAIN_WORKERS: worker counts to try for the loaders (the sluice ones leave cores to the
  # training thread and the engine's thread when fewer)
  for arch in ${ARCHS:-resnet18 resnet50}; do
    for l in ${TRAIN_LOADERS:-synthetic sluice sluice-gpu tvio tvcuda}; do
      for w in ${TRAIN_WORKERS:-$NWORK}; do
        $G train --arch "$arch" --loaders $l --workers "$w" --steps "${STEPS:-40}" --warmup "${WARMUP:-10}" |
          tee -a "$OUT/results.jsonl"
        [ "$l" = synthetic ] && break # no workers to vary
      done
    done
  done
  ;;
gputests)
  # the GPU tests (C: test_gpu*, one at a time; Python: test_gpu.py), then the
  # integration examples on the GPU (Lightning, torchrun DDP, timm)
  (cd build && timeout "${GPUTEST_TIMEOUT:-240}" ctest -R '^test_gpu' --output-on-failure) 2>&1 | tail -40 | tee "$OUT/gputests_c.txt"
  SLUICE_BUILD=$PWD/build timeout "${GPUTEST_TIMEOUT:-240}" $PY -m pytest -q -p no:cacheprovider tests/python/test_gpu.py 2>&1 |
    tail -30 | tee "$OUT/gputests_py.txt"
  SLUICE_BUILD=$PWD/build SLUICE_TEST_CUDA_DEVICES=0 timeout "${GPUTEST_TIMEOUT:-240}" $PY -m pytest -q -p no:cacheprovider \
    tests/python/test_examples.py 2>&1 | tail -20 | tee "$OUT/examples.txt"
  ;;
video)
  for set in ${VIDEO_SETS:-320x240:200 1280x720:32}; do
    size=${set%%:*} clips=${set##*:}
    d=$WORK/video-$size-$clips
    if [ ! -f "$d/.done" ]; then
      t0=$(date +%s.%N)
      bench/make_video_set.sh "$d" --clips "$clips" --classes 10 --size "$size" --jobs "$(nproc)" >&2 || exit 1
      touch "$d/.done"
      echo "{\"set\": \"$d\", \"clips\": $clips, \"mib\": $(du -sm "$d" | cut -f1), \"seconds\": $(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $t0}")}" |
        keep video_set
    fi
  done
  for c in ${VIDEO_CASES:-320x240:112 1280x720:224}; do
    size=${c%%:*} crop=${c##*:}
    d=$(ls -d "$WORK"/video-"$size"-* | head -1)
    for peer in ${VIDEO_PEERS:-sluice pyav tvio torchcodec opencv}; do
      $PY bench/video_peers.py "$d" --peers "$peer" --size "$crop" --workers "$NWORK" --batch "${VIDEO_BATCH:-8}" \
        --warmup "${VIDEO_WARMUP:-$NWORK}" --batches "${VIDEO_BATCHES:-$((2 * NWORK))}" --epochs "${VIDEO_EPOCHS:-2}" \
        --table-dir "$WORK" 2> >(quiet) | keep "video_${size}_$crop"
    done
  done
  ;;
videogpu)
  t_start=$(date +%s)
  log "NVDEC on this host (the driver's video decode library must be there: containers need the 'video' capability)"
  {
    echo "ldconfig -p | grep -E 'nvcuvid|nvidia-encode|libcuda.so':"
    ldconfig -p | grep -E 'nvcuvid|nvidia-encode|libcuda\.so' || echo "  (none)"
    echo "ls /usr/local/nvidia/lib64:"; ls -la /usr/local/nvidia/lib64 2>&1 | head -30
    for d in /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/cuda/lib64 /usr/local/cuda/compat; do
      ls "$d"/libnvcuvid* "$d"/libcuda.so* 2>/dev/null
    done
    echo "NVIDIA_DRIVER_CAPABILITIES=${NVIDIA_DRIVER_CAPABILITIES:-} NVIDIA_VISIBLE_DEVICES=${NVIDIA_VISIBLE_DEVICES:-}"
    nvidia-smi 2>&1 | head -20
    nvidia-smi -q -d ENCODER,SUPPORTED_CLOCKS 2>/dev/null | grep -iE "decoder|encoder" | head -5
  } 2>&1 | tee "$OUT/nvdec_env.txt" >&2
  [ -x build/sluice ] && ls python/sluice/_gpu*.so >/dev/null 2>&1 || "$0" build || exit 1
  log "GPU video: $($PY -c 'import sluice._gpu as g; print(g.video_available(), g.available())' 2>&1)"
  ff_lib=$(ff_shared_lib)
  T=${RUN_TIMEOUT:-100}
  if [ "${VIDEOGPU_TESTS:-1}" = 1 ]; then # (0: the table alone; the tests take about 3 minutes of the call)
    (cd build && timeout 120 ctest -R 'test_video_gpu|test_gpu_video_loader' --output-on-failure) 2>&1 | tail -25 |
      tee "$OUT/videogpu_ctest.txt" >&2
    SLUICE_BUILD=$PWD/build timeout 240 $PY -m pytest -q -p no:cacheprovider -rs tests/python/test_video_gpu.py 2>&1 |
      tail -40 | tee "$OUT/videogpu_pytest.txt" >&2
  fi
  for set in ${VIDEOGPU_SETS:-1280x720:224:24:5-10 1920x1080:224:16:5-8}; do
    IFS=: read -r size crop clips secs <<<"$set"
    d=$WORK/videogpu-$size-$clips-$secs
    if [ ! -f "$d/.done" ]; then
      t0=$(date +%s.%N)
      timeout 200 $PY bench/make_video_set.py "$d" --clips "$clips" --classes 4 --size "$size" --seconds "$secs" \
        --jobs "$(nproc)" >&2 || { log "making $d failed"; continue; }
      touch "$d/.done"
      echo "{\"set\": \"$d\", \"clips\": $clips, \"mib\": $(du -sm "$d" | cut -f1), \"seconds\": $(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $t0}")}" |
        keep videogpu_set
    fi
  done
  for set in ${VIDEOGPU_SETS:-1280x720:224:24:5-10 1920x1080:224:16:5-8}; do # the engine alone: where a clip's time goes
    IFS=: read -r size crop clips secs <<<"$set"
    d=$WORK/videogpu-$size-$clips-$secs
    [ -f "$d/.done" ] || continue
    log "videogpu $size: the engine alone (decoders made and kept, flushes, ms per clip by phase)"
    timeout 60 $PY bench/video_engine.py "$d" --sessions "$NWORK" --size "$crop" --seconds "${VIDEOGPU_ENGINE_S:-15}" \
      2> >(quiet) | grep "^{" | keep "videogpu_${size}_engine"
  done
  for rep in $(seq "${VIDEOGPU_REPS:-2}"); do
    for set in ${VIDEOGPU_SETS:-1280x720:224:24:5-10 1920x1080:224:16:5-8}; do
      IFS=: read -r size crop clips secs <<<"$set"
      d=$WORK/videogpu-$size-$clips-$secs
      [ -f "$d/.done" ] || continue
      for peer in ${VIDEOGPU_PEERS:-sluice-gpu sluice torchcodec torchcodec-cuda pyav}; do
        if [ $(($(date +%s) - t_start)) -gt "${VIDEOGPU_DEADLINE:-450}" ]; then
          echo "{\"loader\": \"$peer\", \"skipped\": \"past VIDEOGPU_DEADLINE\"}" | keep "videogpu_${size}_r$rep"
          continue
        fi
        ld=
        case $peer in torchcodec*) ld=$ff_lib;; esac
        log "videogpu $size r$rep: $peer"
        LD_LIBRARY_PATH=${ld:+$ld:}${LD_LIBRARY_PATH:-} timeout "$T" $PY bench/video_peers.py "$d" --peers "$peer" \
          --size "$crop" --workers "$NWORK" --batch "${VIDEO_BATCH:-8}" --warmup "${VIDEOGPU_WARMUP:-$NWORK}" \
          --batches "${VIDEOGPU_BATCHES:-16}" --epochs 1 --budget "${VIDEOGPU_BUDGET:-4G}" \
          --gpu-budget "${VIDEOGPU_GPU_BUDGET:-3G}" --table-dir "$WORK" >"$OUT/peer.out" 2> >(quiet)
        rc=$?
        if grep -q "^{" "$OUT/peer.out"; then keep "videogpu_${size}_r$rep" <"$OUT/peer.out"
        else # no result line: say how it ended, with its last words
          echo "{\"loader\": \"$peer\", \"skipped\": \"no result (exit $rc$([ $rc = 124 ] && echo ": timeout $T s"))\"}" |
            keep "videogpu_${size}_r$rep"
          tail -5 "$OUT/peer.out" >&2
        fi
      done
    done
  done
  rm -f "$OUT/peer.out" # a call brings back 8 files at most
  "$0" summary
  ;;
videocpu)
  [ -x build/sluice ] && ls build/libsluice.a python/sluice/_sluice*.so >/dev/null 2>&1 || "$0" build || exit 1
  IFS=: read -r size crop clips secs <<<"${VIDEOCPU_SET:-1280x720:224:24:5-10}"
  d=$WORK/videogpu-$size-$clips-$secs # the videogpu step's set
  if [ ! -f "$d/.done" ]; then
    timeout 200 $PY bench/make_video_set.py "$d" --clips "$clips" --classes 4 --size "$size" --seconds "$secs" \
      --jobs "$(nproc)" >&2 || { log "making $d failed"; exit 1; }
    touch "$d/.done"
  fi
  bin=$WORK/video_cpu
  cc -std=gnu11 -O2 -Iinclude -Isrc bench/video_cpu.c build/libsluice.a $(sl_libs) -o "$bin" >&2 ||
    { log "bench/video_cpu.c did not link: the decoder alone is not measured"; bin=; }
  PEERS=${VIDEOCPU_PEERS:-sluice pyav torchcodec sluice-decode} PY=$PY WORKERS=$NWORK SIZE=$crop \
    OUT=$OUT/videocpu TABLE_DIR=$WORK VIDEO_CPU_BIN=$bin TORCHCODEC_LD=$(ff_shared_lib) \
    bench/video_cpu.sh "$d" "${VIDEOCPU_ROUNDS:-2}" 2> >(quiet) | keep "videocpu_$size"
  ;;
fields)
  F=$WORK/fields
  [ -f "$F/lidar.jsonl" ] || $PY bench/make_fields_bench.py "$F" --pairs-gb "${FIELDS_PAIRS_GB:-3}" \
    --scans "${FIELDS_SCANS:-800}" 2>/dev/null | keep fields_data
  for c in pairs lidar; do
    n=$([ $c = pairs ] && echo "${FIELDS_PAIRS_BATCHES:-40}" || echo "${FIELDS_LIDAR_BATCHES:-150}")
    for l in cat torch sluice; do
      SHARED=$(dirname "$SHARED") $PY bench/fields_peers.py "$F" --case $c --loaders $l --workers "$NWORK" --batches "$n" \
        --budget "${FIELDS_BUDGET:-8G}" 2> >(quiet) | keep "fields_${c}_$l"
    done
  done
  ;;
shards)
  # issue 10: tar shards within 10 % of the same images as a folder (sluice pack writes them)
  n=${SHARDS_IMAGES:-5000}
  [ "$n" -gt 0 ] || exit 0
  if ! build/sluice help 2>&1 | grep -w pack >/dev/null; then
    echo '{"skipped": "this build has no `sluice pack` (tar shards as a source come with it)"}' | keep shards
    exit 0
  fi
  sub=$WORK/inet-sub$n S=$WORK/shards-sub$n
  if [ ! -f "$sub/.done" ]; then # the first n images of DATA as a folder of their own
    mkdir -p "$sub"
    (cd "$DATA" && find . -name '*.JPEG' | sort | head -"$n") | while IFS= read -r f; do
      mkdir -p "$sub/$(dirname "$f")" && ln -f "$DATA/$f" "$sub/$f"; done
    touch "$sub/.done"
  fi
  [ -f "$S/.done" ] || { build/sluice pack "$sub" "$S" --shard-size 256M --workers "$NWORK" >&2 && touch "$S/.done"; }
  for rep in 1 2; do
    rec "shards_folder_r$rep" build/sluice bench "$sub" --workers "$NWORK" --epochs 2 --json
    rec "shards_tar_r$rep" build/sluice bench "$S" --workers "$NWORK" --epochs 2 --json
  done
  ;;
ray)
  # issue 22: ResNet-18 fed by sluice.ray.read + iter_torch_batches, by Ray Data's read_images +
  # map_batches (RandomResizedCrop + flip) and by a plain sluice loader (bench/ray_bench.py, a
  # process and a local Ray cluster a row); Ray from the parts of tools/host_ray_wheels.sh
  $PY -c "import ray.data" 2>/dev/null || tools/host_ray_wheels.sh install --python "$PY" || exit 1
  $PY bench/ray_bench.py "$DATA/train" --model "${RAY_MODEL:-resnet18}" --steps "${RAY_STEPS:-100}" \
    --warmup "${RAY_WARMUP:-10}" --batch 256 --workers "${RAY_WORKERS:-4}" --budget "${RAY_BUDGET:-1G}" \
    ${RAY_FLAGS:-} | keep ray
  ;;
peers)
  # issue 20, item 4: sluice's modes, the static sweep and the tuner beside DataLoader (torchvision.io,
  # decode_jpeg cuda), nvImageCodec and DALI, one process a row (bench/gpu_peers.py)
  parts=${PEERS_PARTS:-/tmp/gpupeers-parts} site=${PEERS_SITE:-/tmp/gpupeers-site}
  if [ -f "$parts/MANIFEST" ]; then
    tools/host_gpu_peers.sh install --parts "$parts" --site "$site" --python "$PY" ||
      log "DALI and nvImageCodec not installed: their rows say why"
  else
    log "no $parts/MANIFEST (tools/host_gpu_peers.sh stash): the DALI and nvImageCodec rows are skipped"
  fi
  for m in ${PEERS_MODES:-loaders}; do
    PYTHONPATH=$site:$PYTHONPATH $PY bench/gpu_peers.py "$DATA" table --mode "$m" --work "$WORK/peers" \
      --jsonl "$OUT/peers_$m.jsonl" 2> >(quiet) | tee "$OUT/peers_$m.txt" | keep "peers_$m"
  done
  ;;
syncprobe)
  # issue 20: what nvJPEG's hardware call waits for, each mode, other work queued on the GPU
  for q in 8 32; do # CUDA's hardware queues (CUDA_DEVICE_MAX_CONNECTIONS), its default and the most
    CUDA_DEVICE_MAX_CONNECTIONS=$q $PY bench/gpu_sync_probe.py "$DATA" 2> >(quiet) | tee -a "$OUT/syncprobe.jsonl" |
      keep "syncprobe_q$q"
  done
  ;;
remote)
  # issue 21: remote shards as requests in flight grow, with latency injected, beside local ones
  if build/sluice version | grep -q "remote=off"; then
    echo '{"skipped": "this build has no libcurl (tools/host_deps.sh bundles a static one)"}' | keep remote
    exit 0
  fi
  $PY bench/remote_bench.py "$DATA" --images "${REMOTE_IMAGES:-5000}" --workers "$NWORK" \
    --requests "${REMOTE_REQUESTS:-4,16,64,128}" --epochs "${REMOTE_EPOCHS:-3}" --batch 256 --budget 2G \
    --work "$WORK/remote" --keep \
    --sluice build/sluice | keep remote
  ;;
rss)
  $PY bench/rss_bench.py --sluice build/sluice --workers "${RSS_WORKERS:-1,4,8,16,32}" --budget "${RSS_BUDGET:-256M}" \
    --epochs "${RSS_EPOCHS:-2}" --large-images "${RSS_LARGE:-16}" --imagenet-images "${RSS_IMAGENET:-2000}" \
    ${PHOTOS:+--photos "$PHOTOS"} --work "$WORK/rss" --jsonl "$OUT/results.jsonl" | tee "$OUT/rss.txt"
  ;;
all)
  log "host: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(free -g | awk '/Mem/{print $2}') GiB"
  # hyper-threads or cores: what a loader keeping every vCPU busy competes with (issue 23's CPU ratio)
  log "cpu topology: $(lscpu 2>/dev/null | grep -E '^(Thread\(s\) per core|Core\(s\) per socket|Socket\(s\)|NUMA node\(s\)):' |
    sed 's/  */ /g' | paste -sd ';' -)"
  start=$(date +%s)
  for s in ${ALL_STEPS:-build video fields rss data shards images plan}; do
    if [ $(($(date +%s) - start)) -gt "${ALL_DEADLINE:-500}" ]; then # leave the summary time to print
      echo "{\"step\": \"$s\", \"skipped\": \"past ALL_DEADLINE=${ALL_DEADLINE:-500} s\"}" | keep step
      continue
    fi
    log "step $s"
    t0=$(date +%s.%N)
    "$0" "$s"
    rc=$?
    echo "{\"step\": \"$s\", \"seconds\": $(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $t0}"), \"rc\": $rc}" | keep step
    [ "$s" = build ] && [ $rc != 0 ] && { log "build failed: nothing else runs"; break; }
  done
  "$0" summary
  ;;
summary)
  $PY bench/host_summary.py "$OUT/results.jsonl" | tee "$OUT/summary.txt"
  ;;
*)
  sed -n "2,/^set -uo/{/^set/!p}" "$0"; exit 2 ;;
esac

#!/usr/bin/env bash
# The benchmark table of issues 3, 4 and 5 on a GPU host, in one run, every
# loader measured on the same machine and dataset. Prints JSON lines and a
# summary; with OUT set, also writes them there.
#
#   bench/gpu_host.sh build          build sluice (+ libspng from SPNG_ROOT if given)
#   bench/gpu_host.sh data           make the 20,000-image dataset (make_imagenet_like.py)
#   bench/gpu_host.sh images         issue 3: decode ceilings, sluice 1 and 16 workers, DataLoader pil/tvio
#   bench/gpu_host.sh top            issue 5: `sluice top` on a running peer_torch.py vs smaps_rollup
#   bench/gpu_host.sh plan           issue 5: `sluice plan` predictions beside bench and peer measurements
#   bench/gpu_host.sh pycheck        an epoch through the Python loader beside torchvision and Pillow
#   bench/gpu_host.sh train          issue 4: train_imagenet.py, ResNet-18/50 x synthetic/torch/sluice
#   bench/gpu_host.sh gpu            issue 13: GPU decode engine alone, pixel differences, device memory
#                                    (SKIP_ENGINE=1: not these), `sluice bench --decode cpu|auto|gpu`,
#                                    loaders (sluice CPU, sluice GPU+CPU by the C scheduler, decode=gpu,
#                                    torchvision.io, decode_jpeg cuda), ResNet-18/50 fed by each
#                                    (bench/gpu_decode.py, one process per run)
#
# SHARED: the folder holding make_imagenet_like.py & co (default ../shared/bench).
# DATA: dataset folder (default .data/inet20k). NWORK: workers (default: CPUs).
set -uo pipefail
cd "$(dirname "$0")/.."
SHARED=${SHARED:-../shared/bench}
DATA=${DATA:-.data/inet20k}
NWORK=${NWORK:-$(nproc)}
OUT=${OUT:-/tmp/sluice-bench}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export PYTHONPATH=$PWD/python:/tmp/site${PYTHONPATH:+:$PYTHONPATH}
log() { echo "== $*" >&2; }
rec() { # name, then a command printing one JSON line: keep it
  local name=$1; shift
  local line
  line=$("$@" | tail -1)
  echo "{\"run\": \"$name\", \"result\": ${line:-null}}" | tee -a "$OUT/results.jsonl"
}

case "${1:-}" in
build)
  flags=()
  [ -n "${SPNG_ROOT:-}" ] && flags+=(-DSPNG_ROOT="$SPNG_ROOT")
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE="$(command -v $PY)" "${flags[@]}" >/dev/null &&
    cmake --build build -j "$(nproc)" 2>&1 | grep -E "error|warning: unused" | head -20
  ls python/sluice/_sluice*.so >/dev/null 2>&1 || $PY -m pip install -q --no-build-isolation --target /tmp/site . ||
    echo "python extension not built"
  cc -O2 bench/jpeg_loop.c -Iinclude build/libsluice.a -ljpeg ${SPNG_ROOT:+-L$SPNG_ROOT/usr/lib/x86_64-linux-gnu -lspng} -lpthread -lm -o build/jpeg_loop
  build/sluice --version
  ;;
data)
  [ -f "$DATA/manifest.csv" ] || $PY "$SHARED/make_imagenet_like.py" "$DATA" --images "${IMAGES:-20000}" --classes 100 --seed 0 --jobs "$(nproc)"
  ;;
images)
  find "$DATA" -name '*.JPEG' | sort | head -1000 >"$OUT/files1000"
  rec decode_ceiling_py $PY "$SHARED/decode_ceiling.py" "$DATA" --images 1000
  rec decode_loop_c build/jpeg_loop <"$OUT/files1000"
  for rep in 1 2 3; do
    rec "sluice_train_w1_r$rep" build/sluice bench "$DATA" --workers 1 --batches 16 --json
    rec "sluice_train_w${NWORK}_r$rep" build/sluice bench "$DATA" --workers "$NWORK" --epochs 1 --json
  done
  rec "sluice_val_w${NWORK}" build/sluice bench "$DATA" --preset val --workers "$NWORK" --epochs 1 --json
  rec "sluice_train_w${NWORK}_budget256M" build/sluice bench "$DATA" --workers "$NWORK" --budget 256M --epochs 1 --json
  rec "peer_pil_w${NWORK}" $PY "$SHARED/peer_torch.py" "$DATA" --pipeline pil --workers "$NWORK" --batch 256 --batches 100
  rec "peer_tvio_w${NWORK}" $PY "$SHARED/peer_torch.py" "$DATA" --pipeline tvio --workers "$NWORK" --batch 256 --batches 100
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
  G="$PY bench/gpu_decode.py $DATA"
  if [ -z "${SKIP_ENGINE:-}" ]; then
    $G diff --images 2000 | tee -a "$OUT/results.jsonl"
    $G memory | tee -a "$OUT/results.jsonl"
    for e in 1 2; do $G engine --engines $e --epochs 2 | tee -a "$OUT/results.jsonl"; done
  fi
  # the CLI: the loader alone, batches thrown away (GPU batches stay in device memory)
  for d in cpu auto gpu; do
    rec "cli_bench_decode_$d" build/sluice bench "$DATA" --decode "$d" --workers "$NWORK" --batch 256 --budget 4G \
      --epochs "${CLI_EPOCHS:-2}" --json
  done
  for l in sluice sluice-gpu sluice-gpuonly tvio tvcuda; do
    $G loaders --loaders $l --batches "${BATCHES:-40}" | tee -a "$OUT/results.jsonl"
  done
  for arch in ${ARCHS:-resnet18 resnet50}; do
    for l in synthetic sluice sluice-gpu tvio tvcuda; do
      $G train --arch "$arch" --loaders $l --steps "${STEPS:-40}" --warmup "${WARMUP:-10}" | tee -a "$OUT/results.jsonl"
    done
  done
  ;;
*)
  sed -n 2,19p "$0"; exit 2 ;;
esac

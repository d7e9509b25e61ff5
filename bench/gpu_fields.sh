#!/usr/bin/env bash
# Issue 10's fields benchmark on a GPU host, every loader in the same run:
# makes the datasets (bench/make_fields_bench.py), then for pairs and lidar:
# `cat` (page cache), the PyTorch DataLoader (bench/fields_peers.py), sluice's
# array read path alone (bench/fields_read.c, 16 threads and 1), and
# sluice.Loader(fields=...) where this build has it. One JSON line each.
#   SHARED=/path/to/shared bench/gpu_fields.sh [DATA] [PAIRS_GB] [SCANS]
# SHARED: the folder holding bench/peer_torch.py (its tree-PSS sampler).
# FIELDS_READ: a prebuilt fields_read (default build-static/fields_read,
# made by bench/fields_read.sh). For a small run elsewhere: WORKERS (16),
# PAIRS_BATCHES (60), LIDAR_BATCHES (200), BUDGET (8G).
set -uo pipefail
cd "$(dirname "$0")/.."
DATA=${1:-/tmp/sluice-fields}
FR=${FIELDS_READ:-build-static/fields_read}
PY=${PYTHON:-python3}
echo "host: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(free -g | awk '/Mem/{print $2}') GiB"
[ -f "$DATA/lidar.jsonl" ] || $PY bench/make_fields_bench.py "$DATA" --pairs-gb "${2:-20}" --scans "${3:-2000}"
WORKERS=${WORKERS:-16}
[ -x "$FR" ] || bench/fields_read.sh
for c in pairs lidar; do
  n=$([ $c = pairs ] && echo "${PAIRS_BATCHES:-60}" || echo "${LIDAR_BATCHES:-200}")
  PYTHONPATH=python $PY bench/fields_peers.py "$DATA" --case $c --loaders cat,torch,sluice --workers "$WORKERS" \
    --batches "$n" --budget "${BUDGET:-8G}" \
    2> >(grep -v -e UserWarning -e 'super().__init__' >&2)
  "$FR" "$DATA" $c "$WORKERS" $((n * 8))
  "$FR" "$DATA" $c 1 $((n * 8 / 8))
done

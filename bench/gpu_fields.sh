#!/usr/bin/env bash
# Issue 10's fields benchmark on a GPU host, every loader in the same run:
# makes the datasets (bench/make_fields_bench.py), then for pairs and lidar:
# `cat` (page cache), the PyTorch DataLoader (bench/fields_peers.py), sluice's
# array read path alone (bench/fields_read.c, 16 threads and 1), and
# sluice.Loader(fields=...) where this build has it. One JSON line each.
#   SHARED=/path/to/shared bench/gpu_fields.sh [DATA] [PAIRS_GB] [SCANS]
# SHARED: the folder holding bench/peer_torch.py (its tree-PSS sampler).
# FIELDS_READ: a prebuilt fields_read (default build-static/fields_read,
# made by bench/fields_read.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
DATA=${1:-/tmp/sluice-fields}
FR=${FIELDS_READ:-build-static/fields_read}
PY=${PYTHON:-python3}
echo "host: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(free -g | awk '/Mem/{print $2}') GiB"
[ -f "$DATA/lidar.jsonl" ] || $PY bench/make_fields_bench.py "$DATA" --pairs-gb "${2:-20}" --scans "${3:-2000}"
for c in pairs lidar; do
  n=$([ $c = pairs ] && echo 60 || echo 200)
  PYTHONPATH=python $PY bench/fields_peers.py "$DATA" --case $c --loaders cat,torch,sluice --workers 16 --batches $n \
    2> >(grep -v -e UserWarning -e 'super().__init__' >&2)
  "$FR" "$DATA" $c 16 $((n * 8))
  "$FR" "$DATA" $c 1 $((n * 8 / 8))
done

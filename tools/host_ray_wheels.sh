#!/usr/bin/env bash
# Ray for a GPU host that has Python 3.12 and no network (bench/ray_bench.py,
# examples/ray_train_resnet.py, tests/python/test_ray*.py there).
#
#   tools/host_ray_wheels.sh pack [--out .devcarry/ray] [--work /var/tmp/sluice-ray-wheels]
#       HERE (PyPI reachable): downloads RAY_SPEC's wheels for CPython 3.12 manylinux x86_64,
#       keeps those the host lacks or may hold too old (the big three it has, numpy, pandas and
#       pyarrow, stay behind), recompresses them (zip LZMA: the same files and RECORD, pip reads
#       both), packs them into one tar and splits it into parts of at most PART_MB (50) MiB, as a
#       call to the device machine carries 64 MiB at most: OUT/part-aa, part-ab, ... and OUT/MANIFEST.
#   tools/host_ray_wheels.sh stash [--out .devcarry/ray] [--to /tmp/sluice-ray-parts]
#       THERE: copies the parts (and MANIFEST) this call carried out of the repository, where the
#       next call's carry does not remove them.
#   tools/host_ray_wheels.sh install [--out /tmp/sluice-ray-parts] [--python python3]
#       THERE: joins the parts, unpacks the wheels and installs RAY_SPEC offline
#       (pip --no-index --find-links), taking what the host has where it is recent enough.
#
# Carrying the parts (PART_MB=50: about 68 MiB in two parts, each beside the tree within the 64 MiB a
# call carries): one call a part, each stashing what it carried (a call's carry replaces the ignored
# paths it names and removes those it does not, so a part carried by the call before is gone), then
# a call that installs; gpu_host.sh ray installs from the stash when the host lacks Ray:
#   run(carry=[".devcarry/ray/part-aa", ".devcarry/ray/MANIFEST"], command="tools/host_ray_wheels.sh stash")
#   run(carry=[".devcarry/ray/part-ab"], command="tools/host_ray_wheels.sh stash && bench/gpu_host.sh ray")
set -euo pipefail
cd "$(dirname "$0")/.."
RAY_SPEC=${RAY_SPEC:-"ray[data,train]==2.60.0"}
PART_MB=${PART_MB:-50}
HOST_HAS="numpy pandas pyarrow"  # large, on the host (KINDS.md, "Python packages already there")
mode=${1:-}; shift || true
out=.devcarry/ray work=/var/tmp/sluice-ray-wheels py=python3 to=/tmp/sluice-ray-parts
[ "$mode" = install ] && out=$to
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=$2; shift 2;;
    --work) work=$2; shift 2;;
    --python) py=$2; shift 2;;
    --to) to=$2; shift 2;;
    *) sed -n 2,23p "$0"; exit 2;;
  esac
done
log() { echo "== host_ray_wheels: $*" >&2; }

case $mode in
pack)
  mkdir -p "$out" "$work/dl" "$work/lzma"
  log "downloading $RAY_SPEC for CPython 3.12 manylinux x86_64"
  pip download -q --only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
    -d "$work/dl" "$RAY_SPEC"
  for w in "$work"/dl/*.whl; do
    name=$(basename "$w" | cut -d- -f1 | tr 'A-Z_' 'a-z-')
    case " $HOST_HAS " in *" $name "*) continue;; esac
    [ -f "$work/lzma/$(basename "$w")" ] && continue
    "$py" tools/wheel_lzma.py "$w" "$work/lzma/$(basename "$w")"
  done
  rm -f "$out"/part-*
  tar -cf - -C "$work" lzma | split -b "${PART_MB}M" - "$out/part-"
  {
    echo "sluice host Ray wheels: $RAY_SPEC, CPython 3.12 manylinux x86_64, made $(date -u +%FT%TZ)"
    echo "left for the host to provide: $HOST_HAS"
    ls -l "$work/lzma" | awk 'NR > 1 {print "wheel:", $9, $5}'
    ls -l "$out"/part-* | awk '{print "part:", $9, $5}'
  } >"$out/MANIFEST"
  cat "$out/MANIFEST"
  ;;
stash)
  ls "$out"/part-* >/dev/null 2>&1 || { log "no part in $out: this call carried none"; exit 1; }
  mkdir -p "$to" && cp "$out"/part-* "$to"/ && { [ ! -f "$out/MANIFEST" ] || cp "$out/MANIFEST" "$to"/; }
  ls -l "$to"
  ;;
install)
  [ -f "$out/part-aa" ] || { log "no $out/part-aa: carry the parts first (see the head of this script)"; exit 1; }
  dest=${TMPDIR:-/tmp}/sluice-ray-wheels
  rm -rf "$dest" && mkdir -p "$dest"
  cat "$out"/part-* | tar -xf - -C "$dest"
  log "installing $RAY_SPEC into $("$py" -c 'import sys; print(sys.prefix)') from $dest/lzma"
  "$py" -m pip install -q --no-index --find-links "$dest/lzma" "$RAY_SPEC"
  "$py" -c 'import ray, ray.data, ray.train; print("ray", ray.__version__)'
  ;;
*)
  sed -n 2,23p "$0"; exit 2;;
esac

#!/usr/bin/env bash
# NVIDIA DALI and nvImageCodec for the GPU host (Python 3.12, torch 2.11+cu130, no network): the
# peers of bench/gpu_peers.py (issue 20, item 4).
#
#   tools/host_gpu_peers.sh pack [--out .devcarry/gpupeers] [--work /var/tmp/sluice-gpupeers]
#       HERE (PyPI reachable): downloads the CPython 3.12 manylinux x86_64 wheels of DALI_SPEC and
#       NVIMGCODEC_SPEC and the small packages DALI imports that the host lacks (EXTRA), drops what
#       JPEG training does not need (the extensions of other Pythons, C headers, nvImageCodec's DICOM
#       tools; nvcomp, nvJPEG2000 and nvTIFF are not fetched), rewrites each wheel with its members
#       stored (tools/wheel_lzma.py --stored --drop), packs them into one tar.xz and splits it into
#       parts of at most PART_MB (40) MiB, as a call to the device machine carries 64 MiB at most,
#       the tree's files counted, it seems, by the blocks they take (about 15 MiB):
#       OUT/part-aa, part-ab, ... and OUT/MANIFEST (each wheel's size, each part's and the whole
#       bundle's size and sha256).
#   tools/host_gpu_peers.sh stash [--out .devcarry/gpupeers] [--parts /tmp/gpupeers-parts]
#       THERE, in each part's call: copies the parts and the MANIFEST this call carried into PARTS,
#       outside the repository (a later call carries other parts), and says which are still missing.
#   tools/host_gpu_peers.sh install [--parts /tmp/gpupeers-parts] [--site /tmp/gpupeers-site]
#       THERE, once every part is in PARTS: checks each part's sha256 and the whole's against the
#       MANIFEST, unpacks the wheels and installs them, all in one pip call (pip --target moves each
#       top-level folder once: wheels installed one by one into one target lose nvidia/ to the first),
#       with pip install --no-index --no-deps --target SITE; then imports both. Nothing to do when
#       SITE already holds this MANIFEST's install.
#   tools/host_gpu_peers.sh check [--out .devcarry/gpupeers]
#       HERE: joins the parts, checks the sums, and installs the wheels for CPython 3.12 into a
#       scratch target (pip --python-version 3.12 --only-binary=:all: --no-deps --target), which
#       proves the wheels and their RECORDs whole; imports need the host's Python 3.12.
#
# The device calls (bench/README.md, "Peers in one table"): one call a part, each naming only its
# part in carry (the first with the MANIFEST), all on one warm machine, then the table's call:
#   run(carry=[".devcarry/gpupeers/MANIFEST", ".devcarry/gpupeers/part-aa"], command="tools/host_gpu_peers.sh stash")
#   run(carry=[".devcarry/gpupeers/part-ab"], command="tools/host_gpu_peers.sh stash")
#   ...
#   run(carry=[".devcarry"], command="... bench/gpu_host.sh all")  # its peers step runs `install`
set -euo pipefail
cd "$(dirname "$0")/.."
DALI_SPEC=${DALI_SPEC:-nvidia-dali-cuda130==2.4.0}
NVIMGCODEC_SPEC=${NVIMGCODEC_SPEC:-nvidia-nvimgcodec-cu13==0.9.0.20}
# what DALI 2.4 requires and the host lacks (KINDS.md, "Python packages already there": it has six,
# packaging, numpy, pyyaml, typing-extensions); nvidia-nvjpeg: nvImageCodec's nvJPEG extension
# loads libnvjpeg.so.13 from it where the system's CUDA has none on the loader's path
EXTRA=${EXTRA:-"astunparse==1.6.3 gast==0.7.0 optree==0.20.0 nvtx==0.2.17 makefun==1.16.0 libcst==1.9.0 nvidia-nvjpeg==13.3.2.43"}
PART_MB=${PART_MB:-40}
DROP=(--drop '*.cpython-310-*' --drop '*.cpython-311-*' --drop '*.cpython-313*' --drop '*.cpython-314*'
      --drop '*.cpython-315*' --drop '*.cpython-39-*' --drop 'nvidia/dali/include/*'
      --drop 'nvidia/nvimgcodec/include/*' --drop 'nvidia/nvimgcodec/tools/dicom/*' --drop '*/tests/*'
      --drop 'nvidia/dali/test/*')
mode=${1:-}; shift || true
out=.devcarry/gpupeers work=/var/tmp/sluice-gpupeers parts=/tmp/gpupeers-parts site=/tmp/gpupeers-site py=python3
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=$2; shift 2;;
    --work) work=$2; shift 2;;
    --parts) parts=$2; shift 2;;
    --site) site=$2; shift 2;;
    --python) py=$2; shift 2;;
    *) sed -n 2,36p "$0"; exit 2;;
  esac
done
log() { echo "== host_gpu_peers: $*" >&2; }
PIP_312=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
         --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
         --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 --platform any)

verify() { # dir with part-* and MANIFEST: each part's sha256 and the whole's as the MANIFEST says
  local d=$1 f want got
  [ -f "$d/MANIFEST" ] || { log "no $d/MANIFEST"; return 1; }
  local missing=()
  for f in $(awk '$1 == "part:" {print $2}' "$d/MANIFEST"); do
    [ -f "$d/$f" ] || missing+=("$f")
  done
  [ ${#missing[@]} -eq 0 ] || { log "parts missing in $d: ${missing[*]}"; return 1; }
  while read -r _ f _ want; do
    got=$(sha256sum "$d/$f" | cut -d' ' -f1)
    [ "$got" = "$want" ] || { log "$f: sha256 $got, the MANIFEST says $want"; return 1; }
  done < <(awk '$1 == "part:"' "$d/MANIFEST")
  want=$(awk '$1 == "whole:" {print $4}' "$d/MANIFEST")
  got=$(cat $(awk '$1 == "part:" {print "'"$d"'/" $2}' "$d/MANIFEST") | sha256sum | cut -d' ' -f1)
  [ "$got" = "$want" ] || { log "the joined parts: sha256 $got, the MANIFEST says $want"; return 1; }
}

case $mode in
pack)
  mkdir -p "$out" "$work/dl" "$work/stored"
  log "downloading $DALI_SPEC $NVIMGCODEC_SPEC $EXTRA for CPython 3.12 manylinux x86_64"
  # shellcheck disable=SC2086
  pip download -q --no-deps "${PIP_312[@]}" -d "$work/dl" "$DALI_SPEC" "$NVIMGCODEC_SPEC" $EXTRA
  rm -f "$work"/stored/*.whl
  for w in "$work"/dl/*.whl; do
    "$py" tools/wheel_lzma.py --stored "${DROP[@]}" "$w" "$work/stored/$(basename "$w")"
  done
  log "xz over $(du -sm "$work/stored" | cut -f1) MiB of stored wheels"
  rm -f "$out"/part-* "$out/MANIFEST"
  tar -cf - -C "$work" stored | xz -9 -T"${XZ_THREADS:-2}" | split -b "${PART_MB}M" - "$out/part-"
  {
    echo "sluice GPU-host peers: $DALI_SPEC $NVIMGCODEC_SPEC $EXTRA; CPython 3.12 manylinux x86_64; made $(date -u +%FT%TZ)"
    ls -l "$work/stored" | awk 'NR > 1 {print "wheel:", $9, $5}'
    for f in "$out"/part-*; do
      echo "part: $(basename "$f") $(stat -c %s "$f") $(sha256sum "$f" | cut -d' ' -f1)"
    done
    echo "whole: stored.tar.xz $(cat "$out"/part-* | wc -c) $(cat "$out"/part-* | sha256sum | cut -d' ' -f1)"
  } >"$out/MANIFEST"
  cat "$out/MANIFEST"
  ;;
stash)
  mkdir -p "$parts"
  n=0
  for f in "$out"/MANIFEST "$out"/part-*; do
    [ -f "$f" ] || continue
    cp "$f" "$parts/$(basename "$f").tmp" && mv "$parts/$(basename "$f").tmp" "$parts/$(basename "$f")"
    n=$((n + 1))
  done
  log "$n file(s) copied into $parts: $(cd "$parts" && ls | tr '\n' ' ')"
  verify "$parts" && log "every part is in $parts and checks: ready for install" || true
  ;;
install)
  verify "$parts" || exit 1
  sum=$(awk '$1 == "whole:" {print $4}' "$parts/MANIFEST")
  if [ -f "$site/.gpupeers-$sum" ]; then
    log "$site already holds this bundle"
  else
    tmp=${TMPDIR:-/tmp}/gpupeers-unpack
    rm -rf "$tmp" "$site" && mkdir -p "$tmp" "$site"
    cat $(awk '$1 == "part:" {print "'"$parts"'/" $2}' "$parts/MANIFEST") | xz -dc | tar -xf - -C "$tmp"
    log "installing $(ls "$tmp"/stored | wc -l) wheels into $site"
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "$tmp"/stored/*.whl
    rm -rf "$tmp"
    touch "$site/.gpupeers-$sum"
  fi
  PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH} "$py" -c '
import nvidia.dali, nvidia.nvimgcodec
print("DALI", nvidia.dali.__version__, "nvImageCodec", nvidia.nvimgcodec.__version__)'
  ;;
check)
  verify "$out" || exit 1
  tmp=$(mktemp -d)
  cat $(awk '$1 == "part:" {print "'"$out"'/" $2}' "$out/MANIFEST") | xz -dc | tar -xf - -C "$tmp"
  pip install -q --no-deps --no-compile "${PIP_312[@]}" --target "$tmp/site" "$tmp"/stored/*.whl
  ls "$tmp/site/nvidia/dali/backend_impl.cpython-312-x86_64-linux-gnu.so" \
    "$tmp"/site/nvidia/nvimgcodec/nvimgcodec_impl.cpython-312-x86_64-linux-gnu.so >/dev/null
  log "the parts join, check and install for CPython 3.12: $(du -sm "$tmp/site" | cut -f1) MiB in $tmp/site"
  ls "$tmp/site"
  rm -rf "$tmp"
  ;;
*)
  sed -n 2,36p "$0"; exit 2;;
esac

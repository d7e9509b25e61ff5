#!/usr/bin/env bash
# Install what sluice needs, if it is missing. Idempotent: a second run
# installs nothing. Where it cannot install (not root, no apt, no network),
# it says exactly what is missing and exits non-zero.
#   tools/setup.sh            build + test needs (numpy, Pillow, pytest, moto[server], boto3; torch, CPU build; Ray)
#   tools/setup.sh --bench    the test needs + PyAV, the video benchmarks' DataLoader peer (no test needs it)
#   tools/setup.sh --build    build needs only (what `make` alone requires)
#   tools/setup.sh --demo     build needs + what `make demo` runs (numpy, Pillow)
#   tools/setup.sh --fuzz     build needs + clang and libFuzzer (`make fuzz`)
#
# Python. The interpreter is $PYTHON (python3 by default). When it lacks a
# package the target needs and pip may not install into it (PEP 668: an
# "externally managed" interpreter such as Debian's or Ubuntu's
# /usr/bin/python3, or one whose site-packages this user cannot write),
# setup makes a project virtual environment, .venv/ at the repository root,
# from that interpreter, and installs there. Every Makefile target then uses
# .venv/bin/python (delete .venv/ to go back). The venv does not see the
# system's site-packages: what the tests import is what setup installed.
#
# torch is installed only for the tests that need it, and only as a CPU
# build: `torch==2.13.0+cpu` (a local version label no CUDA wheel carries),
# from pip's configured sources or PyTorch's CPU index. Where neither has it,
# setup says so and the torch tests skip; it never pulls the CUDA build.
set -u
want_py=test want_fuzz=0 want_bench=0
case "${1:-}" in
  "") ;;
  --bench) want_bench=1 ;;
  --build) want_py=none ;;
  --demo) want_py=demo ;;
  --fuzz) want_py=none want_fuzz=1 ;;
  *) echo "usage: tools/setup.sh [--build | --demo | --fuzz | --bench]" >&2; exit 2 ;;
esac
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BASE_PY=${PYTHON:-python3}
VENV=$ROOT/.venv
TORCH_SPEC="torch==2.13.0+cpu"
TORCH_CPU_INDEX=https://download.pytorch.org/whl/cpu
RAY_SPEC="ray[data,train]==2.60.0"

if ! command -v "$BASE_PY" >/dev/null 2>&1; then
  echo "setup: no Python interpreter '$BASE_PY' (set PYTHON=/path/to/python3, 3.10 or newer)" >&2
  exit 1
fi
py_version=$("$BASE_PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
base_is_system=0  # the distribution's interpreter: apt provides its venv module and headers
case "$(command -v "$BASE_PY")" in /usr/bin/*) base_is_system=1 ;; esac

# ---- Debian packages --------------------------------------------------------
missing_deb=()
need_deb() { # package, and a file or command that proves it present
  local pkg=$1 probe=$2
  if [ "${probe#/}" != "$probe" ]; then [ -e "$probe" ] && return; else command -v "$probe" >/dev/null 2>&1 && return; fi
  dpkg -s "$pkg" >/dev/null 2>&1 && return
  missing_deb+=("$pkg")
}
py_has() { "$1" -c "import $2" >/dev/null 2>&1; }
need_deb gcc gcc
need_deb g++ g++ # tests/gpu/resize_emu.cpp: the GPU resize kernels built for the host
need_deb make make
need_deb cmake cmake
need_deb pkg-config pkg-config
need_deb libjpeg62-turbo-dev /usr/include/jpeglib.h
need_deb libspng-dev /usr/include/spng.h
need_deb libjansson-dev /usr/include/jansson.h
# video clips (optional in the build, used when found): FFmpeg's libraries
need_deb libavformat-dev /usr/include/x86_64-linux-gnu/libavformat/avformat.h
need_deb libavcodec-dev /usr/include/x86_64-linux-gnu/libavcodec/avcodec.h
need_deb libswscale-dev /usr/include/x86_64-linux-gnu/libswscale/swscale.h
need_deb libavutil-dev /usr/include/x86_64-linux-gnu/libavutil/avutil.h
# the video tests make their clips with the ffmpeg CLI
[ $want_py = test ] && need_deb ffmpeg ffmpeg
# the C harness's watchdog prints a hung case's stacks with gdb (tests/c/check.h)
[ $want_py = test ] && need_deb gdb gdb
need_deb libwebp-dev /usr/include/webp/decode.h
# s3:// and http(s):// sources (optional in the build, used when found): libcurl with OpenSSL
need_deb libcurl4-openssl-dev /usr/include/x86_64-linux-gnu/curl/curl.h
if [ $want_fuzz = 1 ]; then
  need_deb clang clang
  need_deb libclang-rt-14-dev /usr/lib/llvm-14/lib/clang/14.0.6/lib/linux/libclang_rt.fuzzer-x86_64.a
fi
headers=$("$BASE_PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
# the extension's headers, from the distribution for its own interpreter
[ $base_is_system = 1 ] && [ ! -e "$headers/Python.h" ] && missing_deb+=("python$py_version-dev")

install_debs() {
  echo "setup: installing Debian packages: $*"
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "setup: missing packages and cannot install them (need root and apt-get): $*" >&2
    return 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "$@" >/tmp/sluice-apt.log 2>&1 && return
  apt-get update -q >>/tmp/sluice-apt.log 2>&1
  apt-get install -y -q --no-install-recommends "$@" >>/tmp/sluice-apt.log 2>&1 && return
  echo "setup: apt-get could not install: $* (log: /tmp/sluice-apt.log)" >&2
  return 1
}
if [ ${#missing_deb[@]} -gt 0 ]; then install_debs "${missing_deb[@]}" || exit 1; fi
if [ ! -e "$headers/Python.h" ]; then
  echo "setup: Python headers missing for $BASE_PY ($headers/Python.h): the extension will not build" \
       "(Debian: python$py_version-dev)" >&2
fi
[ "$want_py" = none ] && exit 0

# ---- Python packages ----------------------------------------------------------
wanted=(numpy:numpy PIL:Pillow)
# the remote-source tests run moto's S3 in server mode and talk to it with boto3
[ "$want_py" = test ] && wanted+=(pytest:pytest moto.server:moto[server] boto3:boto3)
missing_in() { # interpreter -> the pip names of the wanted modules it lacks
  local m
  for m in "${wanted[@]}"; do py_has "$1" "${m%%:*}" || printf '%s ' "${m#*:}"; done
}
# pip may install into it: not PEP 668 externally managed (or a venv), and writable
pip_may_install() {
  "$1" - <<'EOF' >/dev/null 2>&1
import os, sys, sysconfig
managed = os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED"))
in_venv = sys.prefix != sys.base_prefix
sys.exit(0 if (in_venv or not managed) and os.access(sysconfig.get_path("purelib"), os.W_OK) else 1)
EOF
}
pip_install() { # interpreter, then pip arguments; output to the log
  "$1" -m pip install -q "${@:2}" >>/tmp/sluice-pip.log 2>&1
}

PY=$BASE_PY
[ -x "$VENV/bin/python" ] && PY=$VENV/bin/python
missing=$(missing_in "$PY")
if [ -n "$missing" ] && [ "$PY" = "$BASE_PY" ] && ! pip_may_install "$BASE_PY"; then
  echo "setup: $BASE_PY is managed by the system (PEP 668) or not writable here; making a project" \
       "virtual environment at $VENV for: $missing"
  # the venv module's ensurepip: a separate package on Debian and Ubuntu
  if ! py_has "$BASE_PY" ensurepip && [ $base_is_system = 1 ]; then
    install_debs "python$py_version-venv" || exit 1
  fi
  "$BASE_PY" -m venv "$VENV" >/tmp/sluice-venv.log 2>&1 || {
    echo "setup: could not make $VENV with $BASE_PY -m venv (log: /tmp/sluice-venv.log;" \
         "Debian/Ubuntu: apt-get install python$py_version-venv)" >&2
    exit 1; }
  PY=$VENV/bin/python
  missing=$(missing_in "$PY")
fi
if [ -n "$missing" ]; then
  echo "setup: installing Python packages into $PY: $missing"
  # shellcheck disable=SC2086  # one word a package
  (set -f; pip_install "$PY" $missing) || { # set -f: moto[server] is a name, not a glob
    echo "setup: pip could not install: $missing (log: /tmp/sluice-pip.log)" >&2; exit 1; }
fi
if [ "$want_py" = test ] && ! py_has "$PY" torch; then
  echo "setup: installing $TORCH_SPEC (CPU build, for the torch tests) into $PY"
  pip_install "$PY" --timeout 30 --retries 1 --extra-index-url "$TORCH_CPU_INDEX" "$TORCH_SPEC" || \
    echo "setup: no CPU build of torch ($TORCH_SPEC) from pip's sources or $TORCH_CPU_INDEX" \
         "(log: /tmp/sluice-pip.log): the torch tests will be skipped" >&2
fi
# Lightning, for the test that trains examples/lightning_datamodule.py on the
# CPU: only beside the installed torch (its requirement, torch >= 2.1, is met
# by it, so pip pulls no other torch); without it that test skips.
if [ "$want_py" = test ] && py_has "$PY" torch && ! py_has "$PY" lightning; then
  echo "setup: installing lightning (for the Lightning example's test) into $PY"
  pip_install "$PY" --timeout 30 --retries 1 lightning || \
    echo "setup: could not install lightning (log: /tmp/sluice-pip.log): its example's test will be skipped" >&2
fi
# Ray (Ray Data and Ray Train), for the sluice.ray tests only, CPU as all of
# Ray's wheels are: RAY_SPEC, a release with wheels for CPython 3.10 to 3.13
# (the GPU host runs 3.12: tools/host_ray_wheels.sh). Where pip cannot get it
# the Ray tests skip, saying so.
if [ "$want_py" = test ] && ! py_has "$PY" ray.data; then
  echo "setup: installing $RAY_SPEC (for the sluice.ray tests) into $PY"
  pip_install "$PY" --timeout 30 --retries 1 "$RAY_SPEC" || \
    echo "setup: could not install $RAY_SPEC (log: /tmp/sluice-pip.log): the Ray tests will be skipped" >&2
fi
# PyAV (its wheel brings its own FFmpeg), the DataLoader peer of the video
# benchmarks (bench/video_cpu.sh, bench/video_peers.py); no test needs it.
# Where pip cannot get it that peer is skipped, saying so.
if [ "$want_bench" = 1 ] && ! py_has "$PY" av; then
  echo "setup: installing av (PyAV, the video benchmarks' peer) into $PY"
  pip_install "$PY" --timeout 30 --retries 1 av || \
    echo "setup: could not install av (log: /tmp/sluice-pip.log): the video benchmarks will skip their PyAV peer" >&2
fi
exit 0

#!/usr/bin/env bash
# Install what sluice needs to build and test, if it is missing. Idempotent:
# a second run installs nothing. Where it cannot install (not root, no apt,
# no network), it says exactly what is missing and exits non-zero.
#   tools/setup.sh            build + test needs
#   tools/setup.sh --build    build needs only (what `make` alone requires)
#   tools/setup.sh --fuzz     build needs + clang and libFuzzer (`make fuzz`)
set -u
want_test=1 want_fuzz=0
[ "${1:-}" = "--build" ] && want_test=0
[ "${1:-}" = "--fuzz" ] && want_test=0 && want_fuzz=1
PY=${PYTHON:-python3}

missing_deb=()
need_deb() { # package, and a file or command that proves it present
  local pkg=$1 probe=$2
  if [ "${probe#/}" != "$probe" ]; then [ -e "$probe" ] && return; else command -v "$probe" >/dev/null 2>&1 && return; fi
  dpkg -s "$pkg" >/dev/null 2>&1 && return
  missing_deb+=("$pkg")
}
need_deb gcc gcc
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
[ $want_test = 1 ] && need_deb ffmpeg ffmpeg
need_deb libwebp-dev /usr/include/webp/decode.h
if [ $want_fuzz = 1 ]; then
  need_deb clang clang
  need_deb libclang-rt-14-dev /usr/lib/llvm-14/lib/clang/14.0.6/lib/linux/libclang_rt.fuzzer-x86_64.a
fi

if [ ${#missing_deb[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing_deb[*]}"
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -q --no-install-recommends "${missing_deb[@]}" >/tmp/sluice-apt.log 2>&1; then
      apt-get update -q >>/tmp/sluice-apt.log 2>&1
      apt-get install -y -q --no-install-recommends "${missing_deb[@]}" >>/tmp/sluice-apt.log 2>&1 || {
        echo "setup: apt-get could not install: ${missing_deb[*]} (log: /tmp/sluice-apt.log)" >&2; exit 1; }
    fi
  else
    echo "setup: missing packages and cannot install them (need root and apt-get): ${missing_deb[*]}" >&2
    exit 1
  fi
fi

if ! $PY -c 'import sysconfig,os,sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"],"Python.h")))' 2>/dev/null; then
  echo "setup: Python headers missing for $PY: the extension will not build (install python3-dev)" >&2
fi

if [ $want_test = 1 ]; then
  missing_py=()
  $PY -c 'import numpy' 2>/dev/null || missing_py+=(numpy)
  $PY -c 'import pytest' 2>/dev/null || missing_py+=(pytest)
  $PY -c 'import PIL' 2>/dev/null || missing_py+=(Pillow)
  # CPU build of torch for the torch-layer tests (never a newer, several-GB one)
  $PY -c 'import torch' 2>/dev/null || missing_py+=(torch==2.13.0)
  if [ ${#missing_py[@]} -gt 0 ]; then
    echo "setup: installing Python packages: ${missing_py[*]}"
    $PY -m pip install -q "${missing_py[@]}" >/tmp/sluice-pip.log 2>&1 || {
      # torch is optional for the tests (they skip without it); the rest is not
      echo "setup: pip could not install all of: ${missing_py[*]} (log: /tmp/sluice-pip.log)" >&2
      for p in numpy pytest Pillow; do
        $PY -m pip install -q "$p" >>/tmp/sluice-pip.log 2>&1 || { echo "setup: $p is required" >&2; exit 1; }
      done; }
  fi
fi
exit 0

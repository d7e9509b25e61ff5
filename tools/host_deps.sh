#!/usr/bin/env bash
# The dependency bundle for a GPU host that has no package manager and no
# network (Ubuntu 24.04, Python 3.12, torch + torchvision, no libjansson-dev,
# libspng, libwebp or FFmpeg dev files): run it HERE (Debian 12, root, with
# Debian's archive and PyPI), carry the result, and `bench/gpu_host.sh deps`
# uses it there.
#
#   tools/host_deps.sh [--out .devcarry] [--work /var/tmp/sluice-host-deps] [--jobs N]
#                      [--no-wheels] [--no-shared]
#
# Writes into OUT (default .devcarry, ignored through .git/info/exclude):
#   root.tar.xz          root/usr/: one prefix, relocatable (.pc files say prefix=${pcfiledir}/../../..):
#                        Debian 12's libjansson4 + -dev, libspng0 + -dev, libwebp7 + -dev
#                        (+ libwebpmux3, libwebpdemux2 that its -dev needs), zlib.pc and
#                        zlib.h (libspng's .pc requires zlib; the host has the runtime),
#                        pkgconf (the pkg-config that CMake runs, where the host has none);
#                        a minimal static FFmpeg (libavformat, libavcodec, libswscale,
#                        libavutil; PIC; the decoders, demuxers and parsers of sluice's
#                        video allow-list) built from Debian 12's ffmpeg source package;
#                        xz-compressed (12 MB -> 3 MB: the carry limit), unpacked by gpu_host.sh
#   wheels/              the video peers' wheels for CPython 3.12 manylinux x86_64:
#                        PyAV, recompressed (zip LZMA: same files and RECORD, ~9 MB less)
#   shared/              a copy of ../shared's bench scripts (peer_torch.py, decode_ceiling.py)
#                        and photos (PHOTOS= of gpu_host.sh); never committed
#   MANIFEST             versions and sizes
# Idempotent: what is there already is kept (delete OUT/ to start over). Needs
# nasm (installed here if missing: FFmpeg's SIMD decoders are what the peers' wheels
# have too) and a deb-src entry (written to /etc/apt/sources.list.d/sluice-deb-src.sources).
set -euo pipefail
cd "$(dirname "$0")/.."
out=.devcarry work=/var/tmp/sluice-host-deps jobs=$(nproc) wheels=1 shared=1
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=$2; shift 2;;
    --work) work=$2; shift 2;;
    --jobs) jobs=$2; shift 2;;
    --no-wheels) wheels=0; shift;;
    --no-shared) shared=0; shift;;
    *) sed -n 2,26p "$0"; exit 2;;
  esac
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
mkdir -p "$work"
work=$(cd "$work" && pwd)
root=$work/root            # the prefix, packed into $out/root.tar.xz at the end
mkdir -p "$work/debs" "$root"
log() { echo "== host_deps: $*" >&2; }

# ---- Debian packages, unpacked into one prefix -------------------------------------
# (pkgconf: the host may have no pkg-config, which CMake needs for jansson)
DEBS="libjansson4 libjansson-dev libspng0 libspng-dev libwebp7 libwebp-dev libwebpmux3 libwebpdemux2 zlib1g-dev
      pkgconf pkgconf-bin libpkgconf3"
if [ "$(cat "$root/.debs-done" 2>/dev/null)" != "$(echo $DEBS)" ]; then
  log "downloading $(echo $DEBS)"
  (cd "$work/debs" && apt-get download $DEBS)
  for d in "$work"/debs/*.deb; do dpkg -x "$d" "$root"; done
  # keep zlib's .pc and header only: the host has libz.so.1, and a libz.a here
  # would be picked before it by -lz
  rm -f "$root"/usr/lib/x86_64-linux-gnu/libz.* "$root"/usr/lib/x86_64-linux-gnu/libwebp*.a
  rm -rf "$root/usr/share/doc" "$root/usr/share/man" "$root/usr/share/lintian"
  echo $DEBS >"$root/.debs-done"
fi

# ---- FFmpeg, static and minimal, from Debian 12's source package --------------------
FF_DECODERS=h264,hevc,vp8,vp9,mpeg4,mpeg2video,mpeg1video,mjpeg,h263   # SL_VIDEO_DEFAULT_CODECS
FF_DEMUXERS=mov,matroska,avi                                          # SL__VIDEO_FORMATS
FF_PARSERS=h264,hevc,vp8,vp9,mpeg4video,mpegvideo,mjpeg,h263
if [ ! -f "$root/usr/lib/x86_64-linux-gnu/libavcodec.a" ]; then
  command -v nasm >/dev/null || { log "installing nasm"; apt-get install -y -q nasm >/dev/null; }
  src=/etc/apt/sources.list.d/sluice-deb-src.sources
  if ! apt-cache showsrc ffmpeg >/dev/null 2>&1; then
    log "adding Debian 12 source packages ($src)"
    cat >"$src" <<'EOF'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    apt-get update -q -o Dir::Etc::sourcelist="$src" -o Dir::Etc::sourceparts=- -o APT::Get::List-Cleanup=0 >/dev/null
  fi
  (cd "$work" && ls ffmpeg_*.orig.tar.xz >/dev/null 2>&1 || apt-get source --download-only -q ffmpeg >/dev/null)
  tarball=$(ls "$work"/ffmpeg_*.orig.tar.xz | tail -1)
  ver=$(basename "$tarball" .orig.tar.xz | sed 's/^ffmpeg_//')
  [ -d "$work/ffmpeg-$ver" ] || tar -xf "$tarball" -C "$work"
  log "building FFmpeg $ver (static, minimal) with $jobs jobs"
  (cd "$work/ffmpeg-$ver" && { [ -f libavcodec/libavcodec.a ] || {
    ./configure --prefix=/usr --libdir=/usr/lib/x86_64-linux-gnu \
      --disable-everything --disable-autodetect --enable-pthreads --enable-static --disable-shared --enable-pic \
      --disable-programs --disable-doc --disable-avdevice --disable-avfilter --disable-swresample \
      --disable-postproc --disable-network --disable-debug --disable-iconv \
      --enable-decoder=$FF_DECODERS --enable-demuxer=$FF_DEMUXERS --enable-parser=$FF_PARSERS \
      --enable-protocol=file >"$work/ffmpeg-configure.log" &&
    nice -n 10 make -j"$jobs" >"$work/ffmpeg-make.log" 2>&1; }; } &&
    make install DESTDIR="$root" >>"$work/ffmpeg-make.log" 2>&1) || { log "FFmpeg build failed: see $work/ffmpeg-*.log"; exit 1; }
  rm -rf "$root/usr/share/ffmpeg"
fi

# Relocatable .pc files: every path from the file's own place (pkg-config and
# pkgconf both define pcfiledir), so the prefix works wherever it is unpacked.
for pc in "$root"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc "$root"/usr/share/pkgconfig/*.pc; do
  [ -f "$pc" ] || continue
  sed -i -e 's|^prefix=.*|prefix=${pcfiledir}/../../..|' -e 's|^exec_prefix=.*|exec_prefix=${prefix}|' \
    -e 's|^libdir=/usr/|libdir=${prefix}/|' -e 's|^includedir=/usr/|includedir=${prefix}/|' "$pc"
done
grep -l "=/" "$root"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc && { log "absolute paths left in .pc files"; exit 1; }
if [ ! -f "$out/root.tar.xz" ] || [ -n "$(find "$root" -newer "$out/root.tar.xz" -print -quit)" ]; then
  log "packing the prefix into $out/root.tar.xz"
  tar -cJf "$out/root.tar.xz.tmp" -C "$work" root && mv "$out/root.tar.xz.tmp" "$out/root.tar.xz"
fi

# ---- the peers' wheels ---------------------------------------------------------------
if [ "$wheels" = 1 ] && ! ls "$out"/wheels/av-*.whl >/dev/null 2>&1; then
  log "downloading PyAV for CPython 3.12 manylinux x86_64"
  mkdir -p "$work/wheels" "$out/wheels"
  pip download -q --no-deps --python-version 3.12 --only-binary=:all: --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_17_x86_64 -d "$work/wheels" av
  for w in "$work"/wheels/av-*.whl; do # same members, LZMA instead of deflate (pip reads both)
    python3 tools/wheel_lzma.py "$w" "$out/wheels/$(basename "$w")"
  done
fi

# ---- the shared material (photos for the ImageNet-like set) --------------------------
if [ "$shared" = 1 ] && [ ! -d "$out/shared/bench" ]; then
  from=${SHARED_ROOT:-$(cd .. && pwd)/shared}
  [ -d "$from/bench" ] || from=/work/shared
  log "copying $from/bench and $from/data (for the host only; never committed)"
  mkdir -p "$out/shared" && cp -r "$from/bench" "$from/data" "$out/shared/"
fi

{
  echo "sluice host bundle, made $(date -u +%FT%TZ) on $(. /etc/os-release && echo "$PRETTY_NAME")"
  for d in "$work"/debs/*.deb; do dpkg-deb -f "$d" Package Version | paste -sd' '; done
  ls "$work"/ffmpeg_*.orig.tar.xz 2>/dev/null | sed 's|.*/|ffmpeg source: |'
  echo "ffmpeg decoders: $FF_DECODERS; demuxers: $FF_DEMUXERS; parsers: $FF_PARSERS"
  ls "$out"/wheels 2>/dev/null | sed 's/^/wheel: /'
  du -sh "$root" "$out/root.tar.xz" "$out/wheels" "$out/shared" 2>/dev/null
} >"$out/MANIFEST"
cat "$out/MANIFEST"
echo "carry: $(du -sh "$out" | cut -f1) in $out (downloads and the FFmpeg build tree stay in $work)"

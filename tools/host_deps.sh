#!/usr/bin/env bash
# The dependency bundle for a GPU host that has no package manager and no
# network (Ubuntu 24.04, Python 3.12, torch + torchvision, no libjansson-dev,
# libspng, libwebp or FFmpeg dev files): run it HERE (Debian 12, root, with
# Debian's archive and PyPI), carry the result, and `bench/gpu_host.sh deps`
# uses it there.
#
#   tools/host_deps.sh [--out .devcarry] [--work /var/tmp/sluice-host-deps] [--jobs N]
#                      [--no-wheels] [--no-shared] [--torchcodec]
#
# With --torchcodec the bundle serves the GPU video run too (issue 23: bench/gpu_host.sh
# videogpu; 52 MiB with the photos, which that run does not need: bench/README.md names the
# parts it carries). A video bundle of its own (37 MB, DEPS=.devcarry/video):
#   tools/host_deps.sh --out .devcarry/video --no-shared --torchcodec
#
# Writes into OUT (default .devcarry, ignored through .git/info/exclude):
#   root.tar.xz          root/usr/: one prefix, relocatable (.pc files say prefix=${pcfiledir}/../../..):
#                        Debian 12's libjansson4 + -dev, libspng0 + -dev, libwebp7 + -dev
#                        (+ libwebpmux3, libwebpdemux2 that its -dev needs), zlib.pc and
#                        zlib.h (libspng's .pc requires zlib; the host has the runtime),
#                        pkgconf (the pkg-config that CMake runs, where the host has none);
#                        a minimal static FFmpeg (libavformat, libavcodec, libswscale,
#                        libavutil; PIC; the decoders, demuxers and parsers of sluice's
#                        video allow-list and their NVDEC hwaccels, which load libcuda.so.1
#                        and libnvcuvid.so.1 at run time) built from Debian 12's ffmpeg source
#                        package against Debian 12's nv-codec-headers (libffmpeg-nvenc-dev,
#                        used here only);
#                        a minimal static libcurl (HTTP and HTTPS through OpenSSL only, PIC:
#                        s3:// and http(s):// sources) from Debian 12's curl source package,
#                        with linker scripts libssl.so / libcrypto.so that name the host's
#                        own libssl.so.3 / libcrypto.so.3 (Ubuntu 24.04 has OpenSSL 3.0 too,
#                        but no -dev symlinks): Debian's libcurl4 and its runtime closure
#                        (nghttp2, libssh2, librtmp, libpsl, libidn2, GSSAPI, LDAP, zstd,
#                        brotli: a dozen libraries the host may lack) are not needed then;
#                        xz-compressed (12 MB -> 3 MB: the carry limit), unpacked by gpu_host.sh
#   wheels/              the video peers' wheels for CPython 3.12 manylinux x86_64:
#                        PyAV, recompressed (zip LZMA: same files and RECORD, ~9 MB less);
#                        with --torchcodec torchcodec (TORCHCODEC, default 0.16.0: PyPI's
#                        wheel, built for CUDA 13 and torch >= 2.11), recompressed the same way
#   ffmpeg-shared.tar.xz with --torchcodec: ffmpeg-shared/lib/, the same minimal FFmpeg as shared
#                        libraries under a prefix of their own (never mixed with the static
#                        one), plus the three libraries torchcodec links (libavfilter with the
#                        filters it uses, libavdevice without devices, libswresample);
#                        gpu_host.sh puts it on LD_LIBRARY_PATH of the torchcodec peers only
#   shared/              a copy of ../shared's bench scripts (peer_torch.py, decode_ceiling.py)
#                        and photos (PHOTOS= of gpu_host.sh); never committed
#   MANIFEST             versions and sizes
# Idempotent: what is there already is kept (delete OUT/ to start over). Needs
# nasm (installed here if missing: FFmpeg's SIMD decoders are what the peers' wheels
# have too) and a deb-src entry (written to /etc/apt/sources.list.d/sluice-deb-src.sources).
set -euo pipefail
cd "$(dirname "$0")/.."
out=.devcarry work=/var/tmp/sluice-host-deps jobs=$(nproc) wheels=1 shared=1 torchcodec=0
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=$2; shift 2;;
    --work) work=$2; shift 2;;
    --jobs) jobs=$2; shift 2;;
    --no-wheels) wheels=0; shift;;
    --no-shared) shared=0; shift;;
    --torchcodec) torchcodec=1; shift;;
    *) sed -n 2,43p "$0"; exit 2;;
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
FF_HWACCELS=h264_nvdec,hevc_nvdec,vp8_nvdec,vp9_nvdec,mpeg1_nvdec,mpeg2_nvdec,mpeg4_nvdec,mjpeg_nvdec
FF_COMMON="--disable-everything --disable-autodetect --enable-pthreads --enable-pic
  --disable-programs --disable-doc --disable-network --disable-debug --disable-iconv --disable-postproc
  --enable-ffnvcodec --enable-cuda --enable-nvdec --enable-hwaccel=$FF_HWACCELS
  --enable-decoder=$FF_DECODERS --enable-demuxer=$FF_DEMUXERS --enable-parser=$FF_PARSERS --enable-protocol=file"
FF_STATIC="$FF_COMMON --enable-static --disable-shared --disable-avdevice --disable-avfilter --disable-swresample"
# the shared build for torchcodec (--torchcodec): it links libavfilter (its frames go through a
# filter graph: these filters), libavdevice and libswresample, and hands NVDEC Annex B through
# the bitstream filters
FF_SHARED="$FF_COMMON --enable-shared --disable-static --enable-avfilter --enable-avdevice --enable-swresample
  --enable-filter=buffer,buffersink,format,scale,crop,null,copy,transpose,hwdownload,hwupload
  --enable-bsf=h264_mp4toannexb,hevc_mp4toannexb,vp9_superframe_split,extract_extradata,null"

ff_source() { # Debian 12's ffmpeg source, unpacked once; prints its folder
  command -v nasm >/dev/null || { log "installing nasm"; apt-get install -y -q nasm >/dev/null; }
  local src=/etc/apt/sources.list.d/sluice-deb-src.sources
  if ! apt-cache showsrc ffmpeg >/dev/null 2>&1; then
    log "adding Debian 12 source packages ($src)"
    printf '%s\n' "Types: deb-src" "URIs: http://deb.debian.org/debian" "Suites: bookworm bookworm-updates" \
      "Components: main" "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" "" "Types: deb-src" \
      "URIs: http://deb.debian.org/debian-security" "Suites: bookworm-security" "Components: main" \
      "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" >"$src"
    apt-get update -q -o Dir::Etc::sourcelist="$src" -o Dir::Etc::sourceparts=- -o APT::Get::List-Cleanup=0 >/dev/null
  fi
  (cd "$work" && ls ffmpeg_*.orig.tar.xz >/dev/null 2>&1 || apt-get source --download-only -q ffmpeg >/dev/null)
  local tarball ver
  tarball=$(ls "$work"/ffmpeg_*.orig.tar.xz | tail -1)
  ver=$(basename "$tarball" .orig.tar.xz | sed 's/^ffmpeg_//')
  [ -d "$work/ffmpeg-$ver" ] || tar -xf "$tarball" -C "$work"
  echo "$work/ffmpeg-$ver"
}

nvcodec_pc() { # Debian 12's nv-codec-headers (libffmpeg-nvenc-dev), for the build only; prints its .pc folder
  local d=$work/nvcodec pc
  if [ ! -f "$d/.done" ]; then
    mkdir -p "$d" && (cd "$d" && apt-get download libffmpeg-nvenc-dev >/dev/null) && dpkg -x "$d"/libffmpeg-nvenc-dev_*.deb "$d" ||
      { log "cannot fetch libffmpeg-nvenc-dev (nv-codec-headers)"; exit 1; }
    pc=$(find "$d" -name ffnvcodec.pc | head -1)
    [ -n "$pc" ] || { log "no ffnvcodec.pc in libffmpeg-nvenc-dev"; exit 1; }
    sed -i "s|^prefix=.*|prefix=$d/usr|" "$pc"
    touch "$d/.done"
  fi
  dirname "$(find "$d" -name ffnvcodec.pc | head -1)"
}

ff_build() { # DIR DESTDIR FLAGS...: FFmpeg configured out of tree in DIR (again when the flags change), installed in DESTDIR
  local dir=$1 dest=$2 srcdir pcdir flags
  shift 2
  flags="--prefix=/usr --libdir=/usr/lib/x86_64-linux-gnu $*"
  srcdir=$(ff_source) && pcdir=$(nvcodec_pc) || exit 1
  if [ "$(cat "$dir/.flags" 2>/dev/null)" != "$flags" ]; then
    rm -rf "$dir" && mkdir -p "$dir"
    log "configuring $(basename "$srcdir") in $dir"
    (cd "$dir" && PKG_CONFIG_PATH=$pcdir "$srcdir/configure" $flags >configure.log 2>&1) ||
      { tail -5 "$dir/configure.log"; log "FFmpeg configure failed: $dir/configure.log"; exit 1; }
    grep -q "h264_nvdec" "$dir/configure.log" || { log "no NVDEC in $dir's configuration (configure.log)"; exit 1; }
    echo "$flags" >"$dir/.flags"
  fi
  log "building FFmpeg in $dir with $jobs jobs"
  (cd "$dir" && nice -n 10 make -j"$jobs" >make.log 2>&1 && make install DESTDIR="$dest" >>make.log 2>&1) ||
    { tail -20 "$dir/make.log"; log "FFmpeg build failed: $dir/make.log"; exit 1; }
}

if [ "$(cat "$root/.ffmpeg-flags" 2>/dev/null)" != "$(echo $FF_STATIC)" ]; then # (re)build: flags changed
  rm -rf "$root"/usr/include/lib{avformat,avcodec,avutil,swscale}
  rm -f "$root"/usr/lib/x86_64-linux-gnu/lib{avformat,avcodec,avutil,swscale}.a
  rm -f "$root"/usr/lib/x86_64-linux-gnu/pkgconfig/lib{avformat,avcodec,avutil,swscale}.pc
  ff_build "$work/ffmpeg-static" "$root" $FF_STATIC
  rm -rf "$root/usr/share/ffmpeg"
  echo $FF_STATIC >"$root/.ffmpeg-flags"
fi

# ---- libcurl, static and minimal, from Debian 12's source package ----------------------
# HTTP and HTTPS only, through OpenSSL (headers from this machine's libssl-dev, the
# host's libssl.so.3 at link and run time), no compression (ranges are of stored bytes),
# no IDN, PSL, HTTP/2, SSH or LDAP: nothing the host must have but OpenSSL 3.
if [ ! -f "$root/usr/lib/x86_64-linux-gnu/libcurl.a" ]; then
  [ -f /usr/include/openssl/ssl.h ] || { log "installing libssl-dev"; apt-get install -y -q libssl-dev >/dev/null; }
  (cd "$work" && ls curl_*.orig.tar.?z* >/dev/null 2>&1 || apt-get source --download-only -q curl >/dev/null)
  ctar=$(ls "$work"/curl_*.orig.tar.?z* | grep -v '\.asc$' | tail -1) # the tarball, not its signature
  cver=$(basename "$ctar" | sed -e 's/^curl_//' -e 's/\.orig\.tar\..*//')
  [ -d "$work/curl-$cver" ] || tar -xf "$ctar" -C "$work"
  log "building libcurl $cver (static, HTTP(S) + OpenSSL) with $jobs jobs"
  (cd "$work/curl-$cver" && { [ -f lib/.libs/libcurl.a ] || {
    ./configure --prefix=/usr --libdir=/usr/lib/x86_64-linux-gnu --disable-shared --enable-static --with-pic \
      --with-openssl --without-zlib --without-brotli --without-zstd --without-libidn2 --without-libpsl \
      --without-nghttp2 --without-ngtcp2 --without-nghttp3 --without-libssh2 --without-librtmp --without-libgsasl \
      --disable-ldap --disable-ldaps --disable-rtsp --disable-dict --disable-telnet --disable-tftp --disable-pop3 \
      --disable-imap --disable-smb --disable-smtp --disable-gopher --disable-mqtt --disable-ftp --disable-file \
      --disable-manual --disable-docs --disable-ntlm --disable-kerberos-auth --disable-negotiate-auth \
      --with-ca-bundle=/etc/ssl/certs/ca-certificates.crt --with-ca-path=/etc/ssl/certs \
      >"$work/curl-configure.log" 2>&1 &&
    nice -n 10 make -j"$jobs" -C lib >"$work/curl-make.log" 2>&1; }; } &&
    make -C lib install DESTDIR="$root" >>"$work/curl-make.log" 2>&1 &&
    make -C include install DESTDIR="$root" >>"$work/curl-make.log" 2>&1 &&
    make install-pkgconfigDATA DESTDIR="$root" >>"$work/curl-make.log" 2>&1) ||
    { log "libcurl build failed: see $work/curl-*.log"; exit 1; }
  rm -f "$root"/usr/lib/x86_64-linux-gnu/libcurl.la
  # -lssl / -lcrypto at link time: the host's OpenSSL 3 (a linker script per library)
  for l in ssl crypto; do echo "INPUT(lib$l.so.3)" >"$root/usr/lib/x86_64-linux-gnu/lib$l.so"; done
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
  for w in "$work"/wheels/av-*.whl; do python3 tools/wheel_lzma.py "$w" "$out/wheels/$(basename "$w")"; done
fi

# ---- torchcodec, and the shared FFmpeg it loads -----------------------------------------
TORCHCODEC=${TORCHCODEC:-0.16.0}
if [ "$torchcodec" = 1 ]; then
  shared_root=$work/ffmpeg-shared-root
  if [ ! -f "$out/ffmpeg-shared.tar.xz" ] || [ "$(cat "$shared_root/.flags" 2>/dev/null)" != "$(echo $FF_SHARED)" ]; then
    rm -rf "$shared_root" "$work/pack"
    ff_build "$work/ffmpeg-shared" "$shared_root" $FF_SHARED
    mkdir -p "$work/pack/ffmpeg-shared/lib"
    cp -a "$shared_root"/usr/lib/x86_64-linux-gnu/lib*.so* "$work/pack/ffmpeg-shared/lib/"
    log "packing the shared FFmpeg into $out/ffmpeg-shared.tar.xz"
    tar -cJf "$out/ffmpeg-shared.tar.xz.tmp" -C "$work/pack" ffmpeg-shared &&
      mv "$out/ffmpeg-shared.tar.xz.tmp" "$out/ffmpeg-shared.tar.xz"
    echo $FF_SHARED >"$shared_root/.flags"
  fi
  if ! ls "$out"/wheels/torchcodec-"$TORCHCODEC"-*.whl >/dev/null 2>&1; then
    log "downloading torchcodec $TORCHCODEC for CPython 3.12 manylinux x86_64"
    mkdir -p "$work/wheels" "$out/wheels"
    pip download -q --no-deps --python-version 3.12 --only-binary=:all: --platform manylinux_2_28_x86_64 \
      -d "$work/wheels" "torchcodec==$TORCHCODEC"
    for w in "$work"/wheels/torchcodec-"$TORCHCODEC"-*.whl; do python3 tools/wheel_lzma.py "$w" "$out/wheels/$(basename "$w")"; done
  fi
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
  ls "$work"/curl_*.orig.tar.?z* 2>/dev/null | grep -v '\.asc$' | sed 's|.*/|curl source: |'
  echo "ffmpeg decoders: $FF_DECODERS; demuxers: $FF_DEMUXERS; parsers: $FF_PARSERS; hwaccels: $FF_HWACCELS"
  ls "$work"/nvcodec/*.deb 2>/dev/null | sed 's|.*/|nv-codec-headers, for the build only: |'
  ls "$out"/wheels 2>/dev/null | sed 's/^/wheel: /'
  du -sh "$root" "$out/root.tar.xz" "$out/ffmpeg-shared.tar.xz" "$out/wheels" "$out/shared" 2>/dev/null || true
} >"$out/MANIFEST"
cat "$out/MANIFEST"
echo "carry: $(du -sh "$out" | cut -f1) in $out (downloads and the FFmpeg build trees stay in $work)"

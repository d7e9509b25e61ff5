# The dependency bundle's environment, sourced by bench/gpu_host.sh and
# bench/gpu_check.sh (DEPS: the bundle's folder, default .devcarry). Every
# process of theirs, builds and suites alike, sees the same prefix: the
# C suite's test_abi builds sluice 0.1 with -lspng, which the linker finds
# through LIBRARY_PATH only.
DEPS=${DEPS:-.devcarry}
# once a process tree: gpu_check.sh's build step runs gpu_host.sh, which
# would otherwise put the same prefix on every path a second time
if [ "${SL_HOST_ENV:-}" = "$DEPS" ]; then return 0; fi
export SL_HOST_ENV=$DEPS
# The bundle's prefix first for pkg-config (its own pkgconf, and the .pc files
# for CMake) and the linker (-lspng, -lwebp; FFmpeg is static); at run time
# what we build finds libjansson.so.4, libspng.so.0 and libwebp.so.7 through
# an rpath (CMake takes LDFLAGS at its first configure), so the peers'
# processes see nothing of the bundle. It travels packed (root.tar.xz) and is
# unpacked beside it once.
if [ -f "$DEPS/root.tar.xz" ] && [ "$DEPS/root.tar.xz" -nt "$DEPS/root/.unpacked" ]; then
  rm -rf "$DEPS/root" && tar -xJf "$DEPS/root.tar.xz" -C "$DEPS" && touch "$DEPS/root/.unpacked"
fi
if [ -d "$DEPS/root/usr/lib/x86_64-linux-gnu" ]; then
  DEPS_LIB=$(cd "$DEPS/root/usr/lib/x86_64-linux-gnu" && pwd)
  export PKG_CONFIG_PATH=$DEPS_LIB/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
  export LIBRARY_PATH=$DEPS_LIB${LIBRARY_PATH:+:$LIBRARY_PATH}
  export LDFLAGS="-Wl,-rpath,$DEPS_LIB${LDFLAGS:+ $LDFLAGS}"
  if [ -x "$DEPS_LIB/../../bin/pkgconf" ]; then # behind a wrapper that finds its libpkgconf.so.3
    mkdir -p "$DEPS/root/wrap"
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$DEPS_LIB" "$(cd "$DEPS_LIB/../../bin" && pwd)/pkgconf" \
      >"$DEPS/root/wrap/pkg-config"
    chmod +x "$DEPS/root/wrap/pkg-config"
    PATH=$(cd "$DEPS/root/wrap" && pwd):$PATH
  fi
fi

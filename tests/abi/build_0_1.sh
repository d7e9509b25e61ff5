#!/bin/sh
# build_0_1.sh SRC DEST: build libsluice 0.1, the library of the commit whose
# include/sluice.h is tests/abi/sluice-0.1.h, into DEST/build (once: a
# second call finds it there). test_abi runs a program built against
# today's header against it. -O0 and the library alone: seconds.
# Exit 77 when SRC's git history does not hold that commit (a source
# archive, a shallow clone), or when 0.1's sources do not configure here
# (they never change, so that is this machine's: a dependency 0.1 requires
# is missing): the test then says it was skipped and why. SL_PKG_CONFIG,
# SL_PKG_CONFIG_PATH and SL_LDFLAGS (set by CMake for the test): the
# pkg-config and search paths today's build was configured with.
set -eu
SRC=$1
DEST=$2
COMMIT=179cbe52a68a73867dce8721029bcef128ce9632
if [ -e "$DEST/build/libsluice.so.0" ]; then exit 0; fi
if ! command -v git >/dev/null 2>&1 || ! git -C "$SRC" cat-file -e "$COMMIT^{commit}" 2>/dev/null; then
    echo "commit $COMMIT (0.1) is not in the history of $SRC (no git, a source archive or a shallow clone): the 0.1 library cannot be built"
    exit 77
fi
rm -rf "$DEST.tmp"
mkdir -p "$DEST.tmp/src"
git -C "$SRC" archive "$COMMIT" | tar -x -C "$DEST.tmp/src"
if ! cmp -s "$DEST.tmp/src/include/sluice.h" "$SRC/tests/abi/sluice-0.1.h"; then
    echo "tests/abi/sluice-0.1.h is not the header of $COMMIT"
    exit 1
fi
if [ -n "${SL_PKG_CONFIG_PATH:-}" ]; then export PKG_CONFIG_PATH=$SL_PKG_CONFIG_PATH; fi
if [ -n "${SL_LDFLAGS:-}" ]; then export LDFLAGS=$SL_LDFLAGS; fi
if ! cmake -S "$DEST.tmp/src" -B "$DEST.tmp/build" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG=-O0 \
        -DSL_WITH_PYTHON=OFF ${SL_PKG_CONFIG:+"-DPKG_CONFIG_EXECUTABLE=$SL_PKG_CONFIG"} >"$DEST.tmp/build.log" 2>&1; then
    echo "0.1's sources do not configure on this machine (a dependency it requires is missing):"
    grep -E "not found|Error" "$DEST.tmp/build.log" | head -n 5
    exit 77
fi
if ! cmake --build "$DEST.tmp/build" --target sluice_shared -j 2 >>"$DEST.tmp/build.log" 2>&1; then
    tail -n 40 "$DEST.tmp/build.log"
    exit 1
fi
rm -rf "$DEST"
mv "$DEST.tmp" "$DEST"
echo "built $DEST/build/libsluice.so.0 from $COMMIT"

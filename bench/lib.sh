# Sourced by the bench scripts that link a C driver against the library:
# builds $BUILD/libsluice.a when it is missing and sets SL_LINK to it plus
# the libraries it needs (bench/link.sh).
BUILD=${BUILD:-build}
if [ ! -f "$BUILD/libsluice.a" ]; then
  cmake -S . -B "$BUILD" >/dev/null
  cmake --build "$BUILD" --target sluice_static -j "$(nproc)" >/dev/null
fi
. bench/link.sh
SL_LINK="$BUILD/libsluice.a $(sl_libs)"

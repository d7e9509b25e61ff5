# Sourced by the bench scripts that link a C driver against the library:
# builds $BUILD/libsluice.a when it is missing and sets SL_LINK to it plus
# the libraries it needs (libspng and libwebp where pkg-config finds them).
BUILD=${BUILD:-build}
if [ ! -f "$BUILD/libsluice.a" ]; then
  cmake -S . -B "$BUILD" >/dev/null
  cmake --build "$BUILD" --target sluice_static -j "$(nproc)" >/dev/null
fi
SL_LINK="$BUILD/libsluice.a -ljpeg -lm -lpthread"
for pc in spng libwebp; do
  if pkg-config --exists $pc 2>/dev/null; then SL_LINK="$SL_LINK $(pkg-config --libs $pc)"; fi
done

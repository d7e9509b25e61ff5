# Sourced by the bench scripts that link a C program against build/libsluice.a
# (bench/lib.sh, bench/gpu_host.sh): sl_libs prints what the static library
# needs, from pkg-config, as CMakeLists.txt finds it: jansson, and where
# found libspng, libwebp, FFmpeg's libraries and libcurl (its --static list
# only where the libcurl found is a static one alone, as the GPU host's
# bundle has it).
sl_libs() {
  local m dir
  for m in jansson spng libwebp libavformat libavcodec libswscale libavutil; do
    pkg-config --exists $m 2>/dev/null && printf '%s ' "$(pkg-config --libs $m)"
  done
  if pkg-config --exists libcurl 2>/dev/null; then
    dir=$(pkg-config --variable=libdir libcurl)
    if [ -e "$dir/libcurl.so" ]; then printf '%s ' "$(pkg-config --libs libcurl)"
    else printf '%s ' "$(pkg-config --libs --static libcurl)"; fi
  fi
  echo "-ljpeg -lpthread -lm -ldl"
}

#!/usr/bin/env bash
# Write the seed corpus of the video fuzzer (tests/fuzz/corpus/video/): tiny
# clips (32x24, a few frames, a few KiB each) of every container and codec
# the module takes, and the odd cases (rotation, odd size 4:4:4, variable
# frame rate, open GOPs, moov first or last, audio beside video, audio
# only). Needs the ffmpeg CLI. x264 and libvpx are not bit-reproducible
# across versions, so the corpus is committed, not rebuilt by the tests.
#   tests/fuzz/make_video_corpus.sh [OUT_DIR]
set -eu
out=${1:-$(dirname "$0")/corpus/video}
mkdir -p "$out"
src="-f lavfi -i testsrc2=size=32x24:rate=10:duration=0.6"
ff() { ffmpeg -nostdin -v error -y "$@"; }
x264="-c:v libx264 -preset ultrafast -g 3 -bf 2 -pix_fmt yuv420p"
ff $src $x264 "$out/h264.mp4"
ff $src $x264 -movflags +faststart "$out/h264_faststart.mp4"
ff $src $x264 "$out/h264.mkv"
ff $src $x264 "$out/h264.mov"
ff $src -c:v libx264 -preset ultrafast -bf 3 -x264-params open-gop=1:keyint=3:b-adapt=0 "$out/opengop.mp4"
ff $src -vf scale=33:25 -c:v libx264 -preset ultrafast -pix_fmt yuv444p "$out/odd444.mp4"
ff $src -vf 'setpts=(N+2*floor(N/3))/10/TB' -fps_mode passthrough $x264 "$out/vfr.mp4"
ff -i "$out/h264.mp4" -c copy -metadata:s:v:0 rotate=90 "$out/rot90.mp4"
ff $src -f lavfi -i sine=duration=0.6 -shortest $x264 -c:a aac -b:a 16k "$out/h264_aac.mp4"
ff $src -c:v libvpx-vp9 -deadline realtime -g 3 "$out/vp9.webm"
ff $src -c:v libvpx -deadline realtime -g 3 "$out/vp8.webm"
ff $src -c:v mpeg4 -bf 2 -g 3 "$out/mpeg4.avi"
ff $src -c:v mjpeg -q:v 10 "$out/mjpeg.avi"
ff $src -c:v mpeg2video -bf 2 -g 3 "$out/mpeg2.mkv"
ff $src -c:v libx265 -preset ultrafast -x265-params log-level=none:keyint=3 "$out/hevc.mp4"
ff -f lavfi -i sine=duration=0.3 -c:a aac -b:a 16k "$out/audio_only.m4a"
ls -l "$out"

#!/usr/bin/env bash
# A UCF101-like video set made with the ffmpeg CLI: class folders of H.264
# .mp4 clips at 25 fps, 5-20 s each (--seconds), 320x240, 1280x720 or 1920x1080, with moving,
# textured content (so bitrates and decode cost resemble camera footage,
# not flat test patterns). Deterministic: clip k's source, duration and
# size derive from k. Without the CLI (a GPU host), make_video_set.py makes
# the same set through PyAV's FFmpeg.
#   bench/make_video_set.sh OUT [--clips 300] [--classes 10] [--size WxH|mixed] [--seconds 5-20] [--jobs N]
set -eu
out=${1:?usage: make_video_set.sh OUT [--clips N] [--classes K] [--size WxH|mixed] [--jobs N]}
shift
clips=300 classes=10 size=320x240 seconds=5-20 jobs=$(nproc)
while [ $# -gt 0 ]; do
  case $1 in
    --clips) clips=$2; shift 2;;
    --classes) classes=$2; shift 2;;
    --size) size=$2; shift 2;;
    --seconds) seconds=$2; shift 2;;
    --jobs) jobs=$2; shift 2;;
    *) echo "make_video_set.sh: unknown option $1" >&2; exit 2;;
  esac
done
if ! command -v ffmpeg >/dev/null; then
  exec "${PYTHON:-python3}" "$(dirname "$0")/make_video_set.py" "$out" --clips "$clips" --classes "$classes" \
    --size "$size" --seconds "$seconds" --jobs "$jobs"
fi

one() { # k -> OUT/cNN/clip_KKKKK.mp4
  k=$1
  c=$(( k % classes ))
  lo=${seconds%-*} hi=${seconds#*-}
  dur=$(( lo + (k * 7919) % (hi - lo + 1) ))            # 5..20 s by default
  sz=$size
  if [ "$size" = mixed ]; then [ $(( k % 3 )) = 0 ] && sz=1280x720 || sz=320x240; fi
  case $(( k % 4 )) in                                  # four kinds of motion
    0) src="testsrc2=size=$sz:rate=25";;
    1) src="mandelbrot=size=$sz:rate=25";;
    2) src="life=size=$sz:rate=25:mold=10:ratio=0.3:death_color=#204060:life_color=#e0a040,gblur=sigma=2";;
    3) src="cellauto=size=$sz:rate=25:rule=$(( 18 + k % 100 )),gblur=sigma=1.5";;
  esac
  d=$(printf "%s/c%02d" "$out" $c)
  mkdir -p "$d"
  f=$(printf "%s/clip_%05d.mp4" "$d" $k)
  [ -s "$f" ] && return 0
  ffmpeg -nostdin -v error -y -f lavfi -i "$src,noise=alls=12:allf=t+u,hue=H=t*$(( 1 + k % 5 ))" -t $dur \
    -c:v libx264 -preset veryfast -crf 23 -g 50 -bf 3 -pix_fmt yuv420p "$f.tmp.mp4" && mv "$f.tmp.mp4" "$f"
}
export -f one
export out classes size seconds
seq 0 $(( clips - 1 )) | xargs -P "$jobs" -I{} bash -c 'one {}'
echo "$out: $(find "$out" -name '*.mp4' | wc -l) clips, $(du -sh "$out" | cut -f1)"

#!/usr/bin/env python3
"""A UCF101-like video set made with PyAV, for hosts without the ffmpeg CLI
(make_video_set.sh runs this when `ffmpeg` is missing): the same layout,
durations, sizes and sources as make_video_set.sh, through the FFmpeg that
PyAV's wheel bundles (its lavfi sources and filters, libx264).

Class folders cNN/ of H.264 .mp4 clips at 25 fps, 5-20 s (--seconds), 320x240,
1280x720 or 1920x1080 (any WxH), moving textured content with grain (testsrc2, mandelbrot, life,
cellauto; noise, a hue that turns), x264 veryfast crf 23, GOP 50, 3
B-frames. Clip k's class, duration, size and source derive from k alone.
The bytes differ from the CLI's (another FFmpeg build), the kind of content
does not.

    bench/make_video_set.py OUT [--clips 300] [--classes 10] [--size WxH|mixed] [--seconds 5-20] [--jobs N]
"""
import argparse
import multiprocessing as mp
import os
import sys
import time


def clip_plan(k, classes, size, seconds=(5, 20)):
    """(class, seconds, WxH, filter chain) of clip k, as make_video_set.sh's one()."""
    lo, hi = seconds
    dur = lo + (k * 7919) % (hi - lo + 1)
    sz = size if size != "mixed" else ("1280x720" if k % 3 == 0 else "320x240")
    src = [f"testsrc2=size={sz}:rate=25",
           f"mandelbrot=size={sz}:rate=25",
           f"life=size={sz}:rate=25:mold=10:ratio=0.3:death_color=#204060:life_color=#e0a040,gblur=sigma=2",
           f"cellauto=size={sz}:rate=25:rule={18 + k % 100},gblur=sigma=1.5"][k % 4]
    chain = f"{src},noise=alls=12:allf=t+u,hue=H=t*{1 + k % 5},format=yuv420p"
    return k % classes, dur, sz, chain


def source_graph(chain):
    """A filter graph that generates frames: the chain's filters linked in
    order to a sink. Returns (graph, sink): the caller keeps the graph alive
    (a filter holds only a weak reference to it)."""
    import av

    graph = av.filter.Graph()
    prev = None
    for part in chain.split(","):
        name, _, args = part.partition("=")
        node = graph.add(name, args) if args else graph.add(name)
        if prev is not None:
            prev.link_to(node)
        prev = node
    sink = graph.add("buffersink")
    prev.link_to(sink)
    graph.configure()
    return graph, sink


def make_clip(job):
    out, k, classes, size, seconds = job
    c, dur, sz, chain = clip_plan(k, classes, size, seconds)
    path = os.path.join(out, f"c{c:02d}", f"clip_{k:05d}.mp4")
    if os.path.exists(path) and os.path.getsize(path) > 0:
        return path, os.path.getsize(path)
    import av

    os.makedirs(os.path.dirname(path), exist_ok=True)
    w, h = map(int, sz.split("x"))
    graph, sink = source_graph(chain)
    tmp = path + ".tmp.mp4"
    with av.open(tmp, "w") as container:
        # one encoder thread: the jobs are the parallelism
        st = container.add_stream("libx264", rate=25, options={"preset": "veryfast", "crf": "23", "g": "50",
                                                               "bf": "3", "threads": "1"})
        st.width, st.height, st.pix_fmt = w, h, "yuv420p"
        for _ in range(dur * 25):
            frame = sink.pull()
            # lavfi's sources mark every frame a keyframe (I), and libx264 obeys a
            # frame's type: clear it (the ffmpeg CLI does), so the GOP is x264's
            frame.pict_type = av.video.frame.PictureType.NONE
            for packet in st.encode(frame):
                container.mux(packet)
        for packet in st.encode(None):
            container.mux(packet)
    os.replace(tmp, path)
    return path, os.path.getsize(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--clips", type=int, default=300)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--size", default="320x240", help="WxH (320x240, 1280x720, 1920x1080) or mixed")
    ap.add_argument("--seconds", default="5-20", help="clip durations MIN-MAX (s)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count())
    a = ap.parse_args()
    try:
        import av  # noqa: F401
    except ImportError:
        sys.exit("make_video_set.py: needs PyAV (pip install av) or the ffmpeg CLI (make_video_set.sh)")
    t0 = time.time()
    # longest clips first, so that the last job to finish is a short one
    seconds = tuple(int(x) for x in a.seconds.split("-"))
    if a.size != "mixed":
        w, h = (int(x) for x in a.size.split("x"))
        if w < 16 or h < 16 or w % 2 or h % 2:
            sys.exit("make_video_set.py: --size WxH, even, at least 16x16")
    jobs = sorted(((a.out, k, a.classes, a.size, seconds) for k in range(a.clips)),
                  key=lambda j: -clip_plan(j[1], a.classes, a.size, seconds)[1])
    total = 0
    with mp.Pool(a.jobs) as pool:
        for _, nbytes in pool.imap_unordered(make_clip, jobs):
            total += nbytes
    print(f"{a.out}: {a.clips} clips, {total / 2**20:.1f} MiB, {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()

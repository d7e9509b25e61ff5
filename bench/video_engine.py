#!/usr/bin/env python3
"""The GPU video engine alone (issue 23): where a clip's time goes on NVDEC.

Threads (--threads, default the sessions) take the set's clips in turn and
decode each through one sluice._gpu.VideoEngine into a device tensor, as the
loader's GPU stage does, for --seconds. Prints one JSON line: clips/s and
the engine's counters: NVDEC decoders made, clips that kept one (reused),
passes started at an IDR without a flush (soft_resets) and with one
(flushes), and per clip the milliseconds waiting for a session, in the
decode call, of it in the sink (kernels and their waits), and the waits
(syncs). With decoders kept, decoders stays near the sessions' count and
flushes near zero.

    PYTHONPATH=python SLUICE_BUILD=build python3 bench/video_engine.py SET_DIR [--sessions 16]
        [--threads N] [--frames 16] [--stride 2] [--size 224] [--seconds 20]
"""
import argparse
import itertools
import json
import os
import sys
import threading
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("set")
    ap.add_argument("--sessions", type=int, default=16)
    ap.add_argument("--threads", type=int, default=0, help="default: the sessions")
    ap.add_argument("--frames", type=int, default=16)
    ap.add_argument("--stride", type=int, default=2)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--pool", default="1G", help="the engine's device pool")
    ap.add_argument("--session-cap", default="256M", help="NVDEC surfaces one session may take")
    a = ap.parse_args()

    def size(s):
        return int(float(s[:-1]) * (1 << {"K": 10, "M": 20, "G": 30}[s[-1]])) if s[-1] in "KMG" else int(s)

    paths = sorted(os.path.join(r, f) for r, _, fs in os.walk(a.set) for f in fs if f.endswith(".mp4"))
    if not paths:
        sys.exit(f"no .mp4 under {a.set}")
    import torch
    from sluice import _gpu

    eng = _gpu.VideoEngine(pool_bytes=size(a.pool), sessions=a.sessions, session_cap=size(a.session_cap))
    threads = a.threads or a.sessions
    shape = (a.frames, 3, a.size, a.size)
    order = itertools.count()
    lock = threading.Lock()
    done, to_cpu, reasons = [0], [0], {}
    stop = time.monotonic() + a.seconds

    def worker():
        dst = torch.empty(shape, dtype=torch.uint8, device="cuda")
        while time.monotonic() < stop:
            with lock:
                k = next(order)
            st, why = eng.clip(paths[k % len(paths)], dst.data_ptr(), frames=a.frames, stride=a.stride,
                               size=a.size, preset="train", seed=1, epoch=k // len(paths), index=k % len(paths))
            with lock:
                if st == _gpu.DONE:
                    done[0] += 1
                else:
                    to_cpu[0] += 1
                    reasons[why] = reasons.get(why, 0) + 1

    t0 = time.monotonic()
    ts = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.monotonic() - t0
    s = eng.stats()
    eng.close()
    n = max(1, s["clips"] + s["to_cpu"])
    out = {"loader": "sluice-gpu engine", "set": a.set, "sessions": a.sessions, "threads": threads,
           "clips_per_s": round(done[0] / wall, 2), "clips": done[0], "to_cpu": to_cpu[0],
           "decoders": s["decoders"], "reused": s["reused"], "soft_resets": s["soft_resets"],
           "flushes": s["flushes"], "waits": s["waits"],
           "ms_per_clip": {k: round(s[k + "_ns"] / n / 1e6, 2) for k in ("wait", "decode", "sink")},
           "syncs_per_clip": round(s["syncs"] / n, 1), "device": s["device_name"],
           "reasons": dict(list(reasons.items())[:3])}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()

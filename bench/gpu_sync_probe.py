#!/usr/bin/env python3
"""What nvJPEG's hardware call waits for: the engine alone (sluice._gpu.Engine), each of its two
hardware modes, while other work is queued on the same GPU.

    gpu_sync_probe.py DATA [--batch 256] [--batches 16] [--busy-ms 40]

In DDP a rank's hardware call took 123-142 µs a sample without nvJPEG's pipeline against 87-90 with
the same ranks training apart (bench/README.md, twelfth session): something couples the call to
the other work on the GPU. Before each batch this probe queues, then times the batched call and the
engine's wait:
  idle          nothing queued
  sleep-default torch.cuda._sleep (one spinning block, like NCCL's kernels waiting for a peer) on
                the legacy default stream, where a training loop's kernels go
  sleep-side    the same on a non-blocking stream of its own (where NCCL's and DDP's streams are)
  mm-default    back-to-back bf16 matmuls filling the SMs on the legacy default stream (a model)
  mm-side       the same on a non-blocking stream
each about --busy-ms long. A call that grows by about --busy-ms a batch under sleep-default but not
sleep-side orders itself after the legacy default stream; one that grows under both waits for the
whole device; one that grows only under the matmuls competes for SMs, or shares a hardware queue
with their stream. CUDA's hardware queues are the environment's CUDA_DEVICE_MAX_CONNECTIONS (8
unset; `import sluice` sets none in a process that is not a DDP rank): with 8 the pipelined call
beside matmuls cost 2.5 times as much, with 32 the same as idle (bench/README.md, thirteenth
session; `bench/gpu_host.sh syncprobe` runs both). One JSON line per mode and condition: the call
and the wait in µs a GPU sample (host clock), the engine's own counters, the queues.
"""
import argparse
import json
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
import sluice  # noqa: E402
from sluice import _gpu  # noqa: E402

sys.path.insert(0, HERE)
from gpu_decode import files_of, read  # noqa: E402  (the set's walk, as the engine's other bench reads it)

CONDITIONS = ("idle", "sleep-default", "sleep-side", "mm-default", "mm-side")


def jpegs(data, n):
    """The first n files of DATA's ImageFolder set that start as a JPEG does, their bytes."""
    out = []
    for path in files_of(data)[1]:
        b = read(path)
        if b[:2] == b"\xff\xd8":
            out.append(b)
            if len(out) == n:
                break
    return out


def calibrate_sleep(ms):
    """torch.cuda._sleep cycles for about ms milliseconds on this GPU."""
    cycles = 1_000_000
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(2):
        a.record()
        torch.cuda._sleep(cycles)
        b.record()
        b.synchronize()
        cycles = int(cycles * ms / max(a.elapsed_time(b), 1e-3))
    return cycles


def calibrate_mm(ms):
    """(x, count): count bf16 matmuls of x by x take about ms milliseconds."""
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.mm(x, x)
    a.record()
    for _ in range(4):
        torch.mm(x, x)
    b.record()
    b.synchronize()
    return x, max(1, round(ms / (a.elapsed_time(b) / 4)))


def queue_busy(cond, side, cycles, mm):
    if cond == "idle":
        return
    stream = torch.cuda.default_stream() if cond.endswith("default") else side
    with torch.cuda.stream(stream):
        if cond.startswith("sleep"):
            torch.cuda._sleep(cycles)
        else:
            x, count = mm
            for _ in range(count):
                torch.mm(x, x)


def probe(a, blobs, mode, flag, cycles, mm, side, dst):
    e = _gpu.Engine(max_batch=a.batch, flags=flag)
    nb = len(blobs) // a.batch

    def batch(b, epoch):
        idx = list(range(b * a.batch, (b + 1) * a.batch))
        t0 = time.perf_counter()
        res = e.submit([blobs[i] for i in idx], idx, list(range(a.batch)), dst.data_ptr(), dst[0].numel(),
                       sluice._sluice.PRESET_TRAIN, 224, 0, epoch)
        t1 = time.perf_counter()
        e.wait()
        t2 = time.perf_counter()
        return t1 - t0, t2 - t1, sum(1 for s, _ in res if s == _gpu.DONE)

    for b in range(min(nb, 4)):  # warm: kernels loaded, nvJPEG's buffers grown to the images
        batch(b, 0)
    for cond in CONDITIONS:
        torch.cuda.synchronize()
        s0 = e.stats()
        call = wait = 0.0
        done = 0
        for k in range(a.batches):
            queue_busy(cond, side, cycles, mm)
            c, w, n = batch(k % nb, 1 + k // nb)
            call, wait, done = call + c, wait + w, done + n
            torch.cuda.synchronize()  # the busy work drains before the next batch's is queued
        s1 = e.stats()
        print(json.dumps({
            "mode": mode, "condition": cond, "busy_ms": a.busy_ms, "batches": a.batches, "gpu_samples": done,
            "call_us_per_sample": round(call / max(done, 1) * 1e6, 1),
            "wait_us_per_sample": round(wait / max(done, 1) * 1e6, 1),
            "call_ms_per_batch": round(call / a.batches * 1e3, 2),
            "engine_thread_hw_s": round(s1["thread_hw_s"] - s0["thread_hw_s"], 4),
            "engine_gpu_hw_s": round(s1["gpu_hw_s"] - s0["gpu_hw_s"], 4),
            "hw_calls": s1["hw_calls"] - s0["hw_calls"],
            "hw_calls_unpipelined": s1["hw_calls_unpipelined"] - s0["hw_calls_unpipelined"],
            "cuda_connections": os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS"),
            "device": s1["device_name"]}), flush=True)
    e.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("data")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--batches", type=int, default=16)
    p.add_argument("--busy-ms", type=float, default=40.0)
    a = p.parse_args()
    ok, why = _gpu.available()
    if not ok or not torch.cuda.is_available():
        print(json.dumps({"skipped": why or "no CUDA device"}))
        return
    blobs = jpegs(a.data, a.batch * max(4, a.batches))
    if len(blobs) < a.batch:
        sys.exit(f"{a.data}: {len(blobs)} JPEGs, fewer than one batch of {a.batch}")
    torch.cuda.init()
    side = torch.cuda.Stream()
    cycles, mm = calibrate_sleep(a.busy_ms), calibrate_mm(a.busy_ms)
    dst = torch.empty((a.batch, 3, 224, 224), dtype=torch.uint8, device="cuda")
    for mode, flag in (("unpipelined", _gpu.HW_UNPIPELINED), ("pipelined", _gpu.HW_PIPELINED)):
        probe(a, blobs, mode, flag, cycles, mm, side, dst)


if __name__ == "__main__":
    main()

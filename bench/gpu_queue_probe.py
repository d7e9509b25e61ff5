#!/usr/bin/env python3
"""Which streams wait behind another stream's kernel: CUDA's hardware queues, and whether sluice's
import sets their number in time.

    gpu_queue_probe.py [--streams 40] [--sleep-ms 300]

CUDA spreads a process's streams over CUDA_DEVICE_MAX_CONNECTIONS hardware queues (8 unless set, at
most 32). Two streams on one queue are one line: a kernel queued on the second waits for the
first's. Under DDP the first is NCCL's all-reduce, which waits for the other ranks. Each variant runs
in a process of its own (CUDA reads the variable when it starts). It makes one stream and runs a
spinning kernel (torch.cuda._sleep, --sleep-ms) on it. It then makes --streams more non-blocking
streams (cuStreamCreate), one tiny kernel on each, and counts the kernels not done a quarter of the
way into the spin. Those streams share the spinner's queue. One JSON line a variant:
  unset                      no CUDA_DEVICE_MAX_CONNECTIONS, no sluice (CUDA's 8 queues)
  env-32                     CUDA_DEVICE_MAX_CONNECTIONS=32 in the environment
  sluice                     `import torch, sluice` (sluice sets 32 where it is unset), as scripts do
  sluice-after-is-available  torch.cuda.is_available() (cuInit), then `import sluice`
  sluice-after-cuda          the model's context made first, then `import sluice`: too late
"""
import argparse
import ctypes
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
VARIANTS = ("unset", "env-32", "sluice", "sluice-after-is-available", "sluice-after-cuda")


def child(variant, n, sleep_ms):
    import torch

    by = None
    if variant == "sluice-after-is-available":
        torch.cuda.is_available()
    if variant == "sluice-after-cuda":
        torch.empty(1, device="cuda")
    if variant.startswith("sluice"):
        sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
        import sluice

        by = sluice._CUDA_CONNECTIONS_BY
    x = torch.zeros(n + 1, device="cuda")
    x[0:1].add_(1)  # the very kernel the streams run, loaded now: CUDA's lazy loading would wait for the spinner
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    torch.cuda._sleep(1_000_000)
    b.record()
    b.synchronize()
    cycles = int(1_000_000 * sleep_ms / max(a.elapsed_time(b), 1e-3))
    cu = ctypes.CDLL("libcuda.so.1")
    streams = []
    for _ in range(n + 1):
        s = ctypes.c_void_p()
        if cu.cuStreamCreate(ctypes.byref(s), 1):  # CU_STREAM_NON_BLOCKING
            raise SystemExit("cuStreamCreate failed")
        streams.append(torch.cuda.ExternalStream(s.value))
    torch.cuda.synchronize()
    with torch.cuda.stream(streams[0]):
        torch.cuda._sleep(cycles)
    events = []
    for i, s in enumerate(streams[1:], 1):
        with torch.cuda.stream(s):
            x[i:i + 1].add_(1)
            events.append(torch.cuda.Event())
            events[-1].record()
    time.sleep(sleep_ms / 4000)
    waiting = [i for i, e in enumerate(events, 1) if not e.query()]
    torch.cuda.synchronize()
    for s in streams:
        cu.cuStreamDestroy_v2(ctypes.c_void_p(s.cuda_stream))
    return {"variant": variant, "env": os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS"), "sluice_set_it": by,
            "streams": n, "waited_behind_spinner": len(waiting), "which": waiting, "sleep_ms": sleep_ms,
            "device": torch.cuda.get_device_name()}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--streams", type=int, default=40)
    p.add_argument("--sleep-ms", type=float, default=300.0)
    p.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        print(json.dumps(child(a.child, a.streams, a.sleep_ms)))
        return
    try:
        import torch

        if not torch.cuda.is_available():
            raise ImportError("no CUDA device")
    except ImportError as e:
        print(json.dumps({"skipped": f"needs torch with a CUDA device: {e}"}))
        return
    for v in VARIANTS:
        env = {k: val for k, val in os.environ.items() if k != "CUDA_DEVICE_MAX_CONNECTIONS"}
        if v == "env-32":
            env["CUDA_DEVICE_MAX_CONNECTIONS"] = "32"
        r = subprocess.run([sys.executable, __file__, "--child", v, "--streams", str(a.streams),
                            "--sleep-ms", str(a.sleep_ms)], env=env, capture_output=True, text=True, timeout=120)
        line = r.stdout.strip().splitlines()[-1:] if r.returncode == 0 else []
        print(line[0] if line else json.dumps({"variant": v, "error": r.stderr[-800:]}), flush=True)


if __name__ == "__main__":
    main()

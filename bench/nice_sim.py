#!/usr/bin/env python3
"""The training loop beside busy workers: what worker_nice buys it.

A training step on a GPU host is, for the CPU, the Python thread that
launches the step's kernels; when the loader's workers keep every core busy
that thread waits for a core, and the GPU for it (issue 13: ResNet-18 fed
at 58 % of its ceiling while the loop waited for batches 3.8 % of the time).
This stands in for it on any machine: a loop that takes a batch from
sluice.Loader and then burns --work-ms of its own CPU time (time.thread_time,
so a descheduled loop takes longer in wall time, as a starved launcher
does). Its ceiling is 1000 / work_ms steps a second. Each worker_nice in
--nices is run --reps times, alternating, one JSON line each, then the
medians:

    bench/nice_sim.py DATA --workers 2 --batch 64 --size 112 --work-ms 60 --nices 0,10

Pick --work-ms so the ceiling is below what the loader delivers alone
(--work-ms 0 prints that rate) but not far below: that is the regime of a
loader with headroom whose workers are still busy most of the time.
"""
import argparse
import json
import statistics
import time

import sluice


def spin(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def run(a, nice):
    ld = sluice.Loader(a.data, batch_size=a.batch, size=a.size, workers=a.workers, budget=a.budget,
                       worker_nice=nice)
    it = iter(ld)
    next(it)  # the workers are up
    steps, waited = 0, 0.0
    t0 = time.perf_counter()
    while steps < a.steps:
        w = time.perf_counter()
        try:
            next(it)
        except StopIteration:
            it = iter(ld)
            next(it)
        waited += time.perf_counter() - w
        spin(a.work_ms / 1000)
        steps += 1
    dt = time.perf_counter() - t0
    ld.close()
    r = {"worker_nice": nice, "work_ms": a.work_ms, "steps_per_s": round(steps / dt, 2),
         "images_per_s": round(steps * a.batch / dt, 1), "waited_fraction": round(waited / dt, 3)}
    if a.work_ms:
        r["of_ceiling"] = round(steps / dt / (1000 / a.work_ms), 3)
    print(json.dumps(r), flush=True)
    return r


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("data")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--size", type=int, default=112)
    p.add_argument("--budget", default="512M")
    p.add_argument("--work-ms", type=float, default=60.0)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--nices", default="0,10")
    p.add_argument("--reps", type=int, default=3)
    a = p.parse_args()
    nices = [int(x) for x in a.nices.split(",")]
    rows = {n: [] for n in nices}
    for _ in range(a.reps):
        for n in nices:
            rows[n].append(run(a, n)["steps_per_s"])
    med = {n: statistics.median(v) for n, v in rows.items()}
    out = {"median_steps_per_s": {str(n): v for n, v in med.items()}}
    if a.work_ms:
        out["median_of_ceiling"] = {str(n): round(v / (1000 / a.work_ms), 3) for n, v in med.items()}
    print(json.dumps(out))


if __name__ == "__main__":
    main()

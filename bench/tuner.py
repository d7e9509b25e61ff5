#!/usr/bin/env python3
"""The tuner (workers="auto", docs/tuner.md) against static worker counts,
for consumers of known demand (issue 20, item 1).

    python bench/tuner.py DATA [--steps 0,50,200] [--workers 1,2] [--decode cpu]
                          [--batch 64] [--size 224] [--budget 1G] [--batches 60]
                          [--busy] [--runs 1] [--json OUT.jsonl]

A consumer takes batches from sluice.Loader and spends --steps milliseconds on
each (0: takes them as fast as it can; --busy: the time is spent on the CPU
in this thread, a stand-in for a loop that launches kernels, instead of
sleeping, a stand-in for one that waits on its GPU). For each step, each
decode mode and each run it measures the tuner and every static count of
--workers, one loader a row, from its first batch to its last (create and
the pipeline's fill excluded: the first batch only starts the clock):

    images/s, the consumer's wait (share of the time it spent in next()),
    the workers active on average (static: the count), the process's CPU
    seconds per 1,000 images (the workers' cost: what a training loop on
    the same cores does not get), and the tuner's decisions.

Then one line per step and mode: the tuner against the sweep's best static
setting (the most images/s; within 3 % of it, the one with the least CPU),
the row the GPU host's table asks for. On the GPU host: --decode cpu,gpu,auto
--workers 4,8,12,16 --batch 256 (bench/README.md has the command).
"""
import argparse
import json
import os
import resource
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
import sluice  # noqa: E402


def cpu_s():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def spin(seconds):
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1
    return x


def run(a, decode, step_ms, workers):
    """One loader over --batches batches with a consumer of step_ms a batch."""
    kw = dict(batch_size=a.batch, size=a.size, budget=a.budget, decode=decode)
    if workers == "auto":
        if a.workers_max:
            kw["workers_max"] = a.workers_max
    else:
        kw["workers"] = workers
    ld = sluice.Loader(a.data, **kw)
    try:
        it = iter(ld)
        n = 0
        b = next(it)  # the first batch starts the clock
        images = 0
        del b
        st0 = ld.stats()
        t0, c0 = time.perf_counter(), cpu_s()
        while n < a.batches:
            try:
                b = next(it)
            except StopIteration:
                it = iter(ld)  # the next epoch
                continue
            images += b.size
            del b
            n += 1
            if step_ms:
                (spin if a.busy else time.sleep)(step_ms / 1000.0)
        t1, c1 = time.perf_counter(), cpu_s()
        st = ld.stats()
    finally:
        ld.close()
    wall = t1 - t0
    wait = st["consumer_wait_s"] - st0["consumer_wait_s"]
    # the mean over the measured span: the pass's integral, less its part before the first batch
    # (a pass is an epoch: over several, the last epoch's mean stands for the span)
    if st["pass_seconds"] > st0["pass_seconds"] and st["epoch"] == st0["epoch"]:
        mean = ((st["workers_active_mean"] * st["pass_seconds"] - st0["workers_active_mean"] * st0["pass_seconds"])
                / (st["pass_seconds"] - st0["pass_seconds"]))
    else:
        mean = st["workers_active_mean"]
    return {"decode": decode, "decode_used": st["decode"], "step_ms": step_ms, "busy": a.busy,
            "workers": workers, "threads": st["workers"], "images": images, "seconds": round(wall, 3),
            "images_per_s": round(images / wall, 1), "wait_fraction": round(wait / wall, 4),
            "workers_active_mean": round(mean, 3), "workers_active_end": st["workers_active"],
            "cpu_s_per_1k_images": round(1000 * (c1 - c0) / max(images, 1), 3),
            "slots_target": st["slots_target"], "decisions": st["tuner_decisions"],
            "last_decision": st["tuner_log"][-1]["reason"] if st["tuner_log"] else "",
            "gpu_samples": st["pass_gpu_samples"], "cpu_samples": st["pass_cpu_samples"]}


def best_static(rows):
    """The most images/s; within 3 % of it, the least CPU a 1,000 images."""
    top = max(r["images_per_s"] for r in rows)
    near = [r for r in rows if r["images_per_s"] >= 0.97 * top]
    return min(near, key=lambda r: r["cpu_s_per_1k_images"])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data")
    p.add_argument("--steps", default="0,50,200", help="consumer ms a batch, comma-separated (0: free-running)")
    p.add_argument("--workers", default="1,2", help="static counts of the sweep")
    p.add_argument("--workers-max", type=int, default=0, help="the tuner's ceiling (0: the rank's CPU share)")
    p.add_argument("--decode", default="cpu", help="decode modes, comma-separated (cpu, gpu, auto)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--budget", default="1G")
    p.add_argument("--batches", type=int, default=60, help="batches measured a row (after the first)")
    p.add_argument("--busy", action="store_true", help="the consumer's step burns CPU instead of sleeping")
    p.add_argument("--runs", type=int, default=1, help="runs of every row, in turns")
    p.add_argument("--json", help="append one JSON line a row to this file")
    a = p.parse_args()
    steps = [int(s) for s in a.steps.split(",")]
    static = [int(w) for w in a.workers.split(",")]
    modes = a.decode.split(",")
    out = open(a.json, "a") if a.json else None
    print(f"# {a.data}: batch {a.batch}, size {a.size}, {a.batches} batches a row, {os.cpu_count()} CPUs, "
          f"consumer {'busy' if a.busy else 'sleeping'}; sluice {sluice.__version__}")
    hdr = f"{'decode':6} {'step':>5} {'workers':>7} {'img/s':>8} {'wait':>6} {'active':>6} {'cpu/1k':>7}  decisions"
    summary = []
    for mode in modes:
        for step in steps:
            rows = {"auto": [], "static": []}
            for _ in range(a.runs):
                for w in ["auto"] + static:
                    r = run(a, mode, step, w)
                    rows["auto" if w == "auto" else "static"].append(r)
                    if out:
                        out.write(json.dumps(r) + "\n")
                        out.flush()
                    if len(rows["auto"]) + len(rows["static"]) == 1:
                        print(hdr)
                    print(f"{mode:6} {step:5} {str(w):>7} {r['images_per_s']:8.1f} {100 * r['wait_fraction']:5.1f}% "
                          f"{r['workers_active_mean']:6.2f} {r['cpu_s_per_1k_images']:7.2f}  {r['decisions']}"
                          f"{'  ' + r['last_decision'] if r['last_decision'] else ''}", flush=True)
            tuned = max(rows["auto"], key=lambda r: r["images_per_s"])
            best = best_static(rows["static"])
            summary.append((mode, step, tuned, best))
    print("\n# the tuner against the sweep's best static setting (most img/s; within 3 %, least CPU)")
    print(f"{'decode':6} {'step':>5} {'tuner img/s':>11} {'active':>6} {'wait':>6} {'cpu/1k':>7}   "
          f"{'best static':>11} {'img/s':>8} {'wait':>6} {'cpu/1k':>7}   tuner/best")
    for mode, step, t, b in summary:
        print(f"{mode:6} {step:5} {t['images_per_s']:11.1f} {t['workers_active_mean']:6.2f} "
              f"{100 * t['wait_fraction']:5.1f}% {t['cpu_s_per_1k_images']:7.2f}   {b['workers']:>11} "
              f"{b['images_per_s']:8.1f} {100 * b['wait_fraction']:5.1f}% {b['cpu_s_per_1k_images']:7.2f}   "
              f"{t['images_per_s'] / b['images_per_s']:.3f}")
        if out:
            out.write(json.dumps({"summary": True, "decode": mode, "step_ms": step, "tuner": t, "best_static": b})
                      + "\n")
    if out:
        out.close()


if __name__ == "__main__":
    main()

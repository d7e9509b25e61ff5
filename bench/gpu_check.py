#!/usr/bin/env python3
"""Issue 17's GPU checks, one measurement per process (bench/gpu_check.sh runs them):

    gpu_check.py corrupt SRC DST
        DST: SRC's images (hard links) plus a JPEG whose scan names a Huffman
        table no DHT defines (probes fine, fails to decode) and a truncated JPEG
    gpu_check.py hash DATA --workers N [--batches 30] [--batch 128] [--decode prefer-gpu]
        sluice.torch.Loader (its default decode unless --decode), uint8 on CUDA:
        one hash of the device bytes of the first --batches batches (images and
        labels), and the loader's decode, share and reason
    gpu_check.py rss DATA --decode gpu --budget 512M [--batches 30] [--workers 16]
        in a process where torch already made the CUDA context: the process's RSS
        growth (VmHWM after the batches less VmRSS before the loader) against the
        budget, the loader's accounting by category
    gpu_check.py parts [--kernel-cache DIR]
        in a process where torch made the context: what each step of the engine's
        create added to the RSS (context and streams, kernels from the cache or
        NVRTC, pinned pool, nvJPEG, first decode), and where the kernels came from

Prints one JSON line per measurement.
"""
import argparse
import hashlib
import json
import os
import shutil
import sys

MIB = 1 << 20


def emit(d):
    print(json.dumps(d), flush=True)


def status_bytes(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def reset_hwm():
    """VmHWM back to the current RSS (Linux 4.0+); False where not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def parse_size(s):
    s = str(s).strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
    return int(float(s.rstrip("KMG")) * mult)


# ---- a copy with corrupt files ---------------------------------------------------------
def bad_table(jpeg):
    """The same JPEG with its first scan's first component naming Huffman tables 3."""
    sos = jpeg.find(b"\xff\xda")
    if sos < 0 or sos + 8 >= len(jpeg):
        raise ValueError("no SOS marker")
    b = bytearray(jpeg)
    b[sos + 6] = 0x33
    return bytes(b)


def cmd_corrupt(a):
    if os.path.exists(a.dst):
        shutil.rmtree(a.dst)
    first = None
    for root, _, files in os.walk(a.src):
        rel = os.path.relpath(root, a.src)
        os.makedirs(os.path.join(a.dst, rel), exist_ok=True)
        for f in sorted(files):
            if f.startswith(".") or f.endswith(".csv"):
                continue
            src = os.path.join(root, f)
            os.link(src, os.path.join(a.dst, rel, f))
            if first is None and f.upper().endswith((".JPEG", ".JPG")):
                first = src
    with open(first, "rb") as f:
        data = f.read()
    cls = os.path.dirname(os.path.relpath(first, a.src))
    with open(os.path.join(a.dst, cls, "zz_bad_table.JPEG"), "wb") as f:
        f.write(bad_table(data))
    with open(os.path.join(a.dst, cls, "zz_truncated.JPEG"), "wb") as f:
        f.write(data[: len(data) // 3])
    emit({"run": "corrupt_set", "set": a.dst, "from": first, "added": ["zz_bad_table.JPEG", "zz_truncated.JPEG"]})


# ---- device bytes of the default decode -------------------------------------------------
def cmd_hash(a):
    import torch

    import sluice.torch as st

    kw = dict(batch_size=a.batch, device="cuda", dtype=torch.uint8, workers=a.workers, seed=a.seed, budget=a.budget)
    if a.decode:
        kw["decode"] = a.decode
    h, per_batch = hashlib.sha256(), []
    with st.Loader(a.data, **kw) as ld:
        n, epoch = 0, 0
        while n < a.batches:  # on into the next epochs where one holds fewer batches
            ld.set_epoch(epoch)
            for x, y in ld:
                b = x.cpu().numpy().tobytes() + y.cpu().numpy().tobytes()
                h.update(b)
                per_batch.append(hashlib.sha256(b).hexdigest()[:12])
                n += 1
                if n == a.batches:
                    break
            epoch += 1
        s = ld.stats()
    total = s["gpu_samples"] + s["cpu_samples"]
    emit({"run": "hash", "data": a.data, "decode_asked": a.decode or "default", "decode": s["decode"],
          "workers": a.workers, "batches": n, "batch": a.batch, "device_hash": h.hexdigest()[:16],
          "batch_hashes": per_batch, "gpu_share": round(s["gpu_samples"] / total, 4) if total else 0.0,
          "gpu_samples": s["gpu_samples"], "cpu_samples": s["cpu_samples"], "handed_back": s["gpu_handed_back"],
          "errors": s["errors"], "decode_reason": s["decode_reason"]})


# ---- resident memory of the Python loader after torch made the context -----------------
def cmd_rss(a):
    import torch

    import sluice
    import sluice.torch as st

    torch.zeros(1, device="cuda")  # torch makes the context first, as a training script does
    torch.cuda.synchronize()
    hwm_ok = reset_hwm()
    rss0 = status_bytes("VmRSS")
    budget = parse_size(a.budget)
    row = {"run": "rss_python", "decode": a.decode, "budget_bytes": budget, "workers": a.workers,
           "hwm_reset": hwm_ok, "rss_before_bytes": rss0}
    try:
        with st.Loader(a.data, batch_size=a.batch, device="cuda", dtype=torch.uint8, workers=a.workers,
                       budget=a.budget, decode=a.decode) as ld:
            n, epoch = 0, 0
            while n < a.batches:
                ld.set_epoch(epoch)
                for x, y in ld:
                    n += 1
                    if n == a.batches:
                        break
                epoch += 1
            torch.cuda.synchronize()
            s = ld.stats()
        peak = status_bytes("VmHWM")
        row.update({"batches": n, "rss_growth_bytes": peak - rss0, "peak_rss_bytes": peak,
                    "over_budget_plus_48m": peak - rss0 - budget - 48 * MIB,
                    "ok": peak - rss0 <= budget + 48 * MIB if hwm_ok else None,
                    "peak_accounted_bytes": s["peak_accounted_bytes"], "fixed_bytes": s.get("fixed_bytes"),
                    "memory": s["memory"], "memory_peak": s.get("memory_peak"), "decode_used": s["decode"],
                    "decode_reason": s["decode_reason"]})
    except sluice.BudgetError as e:
        row.update({"refused": str(e), "ok": True})
    emit(row)


# ---- the engine's create, step by step ---------------------------------------------------
def cmd_parts(a):
    import torch

    from sluice import _gpu

    if a.kernel_cache is not None:
        os.environ["SLUICE_KERNEL_CACHE"] = a.kernel_cache
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    rss0 = status_bytes("VmRSS")
    e = _gpu.Engine(max_batch=256, gpu_budget=512 * MIB, pinned_bytes=96 * MIB, flags=_gpu.LOW_PRIORITY)
    s = e.stats()
    grown = status_bytes("VmRSS") - rss0
    e.close()
    emit({"run": "engine_parts", "kernel_cache": a.kernel_cache, "kernels": s["kernels"],
          "host_rss_context": s["host_rss_context"], "host_rss_kernels": s["host_rss_kernels"],
          "host_rss_pinned": s["host_rss_pinned"], "host_rss_nvjpeg": s["host_rss_nvjpeg"],
          "host_rss_first_decode": s["host_rss_warmup"], "host_rss_total": grown,
          "pinned_pool_bytes": s["pinned_pool_bytes"], "device": s["device_name"], "backends": s["backends"]})


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    c = sub.add_parser("corrupt")
    c.add_argument("src")
    c.add_argument("dst")
    for name in ("hash", "rss"):
        q = sub.add_parser(name)
        q.add_argument("data")
        q.add_argument("--workers", type=int, default=16)
        q.add_argument("--batches", type=int, default=30)
        q.add_argument("--batch", type=int, default=128)
        q.add_argument("--budget", default="2G" if name == "hash" else "512M")
        q.add_argument("--decode", default=None if name == "hash" else "gpu")
        q.add_argument("--seed", type=int, default=0)
    q = sub.add_parser("parts")
    q.add_argument("--kernel-cache", default=None)
    a = p.parse_args()
    {"corrupt": cmd_corrupt, "hash": cmd_hash, "rss": cmd_rss, "parts": cmd_parts}[a.what](a)


if __name__ == "__main__":
    sys.exit(main())

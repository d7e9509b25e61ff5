#!/usr/bin/env python3
"""GPU decode (issue 13) measured on a GPU host, every pipeline in one run.

    gpu_decode.py DATA engine   [--batch 256] [--engines 1] [--epochs 3]
        the engine alone: nvJPEG + crop + resize on the GPU from bytes in memory
        (decode+crop+resize images/s, device memory, share per backend)
    gpu_decode.py DATA diff     [--images 2000]
        per image mean |GPU - CPU path| (train and val presets): distribution, and
        the same against a full-resolution reference (sluice's full decode, then
        Pillow crop + resize), to tell decoder differences from DCT scaling
    gpu_decode.py DATA memory
        device memory outside the engine's pool, step by step (create, tiny
        images, a real batch, large images, an epoch, close), and the process's
        resident host memory at each step (nvJPEG's pageable host allocations
        have no hook; the pinned pool is counted in the host budget)
    gpu_decode.py DATA loaders  [--loaders sluice,sluice-gpu,tvio,tvcuda] [--batches 60]
        loader-only images/s, each loader as its users run it
    gpu_decode.py DATA train    [--arch resnet18] [--loaders synthetic,sluice,...] [--steps 60]
                                [--trace-steps N] [--worker-nice N]
        ResNet training images/s fed by each loader (bf16 autocast, channels_last); over the timed
        window, the cores each thread group kept busy and the share of the wall it waited on the
        run queue ("runq:NAME"), and sluice's counters ("win_*"); --trace-steps: that many more
        steps under torch.profiler, GPU time per step by owner (model, nvJPEG, sluice, copies)
    gpu_decode.py DATA contend  [--loaders sluice-gpuonly] [--workers 8]
        the model on synthetic data while a thread drains the loader: both rates at once

Loaders (all deliver uint8 [B, 3, 224, 224] CUDA batches of train-preset crops):
  synthetic   one random batch already on the GPU, reused: the ceiling
  sluice      sluice.torch.Loader, CPU workers (decode="cpu")
  sluice-gpu  sluice.torch.Loader(decode="auto"): the loader's C scheduler feeds the
              GPU engine beside its CPU workers (split by measured rates); batches
              arrive in device memory through DLPack
  sluice-gpuonly  the same with decode="gpu": every JPEG the GPU takes goes to it
  sluice-default  sluice.torch.Loader's default (decode="prefer-gpu": as "gpu" where the
              engine runs); --gpu-engines N: the sluice GPU loaders' engines (1);
              --workers 0: workers="auto" (the tuner)
  tvio        DataLoader, --workers processes, torchvision.io.decode_image +
              v2.RandomResizedCrop + flip, pin_memory
  tvcuda      DataLoader reading bytes (--workers, pin_memory), then per batch
              torchvision.io.decode_jpeg(device="cuda") + v2 RandomResizedCrop +
              flip on the GPU per image, stacked (the best hand-built pipeline);
              what nvJPEG refuses (PNG, CMYK) decoded on the CPU
Prints one JSON line per measurement.
"""
import argparse
import bisect
import json
import os
import sys
import threading
import time

import numpy as np
import torch

import sluice
from sluice import _gpu

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proc_threads import cores_used, thread_cpu  # noqa: E402
from image_folder import walk  # noqa: E402

SEED = 0


def files_of(data):
    """(root, paths, labels as int64) of the ImageFolder set (image_folder.walk)."""
    root, items = walk(data)
    return root, [p for p, _ in items], np.array([l for _, l in items], dtype=np.int64)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def emit(d):
    print(json.dumps(d), flush=True)


# ---- the engine alone ------------------------------------------------------------
def bench_engine(a, files):
    blobs = [read(p) for p in files]
    torch.cuda.init()
    torch.cuda.synchronize()
    free0 = torch.cuda.mem_get_info()[0]
    engines = [_gpu.Engine(max_batch=a.batch, gpu_budget=a.gpu_budget << 20, pinned_bytes=a.pinned << 20)
               for _ in range(a.engines)]
    dsts = [torch.empty((a.batch, 3, 224, 224), dtype=torch.uint8, device="cuda") for _ in engines]
    free1 = torch.cuda.mem_get_info()[0]
    nb = len(blobs) // a.batch

    def run(k, epoch, counts):
        e, dst = engines[k], dsts[k]
        for b in range(k, nb, len(engines)):
            idx = list(range(b * a.batch, (b + 1) * a.batch))
            res = e.submit([blobs[i] for i in idx], idx, list(range(a.batch)), dst.data_ptr(), dst[0].numel(),
                           sluice._sluice.PRESET_TRAIN, 224, SEED, epoch)
            e.wait()
            counts[k] += sum(1 for s, _ in res if s == _gpu.DONE)

    for epoch in range(a.epochs + 1):  # epoch 0 warms up (kernels compiled, pools touched)
        counts = [0] * len(engines)
        t0 = time.perf_counter()
        th = [threading.Thread(target=run, args=(k, epoch, counts)) for k in range(len(engines))]
        [t.start() for t in th]
        [t.join() for t in th]
        dt = time.perf_counter() - t0
        if epoch == 0:
            continue
        st = [e.stats() for e in engines]
        emit({"run": "engine", "engines": len(engines), "epoch": epoch, "batch": a.batch,
              "gpu_images_per_s": round(sum(counts) / dt, 1), "images": nb * a.batch, "gpu_images": sum(counts),
              "seconds": round(dt, 3), "device": st[0]["device_name"], "backends": st[0]["backends"],
              "hw_engines": st[0]["hw_engines"], "hw_cores": st[0]["hw_cores"],
              "samples_hw": sum(s["samples_hw"] for s in st), "samples_hybrid": sum(s["samples_hybrid"] for s in st),
              "samples_cpu": sum(s["samples_cpu"] for s in st),
              "device_pool_bytes": sum(s["device_pool_bytes"] for s in st),
              "device_peak_bytes": sum(s["device_peak"] for s in st),
              "device_used_idle_bytes": sum(s["device_used"] for s in st),
              "pinned_pool_bytes": sum(s["pinned_pool_bytes"] for s in st),
              "pinned_peak_bytes": sum(s["pinned_peak"] for s in st),
              "pool_refusals": sum(s["pool_refusals"] for s in st),
              "device_taken_at_create": free0 - free1 - sum(d.numel() for d in dsts),
              "device_free_change_since_create": torch.cuda.mem_get_info()[0] - free1,
              "rate_measured": round(sum(s["rate"] for s in st), 1)})
    for e in engines:
        e.close()


# ---- pixels against the CPU path --------------------------------------------------
def _pillow_reference(blob, preset, index):
    """sluice's full decode, then Pillow crop + resize: the full-resolution answer."""
    from PIL import Image

    full = sluice.decode_image(blob)  # HWC, whole image
    h, w = full.shape[:2]
    im = Image.fromarray(full)
    if preset == "train":
        x, y, bw, bh, flip = sluice.train_crop(w, h, seed=SEED, epoch=0, index=index)
        out = im.crop((x, y, x + bw, y + bh)).resize((224, 224), Image.BILINEAR, reducing_gap=None)
        if flip:
            out = out.transpose(Image.FLIP_LEFT_RIGHT)
    else:
        short = 256
        rw, rh = (short, int(short * h / w)) if w <= h else (int(short * w / h), short)
        r = im.resize((rw, rh), Image.BILINEAR, reducing_gap=None)
        cx, cy = round((rw - 224) / 2), round((rh - 224) / 2)
        out = r.crop((cx, cy, cx + 224, cy + 224))
    return np.asarray(out).transpose(2, 0, 1)


def bench_diff(a, files):
    e = _gpu.Engine(max_batch=a.batch)
    dst = torch.empty((a.batch, 3, 224, 224), dtype=torch.uint8, device="cuda")
    blobs = [read(p) for p in files[:a.images]]
    for preset in ("train", "val"):
        code = sluice._sluice.PRESET_TRAIN if preset == "train" else sluice._sluice.PRESET_VAL
        d_cpu, d_ref, d_cpu_ref, cpu_n = [], [], [], 0
        for start in range(0, len(blobs), a.batch):
            chunk = blobs[start:start + a.batch]
            idx = list(range(start, start + len(chunk)))
            res = e.submit(chunk, idx, list(range(len(chunk))), dst.data_ptr(), dst[0].numel(), code, 224, SEED, 0)
            e.wait()
            out = dst.cpu().numpy()
            for j, (st, _) in enumerate(res):
                if st != _gpu.DONE:
                    cpu_n += 1
                    continue
                cpu = sluice.decode_image(chunk[j], preset=preset, size=224, seed=SEED, epoch=0, index=idx[j])
                g = out[j].astype(np.int16)
                d_cpu.append(float(np.abs(g - cpu).mean()))
                if len(d_ref) < 300:
                    try:
                        ref = _pillow_reference(chunk[j], preset, idx[j]).astype(np.int16)
                        d_ref.append(float(np.abs(g - ref).mean()))
                        d_cpu_ref.append(float(np.abs(cpu.astype(np.int16) - ref).mean()))
                    except Exception:
                        pass
        q = lambda v: {"mean": round(float(np.mean(v)), 3), "p50": round(float(np.percentile(v, 50)), 3),
                       "p99": round(float(np.percentile(v, 99)), 3), "max": round(float(np.max(v)), 3)}
        emit({"run": "diff", "preset": preset, "gpu_images": len(d_cpu), "cpu_images": cpu_n,
              "over_2": int(sum(1 for v in d_cpu if v > 2)), "gpu_vs_cpu_path": q(d_cpu),
              "gpu_vs_fullres_ref": q(d_ref), "cpu_path_vs_fullres_ref": q(d_cpu_ref), "ref_images": len(d_ref)})
    e.close()


def _rss():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmRSS:"))


def bench_memory(a, files):
    """Device memory the engine takes outside its pool, step by step, and the process's resident host
    memory beside it (nvJPEG's pageable host allocations have no hook: host_rss_growth_bytes is the
    process's RSS over its level before the engine, which includes the encoded bytes read here)."""
    from PIL import Image
    import io

    def jpeg(w, h, seed):
        rng = np.random.default_rng(seed)
        y, x = np.mgrid[0:h, 0:w]
        img = np.stack([(x * 255 // w), (y * 255 // h), np.full_like(x, 90)], -1) + rng.integers(0, 20, (h, w, 3))
        b = io.BytesIO()
        Image.fromarray(img.clip(0, 255).astype(np.uint8)).save(b, "JPEG", quality=90)
        return b.getvalue()

    torch.cuda.init()
    dst = torch.empty((a.batch, 3, 224, 224), dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    free = lambda: torch.cuda.mem_get_info()[0]
    base = free()
    steps, host = {}, {}
    rss0 = _rss()
    e = _gpu.Engine(max_batch=a.batch, gpu_budget=a.gpu_budget << 20, pinned_bytes=a.pinned << 20)
    pool = e.stats()["device_pool_bytes"]
    steps["create"] = base - free() - pool
    host["create"] = _rss() - rss0

    def run(blobs, epoch=0):
        for s0 in range(0, len(blobs), a.batch):
            c = blobs[s0:s0 + a.batch]
            e.submit(c, list(range(s0, s0 + len(c))), list(range(len(c))), dst.data_ptr(), dst[0].numel(),
                     sluice._sluice.PRESET_TRAIN, 224, SEED, epoch)
            e.wait()

    run([jpeg(64, 64, 1)] * a.batch)
    steps["tiny_batch"] = base - free() - pool
    host["tiny_batch"] = _rss() - rss0
    real = [read(p) for p in files[:a.batch]]
    run(real)
    steps["real_batch"] = base - free() - pool
    host["real_batch"] = _rss() - rss0
    run([jpeg(2400, 1800, 2)] * 8)
    steps["large_images"] = base - free() - pool
    host["large_images"] = _rss() - rss0
    run([read(p) for p in files], 1)
    steps["epoch"] = base - free() - pool
    host["epoch"] = _rss() - rss0
    run([read(p) for p in files], 2)
    steps["epoch2"] = base - free() - pool
    host["epoch2"] = _rss() - rss0
    st = e.stats()
    e.close()
    steps["closed"] = base - free()
    host["closed"] = _rss() - rss0
    emit({"run": "memory", "batch": a.batch, "pool_bytes": pool, "outside_pool_bytes": steps,
          "pool_peak": st["device_peak"], "pinned_peak": st["pinned_peak"], "pinned_pool_bytes": st.get("pinned_pool_bytes"),
          "host_rss_growth_bytes": host})


# ---- loaders -----------------------------------------------------------------------
MEAN = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1) * 255
STD = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1) * 255


def synthetic_batches(a, root, files, labels):
    x = torch.randint(0, 256, (a.batch, 3, 224, 224), dtype=torch.uint8, device="cuda")
    y = torch.randint(0, 100, (a.batch,), device="cuda")
    while True:
        yield x, y


def sluice_batches(a, root, files, labels, decode="cpu"):
    """sluice.torch.Loader; decode="auto"/"gpu": the loader's C scheduler feeds nvJPEG
    beside the CPU workers (no Python per sample)."""
    import sluice.torch as st

    extra = {} if decode == "cpu" else {"gpu_budget": f"{a.gpu_budget}M", "gpu_engines": a.gpu_engines}
    if a.worker_nice is not None:
        extra["worker_nice"] = a.worker_nice
    if a.prefetch:
        extra["prefetch"] = a.prefetch
    ld = st.Loader(root, batch_size=a.batch, device="cuda", dtype=torch.uint8, workers=a.workers or "auto", budget="4G",
                   seed=SEED, drop_last=True, decode=decode, **extra)
    a._ld = ld
    a._passes = [0.0, 0.0, 0.0, 0.0]  # over the passes ended: seconds, the wait, of it the GPU's, the CPU's
    epoch = 0
    while True:
        ld.set_epoch(epoch)
        yield from ld
        s = ld.stats()
        for i, k in enumerate(("pass_seconds", "pass_consumer_wait_s", "pass_consumer_wait_gpu_s",
                               "pass_consumer_wait_cpu_s")):
            a._passes[i] += s.get(k, 0.0)
        epoch += 1


def sluice_gpu_batches(a, root, files, labels):
    yield from sluice_batches(a, root, files, labels, decode="auto")


def sluice_gpuonly_batches(a, root, files, labels):
    yield from sluice_batches(a, root, files, labels, decode="gpu")


def sluice_default_batches(a, root, files, labels):
    yield from sluice_batches(a, root, files, labels, decode="prefer-gpu")


def tvio_batches(a, root, files, labels):
    import torchvision
    from torchvision.io import ImageReadMode, decode_image, read_file
    from torchvision.transforms import v2

    tf = v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip()])
    ds = torchvision.datasets.ImageFolder(root, transform=tf,
                                          loader=lambda p: decode_image(read_file(p), mode=ImageReadMode.RGB))
    dl = torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.workers, pin_memory=True,
                                     persistent_workers=True, drop_last=True, prefetch_factor=2)
    while True:
        for x, y in dl:
            yield x.cuda(non_blocking=True), y.cuda(non_blocking=True)


class _Bytes(torch.utils.data.Dataset):
    def __init__(self, files, labels):
        self.files, self.labels = files, labels

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        from torchvision.io import read_file
        return read_file(self.files[i]), int(self.labels[i])


def _collate(items):
    return [b for b, _ in items], torch.tensor([y for _, y in items])


def tvcuda_batches(a, root, files, labels):
    from torchvision.io import ImageReadMode, decode_image, decode_jpeg
    from torchvision.transforms import v2

    # 256 small tensors a batch: share them through files, not one descriptor each
    torch.multiprocessing.set_sharing_strategy("file_system")
    tf = v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip()])
    dl = torch.utils.data.DataLoader(_Bytes(files, labels), batch_size=a.batch, shuffle=True,
                                     num_workers=a.workers, pin_memory=True, persistent_workers=True,
                                     drop_last=True, prefetch_factor=2, collate_fn=_collate)
    while True:
        for blobs, y in dl:
            jpeg = [i for i, b in enumerate(blobs) if b[0] == 0xFF and b[1] == 0xD8]
            imgs = [None] * len(blobs)
            try:
                for i, im in zip(jpeg, decode_jpeg([blobs[i] for i in jpeg], mode=ImageReadMode.RGB, device="cuda")):
                    imgs[i] = im
            except RuntimeError:  # one file nvJPEG refuses: each on its own
                for i in jpeg:
                    try:
                        imgs[i] = decode_jpeg(blobs[i], mode=ImageReadMode.RGB, device="cuda")
                    except RuntimeError:
                        pass
            for i in range(len(blobs)):
                if imgs[i] is None:
                    imgs[i] = decode_image(blobs[i], mode=ImageReadMode.RGB).cuda()
            yield torch.stack([tf(im) for im in imgs]), y.cuda(non_blocking=True)


LOADERS = {"synthetic": synthetic_batches, "sluice": sluice_batches, "sluice-gpu": sluice_gpu_batches,
           "sluice-gpuonly": sluice_gpuonly_batches, "sluice-default": sluice_default_batches,
           "tvio": tvio_batches, "tvcuda": tvcuda_batches}


def _passes_report(p):
    if not p or p[0] <= 0:
        return None
    return {"seconds": round(p[0], 2), "wait": round(p[1] / p[0], 3), "wait_gpu": round(p[2] / p[0], 3),
            "wait_cpu": round(p[3] / p[0], 3)}


def sluice_report(a):
    """Which engine decoded how much, device and pinned memory: from stats()."""
    ld = getattr(a, "_ld", None)
    if ld is None:
        return {}
    s = ld.stats()
    total = s["gpu_samples"] + s["cpu_samples"]
    return {"decode": s["decode"], "decode_reason": s["decode_reason"],
            "gpu_share": round(s["gpu_samples"] / total, 3) if total else 0.0, "gpu_samples": s["gpu_samples"],
            "cpu_samples": s["cpu_samples"], "handed_back": s["gpu_handed_back"], "gpu_rate": round(s["gpu_rate"], 1),
            "cpu_rate": round(s["cpu_rate"], 1), "device_pool_bytes": s["gpu_pool_bytes"],
            "device_pool_peak_bytes": s["gpu_pool_peak"], "device_batch_bytes": s["gpu_batch_bytes"],
            "pinned_bytes": s["gpu_pinned_bytes"], "staging_peak_bytes": s["gpu_staging_peak"],
            "host_peak_accounted_bytes": s["peak_accounted_bytes"], "consumer_wait_fraction":
            round(s["consumer_wait_fraction"], 3),
            "pass_consumer_wait_gpu_fraction": round(s.get("pass_consumer_wait_gpu_fraction", 0.0), 3),
            # over every pass ended (the epochs, warm-up's included): the loader's wait, and of the
            # wall the waits for batches the busy GPU engines and a CPU worker finished last
            "passes": _passes_report(getattr(a, "_passes", None)),
            "slots": s.get("slots"), "workers_active_mean": round(s.get("workers_active_mean", 0.0), 1),
            "gpu_host_bytes": s["memory"].get("gpu_host", 0),
            # where the GPU's time went (with a model running: the train run), seconds over the run
            "gpu_engines": s.get("gpu_engines", 0), "gpu_hw_s": round(s.get("gpu_hw_s", 0), 3),
            "gpu_hybrid_s": round(s.get("gpu_hybrid_s", 0), 3), "gpu_resize_s": round(s.get("gpu_resize_s", 0), 3),
            "gpu_copy_s": round(s.get("gpu_copy_s", 0), 3), "gpu_hw_calls": s.get("gpu_hw_calls", 0),
            "gpu_hw_failed_calls": s.get("gpu_hw_failed_calls", 0)}


THREAD_STEPS = ("route", "hybrid", "hw", "launch", "wait")  # the GPU threads' wall, by step (host clock)
WINDOW_KEYS = ("gpu_samples", "cpu_samples", "gpu_hw_s", "gpu_hybrid_s", "gpu_resize_s", "gpu_copy_s",
               "gpu_hw_calls", "consumer_wait_s") + tuple(f"gpu_thread_{k}_s" for k in THREAD_STEPS)


def sluice_counters(a):
    ld = getattr(a, "_ld", None)
    if ld is None:
        return None
    s = ld.stats()
    return {k: s.get(k, 0) for k in WINDOW_KEYS}


def sluice_window(a, s0, dt):
    """The sluice counters over the timed window only: per second of it (the GPU phases: the share
    of the window each phase's GPU time took, summed over engines), and per engine call."""
    if s0 is None:
        return {}
    s1 = sluice_counters(a)
    d = {k: s1[k] - s0[k] for k in WINDOW_KEYS}
    calls = max(d["gpu_hw_calls"], 1)
    w = {"win_" + k: round(d[k] / dt, 3) for k in ("gpu_hw_s", "gpu_hybrid_s", "gpu_resize_s", "gpu_copy_s",
                                                   "consumer_wait_s")}
    w.update({"win_gpu_samples_per_s": round(d["gpu_samples"] / dt, 1),
              "win_cpu_samples_per_s": round(d["cpu_samples"] / dt, 1),
              "win_ms_per_hw_call": {k: round(1e3 * d[k] / calls, 2) for k in ("gpu_hw_s", "gpu_resize_s")},
              "win_samples_per_hw_call": round(d["gpu_samples"] / calls, 1),
              # the share of the window each step of the GPU threads' calls took (summed over engines)
              "win_gpu_thread": {k: round(d[f"gpu_thread_{k}_s"] / dt, 3) for k in THREAD_STEPS}})
    return w


def bench_contend(a, name, root, files, labels):
    """The model on synthetic data in this thread while another thread drains the loader: how much
    each slows the other when neither waits for the other (the training row's decomposition). The
    draining thread shares the GIL with the training loop, which bounds its rate."""
    fit = train_step(a)
    xs = torch.randint(0, 256, (a.batch, 3, 224, 224), dtype=torch.uint8, device="cuda")
    ys = torch.randint(0, 100, (a.batch,), device="cuda")
    it = LOADERS[name](a, root, files, labels)
    for _ in range(a.warmup):
        next(it)
    stop, got = threading.Event(), [0]

    def drain():
        with torch.cuda.stream(torch.cuda.Stream()):
            while not stop.is_set():
                x, _ = next(it)
                got[0] += x.shape[0]

    def step():
        fit(xs, ys)

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    th = threading.Thread(target=drain, daemon=True)
    th.start()
    time.sleep(1.0)
    s0, c0, g0 = sluice_counters(a), thread_cpu(), got[0]
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    g1, c1 = got[0], thread_cpu()
    r = {"run": "contend", "arch": a.arch, "loader": name, "batch": a.batch, "workers": a.workers,
         "model_images_per_s": round(a.steps * a.batch / dt, 1), "loader_images_per_s": round((g1 - g0) / dt, 1),
         "cores": cores_used(c0, c1, dt)}
    r.update(sluice_window(a, s0, dt))
    stop.set()
    th.join(timeout=30)
    r.update(sluice_report(a))
    emit(r)


def bench_loader(a, name, root, files, labels):
    it = LOADERS[name](a, root, files, labels)
    for _ in range(a.warmup):
        x, y = next(it)
    torch.cuda.synchronize()
    s0 = sluice_counters(a)
    c0 = thread_cpu()
    t0 = time.perf_counter()
    for _ in range(a.batches):
        x, y = next(it)
        assert x.shape == (a.batch, 3, 224, 224) and x.dtype == torch.uint8 and x.is_cuda
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    r = {"run": "loader", "loader": name, "workers": a.workers, "batch": a.batch,
         "images_per_s": round(a.batches * a.batch / dt, 1), "seconds": round(dt, 2),
         "cores": cores_used(c0, thread_cpu(), dt)}
    r.update(sluice_window(a, s0, dt))
    r.update(sluice_report(a))
    emit(r)
    del it


def train_step(a):
    """One training step of a.arch (bf16 autocast, channels_last, SGD) on a uint8 CUDA batch:
    the loop every train and contend row runs."""
    import torchvision

    torch.backends.cudnn.benchmark = True
    model = getattr(torchvision.models, a.arch)(num_classes=1000).cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    mean, std = MEAN.cuda(), STD.cuda()

    def fit(x, y):
        x = ((x.float() - mean) / std).contiguous(memory_format=torch.channels_last)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return fit


def bench_train(a, name, root, files, labels):
    fit = train_step(a)
    it = LOADERS[name](a, root, files, labels)

    took = [0.0]  # seconds the loop spent in next(it), the loader's hand-over included

    def step():
        t = time.perf_counter()
        with torch.profiler.record_function("loop_next"):  # a range only under --trace-steps
            b = next(it)
        took[0] += time.perf_counter() - t
        fit(*b)

    # the model's stream: the default (priority 0, the device's least, as the engine's streams), or
    # one of the greatest priority, which the GPU schedules before the engine's work
    stream = torch.cuda.Stream(priority=-5) if a.model_priority == "high" else torch.cuda.current_stream()
    with torch.cuda.stream(stream):
        for _ in range(a.warmup):
            step()
        torch.cuda.synchronize()
        s0 = sluice_counters(a)
        c0 = thread_cpu()
        took[0] = 0.0
        t0 = time.perf_counter()
        for _ in range(a.steps):
            step()
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        c1, in_next = thread_cpu(), took[0]
        if a.trace_steps:
            took[0] = 0.0
            r_trace = trace_steps(a, step)
            r_trace["next_ms_per_step"] = round(1e3 * took[0] / a.trace_steps, 2)
    r = {"run": "train", "arch": a.arch, "loader": name, "batch": a.batch, "workers": a.workers,
         "worker_nice": a.worker_nice, "pin_slots": os.environ.get("SLUICE_GPU_PIN_SLOTS") == "1",
         "ab": os.environ.get("SLUICE_AB"), "sluice_from": os.path.dirname(sluice.__file__),
         "images_per_s": round(a.steps * a.batch / dt, 1), "steps": a.steps, "model_priority": a.model_priority,
         "prefetch": a.prefetch or None, "gpu_budget_mb": a.gpu_budget,
         "next_fraction": round(in_next / dt, 3),
         "gpu_max_allocated_bytes": torch.cuda.max_memory_allocated(), "cores": cores_used(c0, c1, dt)}
    r.update(sluice_window(a, s0, dt))
    if a.trace_steps:
        r["trace"] = r_trace
    r.update(sluice_report(a))
    emit(r)


def _tally(d, key, calls, us):
    """d[key] = [calls, microseconds], added to."""
    c_t = d.setdefault(key, [0, 0.0])
    c_t[0] += calls
    c_t[1] += us


def _union(iv):
    """Total length covered by intervals [(t0, t1)] (microseconds)."""
    tot, end = 0.0, None
    for t0, t1 in sorted(iv):
        if end is None or t0 > end:
            tot += t1 - t0
            end = t1
        elif t1 > end:
            tot += t1 - end
            end = t1
    return tot


def trace_steps(a, step):
    """a.trace_steps more steps under torch.profiler (CUPTI sees every kernel of the process: the
    model's, nvJPEG's and sluice's NVRTC kernels sl_*): per step, GPU time by owner, the union of
    all GPU activity (busy) and of the model's kernels alone, against the wall; the time spent in
    CUDA API calls (top_api: name, calls, ms, us a call; the process's, not only the model's
    threads': CUPTI does not tell nvJPEG's apart); the wall of
    next() and what ran inside it (in_next: name, calls, ms)."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        for _ in range(a.trace_steps):
            step()
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    owners, iv_all, iv_model, top, api, aten = {}, [], [], {}, {}, {}
    events = list(prof.events())
    nexts = sorted((e.time_range.start, e.time_range.end) for e in events if e.name == "loop_next")
    loop = {e.thread for e in events if e.name == "loop_next"}
    # what the loop's thread did inside next(): CPU ops and CUDA API calls by name (CUPTI may
    # give other threads' API calls the same thread id: count them with care)
    inside = {}

    def in_next(t):
        i = bisect.bisect_right(nexts, (t, float("inf"))) - 1
        return i >= 0 and nexts[i][0] <= t <= nexts[i][1]

    for e in events:
        if (e.device_type != torch.autograd.DeviceType.CUDA and e.name != "loop_next" and e.thread in loop
                and in_next(e.time_range.start)):
            _tally(inside, e.name[:50], 1, e.time_range.end - e.time_range.start)
        if e.device_type != torch.autograd.DeviceType.CUDA:
            # the CUDA API calls (CUPTI's runtime/driver records) of the threads that run aten
            # ops; CUPTI gives other threads' calls (nvJPEG's, on the GPU thread) the same ids, so
            # with a sluice row this is the whole process's (fifth session, bench/README.md)
            if e.name.startswith("aten::"):
                aten[e.thread] = aten.get(e.thread, 0) + 1
            elif e.name.startswith("cu") and not e.name.startswith("cudnn"):
                _tally(api, (e.thread, e.name), 1, e.time_range.end - e.time_range.start)
            continue
        t0, t1 = e.time_range.start, e.time_range.end
        name = e.name
        low = name.lower()
        own = ("sluice" if name.startswith("sl_") else "nvjpeg" if "nvjpeg" in low or "jpeg" in low
               else "memcpy" if "memcpy" in low else "memset" if "memset" in low else "model")
        owners[own] = owners.get(own, 0.0) + (t1 - t0)
        iv_all.append((t0, t1))
        if own == "model":
            iv_model.append((t0, t1))
        if own not in ("model",):
            k = (own, name[:60])
            top[k] = top.get(k, 0.0) + (t1 - t0)
    n = a.trace_steps
    by_name = {}  # the API calls of the threads that ran the model's ops (forward, autograd)
    for (tid, name), (c, t) in api.items():
        if tid in aten:
            _tally(by_name, name, c, t)
    api = by_name
    return {"steps": n, "wall_ms_per_step": round(1e3 * wall / n, 2),
            "gpu_busy_ms_per_step": round(_union(iv_all) / 1e3 / n, 2),
            "model_busy_ms_per_step": round(_union(iv_model) / 1e3 / n, 2),
            "ms_per_step_by_owner": {k: round(v / 1e3 / n, 3) for k, v in sorted(owners.items())},
            "top_other": [[k[0], k[1], round(v / 1e3 / n, 3)] for k, v in sorted(top.items(), key=lambda kv: -kv[1])[:8]],
            "api_ms_per_step": round(sum(v[1] for v in api.values()) / 1e3 / n, 2),
            "top_api": [[k, round(c / n, 1), round(t / 1e3 / n, 3), round(t / max(c, 1), 1)]
                        for k, (c, t) in sorted(api.items(), key=lambda kv: -kv[1][1])[:6]],
            # inside next(): its wall a step, and what ran in it (name, calls, ms a step)
            "next_wall_ms_per_step": round(sum(b - a for a, b in nexts) / 1e3 / n, 2),
            "in_next": [[k, round(c / n, 1), round(t / 1e3 / n, 3)]
                        for k, (c, t) in sorted(inside.items(), key=lambda kv: -kv[1][1])[:10]]}


def main():
    import faulthandler
    import signal

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # bench/offcpu.py reads the stacks
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("data")
    p.add_argument("what", choices=["engine", "diff", "memory", "loaders", "train", "contend"])
    p.add_argument("--images", type=int, default=2000)
    p.add_argument("--loaders", default="sluice,sluice-gpu,sluice-gpuonly,tvio,tvcuda")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--workers", type=int, default=os.cpu_count(), help="the sluice loaders' workers; 0: auto (the tuner)")
    p.add_argument("--batches", type=int, default=60)
    p.add_argument("--warmup", type=int, default=8)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--engines", type=int, default=2, help="GPU engines (each its own nvJPEG state and stream)")
    p.add_argument("--arch", default="resnet18")
    p.add_argument("--worker-nice", type=int, default=None, help="the sluice loaders' worker_nice (default: theirs)")
    p.add_argument("--trace-steps", type=int, default=0, help="train: that many more steps under torch.profiler")
    p.add_argument("--prefetch", type=int, default=0, help="the sluice loaders' batch slots (0: the library's)")
    p.add_argument("--gpu-budget", type=int, default=512, help="MiB of device memory per engine (the loaders: gpu_budget)")
    p.add_argument("--pinned", type=int, default=96, help="MiB of pinned pool per engine")
    p.add_argument("--gpu-engines", type=int, default=1, help="the sluice GPU loaders' decode engines (gpu_engines)")
    p.add_argument("--model-priority", choices=["default", "high"], default="default",
                   help="train: the model's stream at the default priority or the greatest (clamped)")
    a = p.parse_args()
    ok, why = _gpu.available()
    if not ok:
        sys.exit(f"gpu_decode.py: no GPU engine here: {why}")
    root, files, labels = files_of(a.data)
    if a.what in ("engine", "diff", "memory"):
        {"engine": bench_engine, "diff": bench_diff, "memory": bench_memory}[a.what](a, files)
        return
    for name in a.loaders.split(","):
        {"loaders": bench_loader, "train": bench_train, "contend": bench_contend}[a.what](a, name, root, files, labels)
        if getattr(a, "_ld", None) is not None:
            a._ld.close()
        a._ld = None


if __name__ == "__main__":
    main()

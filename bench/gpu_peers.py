#!/usr/bin/env python3
"""Every loader side by side in one run on a GPU host (issue 20, item 4): loader-only, training
fed by each loader, and torchrun DDP, each row in a process of its own.

    gpu_peers.py DATA table [--mode loaders|train|ddp] [--rows SPEC,...] [--rounds 2]
                            [--archs resnet18,resnet50] [--nproc 2] [--jsonl FILE]
        the driver: writes the file list (see "Files"), then runs every row once per round,
        alternating the rows within each round, each in a process of its own under a time limit
        (--row-timeout), prints each row's JSON line as it comes and the summary table at the end
    gpu_peers.py DATA row --mode loaders|train --row SPEC [--arch resnet18]
        one row in this process (under torchrun for --mode ddp: one loader a rank)
    gpu_peers.py DATA list
        only the file list

Rows (SPEC is NAME[:key=value...]; the default set is made from --sweep-workers and
--sweep-decodes):
  synthetic              one batch made on the device once, reused: the ceiling (train, ddp)
  sluice                 sluice.torch.Loader(LIST, batch_size=B, bf16, channels_last) and nothing
                         else: the library's defaults (workers, budget, decode="prefer-gpu")
  sluice:decode=D:workers=W   the static sweep (D cpu|gpu|auto, W a number or "auto": the tuner,
                         where the library has it; "n/a" with the library's refusal where not),
                         budget --budget, gpu_budget --gpu-budget (either given: decode auto and
                         those budgets); any other key=value goes to the Loader as it is (a number
                         as an int): sluice:gpu_engines=2 is the defaults with two engines
  any row:env.NAME=VALUE  the row's process runs with NAME=VALUE in its environment, e.g.
                         sluice:env.SLUICE_GPU_PIN_SLOTS=0 (the defaults, slots pageable);
                         env.PEERS_DDP=0 in --mode ddp: the ranks train apart, the model not
                         wrapped in DistributedDataParallel (no gradient all-reduce, no step
                         in lockstep): the same host, GPUs and loaders without DDP's coupling;
                         env.PEERS_STREAM=side (train, ddp): the loop's kernels on a CUDA stream
                         of its own rather than the legacy default stream; env.PEERS_FEED=synthetic
                         (train, ddp): the row's loader runs and its batches are taken, the model
                         trains on the synthetic batch (the loader's cost beside the model)
  tvio:workers=W         DataLoader, W processes, torchvision.io.decode_image + v2.RandomResizedCrop
                         + flip, pin_memory
  tvcuda:workers=W       DataLoader reading bytes (W processes, pin_memory), then per batch
                         torchvision.io.decode_jpeg(device="cuda") + v2 RandomResizedCrop + flip on
                         the GPU per image
  nvimgcodec:roi=0|1     nvImageCodec's batched decode of 256 images from bytes in memory, whole
                         images or a RandomResizedCrop ROI, no resize (loader-only; backend=cpu:
                         its CPU backend, for a check without a GPU)
  dali:threads=T         NVIDIA DALI's ResNet pipeline: fn.readers.file (shuffled) +
                         fn.decoders.image_random_crop on "mixed" + fn.resize 224 +
                         fn.crop_mirror_normalize (fp16, CHW, random mirror), DALIGenericIterator
                         (device=cpu: the same pipeline on the CPU, for a check without a GPU)
Every row delivers what the training step takes: a normalized [B, 3, 224, 224] batch on the
device (uint8 batches are normalized on the device, in the loop), int64 labels.

Files: DALI stops at the first file it cannot decode (the set's CMYK JPEGs and PNGs named .JPEG),
so every row reads the same list of the set's RGB and grey baseline/progressive JPEGs (--set clean,
the default; --set all: the whole folder, where the DALI row is expected to fail). The list is
written to WORK as clean.csv (path,label: sluice's manifest), clean.txt (DALI's file_list:
"relative-path label" under the set's root) and clean.json (counts, what was left out and why).

Each row prints one JSON line: images_per_s over --batches (--steps) after --warmup; the process
tree's PSS (smaps_rollup, sampled every 0.5 s): base before the loader, peak, and loader_pss_mb the
difference; the device memory in use above the base (device-wide, torch.cuda.mem_get_info, sampled
likewise: the loader's and, in training, the model's); train: data_wait_fraction, the share of
the timed loop spent in next(loader), and step_ms, the steps' periods on the device (CUDA events at
each step's start: mean, p50, p90, p99, max) and slow_steps, [batch index, ms] of the steps over 1.2x
the median (the warm-up's batches counted in the index, so index % (images_in_list // batch) is the
step's place in its epoch); ddp: each rank's step_ms and wait, and
lockstep_images_per_s, what the node would make were every step as long as its slowest rank's,
drawn from each rank's own steps (with env.PEERS_DDP=0 the lockstep's cost apart from DDP's
all-reduce; the summary's note "lockstep="); sluice rows: the library's stats (decode, GPU share, workers,
the tuner's fields where present). A row that cannot run prints {"skipped": why} or
{"error": traceback} and the table goes on.
"""
import argparse
import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proc_tree import pids as tree, pss_mb as tree_pss_mb  # noqa: E402
from proc_threads import ClockSampler, cores_used, thread_cpu  # noqa: E402
from image_folder import walk  # noqa: E402

SEED = 0
HERE = os.path.abspath(__file__)
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def emit(d):
    print(json.dumps(d), flush=True)


# ---- the file list --------------------------------------------------------------------------
def jpeg_components(path):
    """Components of a JPEG's frame (1 grey, 3 YCbCr/RGB, 4 CMYK/YCCK), or None when the file is
    no JPEG or has no frame header. Walks the markers up to the first SOF: the first 64 KiB, the
    whole file when the header lies further on (a large APP segment)."""
    with open(path, "rb") as f:
        data = f.read(1 << 16)
        for attempt in (0, 1):
            if attempt:
                data += f.read()
            if data[:2] != b"\xff\xd8":
                return None
            i = 2
            while i + 4 <= len(data):
                if data[i] != 0xFF:
                    return None
                m = data[i + 1]
                if m == 0xFF:  # fill byte
                    i += 1
                    continue
                if m == 0x01 or 0xD0 <= m <= 0xD8:  # no length
                    i += 2
                    continue
                if m in (0xD9, 0xDA):  # the end, or a scan, before any frame
                    return None
                if 0xC0 <= m <= 0xCF and m not in (0xC4, 0xC8, 0xCC):
                    return data[i + 9] if i + 9 < len(data) else None
                i += 2 + int.from_bytes(data[i + 2:i + 4], "big")
    return None


def set_files(data):
    """(root, [(relative path, label)]) of an ImageFolder set (DATA or DATA/train)."""
    root, items = walk(data)
    return os.path.abspath(root), [(os.path.relpath(p, root), label) for p, label in items]


def write_list(data, work, which):
    """The list every row reads (module doc, "Files"): WORK/<which>.csv, .txt and .json."""
    os.makedirs(work, exist_ok=True)
    info_path = os.path.join(work, which + ".json")
    root, files = set_files(data)
    if os.path.exists(info_path):
        with open(info_path) as f:
            info = json.load(f)
        if info.get("root") == root and info.get("set_images") == len(files):
            return info
    kept, left = [], {}
    for rel, label in files:
        comps = jpeg_components(os.path.join(root, rel)) if which == "clean" else 3
        if comps in (1, 3):
            kept.append((rel, label))
        else:
            why = "not a JPEG" if comps is None else f"JPEG with {comps} components"
            left[why] = left.get(why, 0) + 1
    csv_path, txt_path = os.path.join(work, which + ".csv"), os.path.join(work, which + ".txt")
    with open(csv_path + ".tmp", "w") as f:
        f.write("path,label\n")
        for rel, label in kept:
            f.write('"%s",%d\n' % (os.path.join(root, rel).replace('"', '""'), label))
    with open(txt_path + ".tmp", "w") as f:
        for rel, label in kept:
            f.write("%s %d\n" % (rel, label))
    os.replace(csv_path + ".tmp", csv_path)
    os.replace(txt_path + ".tmp", txt_path)
    info = {"root": root, "set": which, "set_images": len(files), "images": len(kept), "left_out": left,
            "classes": len(set(l for _, l in files)), "csv": csv_path, "txt": txt_path}
    with open(info_path + ".tmp", "w") as f:
        json.dump(info, f)
    os.replace(info_path + ".tmp", info_path)
    return info


def read_list(info):
    paths, labels = [], []
    with open(info["txt"]) as f:
        for line in f:
            rel, label = line.rstrip("\n").rsplit(" ", 1)
            paths.append(os.path.join(info["root"], rel))
            labels.append(int(label))
    return paths, labels


# ---- measuring --------------------------------------------------------------------------------
def tree_pss(root):
    """PSS of root's process tree, MiB."""
    return tree_pss_mb(tree(root))


class Sampler(threading.Thread):
    """Peak PSS of this process's tree and peak device memory in use, every 0.5 s."""

    def __init__(self, device):
        super().__init__(daemon=True)
        self.device, self.stop = device, threading.Event()
        self.pss_base = tree_pss(os.getpid())
        self.dev_base = self.dev_used()
        self.pss, self.dev = self.pss_base, self.dev_base

    def dev_used(self):
        if self.device is None:
            return 0.0
        import torch
        free, total = torch.cuda.mem_get_info(self.device)
        return (total - free) / 2**20

    def rebase(self):
        """The base taken again (training: after the model and its optimizer, before the loader)."""
        self.pss_base = tree_pss(os.getpid())
        self.dev_base = self.dev_used()
        self.pss, self.dev = self.pss_base, self.dev_base

    def sample(self):
        self.pss = max(self.pss, tree_pss(os.getpid()))
        self.dev = max(self.dev, self.dev_used())

    def run(self):
        while not self.stop.wait(0.5):
            self.sample()

    def report(self):
        self.stop.set()
        self.sample()
        r = {"tree_pss_base_mb": round(self.pss_base, 1), "tree_pss_peak_mb": round(self.pss, 1),
             "loader_pss_mb": round(self.pss - self.pss_base, 1)}
        if self.device is not None:
            r["device_used_above_base_mb"] = round(self.dev - self.dev_base, 1)
        return r


# ---- loaders: each yields (x, y) on the device; x uint8 [B,3,224,224] or already normalized ----
def row_items(spec):
    """The (key, value) of each option after the row's NAME, in order."""
    return [item.partition("=")[::2] for item in spec.split(":")[1:]]


def parse_row(spec):
    """NAME and its options; env.NAME=VALUE items are the row process's environment (row_env)."""
    return spec.split(":")[0], {k: v for k, v in row_items(spec) if not k.startswith("env.")}


def row_env(spec):
    return {**os.environ, **{k[4:]: v for k, v in row_items(spec) if k.startswith("env.")}}


def synthetic_batches(a, info, opts, dev):
    import torch

    g = torch.Generator(device="cpu").manual_seed(SEED)
    x = torch.randint(0, 256, (a.batch, 3, a.size, a.size), dtype=torch.uint8, generator=g).to(dev)
    x = normalize(x, dev).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, info["classes"], (a.batch,), generator=g).to(dev)
    while True:
        yield x, y


def sluice_kwargs(a, opts, cuda):
    """The Loader's arguments for a sluice row: none (the library's defaults) but the row's options,
    or with decode or workers named, the sweep's settings (decode auto, --budget, --gpu-budget)."""
    kw = {}
    if "decode" in opts or "workers" in opts:  # the sweep's settings (decode auto, --budget, --gpu-budget)
        w = opts.get("workers", "")
        if w:
            kw["workers"] = w if w == "auto" else int(w)
        kw["decode"] = opts.get("decode", "auto")
        kw["budget"] = opts.get("budget", a.budget)
        if kw["decode"] != "cpu" and cuda:
            kw["gpu_budget"] = opts.get("gpu_budget", a.gpu_budget)
    for k, v in opts.items():  # any other Loader argument, e.g. gpu_engines=2, prefetch=4, budget=256M
        if k not in ("workers", "decode") and k not in kw:  # without decode or workers: the library's defaults
            kw[k] = int(v) if v.isdigit() else v
    return kw


def sluice_batches(a, info, opts, dev):
    import torch
    import sluice.torch as st

    kw = sluice_kwargs(a, opts, dev.type == "cuda")
    try:
        ld = st.Loader(info["csv"], batch_size=a.batch, size=a.size, device=str(dev), dtype=torch.bfloat16,
                       channels_last=True, seed=SEED, drop_last=True, **kw)
    except (TypeError, ValueError) as e:
        if kw.get("workers") == "auto":
            raise Skip(f"n/a: workers='auto' is not in this library ({type(e).__name__}: {e})")
        raise
    a._sluice = ld
    epoch = 0
    while True:
        ld.set_epoch(epoch)
        yield from ld
        epoch += 1


def sluice_report(ld):
    s = ld.stats()
    total = s.get("gpu_samples", 0) + s.get("cpu_samples", 0)
    r = {"decode": s.get("decode"), "decode_reason": s.get("decode_reason"), "workers": s.get("workers"),
         "slots": s.get("slots"), "budget_bytes": s.get("budget_bytes"),
         "gpu_share": round(s.get("gpu_samples", 0) / total, 3) if total else 0.0,
         "consumer_wait_fraction": round(s.get("consumer_wait_fraction", 0.0), 3),
         # of the pass, the wait the GPU decode held up (batches the busy engines finished last)
         "pass_consumer_wait_gpu_fraction": round(s.get("pass_consumer_wait_gpu_fraction", 0.0), 3),
         "pass_consumer_wait_cpu_fraction": round(s.get("pass_consumer_wait_cpu_fraction", 0.0), 3),
         # the GPU threads' wall in each step of their calls, seconds over the row (host clock)
         "gpu_thread_s": {k: round(s.get(f"gpu_thread_{k}_s", 0.0), 2) for k in ("route", "hybrid", "hw", "launch",
                                                                                  "wait")},
         # nvJPEG's hardware calls, those without its pipeline, and the engines' moves between the modes
         "gpu_hw_calls": [s.get("gpu_hw_calls"), s.get("gpu_hw_calls_unpipelined"), s.get("gpu_hw_mode_switches")],
         "gpu_hw_us": [round(s.get("gpu_hw_us_pipelined", 0.0), 1), round(s.get("gpu_hw_us_unpipelined", 0.0), 1)],
         # GPU samples (warm-up, hybrid ones and any decoded ahead included) over the hardware calls:
         # a call's mean size (SLUICE_GPU_GATHER, _MS: how many a call waits for, how long)
         "gpu_samples": s.get("gpu_samples", 0),
         "gpu_samples_per_call": (round(s.get("gpu_samples", 0) / s["gpu_hw_calls"], 1)
                                  if s.get("gpu_hw_calls") else None),
         # the resize's GPU time (stream events around its kernels) a GPU sample, microseconds
         "gpu_resize_us": (round(s.get("gpu_resize_s", 0.0) / s["gpu_samples"] * 1e6, 2)
                           if s.get("gpu_samples") else None),
         "peak_accounted_bytes": s.get("peak_accounted_bytes"),
         # what the accounted peak is made of, per category, each at its own peak (MB)
         "memory_peak_mb": {k: round(v / 1e6, 1) for k, v in (s.get("memory_peak") or {}).items() if v}}
    # the tuner's choice (stats fields workers_active*, tuner*), where the library has one
    r.update({k: v for k, v in s.items() if k.startswith(("workers_active", "tuner", "prefetch_active"))})
    # CUDA's hardware queues in this process, and who chose them (sluice at import, the user, or late: CUDA first)
    import sluice

    r["cuda_connections"] = [os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS"),
                             getattr(sluice, "_CUDA_CONNECTIONS_BY", None)]
    return r


class _Files:
    """The list's (path, label) for DataLoader rows; decode in the worker (tvio) or bytes (tvcuda)."""

    def __init__(self, paths, labels, tf=None):
        self.paths, self.labels, self.tf = paths, labels, tf

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        from torchvision.io import ImageReadMode, decode_image, read_file

        data = read_file(self.paths[i])
        if self.tf is None:
            return data, self.labels[i]
        return self.tf(decode_image(data, mode=ImageReadMode.RGB)), self.labels[i]


def _dataloader(a, ds, workers, collate=None):
    import torch

    sampler, shuffle = None, True
    if a._world > 1:
        sampler = torch.utils.data.distributed.DistributedSampler(ds, shuffle=True, seed=SEED, drop_last=True)
        shuffle = None
    return torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=shuffle, sampler=sampler,
                                       num_workers=workers, pin_memory=a._dev.type == "cuda",
                                       persistent_workers=workers > 0, drop_last=True,
                                       prefetch_factor=2 if workers > 0 else None, collate_fn=collate)


def _epochs(dl):
    epoch = 0
    while True:
        if getattr(dl, "sampler", None) is not None and hasattr(dl.sampler, "set_epoch"):
            dl.sampler.set_epoch(epoch)
        yield from dl
        epoch += 1


def tvio_batches(a, info, opts, dev):
    try:
        from torchvision.transforms import v2
    except ImportError as e:
        raise Skip(f"torchvision: {e}")
    paths, labels = read_list(info)
    tf = v2.Compose([v2.RandomResizedCrop(a.size, antialias=True), v2.RandomHorizontalFlip()])
    for x, y in _epochs(_dataloader(a, _Files(paths, labels, tf), int(opts.get("workers", a.cpus)))):
        yield x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)


def _bytes_collate(items):
    import torch

    return [b for b, _ in items], torch.tensor([y for _, y in items])


def tvcuda_batches(a, info, opts, dev):
    import torch
    try:
        from torchvision.io import ImageReadMode, decode_image, decode_jpeg
        from torchvision.transforms import v2
    except ImportError as e:
        raise Skip(f"torchvision: {e}")
    if dev.type != "cuda":
        raise Skip("decode_jpeg(device='cuda') needs a GPU")
    torch.multiprocessing.set_sharing_strategy("file_system")  # 256 small tensors a batch
    paths, labels = read_list(info)
    tf = v2.Compose([v2.RandomResizedCrop(a.size, antialias=True), v2.RandomHorizontalFlip()])
    dl = _dataloader(a, _Files(paths, labels), int(opts.get("workers", a.cpus)), _bytes_collate)
    for blobs, y in _epochs(dl):
        imgs = [None] * len(blobs)
        try:
            for i, im in enumerate(decode_jpeg(blobs, mode=ImageReadMode.RGB, device=dev)):
                imgs[i] = im
        except RuntimeError:  # one file nvJPEG refuses: each on its own, the CPU for what it refuses
            for i, b in enumerate(blobs):
                try:
                    imgs[i] = decode_jpeg(b, mode=ImageReadMode.RGB, device=dev)
                except RuntimeError:
                    imgs[i] = decode_image(b, mode=ImageReadMode.RGB).to(dev)
        yield torch.stack([tf(im) for im in imgs]), y.to(dev, non_blocking=True)


def dali_batches(a, info, opts, dev):
    try:
        from nvidia.dali import fn, pipeline_def, types
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy
    except ImportError as e:
        raise Skip(f"NVIDIA DALI: {e}")
    on_gpu = opts.get("device", "gpu") == "gpu"
    if on_gpu and dev.type != "cuda":
        raise Skip("DALI's mixed decoder needs a GPU (dali:device=cpu runs the same pipeline on the CPU)")

    @pipeline_def
    def resnet_train():
        jpegs, labels = fn.readers.file(file_root=info["root"], file_list=info["txt"], random_shuffle=True,
                                        shard_id=a._rank, num_shards=a._world, seed=SEED, name="Reader")
        images = fn.decoders.image_random_crop(jpegs, device="mixed" if on_gpu else "cpu", output_type=types.RGB,
                                               random_aspect_ratio=[3 / 4, 4 / 3], random_area=[0.08, 1.0],
                                               num_attempts=10, seed=SEED)
        images = fn.resize(images, resize_x=a.size, resize_y=a.size)
        mirror = fn.random.coin_flip(probability=0.5, seed=SEED)
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT16, output_layout="CHW",
                                          mean=[m * 255 for m in MEAN], std=[s * 255 for s in STD],
                                          mirror=mirror)
        return images, labels.gpu() if on_gpu else labels

    threads = int(opts.get("threads", a.cpus))
    pipe = resnet_train(batch_size=a.batch, num_threads=threads, seed=SEED, prefetch_queue_depth=2,
                        device_id=(dev.index or 0) if on_gpu else None)
    pipe.build()
    it = DALIGenericIterator([pipe], ["data", "label"], reader_name="Reader", auto_reset=True,
                             last_batch_policy=LastBatchPolicy.DROP)
    a._dali_threads = threads
    while True:
        for out in it:
            x, y = out[0]["data"], out[0]["label"]
            yield x.to(dev, non_blocking=True), y.view(-1).long().to(dev, non_blocking=True)


def nvimgcodec_row(a, info, opts, dev):
    """nvImageCodec's batched decode alone, from bytes in memory (loader-only)."""
    import torch
    try:
        from nvidia import nvimgcodec
    except ImportError as e:
        raise Skip(f"nvImageCodec: {e}")
    roi = opts.get("roi", "0") == "1"
    cpu = opts.get("backend", "gpu") == "cpu"
    if not cpu and dev.type != "cuda":
        raise Skip("nvImageCodec's GPU backends need a GPU (nvimgcodec:backend=cpu: its CPU backend)")
    paths, _ = read_list(info)
    blobs = []
    for p in paths:
        with open(p, "rb") as f:
            blobs.append(f.read())
    threads = int(opts.get("threads", a.cpus))
    if cpu:
        dec = nvimgcodec.Decoder(device_id=nvimgcodec.NVIMGCODEC_DEVICE_CPU_ONLY, max_num_cpu_threads=threads,
                                 backends=[nvimgcodec.Backend(nvimgcodec.BackendKind.CPU_ONLY)])
    else:
        dec = nvimgcodec.Decoder(device_id=dev.index or 0, max_num_cpu_threads=threads)
    params = nvimgcodec.DecodeParams(color_spec=nvimgcodec.ColorSpec.SRGB, sample_format=nvimgcodec.SampleFormat.I_RGB)
    rng = random.Random(SEED)

    def crop(w, h):  # torchvision's RandomResizedCrop box: scale (0.08, 1), ratio (3/4, 4/3)
        area = w * h
        for _ in range(10):
            target = area * rng.uniform(0.08, 1.0)
            ar = pow(2.718281828459045, rng.uniform(-0.2876820724517809, 0.28768207245178085))
            cw, ch = int(round((target * ar) ** 0.5)), int(round((target / ar) ** 0.5))
            if 0 < cw <= w and 0 < ch <= h:
                y0, x0 = rng.randint(0, h - ch), rng.randint(0, w - cw)
                return y0, x0, y0 + ch, x0 + cw
        return 0, 0, h, w

    pos = [0]

    def batch():
        n = len(blobs)
        srcs = []
        for _ in range(a.batch):
            cs = nvimgcodec.CodeStream(blobs[pos[0] % n])
            pos[0] += 1
            if roi:
                cs = cs.get_sub_code_stream(region=nvimgcodec.Region(*crop(cs.width, cs.height)))
            srcs.append(cs)
        imgs = dec.decode(srcs, params=params)
        return sum(1 for im in imgs if im is not None), imgs

    for _ in range(a.warmup):
        batch()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    done, t0 = 0, time.perf_counter()
    for _ in range(a.batches):
        k, imgs = batch()
        done += k
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    dt = time.perf_counter() - t0
    return {"images_per_s": round(done / dt, 1), "images": done, "refused": a.batches * a.batch - done,
            "seconds": round(dt, 3), "roi": roi, "threads": threads, "backend": "cpu" if cpu else "gpu",
            "nvimgcodec": nvimgcodec.__version__}


class Skip(Exception):
    pass


LOADERS = {"synthetic": synthetic_batches, "sluice": sluice_batches, "tvio": tvio_batches,
           "tvcuda": tvcuda_batches, "dali": dali_batches}


def normalize(x, dev, _c={}):
    """uint8 [B,3,H,W] -> bf16 normalized channels_last, on the device; float batches pass."""
    import torch

    if x.dtype != torch.uint8:
        return x.contiguous(memory_format=torch.channels_last)
    if dev not in _c:
        _c[dev] = (torch.tensor(MEAN, device=dev).view(1, 3, 1, 1) * 255,
                   torch.tensor(STD, device=dev).view(1, 3, 1, 1) * 255)
    mean, std = _c[dev]
    return ((x.float() - mean) / std).to(torch.bfloat16).contiguous(memory_format=torch.channels_last)


# ---- one row --------------------------------------------------------------------------------
def run_row(a):
    if parse_row(a.row)[0] == "sluice":
        import sluice  # noqa: F401  (first, as a script imports it: before CUDA starts, for its hardware queues)
    import torch

    a._rank, a._world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local = int(os.environ.get("LOCAL_RANK", 0))
    cuda = torch.cuda.is_available() and a.device == "cuda"
    if a._world > 1:
        import torch.distributed as dist

        share = len(os.sched_getaffinity(0)) // int(os.environ.get("LOCAL_WORLD_SIZE", a._world))
        if a.pin and share > 0:  # each rank its share of the node's CPUs
            cpus = sorted(os.sched_getaffinity(0))
            os.sched_setaffinity(0, cpus[local * share:(local + 1) * share])
        if cuda:
            torch.cuda.set_device(local)
        dist.init_process_group("nccl" if cuda else "gloo")
    dev = torch.device("cuda", local if a._world > 1 else torch.cuda.current_device()) if cuda else torch.device("cpu")
    a._dev = dev
    a.cpus = len(os.sched_getaffinity(0))
    if cuda:
        torch.cuda.init()
        torch.empty(1, device=dev)  # the context, before the base is taken
    info = json.load(open(os.path.join(a.work, a.set + ".json")))
    name, opts = parse_row(a.row)
    r = {"mode": "ddp" if a._world > 1 else a.mode, "row": a.row, "batch": a.batch, "cpus": a.cpus, "device": str(dev),
         "device_name": torch.cuda.get_device_name(dev) if cuda else "cpu", "images_in_list": info["images"]}
    if a.mode != "loaders":
        r["arch"] = a.arch
    if a._world > 1:
        r["world"], r["ddp"] = a._world, ddp_wrapped(a)
    sampler = a._sampler = Sampler(dev if cuda else None)
    sampler.start()
    try:
        if name == "nvimgcodec":
            if a.mode != "loaders":
                raise Skip("nvImageCodec is a decoder, measured loader-only")
            r.update(nvimgcodec_row(a, info, opts, dev))
        elif name not in LOADERS:
            raise ValueError(f"no row named {name!r} (rows: {', '.join(sorted(LOADERS))}, nvimgcodec)")
        elif a.mode == "loaders":
            if name == "synthetic":
                raise Skip("the synthetic ceiling is a training row")
            r.update(loader_only(a, name, opts, info, dev))
        else:
            r.update(train(a, name, opts, info, dev))
    except Skip as e:
        r["skipped"] = str(e)
    except BaseException:
        r["error"] = traceback.format_exc()[-3000:]
    r.update(sampler.report())
    if getattr(a, "_sluice", None) is not None:
        try:
            r.update(sluice_report(a._sluice))
        except Exception:
            r["stats_error"] = traceback.format_exc()[-600:]
        if opts.get("workers") == "auto" and not any(k.startswith("workers_active") for k in r):
            # a library without the tuner takes workers="auto" as its default count
            r["tuner"] = "n/a: no workers_active in stats (no tuner in this library)"
    if getattr(a, "_dali_threads", None):
        r["threads"] = a._dali_threads
    if a._world > 1:
        r = gather_ranks(r)
    if a._rank == 0:
        emit(r)
    if getattr(a, "_sluice", None) is not None:
        a._sluice.close()
    if a._world > 1:
        import torch.distributed as dist

        dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)  # DataLoader workers and DALI's threads: no slow teardown in the measured row's process


def ddp_wrapped(a):
    """Whether this rank trains inside DistributedDataParallel: under torchrun, unless PEERS_DDP=0
    (each rank alone: the docstring's env.PEERS_DDP)."""
    return a._world > 1 and os.environ.get("PEERS_DDP", "1") != "0"


def gather_ranks(r):
    """Rank 0's line with the node's figures: img/s of all ranks (global images / slowest rank's
    time), PSS summed over the ranks' trees, device memory per rank at most."""
    import torch.distributed as dist

    rows = [None] * dist.get_world_size()
    dist.all_gather_object(rows, r)
    out = dict(rows[0])
    if all("seconds" in x for x in rows):
        dt = max(x["seconds"] for x in rows)
        out["images_per_s"] = round(sum(x["images"] for x in rows) / dt, 1)
        out["seconds"] = dt
        out["images"] = sum(x["images"] for x in rows)
        out["rank_images_per_s"] = [x.get("images_per_s") for x in rows]
    steps = [x.pop("_step_ms", None) for x in rows]
    out.pop("_step_ms", None)
    if all(steps):
        out["rank_step_ms"] = [x.get("step_ms") for x in rows]
        out["rank_data_wait_fraction"] = [x.get("data_wait_fraction") for x in rows]
        # the ranks' steps in lockstep, from each rank's own step times (lockstep_mean_ms): with the
        # ranks apart (env.PEERS_DDP=0) what DDP's lockstep alone would cost them
        est = lockstep_mean_ms(steps)
        out["lockstep_step_ms"] = round(est, 2)
        out["lockstep_images_per_s"] = round(len(rows) * out["batch"] / (est / 1e3), 1) if est else None
    for k in ("tree_pss_base_mb", "tree_pss_peak_mb", "loader_pss_mb"):
        out[k] = round(sum(x.get(k, 0) for x in rows), 1)
    if "device_used_above_base_mb" in out:
        out["device_used_above_base_mb"] = max(x.get("device_used_above_base_mb", 0) for x in rows)
    if "data_wait_fraction" in out:
        out["data_wait_fraction"] = round(max(x.get("data_wait_fraction", 0) for x in rows), 3)
    errs = [x.get("error") for x in rows if x.get("error")]
    if errs and "error" not in out:
        out["error"] = errs[0]
    return out


def _sync(dev):
    import torch

    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    if int(os.environ.get("WORLD_SIZE", 1)) > 1:
        import torch.distributed as dist

        dist.barrier()


class ThreadWatch:
    """Over a row's timed part: the cores each thread group of this process kept busy ("main" the
    loop's, "sl-gpu" the GPU engine's, "sl-worker" the CPU workers') and how long each waited
    runnable ("runq:NAME", seconds a second), and the mean clock of the CPUs it may run on
    (bench/proc_threads.py). Where the engine's thread is on a CPU for most of its hardware call,
    the call is CPU-bound and the clock (lower with more cores busy on the host) sets its speed."""

    def __init__(self):
        self.c0, self.clock = thread_cpu(), ClockSampler().start()

    def stop(self, dt):
        mhz = self.clock.stop()
        return {"cores": cores_used(self.c0, thread_cpu(), dt), "cpu_mhz": mhz}


def loader_only(a, name, opts, info, dev):
    import torch

    it = LOADERS[name](a, info, opts, dev)
    for _ in range(a.warmup):
        x, y = next(it)
        x = normalize(x, dev)
    _sync(dev)
    watch = ThreadWatch()
    t0 = time.perf_counter()
    for _ in range(a.batches):
        x, y = next(it)
        x = normalize(x, dev)
        assert x.shape == (a.batch, 3, a.size, a.size), x.shape
    _sync(dev)
    dt = time.perf_counter() - t0
    n = a.batches * a.batch
    return {"images_per_s": round(n / dt, 1), "images": n, "seconds": round(dt, 3), "out_dtype": str(x.dtype),
            **watch.stop(dt)}


def make_model(arch):
    """torchvision's model of that name; "tiny": three convolutions, for a check of the loop where
    there is no torchvision (this harness's own test on a machine without a GPU)."""
    import torch
    from torch import nn

    if arch == "tiny":
        return nn.Sequential(nn.Conv2d(3, 16, 3, stride=4), nn.ReLU(), nn.Conv2d(16, 32, 3, stride=4), nn.ReLU(),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 1000))
    try:
        import torchvision
    except ImportError as e:
        raise Skip(f"torchvision (the models): {e}")
    return getattr(torchvision.models, arch)(num_classes=1000)


def _timed_steps(a, name, opts, info, dev, fit):
    """train's measured part: the base, the warm-up, the timed steps."""
    # The model's own memory goes into the base: a few steps on one synthetic batch load the
    # kernels CUDA, cuDNN and cuBLAS bring in lazily (hundreds of MB of host memory: the synthetic
    # row measured 629-693 MB above a base taken before any step) and make the optimizer's state,
    # so that the row's PSS above the base is its loader's.
    xs, ys = next(synthetic_batches(a, info, opts, dev))
    for _ in range(3):
        fit(xs, ys)
    _sync(dev)
    # PEERS_FEED=synthetic: the loader runs and its batches are taken, but the model trains on the
    # synthetic batch: a step's cost of the loader's work beside the model, apart from its batch's
    synthetic_feed = os.environ.get("PEERS_FEED") == "synthetic"
    if not synthetic_feed:
        del xs, ys
    a._sampler.rebase()
    it = LOADERS[name](a, info, opts, dev)
    wait = [0.0]

    def step():
        t = time.perf_counter()
        x, y = next(it)
        wait[0] += time.perf_counter() - t
        if synthetic_feed:
            x, y = xs, ys
        fit(x, y)

    for _ in range(a.warmup):
        step()
    _sync(dev)
    wait[0] = 0.0
    watch, clock = ThreadWatch(), StepClock(dev)
    t0 = time.perf_counter()
    for _ in range(a.steps):
        clock.mark()
        step()
    clock.mark()
    _sync(dev)
    dt = time.perf_counter() - t0
    n = a.steps * a.batch
    r = {"images_per_s": round(n / dt, 1), "images": n, "seconds": round(dt, 3), "steps": a.steps,
         "data_wait_fraction": round(wait[0] / dt, 3), **watch.stop(dt)}
    steps = clock.ms()
    r["step_ms"] = step_summary(steps)
    r["slow_steps"] = slow_steps(steps, a.warmup)
    if synthetic_feed:
        r["feed"] = "synthetic"
    if a._world > 1:
        r["_step_ms"] = steps  # for gather_ranks, which takes it out of the line
    return r


class StepClock:
    """Each timed step's period as the device saw it: on CUDA an event recorded on the current
    stream at each step's start (the interval holds the step's kernels, the stream's idle while the
    loop waited for data and, under DDP, NCCL's wait for the other ranks); elsewhere the host's
    clock. Read after the loop's last synchronisation."""

    def __init__(self, dev):
        import torch

        self.cuda, self.marks = dev.type == "cuda", []
        self._event = (lambda: torch.cuda.Event(enable_timing=True)) if self.cuda else None

    def mark(self):
        if self.cuda:
            e = self._event()
            e.record()
            self.marks.append(e)
        else:
            self.marks.append(time.perf_counter())

    def ms(self):
        m = self.marks
        if self.cuda:
            return [m[i].elapsed_time(m[i + 1]) for i in range(len(m) - 1)]
        return [(m[i + 1] - m[i]) * 1e3 for i in range(len(m) - 1)]


def step_summary(ms):
    if not ms:
        return {}
    v = sorted(ms)
    q = lambda p: v[min(len(v) - 1, int(p * len(v)))]
    return {"mean": round(sum(v) / len(v), 2), "p50": round(q(0.5), 2), "p90": round(q(0.9), 2),
            "p99": round(q(0.99), 2), "max": round(v[-1], 2)}


def slow_steps(ms, first):
    """The steps over 1.2x the median, as [index counted from the loader's first batch (the warm-up's
    included), ms], at most 40: where the tail falls against the epochs (each epoch is
    images_in_list // batch batches: every loader here drops the last partial one)."""
    if not ms:
        return []
    limit = 1.2 * sorted(ms)[len(ms) // 2]
    return [[first + i, round(v, 1)] for i, v in enumerate(ms) if v > limit][:40]


def lockstep_mean_ms(per_rank):
    """The mean step of ranks in lockstep, each step as long as the slowest rank's, if each rank's
    step times were drawn apart from its own measured ones: E[max] over the ranks' empirical
    distributions (P(max <= t) is the product of each rank's share of steps <= t). Beside a DDP
    row's measured steps this tells the lockstep's cost from what DDP adds inside a step."""
    import bisect

    ranks = [sorted(x) for x in per_rank if x]
    if not ranks:
        return None
    prev, mean = 0.0, 0.0
    for t in sorted(set(v for r in ranks for v in r)):
        p = 1.0
        for r in ranks:
            p *= bisect.bisect_right(r, t) / len(r)
        mean += t * (p - prev)
        prev = p
    return mean


def train(a, name, opts, info, dev):
    import torch

    torch.manual_seed(SEED)
    torch.backends.cudnn.benchmark = True
    model = make_model(a.arch).to(dev).to(memory_format=torch.channels_last)
    if ddp_wrapped(a):
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[dev.index] if dev.type == "cuda" else None)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)

    def fit(x, y):
        x = normalize(x, dev)
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    # PEERS_STREAM=side: the loop's kernels on a stream of their own, not the legacy default stream
    # (which orders itself against every blocking stream of the context); the loaders' batches
    # arrive on whichever stream is current (sluice waits there on its copy's event)
    side = torch.cuda.Stream(dev) if dev.type == "cuda" and os.environ.get("PEERS_STREAM") == "side" else None
    with torch.cuda.stream(side) if side is not None else contextlib.nullcontext():
        r = _timed_steps(a, name, opts, info, dev, fit)
    r["stream"] = "side" if side is not None else "default"
    if dev.type == "cuda":
        r["torch_max_allocated_mb"] = round(torch.cuda.max_memory_allocated(dev) / 2**20, 1)
    return r


# ---- the driver -------------------------------------------------------------------------------
def default_rows(a):
    sweep = [f"sluice:decode={d}:workers={w}" for d in a.sweep_decodes.split() for w in a.sweep_workers.split()]
    tuned = [f"sluice:decode={d}:workers=auto" for d in a.sweep_decodes.split()]
    w = a.peer_workers
    peers = [f"tvio:workers={w}", f"dali:threads={w}"]
    if a.mode == "loaders":
        return ["sluice"] + tuned + sweep + peers + [f"tvcuda:workers={w}", "nvimgcodec:roi=0", "nvimgcodec:roi=1"]
    if a.mode == "train":
        return ["synthetic", "sluice"] + tuned + sweep + peers + [f"tvcuda:workers={w}"]
    return ["synthetic", "sluice"] + tuned + sweep + peers  # ddp


def child_cmd(a, row, arch):
    args = [HERE, a.data, "row", "--mode", "train" if a.mode == "ddp" else a.mode, "--row", row, "--arch", arch,
            "--work", a.work, "--set", a.set, "--batch", str(a.batch), "--size", str(a.size),
            "--warmup", str(a.warmup), "--batches", str(a.batches), "--steps", str(a.steps),
            "--budget", a.budget, "--gpu-budget", a.gpu_budget, "--device", a.device,
            "--pin", str(a.pin)]
    if a.mode == "ddp":
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(a.nproc)] + args
    return [sys.executable] + args


def run_child(a, row, arch):
    """The row's JSON line from a process group of its own, killed at --row-timeout."""
    t0 = time.perf_counter()
    p = subprocess.Popen(child_cmd(a, row, arch), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True, env=row_env(row))
    try:
        out, err = p.communicate(timeout=a.row_timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        timed_out = True
    try:  # what the row's process left behind (DataLoader workers, torchrun's ranks)
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    line = next((l for l in reversed(out.splitlines()) if l.startswith("{")), None)
    r = json.loads(line) if line else {"row": row, "mode": a.mode}
    if timed_out:
        r["error"] = f"timed out after {a.row_timeout} s; stderr: " + err[-1500:]
    elif line is None:
        r["error"] = f"exit {p.returncode}, no result line; stderr: " + err[-2500:]
    r["row_wall_s"] = round(time.perf_counter() - t0, 1)
    return r


def table(a):
    info = write_list(a.data, a.work, a.set)
    emit({"list": info, "host_cpus": os.cpu_count(), "mode": a.mode})
    rows = a.rows.split(",") if a.rows else default_rows(a)
    archs = a.archs.split(",") if a.mode != "loaders" else ["-"]
    results, start = [], time.perf_counter()
    for rnd in range(1, a.rounds + 1):
        for arch in archs:
            order = rows if rnd % 2 else list(reversed(rows))  # alternate: no row always first or last
            for row in order:
                if time.perf_counter() - start > a.deadline:
                    r = {"row": row, "mode": a.mode, "skipped": f"past --deadline {a.deadline} s"}
                else:
                    r = run_child(a, row, arch)
                r["round"] = rnd
                if a.mode != "loaders":
                    r["arch"] = arch
                results.append(r)
                emit(r)
                if a.jsonl:
                    with open(a.jsonl, "a") as f:
                        f.write(json.dumps(r) + "\n")
    print(summary(results, a), flush=True)


def med(v):
    return statistics.median(v) if v else None


def summary(results, a):
    """The table: per row the median img/s over the rounds (each round's in brackets), ratios to the
    peers, the loop's wait, the median step (ms, step50), memory; per decode mode the tuner beside
    the sweep's best static setting."""
    lines = [f"== {a.mode}: {len(results)} runs, batch {a.batch}, list {a.set}; median of rounds [each round]"]
    groups = {}
    for r in results:
        groups.setdefault((r.get("arch", "-"), r["row"]), []).append(r)

    def rate(arch, row):
        v = [x["images_per_s"] for x in groups.get((arch, row), []) if isinstance(x.get("images_per_s"), (int, float))]
        return med(v)

    def apart(row):  # the ranks trained apart: measured against the synthetic rows trained apart too
        return ("env.PEERS_DDP", "0") in row_items(row)

    for arch in sorted(set(k[0] for k in groups)):
        synth = rate(arch, "synthetic")
        synth_apart = rate(arch, "synthetic:env.PEERS_DDP=0") or synth
        tv = rate(arch, f"tvio:workers={a.peer_workers}")
        dali = rate(arch, f"dali:threads={a.peer_workers}")
        if arch != "-":
            lines.append(f"-- {arch}" + (f", {a.nproc} GPUs DDP (img/s per node)" if a.mode == "ddp" else ""))
        hdr = f"{'row':<34} {'img/s':>9} {'rounds':<22} {'%synth':>7} {'x tvio':>7} {'x DALI':>7} " \
              f"{'wait':>5} {'step50':>6} {'PSS MB':>7} {'dev MB':>7}  note"
        lines.append(hdr)
        best = {}
        for (ar, row), rs in groups.items():
            if ar != arch:
                continue
            vals = [x.get("images_per_s") for x in rs]
            m = rate(arch, row)
            note = ""
            for x in rs:
                if "skipped" in x:
                    note = "skipped: " + x["skipped"][:80]
                elif "error" in x:
                    note = "error: " + x["error"].strip().splitlines()[-1][:80]
            if m is not None and row.startswith("sluice"):
                s = rs[-1]
                cores = s.get("cores") or {}
                note = (note + " " if note else "") + f"decode={s.get('decode')} gpu_share={s.get('gpu_share')} " \
                    f"sl-gpu={cores.get('sl-gpu')} cores mhz={s.get('cpu_mhz')} " \
                    f"workers={s.get('workers')}" + "".join(f" {k}={v}" for k, v in s.items() if k.startswith(
                        ("workers_active", "tuner")))
                name, opts = parse_row(row)
                if opts.get("workers", "auto") != "auto":
                    d = opts.get("decode")
                    if d not in best or m > best[d][1]:
                        best[d] = (row, m)
            lock = med([x["lockstep_images_per_s"] for x in rs if x.get("lockstep_images_per_s")])
            if lock and apart(row):  # the ranks apart: what their lockstep would make
                note = (note + " " if note else "") + f"lockstep={lock:.0f}"
            pss = med([x["loader_pss_mb"] for x in rs if "loader_pss_mb" in x and "images_per_s" in x])
            devm = med([x["device_used_above_base_mb"] for x in rs if "device_used_above_base_mb" in x and
                        "images_per_s" in x])
            wait = med([x["data_wait_fraction"] for x in rs if "data_wait_fraction" in x])
            step50 = med([x["step_ms"]["p50"] for x in rs if x.get("step_ms")])  # the median step, ms (rank 0's)
            f = lambda v, fmt, w: (fmt % v) if v is not None else "-".rjust(w)
            ceil = synth_apart if apart(row) else synth
            lines.append(f"{row:<34} {f(m, '%9.0f', 9)} {'[' + ' '.join('%.0f' % v if v else '-' for v in vals) + ']':<22} "
                         f"{f(m / ceil * 100 if m and ceil else None, '%6.1f%%', 7)} "
                         f"{f(m / tv if m and tv else None, '%6.2fx', 7)} {f(m / dali if m and dali else None, '%6.2fx', 7)} "
                         f"{f(wait, '%5.2f', 5)} {f(step50, '%6.2f', 6)} {f(pss, '%7.0f', 7)} "
                         f"{f(devm, '%7.0f', 7)}  {note}")
        for d, (row, m) in sorted(best.items()):
            auto = f"sluice:decode={d}:workers=auto"
            am = rate(arch, auto)
            if any(str(x.get("tuner", "")).startswith("n/a") for x in groups.get((arch, auto), [])):
                am = None
            lines.append(f"   decode={d}: tuner (workers=auto) {('%.0f' % am) if am else 'n/a'} img/s beside the "
                         f"sweep's best static {row} {m:.0f} img/s" +
                         (f" ({am / m * 100:.0f} %)" if am else ""))
        sl = [(rate(arch, row), row) for (ar, row) in groups
              if ar == arch and row.startswith("sluice") and not apart(row)]
        sl = [x for x in sl if x[0]]
        if sl:  # the issue's targets, for the best sluice row and the default
            for m, row in [max(sl)] + [(rate(arch, "sluice"), "sluice")] * (rate(arch, "sluice") is not None):
                parts = []
                if tv:
                    parts.append(f"{m / tv:.2f}x the torchvision.io DataLoader" + (" (issue: >= 4x)" if arch == "-" else ""))
                if dali:
                    parts.append(f"{m / dali:.2f}x DALI" + (" (issue: >= 1.2x)" if arch == "-" else " (issue: ahead)"))
                if synth:
                    parts.append(f"{m / synth * 100:.1f} % of synthetic (issue: >= 95 % ResNet-18 on one GPU, "
                                 ">= 98 % ResNet-50, >= 90 % DDP)")
                lines.append(f"   {row} {m:.0f} img/s: " + ("; ".join(parts) or "no peer measured"))
        tvp = med([x["loader_pss_mb"] for x in groups.get((arch, f"tvio:workers={a.peer_workers}"), [])
                   if "loader_pss_mb" in x and "images_per_s" in x])
        sp = med([x["loader_pss_mb"] for x in groups.get((arch, "sluice"), []) if "loader_pss_mb" in x and
                  "images_per_s" in x])
        if tvp and sp:
            lines.append(f"   loader PSS: sluice default {sp:.0f} MB = {sp / tvp:.3f} of the DataLoader's {tvp:.0f} MB"
                         " (issue: <= 1/8)")
    return "\n".join(lines)


def main():
    env = os.environ.get
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("data")
    p.add_argument("what", choices=["table", "row", "list"])
    p.add_argument("--mode", choices=["loaders", "train", "ddp"], default=env("PEERS_MODE", "loaders"))
    p.add_argument("--rows", default=env("PEERS_ROWS", ""), help="comma-separated SPECs (default: the whole set)")
    p.add_argument("--row", help="row: the SPEC to run")
    p.add_argument("--rounds", type=int, default=int(env("PEERS_ROUNDS", 2)))
    p.add_argument("--archs", default=env("PEERS_ARCHS", "resnet18"))
    p.add_argument("--arch", default="resnet18")
    p.add_argument("--nproc", type=int, default=int(env("PEERS_NPROC", 2)), help="ddp: GPUs (torchrun ranks)")
    p.add_argument("--pin", type=int, default=int(env("PEERS_PIN", 1)), help="ddp: each rank on its share of CPUs")
    p.add_argument("--sweep-workers", default=env("PEERS_SWEEP_WORKERS", "4 8 12 16"))
    p.add_argument("--sweep-decodes", default=env("PEERS_SWEEP_DECODES", "cpu gpu auto"))
    p.add_argument("--peer-workers", default=env("PEERS_PEER_WORKERS", ""),
                   help="the peers' workers/threads (default: the CPUs, in ddp each rank's share)")
    p.add_argument("--batch", type=int, default=int(env("PEERS_BATCH", 256)))
    p.add_argument("--size", type=int, default=int(env("PEERS_SIZE", 224)))
    p.add_argument("--warmup", type=int, default=int(env("PEERS_WARMUP", 8)))
    p.add_argument("--batches", type=int, default=int(env("PEERS_BATCHES", 30)), help="loader-only: timed batches")
    p.add_argument("--steps", type=int, default=int(env("PEERS_STEPS", 30)), help="train: timed steps")
    p.add_argument("--budget", default=env("PEERS_BUDGET", "4G"))
    p.add_argument("--gpu-budget", default=env("PEERS_GPU_BUDGET", "512M"))
    p.add_argument("--device", default=env("PEERS_DEVICE", "cuda"), choices=["cuda", "cpu"])
    p.add_argument("--set", default=env("PEERS_SET", "clean"), choices=["clean", "all"])
    p.add_argument("--work", default=env("PEERS_WORK", "/tmp/sluice-peers"))
    p.add_argument("--row-timeout", type=int, default=int(env("PEERS_ROW_TIMEOUT", 120)))
    p.add_argument("--deadline", type=int, default=int(env("PEERS_DEADLINE", 480)),
                   help="table: no row starts after this many seconds (the summary still prints)")
    p.add_argument("--jsonl", default=env("PEERS_JSONL", ""))
    a = p.parse_args()
    if not a.peer_workers:
        a.peer_workers = str(max(1, len(os.sched_getaffinity(0)) // (a.nproc if a.mode == "ddp" else 1)))
    if a.what == "list":
        emit(write_list(a.data, a.work, a.set))
    elif a.what == "table":
        table(a)
    else:
        if not a.row:
            p.error("row needs --row SPEC")
        run_row(a)


if __name__ == "__main__":
    main()

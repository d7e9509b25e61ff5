#!/usr/bin/env python3
"""Video clips: sluice against a PyTorch DataLoader with each usual decoder.

Every pipeline yields uint8 clips [B, T, 3, S, S] (T frames every `stride`,
a random temporal offset, one RandomResizedCrop box + flip for every frame
of a clip) and int64 labels, from a class-folder video set
(bench/make_video_set.sh). Measured side by side in one run: steady-state
clips/s after a warm-up, and the peak PSS of the whole process tree
(main process + workers, /proc/PID/smaps_rollup, sampled every 0.2 s), per
epoch so that growth over epochs shows, and loader_pss_mb: the last peak
less the tree's PSS before the pipeline (torch imported), what the
pipeline itself holds. Over the timed batches, the tree's CPU time
(/proc/PID/stat of every process of the tree): cpu_ms_per_clip, and
cpu_util, the share of the machine's cores it kept busy (a loader below
1.0 waits for something other than the CPU). GPU pipelines also report
device_peak_mb: the GPU's used memory (nvidia-smi, sampled with the PSS)
above what it was before the pipeline. One JSON line per pipeline.
The warm-up and the timed batches lie inside one epoch: a set smaller than
that is listed several times (--repeat; sluice then reads a .jsonl table
of the same rows), since a DataLoader's 16 workers x prefetch 2 have 32
batches in flight and timing past an epoch's end would time those alone.
Give the warm-up at least one batch a worker (--warmup 16). torch is
imported first in every case (a training process has it), so with one
pipeline a process (gpu_host.sh video) every tree starts from one base.

Peers, written the way their users write them (a Dataset whose
__getitem__ opens the file, decodes the clip, closes it; DataLoader with
16 workers, pin_memory, persistent workers):
  pyav        av.open + container.seek to the start + decode, frame.to_ndarray(rgb24)
  tvio        torchvision.io.read_video(start_pts, end_pts, pts_unit="sec") (torchvision < 0.26)
  torchcodec  torchcodec.decoders.VideoDecoder(path).get_frames_at(indices)
  opencv      cv2.VideoCapture + CAP_PROP_POS_FRAMES + read(), cvtColor, release
  torchcodec-cuda  torchcodec's CUDA decoder (VideoDecoder(path, device="cuda")) in the main
              process, as torchcodec's GPU examples run it (no DataLoader workers: CUDA does
              not survive their fork), crop and flip on the GPU with the same transforms
  sluice      sluice.Loader(path, fields={"clip": {"kind": "video", ...}, "label": {...}})
  sluice-gpu  the same with decode="gpu": NVDEC and the GPU's kernels, clips in device memory
  sluice-decode  sluice.decode_video (one clip: decode + crop + resize) in the same DataLoader:
              the decoder alone, without sluice's pipeline
The crop and resize of the peers: torchvision.transforms.v2 on the [T, C, H, W]
tensor when torchvision is there (RandomResizedCrop(S, antialias=True) and
RandomHorizontalFlip: one draw per call, so one box for the whole clip),
else the same in plain torch. A peer whose module is missing is skipped:
its line says so, and why.

    video_peers.py DATA --peers pyav,tvio,torchcodec,opencv,sluice --size 112 --frames 16 --stride 2 \\
        --workers 16 --batch 16 --batches 50 --epochs 2
"""
import argparse
import json
import math
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proc_tree import pids as tree_pids, pss_kb  # noqa: E402

VIDEO_EXT = (".mp4", ".avi", ".mkv", ".webm", ".mov")


def tree_pss_bytes(root_pid):
    """Sum of Pss over root_pid and its descendants (as /work/shared/bench/peer_torch.py)."""
    return pss_kb(tree_pids(root_pid)) * 1024


def tree_cpu_s(root_pid):
    """CPU seconds (user + system) the processes of the tree have used so far."""
    tick, total = os.sysconf("SC_CLK_TCK"), 0
    for pid in tree_pids(root_pid):
        try:
            with open("/proc/%d/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            pass
    return total / tick


def gpu_used_mb():
    """The GPU's used memory (MiB) as nvidia-smi reports it (device 0), or None."""
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                             capture_output=True, text=True, timeout=5).stdout
        return float(out.split()[0])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None


class PeakSampler(threading.Thread):
    def __init__(self, pid, period=0.2, gpu=False):
        super().__init__(daemon=True)
        self.pid, self.period, self.peak, self.stop = pid, period, 0, False
        self.gpu, self.gpu_base, self.gpu_peak = gpu, gpu_used_mb() if gpu else None, None

    def run(self):
        while not self.stop:
            self.peak = max(self.peak, tree_pss_bytes(self.pid))
            if self.gpu:
                g = gpu_used_mb()
                if g is not None:
                    self.gpu_peak = g if self.gpu_peak is None else max(self.gpu_peak, g)
            time.sleep(self.period)


def list_videos(root):
    """Class folders of videos, labels by sorted class name (ImageFolder's rule)."""
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    items = []
    for label, c in enumerate(classes):
        for dirpath, _, files in sorted(os.walk(os.path.join(root, c))):
            items += [(os.path.join(dirpath, f), label) for f in sorted(files) if f.lower().endswith(VIDEO_EXT)]
    return items


# ---- the crop every peer applies: one box + flip per clip ----------------------
def make_transform(size):
    try:
        from torchvision.transforms import v2

        return v2.Compose([v2.RandomResizedCrop(size, antialias=True), v2.RandomHorizontalFlip()])
    except ImportError:
        return lambda clip: rrc_torch(clip, size)


def rrc_torch(clip, size):
    """RandomResizedCrop(size, scale 0.08-1, ratio 3/4-4/3) + flip on [T, C, H, W] uint8."""
    import torch
    import torch.nn.functional as F

    t, c, h, w = clip.shape
    area = h * w
    for _ in range(10):
        target = area * random.uniform(0.08, 1.0)
        ar = math.exp(random.uniform(math.log(3 / 4), math.log(4 / 3)))
        cw, ch = int(round(math.sqrt(target * ar))), int(round(math.sqrt(target / ar)))
        if 0 < cw <= w and 0 < ch <= h:
            y, x = random.randint(0, h - ch), random.randint(0, w - cw)
            break
    else:
        cw, ch, x, y = w, h, 0, 0
    out = F.interpolate(clip[:, :, y:y + ch, x:x + cw].float(), size=(size, size), mode="bilinear",
                        antialias=True, align_corners=False)
    out = out.round_().clamp_(0, 255).to(torch.uint8)
    return out.flip(-1) if random.random() < 0.5 else out


def clip_start(n_frames, span):
    return random.randint(0, max(n_frames - span, 0))


def fit(frames, want):
    """Pad a short clip by repeating its last frame (sluice's default)."""
    return frames + [frames[-1]] * (want - len(frames)) if frames else frames


# ---- the peers' datasets -------------------------------------------------------------
class ClipDataset:
    def __init__(self, items, frames, stride, size):
        self.items, self.T, self.s, self.tf = items, frames, stride, make_transform(size)

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        import numpy as np
        import torch

        path, label = self.items[i]
        frames = self.decode(path)  # list of HWC uint8 numpy arrays
        clip = torch.from_numpy(np.stack(frames)).permute(0, 3, 1, 2)
        return self.tf(clip), label


class PyAVClips(ClipDataset):
    def decode(self, path):
        import av

        span = (self.T - 1) * self.s + 1
        with av.open(path) as container:
            stream = container.streams.video[0]
            n = stream.frames or int(float(stream.duration * stream.time_base) * float(stream.average_rate))
            first = clip_start(n, span)
            rate = float(stream.average_rate)
            start_pts = int(first / rate / stream.time_base)
            container.seek(start_pts, stream=stream, backward=True, any_frame=False)
            out = []
            for frame in container.decode(stream):
                idx = int(round(float(frame.pts * stream.time_base) * rate))
                if idx < first or (idx - first) % self.s:
                    continue
                out.append(frame.to_ndarray(format="rgb24"))
                if len(out) == self.T:
                    break
        return fit(out, self.T)


class TvioClips(ClipDataset):
    def decode(self, path):
        import torchvision.io as io

        pts, fps = io.read_video_timestamps(path, pts_unit="sec")
        span = (self.T - 1) * self.s + 1
        first = clip_start(len(pts), span)
        last = min(first + span, len(pts)) - 1
        video, _, _ = io.read_video(path, start_pts=pts[first], end_pts=pts[last], pts_unit="sec",
                                    output_format="THWC")
        return fit([f.numpy() for f in video[::self.s][:self.T]], self.T)


class TorchcodecClips(ClipDataset):
    def decode(self, path):
        from torchcodec.decoders import VideoDecoder

        dec = VideoDecoder(path, dimension_order="NHWC")
        n = dec.metadata.num_frames
        first = clip_start(n, (self.T - 1) * self.s + 1)
        idx = [min(first + k * self.s, n - 1) for k in range(self.T)]
        return [f.numpy() for f in dec.get_frames_at(indices=idx).data]


def torchcodec_cuda_batches(items, a):
    """torchcodec's CUDA decoder, clip after clip in this process, the crop and
    flip on the GPU: batches [B, T, 3, S, S] uint8 on the device."""
    import torch
    from torchcodec.decoders import VideoDecoder

    tf = make_transform(a.size)
    order = list(range(len(items)))
    random.shuffle(order)
    for start in range(0, len(order) - a.batch + 1, a.batch):
        clips, labels = [], []
        for i in order[start:start + a.batch]:
            path, label = items[i]
            dec = VideoDecoder(path, device="cuda")
            n = dec.metadata.num_frames
            first = clip_start(n, (a.frames - 1) * a.stride + 1)
            idx = [min(first + k * a.stride, n - 1) for k in range(a.frames)]
            clips.append(tf(dec.get_frames_at(indices=idx).data))  # [T, C, H, W] on the GPU
            labels.append(label)
        yield torch.stack(clips), torch.tensor(labels)


class OpenCVClips(ClipDataset):
    def decode(self, path):
        import cv2

        cap = cv2.VideoCapture(path)
        try:
            n = int(cap.get(cv2.CAP_PROP_FRAME_COUNT))
            first = clip_start(n, (self.T - 1) * self.s + 1)
            cap.set(cv2.CAP_PROP_POS_FRAMES, first)
            out, k = [], 0
            while len(out) < self.T:
                ok, bgr = cap.read()
                if not ok:
                    break
                if k % self.s == 0:
                    out.append(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))
                k += 1
        finally:
            cap.release()
        return fit(out, self.T)


class SluiceDecodeClips(ClipDataset):
    """sluice's clip decoder (sluice.decode_video: decode, crop and resize in
    one call) inside the same DataLoader: the decoder compared alone, for
    builds whose Loader does not take video fields yet. Not sluice's
    pipeline (no budget, no shared workers)."""

    def __init__(self, items, frames, stride, size):
        super().__init__(items, frames, stride, size)
        self.size, self.seed = size, random.getrandbits(32)

    def __getitem__(self, i):
        import sluice
        import torch

        path, label = self.items[i]
        clip, _ = sluice.decode_video(path, frames=self.T, stride=self.s, size=self.size, preset="train",
                                      seed=self.seed, index=i, epoch=random.getrandbits(32))
        return torch.from_numpy(clip), label


PEERS = {"pyav": ("av", PyAVClips), "tvio": ("torchvision.io", TvioClips),
         "torchcodec": ("torchcodec", TorchcodecClips), "opencv": ("cv2", OpenCVClips),
         "sluice-decode": ("sluice", SluiceDecodeClips)}


def torch_loader(peer, items, a):
    import torch

    torch.set_num_threads(1)
    ds = PEERS[peer][1](items, a.frames, a.stride, a.size)
    return torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.workers,
                                       pin_memory=True, prefetch_factor=a.prefetch if a.workers else None,
                                       persistent_workers=a.workers > 0, drop_last=True)


def sluice_loader(a, items, decode="cpu"):
    """sluice.Loader over the class folders, or, when the clip list is
    repeated, over a .jsonl table of the same (path, label) rows."""
    import sluice

    fields = {"clip": {"kind": "video", "frames": a.frames, "stride": a.stride, "size": a.size,
                       "preset": "train"},
              "label": {"kind": "label"}}
    source = a.data
    if a.repeat > 1:
        source = os.path.join(a.table_dir, "video_peers_%d.jsonl" % os.getpid())
        with open(source, "w") as f:
            for path, label in items:
                f.write(json.dumps({"clip": os.path.abspath(path), "label": label}) + "\n")
    gpu = {} if decode == "cpu" else {"decode": decode, "gpu_budget": a.gpu_budget}
    return sluice.Loader(source, batch_size=a.batch, budget=a.budget, workers=a.workers, fields=fields,
                         drop_last=True, **gpu)


def batches(loader, sluice_api):
    for b in loader:
        if sluice_api:
            yield b["clip"], b["label"]
        else:
            yield b


def run(name, loader, a, sluice_api=False, gpu=False, extra=None):
    """Time the batches of `loader` (an iterable per epoch, or a function of
    the epoch returning one); one JSON line."""
    sampler = PeakSampler(os.getpid(), gpu=gpu)
    sampler.start()
    per_epoch, rate, cpu_ms, util = [], None, None, None
    for epoch in range(a.epochs):
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(epoch)
        it = loader(epoch) if callable(loader) else batches(loader, sluice_api)
        n, t0 = 0, None
        for clip, label in it:
            assert tuple(clip.shape[1:]) == (a.frames, 3, a.size, a.size), clip.shape
            n += 1
            if n == a.warmup:
                t0, c0 = time.perf_counter(), tree_cpu_s(os.getpid())
            if n >= a.warmup + a.batches:
                break
        if t0 is not None and n > a.warmup:
            dt, dc = time.perf_counter() - t0, tree_cpu_s(os.getpid()) - c0
            r = (n - a.warmup) * a.batch / dt
            if rate is None or r > rate:
                rate, cpu_ms, util = r, 1000 * dc / ((n - a.warmup) * a.batch), dc / (dt * os.cpu_count())
        per_epoch.append(round(sampler.peak / 2**20, 1))
    sampler.stop = True
    sampler.join()
    out = {"loader": name, "clips_per_s": round(rate or 0, 2), "peak_tree_pss_mb": per_epoch[-1],
           "peak_pss_mb_by_epoch": per_epoch, "base_pss_mb": round(a.base_pss / 2**20, 1),
           "loader_pss_mb": round(per_epoch[-1] - a.base_pss / 2**20, 1),
           "cpu_ms_per_clip": round(cpu_ms, 1) if cpu_ms else None, "cpu_util": round(util, 3) if util else None,
           "frames": a.frames, "stride": a.stride, "size": a.size, "workers": a.workers, "batch": a.batch,
           "clips": a.clips, "repeat": a.repeat}
    if gpu and sampler.gpu_peak is not None and sampler.gpu_base is not None:
        out["device_peak_mb"] = round(sampler.gpu_peak - sampler.gpu_base, 1)
    out.update(extra or {})
    print(json.dumps(out), flush=True)


def skipped(name, why):
    """A pipeline that cannot run here: one JSON line saying why, in place of its result."""
    print(json.dumps({"loader": name, "skipped": why}), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data")
    ap.add_argument("--peers", default="pyav,tvio,torchcodec,opencv,sluice")
    ap.add_argument("--frames", type=int, default=16)
    ap.add_argument("--stride", type=int, default=2)
    ap.add_argument("--size", type=int, default=112)
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--prefetch", type=int, default=2)
    ap.add_argument("--batches", type=int, default=50, help="timed batches per epoch, after the warm-up")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--budget", default="2G", help="sluice's memory budget")
    ap.add_argument("--gpu-budget", default="2G", help="sluice-gpu's device memory (gpu_budget)")
    ap.add_argument("--repeat", type=int, default=0,
                    help="list each clip this many times (0: as often as an epoch of warm-up + batches needs)")
    ap.add_argument("--table-dir", default="/tmp", help="where the sluice table of a repeated list is written")
    a = ap.parse_args()
    # torch first, for every pipeline (sluice's too): a training process has
    # it, so each tree's PSS starts from the same base
    import torch  # noqa: F401

    # the process before any pipeline (torch imported): loader_pss_mb is the
    # peak above it, what the pipeline itself holds (workers included)
    a.base_pss = tree_pss_bytes(os.getpid())
    items = list_videos(a.data)
    if not items:
        sys.exit(f"video_peers.py: no videos in class folders under {a.data}")
    # An epoch must hold the warm-up and the timed batches: batches are counted
    # after the warm-up, within one epoch, so a shorter epoch would time the
    # prefetched batches alone. A small set is listed `repeat` times.
    if a.repeat == 0:
        a.repeat = max(1, -(-(a.warmup + a.batches) * a.batch // len(items)))
    a.clips, items = len(items), items * a.repeat
    for peer in a.peers.split(","):
        if peer in ("sluice", "sluice-gpu"):
            try:
                loader = sluice_loader(a, items, "gpu" if peer == "sluice-gpu" else "cpu")
            except ImportError:
                skipped(peer, "not importable (PYTHONPATH=python after make)")
                continue
            except TypeError as e:  # the schema pipeline (issue 10) is not wired in this build yet
                skipped(peer, f"this build's Loader takes no video fields ({e})")
                continue
            except (ValueError, RuntimeError) as e:  # refused at create (no video, no GPU, a budget too small)
                skipped(peer, str(e))
                continue
            with loader:
                st = loader.stats() if hasattr(loader, "stats") else {}
                run(peer, loader, a, sluice_api=True, gpu=peer == "sluice-gpu",
                    extra={k: st[k] for k in ("decode", "decode_reason") if k in st})
            continue
        if peer == "torchcodec-cuda":
            try:
                import torch
                from torchcodec.decoders import VideoDecoder  # noqa: F401

                if not torch.cuda.is_available():
                    raise RuntimeError("torch sees no CUDA device")
                torch.zeros(1, device="cuda")
            except Exception as e:  # a peer that cannot run here: its line says why
                skipped("torchcodec-cuda", f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}")
                continue
            workers, a.workers = a.workers, 0  # the main process decodes
            run("torchcodec-cuda", lambda epoch: torchcodec_cuda_batches(items, a), a, gpu=True)
            a.workers = workers
            continue
        module, _ = PEERS.get(peer, (None, None))
        if module is None:
            sys.exit(f"video_peers.py: unknown peer {peer} (one of {', '.join(PEERS)}, sluice)")
        try:
            __import__(module)
        except Exception as e:  # ImportError, or torchcodec's RuntimeError when no FFmpeg loads
            skipped(f"DataLoader+{peer}", f"{module} does not import ({type(e).__name__}: "
                    f"{str(e).splitlines()[0][:300] if str(e) else ''})")
            continue
        if peer == "tvio" and not hasattr(sys.modules[module], "read_video"):  # removed in torchvision 0.26
            import torchvision

            skipped("DataLoader+tvio", f"torchvision {torchvision.__version__} has no io.read_video (torchcodec replaces it)")
            continue
        run(f"DataLoader+{peer}", torch_loader(peer, items, a), a)


if __name__ == "__main__":
    main()

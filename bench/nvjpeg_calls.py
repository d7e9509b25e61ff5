#!/usr/bin/env python3
"""What nvJPEG's hardware backend does per image, by output format: the question before a kernel.

    nvjpeg_calls.py DATA [--images 256] [--formats rgbi,rgb,yuv,unchanged] [--apis batched,ex] [--repeats 5]
                         [--beside resnet18] [--priorities least,greatest]

Beside a model on one H100 the loader's GPU thread made about four CUDA runtime calls per image it
decoded (a launch of nvJPEG's `rgba2rgb`, a copy, an event, a wait on it: bench/README.md, "GPU
host, 2026-11-27, fifth session"), each taking the driver's lock the training thread's launches
need. Whether another output format drops them decides whether colour conversion should move into
sluice's resize kernels. This script asks libnvjpeg directly (ctypes, no sluice): one hardware
handle (NVJPEG_BACKEND_HARDWARE), the first --images JPEGs under DATA that the hardware takes
(nvjpegDecodeBatchedSupported), decoded into torch device buffers on a stream of its own, either
whole (`nvjpegDecodeBatched`) or, as sluice's engine calls it, with a region of interest per image
(`nvjpegDecodeBatchedEx`, the centre half of each side); --repeats timed calls per format and API
after two warm-up calls, then as many under torch.profiler. One JSON line per format and API:
images/s of the call alone, the CUDA API calls and the kernels per image (CUPTI: every thread of
this process, and only nvJPEG calls here), GPU ms per image. Needs a CUDA torch and libnvjpeg (the GPU host has both); not part of any suite.

--beside ARCH runs that model's training (bf16 autocast, channels_last, batch 256, synthetic data, on
the default stream, one step queued ahead at most, as a loop fed by a loader runs it) in a thread for
the whole run, and each line gives the model's images/s over the timed calls beside the decode's,
and the model alone before (no profiler then: it would count the model's calls too).
--priorities: the decode stream's, least (the CUDA default, sluice's engine) and/or greatest.
"""
import argparse
import ctypes
import faulthandler
import json
import os
import sys
import threading
import time

import torch
import torch.profiler

FORMATS = {"unchanged": 0, "yuv": 1, "y": 2, "rgb": 3, "bgr": 4, "rgbi": 5, "bgri": 6}
BACKEND_HARDWARE = 3


class Image(ctypes.Structure):  # nvjpegImage_t
    _fields_ = [("channel", ctypes.c_void_p * 4), ("pitch", ctypes.c_size_t * 4)]


def load_nvjpeg():
    """libnvjpeg as sluice finds it (src/gpu/cuda.c): the loader's search, then CUDA's folders and
    the nvidia-* wheels beside torch."""
    import glob
    dirs = [os.path.join(os.environ.get(v, ""), "lib64") for v in ("SLUICE_CUDA_PATH", "CUDA_HOME") if os.environ.get(v)]
    dirs += ["/usr/local/cuda/lib64"] + glob.glob(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)),
                                                                  "nvidia", "*", "lib"))
    for name in ("libnvjpeg.so.13", "libnvjpeg.so.12", "libnvjpeg.so"):
        for path in [name] + [os.path.join(d, name) for d in dirs]:
            try:
                return ctypes.CDLL(path)
            except OSError:
                continue
    sys.exit("nvjpeg_calls.py: libnvjpeg not found")


def check(status, what):
    if status:
        raise RuntimeError(f"{what}: nvjpegStatus {status}")


def jpegs(root, limit):
    out = []
    for dirpath, _, names in sorted(os.walk(root)):
        for n in sorted(names):
            if n.lower().endswith((".jpg", ".jpeg")):
                out.append(os.path.join(dirpath, n))
                if len(out) >= 4 * limit:
                    return out
    return out


class Decoder:
    def __init__(self, lib):
        self.lib = lib
        self.h = ctypes.c_void_p()
        check(lib.nvjpegCreateEx(BACKEND_HARDWARE, None, None, 0, ctypes.byref(self.h)), "nvjpegCreateEx(hardware)")
        self.state = ctypes.c_void_p()
        check(lib.nvjpegJpegStateCreate(self.h, ctypes.byref(self.state)), "nvjpegJpegStateCreate")
        self.stream = ctypes.c_void_p()
        check(lib.nvjpegJpegStreamCreate(self.h, ctypes.byref(self.stream)), "nvjpegJpegStreamCreate")

    def supported(self, data):
        if self.lib.nvjpegJpegStreamParseHeader(self.h, data, ctypes.c_size_t(len(data)), self.stream):
            return False
        ok = ctypes.c_int(1)
        return self.lib.nvjpegDecodeBatchedSupported(self.h, self.stream, ctypes.byref(ok)) == 0 and ok.value == 0

    def info(self, data):
        n, sub = ctypes.c_int(), ctypes.c_int()
        w, h = (ctypes.c_int * 4)(), (ctypes.c_int * 4)()
        check(self.lib.nvjpegGetImageInfo(self.h, data, ctypes.c_size_t(len(data)), ctypes.byref(n), ctypes.byref(sub),
                                          w, h), "nvjpegGetImageInfo")
        return n.value, [(w[i], h[i]) for i in range(n.value)]


def planes(fmt, comps):
    """(width in bytes, height) of each output plane of an image for format fmt."""
    w, h = comps[0]
    if fmt in ("rgbi", "bgri"):
        return [(3 * w, h)]
    if fmt in ("rgb", "bgr"):
        return [(w, h)] * 3
    if fmt == "y":
        return [(w, h)]
    return list(comps)  # yuv, unchanged: each component at its own size


class Model:
    """A training loop on synthetic data in a thread of its own: steps counted as they finish."""

    def __init__(self, arch):
        import torchvision
        self.m = getattr(torchvision.models, arch)(num_classes=1000).cuda().to(memory_format=torch.channels_last)
        self.opt = torch.optim.SGD(self.m.parameters(), lr=0.01, momentum=0.9)
        self.x = torch.randn(256, 3, 224, 224, device="cuda").contiguous(memory_format=torch.channels_last)
        self.y = torch.randint(0, 1000, (256,), device="cuda")
        self.steps, self.stop = 0, threading.Event()
        # A stream of its own (non-blocking, priority 0): on the legacy default stream the first decode
        # call beside it never returned (one H100, 2026-11-27, sixth session: the main thread inside
        # nvjpegDecodeBatchedEx, the model's in Event.synchronize)
        self.stream = torch.cuda.Stream()
        for _ in range(3):
            self.step()
        torch.cuda.synchronize()

    def step(self):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(self.m(self.x), self.y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()

    def loop(self):
        prev = None
        with torch.cuda.stream(self.stream):
            while not self.stop.is_set():
                self.step()
                done = torch.cuda.Event()
                done.record()
                if prev is not None:
                    prev.synchronize()  # one step queued ahead, no more
                    self.steps += 1
                prev = done

    def rate(self, seconds):
        """Images/s alone, over about `seconds` (before the thread starts)."""
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            self.step()
            n += 1
        torch.cuda.synchronize()
        return 256 * n / (time.perf_counter() - t0)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("data")
    p.add_argument("--images", type=int, default=256)
    p.add_argument("--formats", default="rgbi,rgb,yuv,unchanged")
    p.add_argument("--apis", default="batched,ex", help="batched: whole images; ex: a region of interest each")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--beside", help="a torchvision model to train beside the decode (resnet18, resnet50)")
    p.add_argument("--priorities", default="least", help="the decode stream's: least, greatest or both")
    p.add_argument("--stacks-after", type=float, default=120,
                   help="seconds: then print every thread's stack to stderr and exit (a run that stalls)")
    a = p.parse_args()
    faulthandler.dump_traceback_later(a.stacks_after, exit=True)  # where it stands, all threads, if it stalls
    lib = load_nvjpeg()
    torch.cuda.init()
    dec = Decoder(lib)
    datas, infos = [], []
    for path in jpegs(a.data, a.images):
        with open(path, "rb") as f:
            d = f.read()
        if dec.supported(d):
            datas.append(d)
            infos.append(dec.info(d))
        if len(datas) == a.images:
            break
    n = len(datas)
    if not n:
        sys.exit("nvjpeg_calls.py: no JPEG the hardware takes under " + a.data)
    bufs = [ctypes.create_string_buffer(d, len(d)) for d in datas]
    ptrs = (ctypes.c_void_p * n)(*[ctypes.cast(b, ctypes.c_void_p) for b in bufs])
    lens = (ctypes.c_size_t * n)(*[len(d) for d in datas])
    params = (ctypes.c_void_p * n)()  # the ex API's, one a sample: the centre half of each side
    for i, (_, comps) in enumerate(infos):
        one = ctypes.c_void_p()
        check(lib.nvjpegDecodeParamsCreate(dec.h, ctypes.byref(one)), "nvjpegDecodeParamsCreate")
        w, h = comps[0]
        check(lib.nvjpegDecodeParamsSetROI(one, (w // 4) & ~1, (h // 4) & ~1, max(2, (w // 2) & ~1), max(2, (h // 2) & ~1)),
              "nvjpegDecodeParamsSetROI")
        params[i] = one.value
    model, alone = None, None
    if a.beside:  # after the files are read and the parameters set: the model's thread takes the interpreter lock often
        model = Model(a.beside)
        alone = model.rate(3.0)
        print(f"nvjpeg_calls.py: {n} images; {a.beside} alone {alone:.0f} images/s", file=sys.stderr, flush=True)
        threading.Thread(target=model.loop, daemon=True).start()
    for prio in a.priorities.split(","):
        side = torch.cuda.Stream(priority=-100 if prio == "greatest" else 0)  # clamped to the device's range
        stream = ctypes.c_void_p(side.cuda_stream)
        for api in a.apis.split(","):
            for fmt in a.formats.split(","):
                r = run(a, lib, dec, api, fmt, infos, ptrs, lens, params, stream, side, model)
                r["stream_priority"] = prio
                if model:
                    r.update({"beside": a.beside, "model_alone_images_per_s": round(alone, 1)})
                print(json.dumps(r), flush=True)
    if model:
        model.stop.set()


def run(a, lib, dec, api, fmt, infos, ptrs, lens, params, stream, side, model):
    """One format through one API: its JSON line (or the status nvJPEG refused it with)."""
    n = len(infos)
    outs, keep = (Image * n)(), []  # planes at the whole image's size: an ROI writes their start
    for i, (_, comps) in enumerate(infos):
        for c, (pw, ph) in enumerate(planes(fmt, comps)):
            t = torch.empty(pw * ph, dtype=torch.uint8, device="cuda")
            keep.append(t)
            outs[i].channel[c] = t.data_ptr()
            outs[i].pitch[c] = pw

    def call():
        check(lib.nvjpegDecodeBatchedInitialize(dec.h, dec.state, n, 1, FORMATS[fmt]), "nvjpegDecodeBatchedInitialize")
        if api == "ex":
            check(lib.nvjpegDecodeBatchedEx(dec.h, dec.state, ptrs, lens, outs, params, stream), "nvjpegDecodeBatchedEx")
        else:
            check(lib.nvjpegDecodeBatched(dec.h, dec.state, ptrs, lens, outs, stream), "nvjpegDecodeBatched")

    r = {"format": fmt, "api": "nvjpegDecodeBatchedEx, centre ROI" if api == "ex" else "nvjpegDecodeBatched",
         "backend": "hardware", "images": n}
    try:
        for _ in range(2):
            call()
        side.synchronize()
        s0, t0 = model.steps if model else 0, time.perf_counter()
        for _ in range(a.repeats):
            call()
        side.synchronize()
        dt = time.perf_counter() - t0
        r["images_per_s"] = round(n * a.repeats / dt, 1)
        if model:
            r["model_images_per_s"] = round(256 * (model.steps - s0) / dt, 1)
            return r
        api_calls, kernels, gpu_us = {}, {}, 0.0
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(a.repeats):
                call()
            side.synchronize()
    except RuntimeError as e:  # a format or API the hardware backend refuses says so
        r["error"] = str(e)
        return r
    for e in prof.events():
        us = e.time_range.end - e.time_range.start
        if e.device_type == torch.autograd.DeviceType.CUDA:
            k = kernels.setdefault(e.name[:70], [0, 0.0])
            gpu_us += us
        elif e.name.startswith("cu"):
            k = api_calls.setdefault(e.name, [0, 0.0])
        else:
            continue
        k[0] += 1
        k[1] += us
    per = n * a.repeats
    r.update({"api_calls_per_image": {k: round(c / per, 2)
                                      for k, (c, _) in sorted(api_calls.items(), key=lambda kv: -kv[1][0])},
              "api_us_per_image": round(sum(t for _, t in api_calls.values()) / per, 1),
              "kernels_per_image": {k: round(c / per, 2)
                                    for k, (c, _) in sorted(kernels.items(), key=lambda kv: -kv[1][1])[:8]},
              "gpu_ms_per_image": round(gpu_us / 1e3 / per, 4)})
    return r

if __name__ == "__main__":
    main()

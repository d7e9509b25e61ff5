"""sluice.torch: batches delivered as PyTorch tensors on the GPU.

    from sluice.torch import Loader, memory_report
    loader = Loader("/data/train", batch_size=256, budget="2G", device="cuda",
                    dtype=torch.float16, channels_last=True)
    for images, labels in loader:     # images: [N, 3, 224, 224] float16 on cuda, normalized
        ...

How a batch travels (CUDA):
  * The loader's slot region (sl_loader_slot_region: every batch slot lives in
    it, and it is already counted in the budget) is registered once as pinned
    memory with cudaHostRegister, so host-to-device copies are true DMA.
  * For each batch the uint8 image and the labels are copied with
    non_blocking=True on a side stream; the uint8 -> dtype conversion and the
    mean/std normalization (one fused addcmul, channels_last on request) run
    on that stream too, and an event marks the batch ready.
  * One batch is staged ahead: while you compute on batch k, batch k+1 is
    copied, converted and passed through your `transform` (if any).
  * Your (current) stream waits on the ready event; the tensors are
    record_stream()-ed on it, so the caching allocator never hands their
    memory to the side stream while your kernels still use it.
  * The slot goes back to the pool once its copy has finished (event query,
    or synchronize when every slot would otherwise be held).
  * GPU decode (decode="prefer-gpu", the default, where the engine runs; "gpu";
    "auto"): the library's scheduler decodes JPEGs with nvJPEG beside its CPU
    workers straight into the slot's device memory; the image arrives as a CUDA
    tensor through DLPack (no copy) and is converted and normalized on the side
    stream as above.
Without CUDA the same loader yields CPU tensors, and warns once; the default
dtype is then float32, what a model on the CPU takes.
"""
import os
import warnings

import torch

import sluice

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.uint8)
_CUDA_HOST_REGISTER_PORTABLE = 1
_GIB = float(1 << 30)


def _warn_no_cuda(device):
    # The warnings module's default filter shows this once per call site.
    warnings.warn(f"sluice.torch: CUDA is not available; device={device!r} falls back to CPU "
                  "tensors (no pinning, conversion on the CPU)", RuntimeWarning, stacklevel=3)


def _cudart():
    """The CUDA runtime: torch's binding, else libcudart loaded at run time."""
    try:
        return torch.cuda.cudart()
    except Exception:  # older torch without the binding
        import ctypes
        import ctypes.util

        for name in ("libcudart.so", "libcudart.so.12", "libcudart.so.11.0",
                     ctypes.util.find_library("cudart")):
            if not name:
                continue
            try:
                lib = ctypes.CDLL(name)
            except OSError:
                continue
            lib.cudaHostRegister.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
            lib.cudaHostUnregister.argtypes = [ctypes.c_void_p]
            return lib
        raise RuntimeError("sluice.torch: cannot find the CUDA runtime (libcudart) to pin memory")


def _cuda_ok(err):
    return int(getattr(err, "value", err)) == 0


_DECODE = ("prefer-gpu", "gpu", "cpu", "auto")


def gpu_decode_available():
    """(bool, reason): whether the GPU decode engine (nvJPEG + NVRTC, loaded at
    run time) can run in this process, and if not, why."""
    try:
        from sluice import _gpu
    except ImportError as e:  # a build without the engine's module
        return False, f"sluice._gpu is not built ({e})"
    return _gpu.available()


def _resolve_decode(decode, dev):
    """What the loader is asked for: (decode, reason), reason set where this layer
    chose the CPU itself. "prefer-gpu" and "auto" let the library take the GPU when
    its engine can run here (the library says why not in stats()["decode_reason"]);
    "gpu" insists and raises, saying why, where it cannot."""
    if decode not in _DECODE:
        raise ValueError(f"decode must be one of {list(_DECODE)}, got {decode!r}")
    if decode == "cpu":
        return "cpu", "decode='cpu'"
    ok, why = gpu_decode_available()
    if decode == "gpu" and not ok:
        raise RuntimeError(f"decode='gpu': the GPU decode engine cannot run here: {why}")
    if dev.type != "cuda":
        if decode == "gpu":
            raise ValueError("decode='gpu' needs device='cuda'")
        return "cpu", "device is the CPU"
    return decode, None


class Loader:
    """A :class:`sluice.Loader` that yields ``(images, labels)`` tensors, or with
    ``fields=`` a dict of tensors, one per output.

    Arguments: those of :class:`sluice.Loader`, plus
      device         "cuda" (the current CUDA device), "cuda:N" or "cpu"
      dtype          torch.float16, torch.bfloat16, torch.float32 or torch.uint8; None (the
                     default): float16 on CUDA, float32 on the CPU (device="cpu", or the
                     fallback without CUDA), what a model there takes
      mean, std      per-channel, on the 0..1 scale (ImageNet by default): float
                     outputs are (x / 255 - mean) / std. mean=None and std=None:
                     x / 255. Not used for uint8 outputs. With keep_alpha=True the
                     defaults cover RGB and alpha is x / 255 (mean 0, std 1).
      channels_last  images in torch.channels_last memory format
      video_layout   "TCHW" (default): clips [N, T, C, H, W]; "CTHW": [N, C, T, H, W]
      pin_memory     None/True: on CUDA, the slot region is pinned (page-locked)
                     so copies overlap compute; False: not pinned (copies from
                     pageable memory). True with device="cpu" is refused.
      transform      None, or a function run on each device batch after the dtype
                     conversion and normalization, before it is yielded (see below)
      decode         "prefer-gpu" (default): every JPEG the GPU engine (nvJPEG)
                     takes is decoded by it, beside the CPU workers, where the
                     engine can run and the budget holds it, else the CPU path;
                     which engine decodes a sample is a rule of the sample, so
                     the same seed gives the same bytes for any worker count,
                     run and load. "gpu": the same, but raises (saying why)
                     where the engine cannot run. "cpu": CPU workers only.
                     "auto": the GPU and the CPU workers split the samples by
                     their measured rates (fast where both are busy, but not
                     bit-reproducible: the split follows timing). Without CUDA
                     "prefer-gpu" and "auto" are the CPU path, with one line of
                     notice (the CUDA warning above). ``stats()["decode"]`` says
                     which engine decodes and ``["decode_reason"]`` why;
                     ``gpu_samples``/``cpu_samples`` how many each decoded.
                     gpu_budget=, gpu_staging=, gpu_max_pixels= go to the
                     library (docs/gpu.md).

    ``images`` is [N, C, height, width] of dtype on device, ``labels`` int64 [N]
    on device. With ``fields=``: a dict name -> tensor on device; image fields
    (and sequences of images, and clips) get dtype and mean/std over their
    channel axis (the third from last), every other field keeps its dtype.

    ``transform`` is where GPU-side augmentation goes: torchvision v2
    transforms (``v2.Compose([...])``, ``v2.MixUp``, ``v2.CutMix``),
    RandAugment, random erasing. Without ``fields=`` it receives the batch's
    two tensors, already on ``device``, and returns two (a transform may
    change dtype or shape: MixUp/CutMix return float soft labels [N,
    classes]); with ``fields=`` it receives the dict and returns a dict;
    anything else is a TypeError. On CUDA it runs on the loader's side
    stream, one batch ahead, so it overlaps your compute on the previous
    batch; the tensors it returns are handed to your stream safely. Its
    randomness is torch's (seed it with ``torch.manual_seed``): unlike the
    crop and flip, it is not derived from the loader's seed nor restored by
    ``load_state_dict``. A transform that wants unnormalized input takes
    ``dtype=torch.uint8`` (or ``mean=None, std=None`` for floats in [0, 1])
    and normalizes itself. ``len()``, ``set_epoch``, ``state_dict``/``load_state_dict``,
    ``stats``, ``errors``, ``close`` as in :class:`sluice.Loader`; the state
    counts the batches you have received. Each ``for`` is one pass, as in
    :class:`sluice.Loader`.
    """

    def __init__(self, source, *, device="cuda", dtype=None, mean=IMAGENET_MEAN,
                 std=IMAGENET_STD, channels_last=False, transform=None, decode="prefer-gpu", video_layout="TCHW",
                 pin_memory=None, **kwargs):
        self._base = None
        if transform is not None and not callable(transform):
            raise TypeError(f"transform must be callable (images, labels) -> (images, labels), got {transform!r}")
        self._transform = transform
        self._pinned = None
        self._carry = None  # a batch staged by a loop that ended early
        self._inflight = []  # (copy-done event, cpu batch) in issue order
        if dtype is not None and dtype not in _DTYPES:
            raise TypeError(f"dtype must be one of {[str(d) for d in _DTYPES]}, got {dtype!r}")
        try:
            dev = torch.device(device)
        except (RuntimeError, TypeError) as e:
            raise ValueError(f"device: {e}") from None
        if dev.type not in ("cuda", "cpu"):
            raise ValueError(f"device must be 'cuda', 'cuda:N' or 'cpu', got {device!r}")
        if pin_memory is not None and not isinstance(pin_memory, bool):
            raise TypeError(f"pin_memory must be True, False or None, got {pin_memory!r}")
        if pin_memory and dev.type == "cpu":
            raise ValueError("pin_memory=True pins host memory for copies to a GPU, but device='cpu'; "
                             "with device='cuda' sluice.torch.Loader pins its slot region and copies "
                             "each batch to the GPU itself")
        self._pin = pin_memory is not False
        if dev.type == "cuda" and not torch.cuda.is_available():
            _warn_no_cuda(device)
            dev = torch.device("cpu")
        if dev.type == "cuda" and dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        if dtype is None:  # what a model on that device takes: half on the GPU, float32 on the CPU
            dtype = torch.float16 if dev.type == "cuda" else torch.float32
        decode, self._decode_reason = _resolve_decode(decode, dev)
        if decode != "cpu":  # the library's scheduler feeds the GPU engine on this device
            kwargs["gpu_device"] = dev.index
        channels = 4 if kwargs.get("keep_alpha") else 3
        if (mean is None) != (std is None):
            raise ValueError("mean and std go together: give both or neither")
        if mean is None:
            mean, std = (0.0,) * channels, (1.0,) * channels
        if channels == 4 and mean is IMAGENET_MEAN and std is IMAGENET_STD:
            mean, std = tuple(mean) + (0.0,), tuple(std) + (1.0,)  # alpha: x / 255
        mean = self._per_channel("mean", mean, channels)
        std = self._per_channel("std", std, channels)
        if any(s <= 0 for s in std):
            raise ValueError(f"std must be > 0 in every channel, got {std}")
        self._device = dev
        self._dtype = dtype
        self._channels_last = bool(channels_last)
        self.loader = sluice.Loader(source, decode=decode, **kwargs)
        self._dict = kwargs.get("fields") is not None
        if video_layout not in ("TCHW", "CTHW"):
            raise ValueError(f'video_layout must be "TCHW" or "CTHW", got {video_layout!r}')
        self._cthw = video_layout == "CTHW"
        # out = x * scale + bias == (x / 255 - mean) / std, in float32 opmath;
        # [C, 1, 1] broadcasts over the channel axis of [..., C, H, W]
        self._scale = torch.tensor([1.0 / (255.0 * s) for s in std], dtype=torch.float32).view(-1, 1, 1)
        self._bias = torch.tensor([-m / s for m, s in zip(mean, std)], dtype=torch.float32).view(-1, 1, 1)
        self._max_inflight = max(1, self.loader.stats()["slots"] - 1)
        if dev.type == "cuda":
            try:
                self._setup_cuda()
            except BaseException:
                self.close()
                raise

    @staticmethod
    def _per_channel(name, v, channels):
        try:
            v = tuple(float(x) for x in v)
        except TypeError:
            raise TypeError(f"{name} must be a sequence of {channels} numbers, got {v!r}") from None
        if len(v) == 1:
            v = v * channels
        if len(v) != channels:
            raise ValueError(f"{name} must have {channels} values (one per channel), got {len(v)}")
        return v

    def _setup_cuda(self):
        dev = self._device
        with torch.cuda.device(dev):
            self._stream = torch.cuda.Stream(dev)
            self._scale = self._scale.to(dev)
            self._bias = self._bias.to(dev)
            if not self._pin or self.loader.stats()["decode"] == "gpu":
                # pin_memory=False; or the GPU decodes: the images arrive in device
                # memory, and the library uploads the CPU-decoded ones itself, through
                # a pinned bounce block (docs/gpu.md, "The device batch")
                self._pinned = 0
                return
            try:  # pinned slots are fixed in the budget: refused while a lowered limit keeps some retired
                base, length = self.loader.slot_region()
            except sluice.BudgetError as e:
                self._pinned = 0
                warnings.warn(f"sluice.torch: the slot region cannot be pinned now ({e}); copies will not "
                              "overlap compute", RuntimeWarning, stacklevel=3)
                return
            err = _cudart().cudaHostRegister(base, length, _CUDA_HOST_REGISTER_PORTABLE)
            if _cuda_ok(err):
                self._base = base
                self._pinned = length
            else:
                self._pinned = 0
                warnings.warn(f"sluice.torch: cudaHostRegister of the {length}-byte slot region "
                              f"failed ({err}); copies will not overlap compute", RuntimeWarning,
                              stacklevel=3)

    # -- iteration --
    def __iter__(self):
        """(images, labels), or the dict with fields=: one pass, as :class:`sluice.Loader`'s ``for``."""
        if self.loader._begin_pass():
            self._drop_staged()
        if self._device.type == "cuda":
            return self._iter_cuda()
        return self._iter_cpu()

    def _pixels(self, img):
        """uint8 pixels [..., C, H, W] (on any device) as the output dtype, normalized."""
        fmt = torch.channels_last if self._channels_last and img.dim() == 4 else torch.contiguous_format
        if self._dtype == torch.uint8:
            return img.contiguous(memory_format=fmt) if fmt is torch.channels_last else img
        out = torch.empty(img.shape, dtype=self._dtype, device=img.device, memory_format=fmt)
        return torch.addcmul(self._bias, img, self._scale, out=out)

    def _layout(self, field, t):
        """Clips as [N, C, T, H, W] when video_layout="CTHW" (what 3D CNNs take)."""
        kind = field if isinstance(field, str) else field.kind
        if kind == "video" and self._cthw:
            return t.permute(0, 2, 1, 3, 4).contiguous()
        return t

    @staticmethod
    def _is_pixels(field):
        return field.kind in ("image", "video") or (field.kind == "sequence" and field.dtype == "uint8"
                                                     and len(field.shape) >= 5)

    def _outputs(self, tensors):
        """What a loop yields: (images, labels), or a dict of every output,
        through the transform."""
        if self._dict:
            if self._transform is None:
                return tensors
            res = self._transform(tensors)
            if not isinstance(res, dict):
                raise TypeError(f"sluice.torch: transform must return the batch dict, got {type(res).__name__}")
            return res
        return self._apply_transform(tensors["image"], tensors["label"])

    def _iter_cpu(self):
        for batch in self.loader._batches():
            tensors = {}
            for name, field in batch.items():
                t = torch.from_dlpack(field)
                if self._is_pixels(field):
                    tensors[name] = self._layout(field, self._pixels(t))  # uint8: zero-copy, holds the slot
                else:
                    tensors[name] = t.clone()  # lets the slot go once the pixels are converted
            del batch, t
            out = self._outputs(tensors)
            del tensors
            self._state = None
            yield out
            del out

    def _iter_cuda(self):
        pending, self._carry = self._carry, None
        try:
            while True:
                self._reap(self._max_inflight - 1)
                batch = self.loader.next_batch()
                if batch is None:
                    break
                staged = self._stage(batch)
                del batch
                out = self._deliver(pending) if pending is not None else None
                pending = staged  # staged ahead while the caller works on out
                del staged
                if out is not None:
                    yield out
                    del out
            if pending is not None:
                out, pending = self._deliver(pending), None
                yield out
                del out
            self._state = None  # epoch over: the loader's own state is exact
        finally:
            # A loop that ends early keeps its staged batch: after a SampleError
            # or SlotsHeldError the next loop goes on with it (nothing skipped,
            # state_dict() exact); after a break the next loop starts the next
            # epoch and drops it (__iter__).
            if pending is not None:
                self._carry = pending

    def _stage(self, batch):
        """Issue copy + conversion of a CPU batch on the side stream."""
        state = self.loader.state_dict()  # the state once this batch is delivered
        dev = self._device
        tensors = {}
        with torch.cuda.stream(self._stream):
            for name, field in batch.items():
                # a field the GPU decoded is device memory of the slot already (DLPack, no copy)
                t = torch.from_dlpack(field).to(dev, non_blocking=True)
                tensors[name] = (t, self._is_pixels(field), field.kind, field.device != "cpu")
            for name, (t, pixels, kind, in_slot) in tensors.items():
                if pixels:
                    t = self._layout(kind, self._pixels(t))
                    if in_slot and t.data_ptr() == tensors[name][0].data_ptr():
                        t = t.clone()  # uint8 out: a tensor of its own, the slot goes back
                tensors[name] = t
            copied = torch.cuda.Event()  # the slot's memory has been read (copies, conversion)
            copied.record(self._stream)
            out = self._outputs(tensors)
            ready = torch.cuda.Event()
            ready.record(self._stream)
        # The CPU views (and so the slot) live until the copy is done.
        self._inflight.append((copied, batch))
        return out, ready, state

    def _apply_transform(self, images, labels):
        """The user's transform, its result checked."""
        if self._transform is None:
            return images, labels
        res = self._transform(images, labels)
        if not isinstance(res, (tuple, list)) or len(res) != 2:
            raise TypeError("sluice.torch: transform must return (images, labels), got "
                            f"{type(res).__name__}")
        return res[0], res[1]

    def _deliver(self, staged):
        out, ready, state = staged
        cur = torch.cuda.current_stream(self._device)
        cur.wait_event(ready)
        for t in (out.values() if isinstance(out, dict) else out):  # made on the side stream: used on yours now
            if isinstance(t, torch.Tensor) and t.is_cuda:
                t.record_stream(cur)
        self._state = state
        self._reap(self._max_inflight)
        return out

    def _reap(self, keep):
        """Release CPU batches whose copies finished; wait for the oldest
        while more than `keep` are held."""
        while self._inflight:
            copied, _ = self._inflight[0]
            if len(self._inflight) > keep:
                copied.synchronize()
            elif not copied.query():
                break
            self._inflight.pop(0)

    # -- the rest, as sluice.Loader --
    _state = None

    def __len__(self):
        return len(self.loader)

    def set_epoch(self, epoch):
        self._drop_staged()
        self.loader.set_epoch(epoch)

    def state_dict(self):
        """State after the last batch you received."""
        if self._state is not None:
            return dict(self._state)
        return self.loader.state_dict()

    def load_state_dict(self, state):
        self._drop_staged()
        self.loader.load_state_dict(state)

    def _drop_staged(self):
        self._carry = None
        self._state = None

    def stats(self):
        s = self.loader.stats()
        s["device"] = str(self._device)
        if self._decode_reason:  # chosen here, not by the library
            s["decode_reason"] = self._decode_reason
        s["pinned_bytes"] = self._pinned or 0
        return s

    def errors(self, *args, **kwargs):
        return self.loader.errors(*args, **kwargs)

    def close(self):
        """Wait for copies in flight, unpin the slot region, close the loader."""
        self._carry = None
        if self._inflight:
            for copied, _ in self._inflight:
                copied.synchronize()
            self._inflight.clear()
        if self._base is not None:
            base, self._base = self._base, None
            try:
                _cudart().cudaHostUnregister(base)
            except Exception:
                pass
        if getattr(self, "loader", None) is not None:
            self.loader.close()

    @property
    def closed(self):
        return self.loader.closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __copy__(self):
        raise TypeError("a sluice.torch.Loader cannot be copied (it owns worker threads and its memory); "
                        "create another one with the same arguments")

    def __deepcopy__(self, memo):
        self.__copy__()

    def __reduce_ex__(self, protocol):
        raise TypeError("a sluice.torch.Loader cannot be pickled; create it in the process that "
                        "iterates it")

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


# ---- memory report -----------------------------------------------------------
def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _kv_kib(text, key):
    for line in (text or "").splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return None


def _cgroup_memory():
    """(limit, usage) in bytes of this process's memory cgroup; None where unknown
    or unlimited."""
    rel = "/"
    for line in (_read("/proc/self/cgroup") or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and (parts[0] == "0" or "memory" in parts[1].split(",")):
            rel = parts[2] or "/"
            if parts[0] == "0":
                break
    # cgroup v2: the process's own folder, else the namespace root
    for d in (os.path.join("/sys/fs/cgroup", rel.lstrip("/")), "/sys/fs/cgroup"):
        mx = _read(os.path.join(d, "memory.max"))
        if mx is not None:
            cur = _read(os.path.join(d, "memory.current"))
            limit = None if mx.strip() == "max" else int(mx)
            return limit, int(cur) if cur and cur.strip().isdigit() else None
    # cgroup v1
    for d in (os.path.join("/sys/fs/cgroup/memory", rel.lstrip("/")), "/sys/fs/cgroup/memory"):
        lim = _read(os.path.join(d, "memory.limit_in_bytes"))
        if lim is not None:
            use = _read(os.path.join(d, "memory.usage_in_bytes"))
            limit = int(lim)
            if limit >= (1 << 60):  # "unlimited" is a page-rounded LONG_MAX
                limit = None
            return limit, int(use) if use and use.strip().isdigit() else None
    return None, None


def memory_report():
    """Memory now, as a flat dict for training logs (values in GiB):

    memory/rss_gb, memory/peak_rss_gb          this process (VmRSS, VmHWM)
    memory/system_available_gb, memory/system_total_gb   MemAvailable, MemTotal
    memory/cgroup_limit_gb, memory/cgroup_usage_gb      when in a limited cgroup
    memory/gpuN_allocated_gb, _reserved_gb, _fragmentation_gb (reserved -
    allocated), _peak_allocated_gb, _peak_reserved_gb   each GPU this process uses
    """
    r = {}
    status = _read("/proc/self/status")
    rss, hwm = _kv_kib(status, "VmRSS"), _kv_kib(status, "VmHWM")
    if rss is not None:
        r["memory/rss_gb"] = rss / _GIB
    if hwm is not None:
        r["memory/peak_rss_gb"] = hwm / _GIB
    meminfo = _read("/proc/meminfo")
    avail, total = _kv_kib(meminfo, "MemAvailable"), _kv_kib(meminfo, "MemTotal")
    if avail is not None:
        r["memory/system_available_gb"] = avail / _GIB
    if total is not None:
        r["memory/system_total_gb"] = total / _GIB
    limit, usage = _cgroup_memory()
    if limit is not None:
        r["memory/cgroup_limit_gb"] = limit / _GIB
        if usage is not None:
            r["memory/cgroup_usage_gb"] = usage / _GIB
    # Only GPUs this process has touched: never create a CUDA context here.
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for i in range(torch.cuda.device_count()):
            alloc = torch.cuda.memory_allocated(i)
            reserved = torch.cuda.memory_reserved(i)
            if reserved == 0 and alloc == 0:
                continue
            r[f"memory/gpu{i}_allocated_gb"] = alloc / _GIB
            r[f"memory/gpu{i}_reserved_gb"] = reserved / _GIB
            r[f"memory/gpu{i}_fragmentation_gb"] = (reserved - alloc) / _GIB
            r[f"memory/gpu{i}_peak_allocated_gb"] = torch.cuda.max_memory_allocated(i) / _GIB
            r[f"memory/gpu{i}_peak_reserved_gb"] = torch.cuda.max_memory_reserved(i) / _GIB
    return r

"""sluice: a budgeted, deterministic data loader for deep-learning training.

    import sluice
    with sluice.Loader("/data/train", batch_size=256, budget="2G") as loader:
        for epoch in range(epochs):
            loader.set_epoch(epoch)
            for batch in loader:              # one `for` = the rest of the epoch
                images = numpy.asarray(batch["image"])   # zero-copy view of the slot
                labels = torch.from_dlpack(batch["label"])

Every batch is a dict of :class:`Field` views into one batch slot of the
loader. The slot goes back to the pool when the last view of it (the fields,
and every numpy array or tensor made from them) is gone. See docs/python.md.
"""
import gc
import inspect
import json
import numbers
import os
import stat
import sys
import warnings

from . import _dataloader_names, _sluice
from ._sluice import (  # noqa: F401  (re-exported)
    BudgetError,
    DecodeError,
    ErrorRateError,
    Field,
    SampleError,
    SlotsHeldError,
    probe_image,
)

#: "0.2.0": the version of the libsluice built into this extension.
__version__ = _sluice.version().split()[0]

__all__ = [
    "Loader", "Budget", "Batch", "Field", "decode_image", "probe_image", "train_crop", "parse_size",
    "decode_video", "probe_video", "merge_states",
    "BudgetError", "DecodeError", "ErrorRateError", "SampleError", "SlotsHeldError", "PerformanceWarning",
    "__version__", "build_info",
]

_U32 = (1 << 32) - 1
_U64 = (1 << 64) - 1
_PRESETS = {"train": _sluice.PRESET_TRAIN, "val": _sluice.PRESET_VAL}
_ON_ERROR = {"skip": _sluice.ON_ERROR_SKIP, "raise": _sluice.ON_ERROR_RAISE}
_CACHE_SHARE = {"none": _sluice.CACHE_PRIVATE, "node": _sluice.CACHE_NODE}
_CACHE_WHAT = {"encoded": _sluice.CACHE_ENCODED, "decoded": _sluice.CACHE_DECODED}
_DECODE = {"cpu": 0, "auto": 1, "gpu": 2, "prefer-gpu": 3}  # SL_DECODE_*


class PerformanceWarning(UserWarning):
    """A pass ran slower than the machine allows, for a reason the loader measured and you can
    change (the message says which setting). Issued once a loader; the bytes delivered are the
    same either way."""


# A pass in which the consumer waited on the GPU decode this share of its time or more, for at
# least GPU_HELD_SECONDS: the GPU had too little left beside the model to decode with. The
# loader's first pass counts from GPU_HELD_FIRST_SECONDS: the model's warm-up falls in it (cuDNN's
# autotuning, compilation), which slows the loop and the decode beside it for seconds. (One H100,
# ResNet-18 on a 6,000-image set: 23-batch passes of 0.7 s, and a first of 2 s or more that said
# the loop took 3,100 images/s where it takes 9,000.)
GPU_HELD_HINT = 0.10
GPU_HELD_SECONDS = 2.0
GPU_HELD_FIRST_SECONDS = 60.0


def _gpu_held_hint(stats, first=False, world=1):
    """The PerformanceWarning for a pass whose loop the GPU decode held up, or None (first: the
    loader's first pass; world: the DDP ranks, _world())."""
    held = stats.get("pass_consumer_wait_gpu_fraction", 0.0)
    least = GPU_HELD_FIRST_SECONDS if first else GPU_HELD_SECONDS
    if stats.get("decode") != "gpu" or held < GPU_HELD_HINT or stats.get("pass_seconds", 0.0) < least:
        return None
    busy = stats["pass_seconds"] - stats.get("pass_consumer_wait_s", 0.0)  # the loop's own time
    demand = (stats.get("pass_gpu_samples", 0) + stats.get("pass_cpu_samples", 0)) / busy if busy > 0 else 0.0
    cpu, split = stats.get("cpu_rate", 0.0), str(stats.get("decode_reason", "")).startswith("decode=auto")
    which = "their share of the images" if split else "the images the GPU does not take (the costly ones)"
    seen = f" (the CPU workers, all busy, decoded {which} at {cpu:,.0f}/s)" if cpu > 0 else ""
    return (f"sluice: the loop waited {held:.0%} of the pass for the GPU decode (it finished those batches last): the "
            f"model leaves the GPU too little to decode with. The loop took about {demand:,.0f} images/s while it "
            f"did not wait{seen}; where the CPU workers decode that many (`sluice bench DATA --decode cpu` "
            "measures them), decode='cpu' feeds it without the GPU (one H100, 16 cores, ResNet-50: 99.7 % of its "
            "synthetic rate against 91.5 %). See docs/gpu.md, \"Which decode for which model\"." + _queues_hint(world))


# ---- argument checks -------------------------------------------------------
def _int(name, value, lo=0, hi=_U64):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})")
    value = int(value)
    if value < lo:
        raise ValueError(f"{name} must be >= {lo}, got {value}")
    if value > hi:
        raise ValueError(f"{name} must be <= {hi}, got {value}")
    return value


def _flag(name, value):
    if isinstance(value, bool):
        return value
    if isinstance(value, numbers.Integral) and int(value) in (0, 1):
        return bool(value)
    raise TypeError(f"{name} must be True or False, got {value!r}")


def _choice(name, value, choices):
    if not isinstance(value, str):
        raise TypeError(f"{name} must be one of {sorted(choices)}, got {type(value).__name__} ({value!r})")
    if value not in choices:
        raise ValueError(f"{name} must be one of {sorted(choices)}, got {value!r}")
    return choices[value]


_INTERP = {"bilinear": _sluice.INTERP_BILINEAR, "bicubic": _sluice.INTERP_BICUBIC}


def _pair(name, value, kind=float):
    """(a, b) from a 2-sequence of numbers."""
    try:
        a, b = value
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a pair (a, b), got {value!r}") from None
    for v in (a, b):
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise TypeError(f"{name} must hold numbers, got {value!r}")
    return kind(a), kind(b)


def _recipe(preset, size, scale, ratio, interpolation, crop_pct, resize, hflip):
    """(size, recipe dict for the extension) from the user's recipe options.
    The library checks the ranges (ValueError with its reason)."""
    r = {"interpolation": _choice("interpolation", interpolation, _INTERP)}
    if isinstance(size, (tuple, list)) and len(size) == 2:
        r["height"], r["width"] = _int("size height", size[0], 1, 1 << 16), _int("size width", size[1], 1, 1 << 16)
        side = max(r["height"], r["width"])
    elif isinstance(size, numbers.Integral) and not isinstance(size, bool):
        side = _int("size", size, 1, 1 << 16)
    else:
        raise TypeError(f"size must be an int or a pair of ints (height, width), got {size!r}")
    r["scale_min"], r["scale_max"] = _pair("scale", scale)
    r["ratio_min"], r["ratio_max"] = _pair("ratio", ratio)
    if isinstance(hflip, bool) or not isinstance(hflip, numbers.Real):
        raise TypeError(f"hflip must be a probability (a number in [0, 1]), got {hflip!r}")
    if not 0.0 <= hflip <= 1.0:
        raise ValueError(f"hflip must be a probability in [0, 1], got {hflip!r}")
    r["hflip"] = float(hflip) if hflip > 0 else -1.0  # SL_HFLIP_NEVER
    if preset == "train" and (crop_pct is not None or resize is not None):
        raise ValueError("crop_pct and resize apply to preset='val' (train crops with scale and ratio)")
    if crop_pct is not None:
        if isinstance(crop_pct, bool) or not isinstance(crop_pct, numbers.Real):
            raise TypeError(f"crop_pct must be a number in (0, 1], got {crop_pct!r}")
        r["crop_pct"] = float(crop_pct)
    if resize is not None:
        r["resize"] = _int("resize", resize, 1, _U32)
    return side, r


def parse_size(size):
    """Bytes from an int or a string like "512M", "2G", "1.5G", "1000" (K, M, G, T
    suffixes are powers of 1024). Raises ValueError/TypeError saying what was wrong."""
    if isinstance(size, bool):
        raise TypeError(f"a size must be an int or a string like '512M', got {size!r}")
    if isinstance(size, numbers.Integral):
        if size < 0:
            raise ValueError(f"a size must be >= 0, got {size}")
        if size > _U64:
            raise ValueError(f"size {size} does not fit in 64 bits")
        return int(size)
    if isinstance(size, str):
        return _sluice.parse_size(size)
    raise TypeError(f"a size must be an int or a string like '512M', got {type(size).__name__} ({size!r})")


def _env_int(var):
    raw = os.environ.get(var)
    if raw is None or raw.strip() == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {var}={raw!r} is not an integer") from None


def _is_url(source):
    """True for the remote sources the library reads (s3://, http://, https://)."""
    return source.lower().startswith(("s3://", "http://", "https://"))


def _io_args(requests, timeout, retries, hedge, readahead):
    """The remote-I/O options as _Loader keywords (None: the library's defaults)."""
    kw = {"io_hedge": 0 if _flag("io_hedge", hedge) else -1}
    if requests is not None:
        kw["io_requests"] = _int("io_requests", requests, 1, 1024)
    if retries is not None:
        kw["io_retries"] = _int("io_retries", retries, 1, 100)
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) or not 0 < timeout <= 86400:
            raise ValueError(f"io_timeout must be seconds in (0, 86400], got {timeout!r}")
        kw["io_timeout_ms"] = max(1, int(round(timeout * 1000)))
    if readahead is not None:
        try:
            n = parse_size(readahead)
        except (TypeError, ValueError) as e:
            raise type(e)(f"io_readahead: {e}") from None
        kw["io_readahead"] = n if n else (1 << 64) - 1  # 0: none (SL_READAHEAD_OFF)
    return kw


def _cache_args(cache, share, what):
    """The sample cache's arguments: {} without one."""
    share = _choice("cache_share", share, _CACHE_SHARE)
    what = _choice("cache_what", what, _CACHE_WHAT)
    if cache is None:
        return {}
    try:
        size = parse_size(cache)
    except (TypeError, ValueError) as e:
        raise type(e)(f"cache: {e}") from None
    if size == 0:
        return {}
    return {"cache": size, "cache_share": share, "cache_what": what}


def _rank_world(rank, world_size):
    """rank/world_size from the arguments, else from torchrun's RANK/WORLD_SIZE."""
    if rank is None:
        rank = _env_int("RANK")
    if world_size is None:
        world_size = _env_int("WORLD_SIZE")
    if rank is None:
        rank = 0
    if world_size is None:
        world_size = 1
    world_size = _int("world_size", world_size, 1, _U32)
    rank = _int("rank", rank, 0, _U32)
    if rank >= world_size:
        raise ValueError(f"rank must be < world_size, got rank={rank} world_size={world_size}")
    return rank, world_size


_FIELDS_FILE_MAX = 1 << 20  # as the CLI's --fields: a schema file larger than this is a mistake


def _fields_file(path):
    """The text of a schema file, read as the CLI's --fields reads one: a
    regular file (opened without blocking: a FIFO never hangs the call) of at
    most 1 MiB."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise FileNotFoundError(f"fields: {path!r}: no such file (fields= takes a dict, or the path of a "
                                "JSON file holding one)") from None
    except OSError as e:
        raise OSError(e.errno, f"fields: {path!r}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"fields: {path!r} is not a regular file")
        data = os.read(fd, _FIELDS_FILE_MAX + 1) if st.st_size <= _FIELDS_FILE_MAX else b""
        if st.st_size > _FIELDS_FILE_MAX or len(data) > _FIELDS_FILE_MAX:
            raise ValueError(f"fields: {path!r} is {max(st.st_size, len(data))} bytes, larger than 1 MiB")
    finally:
        os.close(fd)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"fields: {path!r} is not UTF-8 text: {e}") from None


def _schema_json(fields):
    """The schema as the JSON text the library parses (it checks the rest):
    from a dict, the path of a JSON file (str or os.PathLike, as the CLI's
    --fields), or JSON text itself (a str starting with '{')."""
    if isinstance(fields, (bytes, os.PathLike)) or (isinstance(fields, str) and not fields.lstrip().startswith("{")):
        return _fields_file(os.fsdecode(os.fspath(fields)))
    if isinstance(fields, str):
        return fields
    if not isinstance(fields, dict) or not fields:
        raise TypeError(f"fields must be a non-empty dict of named fields or the path of a JSON file holding "
                        f"one, got {type(fields).__name__}")
    for name, opts in fields.items():
        if not isinstance(name, str) or not isinstance(opts, dict):
            raise TypeError(f"fields: each entry is name -> dict of options, got {name!r}: {type(opts).__name__}")
    try:
        return json.dumps(fields)
    except (TypeError, ValueError) as e:
        raise TypeError(f"fields: not JSON-serialisable: {e}") from None


# ---- the GPU's hardware queues, before CUDA starts ----------------------------------------------
#: The hardware queues sluice asks CUDA for in a DDP rank (CUDA_DEVICE_MAX_CONNECTIONS, 1-32; CUDA's
#: default is 8). CUDA spreads a context's streams over them, and a kernel queued behind another
#: stream's on the same queue waits for it. The GPU decode has a stream per engine and per worker;
#: under DDP, NCCL's all-reduce kernel waits in its queue for the other ranks. On two H200s
#: (ResNet-18 DDP) 32 queues fed the ranks at 72-88 % of their synthetic rate against 56-68 % with 8,
#: the loop waiting 5-8 % of its time against 19-29 %. The queues cost host memory, the CUDA
#: context's (a context per GPU the process drives): about 105 MB of PSS with 16 and 270 MB with 32,
#: over 8's. So a process that is not a rank keeps CUDA's 8, and the GPU-held warning says what
#: CUDA_CONNECTIONS_SINGLE did there, for you to choose: one H200 alone was fed at 92.5-93.2 % with 16
#: against 90.8-91.1 % with 8, one step in ten 20.7-20.9 ms against 23.5-23.8 (32: 92.9 %; docs/gpu.md,
#: "CUDA's hardware queues").
CUDA_CONNECTIONS = 32
CUDA_CONNECTIONS_SINGLE = 16


def _launched_ranks():
    """The ranks a launcher told this process it is one of before it started (WORLD_SIZE, as torchrun
    sets it, read as _rank_world reads it); 1 where there is none or it is no integer (the loader
    says so when it is made, not the import)."""
    try:
        return _env_int("WORLD_SIZE") or 1
    except ValueError:
        return 1


def _set_cuda_connections():
    """CUDA_DEVICE_MAX_CONNECTIONS=CUDA_CONNECTIONS in this process's environment, where it is unset,
    the process is a DDP rank (_launched_ranks() > 1) and torch has not started CUDA (CUDA reads it
    when it makes the context, which torch does when the first tensor goes to the GPU: `import sluice`
    at a script's top is in time). Returns what was done: "sluice"; "user" (a value of yours is
    kept); "single" (not a rank: CUDA's 8, and its memory, kept); or "late" (torch started CUDA
    before sluice was imported)."""
    if "CUDA_DEVICE_MAX_CONNECTIONS" in os.environ:
        return "user"
    if _launched_ranks() < 2:
        return "single"
    cuda = getattr(sys.modules.get("torch"), "cuda", None)
    if cuda is not None and cuda.is_initialized():
        return "late"
    os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = str(CUDA_CONNECTIONS)
    return "sluice"


_CUDA_CONNECTIONS_BY = _set_cuda_connections()


def _queues_hint(world):
    """The advice for a loop the GPU decode held up whose decode shares CUDA's few hardware queues
    with the model's kernels (world: ranks in its group; under DDP, with NCCL's all-reduce), or ""."""
    v = os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS", "")
    want = CUDA_CONNECTIONS if world > 1 else CUDA_CONNECTIONS_SINGLE
    if _CUDA_CONNECTIONS_BY != "late" and v.isdigit() and int(v) >= want:
        return ""
    fix = f"set CUDA_DEVICE_MAX_CONNECTIONS={want} before CUDA starts"
    if world < 2:  # a single process keeps CUDA's 8 unless told (their memory): what 16 did, to choose
        return (f" The decode's streams share CUDA's {v if v.isdigit() else 8} hardware queues with the model's "
                f"kernels, and a kernel queued behind another waits for it: {fix} (one H200, ResNet-18: "
                "92.5-93.2 % of its synthetic rate against 90.8-91.1 % with 8, for about 105 MB more host memory, "
                "the CUDA context's; 32: 92.9 %, 270 MB). See docs/gpu.md, \"CUDA's hardware queues\".")
    now = {"user": f"CUDA_DEVICE_MAX_CONNECTIONS={v}",
           "late": "CUDA started before `import sluice`, with CUDA's 8 hardware queues",
           "single": "CUDA's 8 hardware queues: WORLD_SIZE was not set when sluice was imported"}
    return (f" Under DDP ({now.get(_CUDA_CONNECTIONS_BY, v)}), the decode's streams may share a hardware queue "
            f"with NCCL's all-reduce and then wait for the other ranks: {fix} (importing sluice at the top of a "
            "torchrun script does it). See docs/gpu.md, \"CUDA's hardware queues\".")


def _world():
    """Ranks in torch.distributed's default group, or 1 (none started, or no torch imported)."""
    dist = sys.modules.get("torch.distributed")
    try:
        return dist.get_world_size() if dist is not None and dist.is_available() and dist.is_initialized() else 1
    except Exception:
        return 1


# ---- shared budgets ----------------------------------------------------------
class Budget:
    """One memory budget several loaders draw from (train and val in one process).

        budget = sluice.Budget("4G")                       # a fixed limit
        budget = sluice.Budget("4G", governor=True)        # 4G at most, less under pressure
        budget = sluice.Budget("auto")                     # what the container allows, governed
        train = sluice.Loader("train", budget=budget, ...)
        val = sluice.Loader("val", budget=budget, preset="val", ...)

    Together the loaders never hold more than the limit; each keeps its own
    minimum working set, and a loader whose minimum does not fit what is left
    is refused (BudgetError, with the numbers). ``set_limit()`` moves the limit
    while they run; the governor moves it by itself to keep the container's
    memory cgroup under its limit minus ``margin`` (reading the cgroup, PSI and
    MemAvailable every ``period_ms``). ``stats()`` and ``events()`` show it.
    Each loader holds the budget alive; ``close()`` drops this reference only.
    A Budget belongs to the process that made it: in a child of ``fork()`` every
    call raises RuntimeError (so does a Loader made on it); create it after the fork.
    """

    def __init__(self, limit, governor=False, margin=None, period_ms=None, grow_after_ms=None,
                 cgroup_dir=None):
        kw = {"governor": _flag("governor", governor)}
        if margin is not None:
            kw["margin"] = parse_size(margin)
        if period_ms is not None:
            kw["period_ms"] = _int("period_ms", period_ms, 1, 60000)
        if grow_after_ms is not None:
            kw["grow_after_ms"] = _int("grow_after_ms", grow_after_ms, 0, 3600000)
        if cgroup_dir is not None:
            kw["cgroup_dir"] = os.fspath(cgroup_dir)
        if isinstance(limit, str) and limit.strip().lower() == "auto":
            self._b = _sluice._Budget(0, auto=True, **kw)
        else:
            try:
                limit = parse_size(limit)
            except (TypeError, ValueError) as e:
                raise type(e)(f"budget: {e}") from None
            if limit == 0:
                raise ValueError("budget must be > 0 bytes")
            self._b = _sluice._Budget(limit, **kw)

    def set_limit(self, limit):
        """Move the limit now (an int or "2G"); loaders give back what is over."""
        self._b.set_limit(parse_size(limit))

    def stats(self):
        """limit, ceiling, used, peak, fixed, by category (mem, mem_peak), per loader
        (loader_used/peak/fixed, by creation), waiters, and the governor's last readings."""
        return self._b.stats()

    def events(self, first=0):
        """The governor's moves: dicts of t, old_limit, new_limit, container_limit,
        container_usage, mem_available, reason."""
        return self._b.events(_int("first", first))

    def close(self):
        self._b.close()

    @property
    def closed(self):
        return self._b.closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        if self._b.closed:
            return "<sluice.Budget closed>"
        try:
            s = self._b.stats()
        except RuntimeError:  # inherited across fork()
            return "<sluice.Budget of another process (fork)>"
        return f"<sluice.Budget limit={s['limit']} used={s['used']} loaders={s['loaders']}>"


# ---- batches ---------------------------------------------------------------
class Batch(dict):
    """One batch: a dict of :class:`Field` views, one per schema field, then
    "<f>_len" for fields with points and "index" (default: "image", "label", "index").

    Attributes: ``epoch``, ``index`` (batch number within the epoch), ``size``
    (samples), ``checksum`` (with ``checksum=True``, else 0). Each field keeps
    the slot alive; ``del batch`` (and of the arrays made from it) gives it back.
    """

    __slots__ = ("epoch", "index", "size", "checksum")

    def __init__(self, raw):
        super().__init__(raw.fields())
        self.epoch = raw.epoch
        self.index = raw.index
        self.size = raw.size
        self.checksum = raw.checksum

    def __repr__(self):
        fields = ", ".join(f"{k}: {tuple(v.shape)}" for k, v in self.items())
        return f"<sluice.Batch epoch={self.epoch} index={self.index} size={self.size} {{{fields}}}>"


# ---- the loader ------------------------------------------------------------
class Loader:
    """Iterate batches of a folder (ImageFolder layout) or manifest (.csv/.jsonl).

    Arguments (see docs/python.md):
      source       folder or manifest path
      batch_size   samples per batch (256)
      preset       "train" (RandomResizedCrop + flip) or "val" (resize + center crop)
      size         output side (224), or (height, width)
      scale, ratio train: RandomResizedCrop area fraction ((0.08, 1.0)) and w/h
                   ((3/4, 4/3)) ranges
      interpolation  "bilinear" or "bicubic" (Pillow-exact, antialiased)
      hflip        train: horizontal flip probability (0.5; 0 never flips)
      crop_pct     val: resize to size / crop_pct, then centre crop (timm); default
                   224/256
      resize       val: resize the short side to this, then centre crop
                   (torchvision Resize(resize) + CenterCrop(size))
      fast         JPEG DCT-domain downscaling down to the output size: faster,
                   not Pillow-exact (see docs/images.md)
      max_scans    JPEG scans a file may have (64); more is an error record
      shuffle      new seeded permutation each epoch (True)
      seed         seeds the order and the augmentation (0)
      drop_last    drop the uneven rank tail and the last short batch (False)
      budget       bytes the loader may hold, int or "512M"/"2G" ("512M"); a shared
                   sluice.Budget several loaders draw from; or "auto" (what the
                   container allows, governed: see Budget)
      governor     True: a governor moves this loader's budget (at most `budget`)
                   to keep the container's memory cgroup under its limit
      workers      "auto" (None is the same): a tuner driven by your loop decides how many
                   decode threads take work, up to ``workers_max``, and how many batch
                   slots are in use (docs/tuner.md); an int: that many, fixed
      workers_max  with workers="auto", the most it runs; None = this rank's share of the
                   CPUs it may run on (the affinity mask and cgroup quota, divided by
                   LOCAL_WORLD_SIZE; a rank pinned to CPUs of its own keeps them), at
                   most as many as the budget holds
      worker_nice  how far below the process's CPU priority the workers run, a nice
                   increment 0..19 (None: 10): under contention the training loop and
                   the GPU engine run first; an idle CPU still goes to the workers
      prefetch     batch slots (in flight + held by you); None = as the budget allows
      on_error     "skip" (record and go on) or "raise" (SampleError, batch dropped)
      rank, world_size   shard of the dataset; default from RANK / WORLD_SIZE
      order_range  (begin, end): run over positions [begin, end) of every epoch's seeded
                   order only (a Ray Data read task's lease; None: the whole order)
      max_pixels, max_bytes  per-sample limits checked from headers (library defaults)
      max_error_rate  stop (ErrorRateError) once more than this fraction of the samples
                   tried failed, from 100 tried on (0.1; 1 = never); an epoch whose first
                   1,000 samples, or every sample, failed always stops it
      checksum     hash every batch (Batch.checksum)
      exif         apply EXIF orientation
      keep_alpha   4 output channels (RGBA)
      fields       the schema: a dict of named fields (docs/fields.md), e.g.
                   {"blur": {"kind": "array", "crop": [256, 256], "crop_group": "xy"}, ...},
                   or the path of a JSON file holding one (as the CLI's --fields);
                   None: "image" + "label" with preset and size above
      cache        a sample cache of this many bytes ("20G"; None: none), one copy for
                   every worker, evicting the entry used farthest ahead (docs/cache.md)
      cache_share  "none": the cache is a part of `budget` (or of the shared Budget);
                   "node": one /dev/shm segment for every rank of the node (torchrun's
                   LOCAL_RANK / LOCAL_WORLD_SIZE), counted once, outside the budgets
      local_rank, local_world_size   this rank's place among the ranks of its node,
                   for cache_share="node" (None: LOCAL_RANK / LOCAL_WORLD_SIZE, else
                   the whole world on one node)
      cache_what   "encoded" (file bytes) or "decoded" (a field's output where it
                   depends on the file alone: val images and clips, arrays without a random
                   crop or points; file bytes otherwise)
      decode       "cpu" (the CPU workers); "gpu": every JPEG the GPU engine (nvJPEG)
                   can take decoded by it, beside the workers, the image field
                   delivered in device memory (field.device "cuda:N": take it with
                   DLPack, torch.from_dlpack; it is not a host buffer); a schema with
                   a video field and no image field: its clips decoded by NVDEC into
                   device memory (docs/video.md); which engine
                   decodes a sample is a rule of the sample, so the bytes repeat for
                   any worker count and timing; raises where it cannot run.
                   "prefer-gpu": "gpu" where it can run and the budget holds it, else
                   "cpu" (stats()["decode_reason"] says why). "auto": the GPU beside
                   the CPU workers split by their measured rates (not
                   bit-reproducible: the split follows timing), else "cpu".
                   sluice.torch.Loader defaults to "prefer-gpu" (docs/gpu.md)
      gpu_device, gpu_budget, gpu_max_pixels, gpu_staging, gpu_engines   the CUDA
                   device (0), its memory for the engines and the device batches
                   ("512M"), larger images go to the CPU (4.2 Mpx), pinned staging in
                   the budget ("64M", at most an eighth of it), decode engines (1..4,
                   each its own nvJPEG state and stream; 1)
      io_requests  remote sources (s3://, http(s)://; docs/remote.md): HTTP requests in
                   flight at once, whatever the worker count (64)
      io_timeout   seconds an attempt may receive nothing before it is retried (30)
      io_retries   attempts after the first for 5xx, SlowDown, resets, bodies cut short (8)
      io_hedge     a duplicate request for a read much slower than the others (True)
      io_readahead bytes of files read ahead along the order, a part of `budget` (None:
                   budget / 16, at most 256M; 0: none)

    PyTorch DataLoader names are taken too: ``num_workers`` (-> workers),
    ``persistent_workers`` (no effect), ``prefetch_factor=None``,
    ``pin_memory=False``; the others are refused naming sluice's option
    (docs/python.md, "Coming from DataLoader").

    Each ``for`` loop is one pass, as with a DataLoader: the first runs the
    current epoch (0, or the one set_epoch/load_state_dict chose, from the
    position it set); every later loop starts the next epoch from its first
    batch, whether the loop before it finished or you left it early. A loop
    the loader stopped (SampleError, SlotsHeldError) is not over: the next
    loop goes on with it.
    Errors: ValueError/TypeError for bad arguments,
    FileNotFoundError for a missing source, BudgetError (a ValueError and a
    MemoryError) for a budget below the pipeline's minimum (the message states
    it), SlotsHeldError when every slot is held by your views, ErrorRateError
    when too many samples fail, FileNotFoundError when the dataset folder is
    removed while iterating, RuntimeError for a loader used in a child of
    fork() (create one after the fork: in ``worker_init_fn``, or lazily in
    the Dataset's ``__iter__``). Ctrl-C interrupts a waiting iteration
    (KeyboardInterrupt) without losing the batch it waited for.

    A Loader is not copyable or picklable (it owns threads and memory):
    ``copy.copy``/``pickle`` raise TypeError.
    """

    def __init__(self, source, batch_size=256, preset="train", size=224, shuffle=True, seed=0,
                 drop_last=False, budget="512M", workers="auto", prefetch=None, on_error="skip",
                 rank=None, world_size=None, max_pixels=None, max_bytes=None, checksum=False,
                 exif=False, keep_alpha=False, max_error_records=None, scale=(0.08, 1.0),
                 ratio=(3.0 / 4.0, 4.0 / 3.0), interpolation="bilinear", crop_pct=None, resize=None,
                 hflip=0.5, fast=False, max_scans=None, fields=None, max_error_rate=None, governor=False,
                 cache=None, cache_share="none", cache_what="encoded", decode="cpu", gpu_device=None,
                 gpu_budget=None, gpu_max_pixels=None, gpu_staging=None, gpu_engines=None, worker_nice=None,
                 order_range=None, local_rank=None, local_world_size=None, workers_max=None, io_requests=None,
                 io_timeout=None, io_retries=None, io_hedge=True, io_readahead=None, **dataloader_args):
        self._ld = None
        self._positioned = True  # the next pass starts where the loader is (see _begin_pass)
        self._hinted = False  # a PerformanceWarning was issued (once a loader)
        self._passes_ended = 0  # passes this loader ended (the first holds the model's warm-up)
        workers = _dataloader_names.translate("sluice.Loader", dataloader_args, workers, _ARGS)
        if not isinstance(source, (str, bytes, os.PathLike)):
            raise TypeError(f"source must be a path (str or os.PathLike), got {type(source).__name__}")
        source = os.fspath(source)
        if isinstance(source, bytes):
            source = os.fsdecode(source)
        if not source:
            raise ValueError("source is empty: give an image folder or a .csv/.jsonl manifest")
        if (not os.path.exists(source) and not ("{" in source and "}" in source)  # a brace pattern of shards
                and not _is_url(source)):  # s3://, http(s):// (docs/remote.md): the library says what is missing
            raise FileNotFoundError(f"source {source!r} does not exist")
        kw = {
            "batch_size": _int("batch_size", batch_size, 1, _U32),
            "preset": _choice("preset", preset, _PRESETS),
            "shuffle": _flag("shuffle", shuffle),
            "seed": _int("seed", seed),
            "drop_last": _flag("drop_last", drop_last),
            "on_error": _choice("on_error", on_error, _ON_ERROR),
            "min_slots": 2,  # a `for` loop still holds the previous batch while asking for the next
        }
        # budget: a size (private), a shared Budget, or "auto"; governor=True
        # governs a private size (the loader then owns a Budget of its own)
        self._budget = None
        if isinstance(budget, Budget):
            if _flag("governor", governor):
                raise ValueError("governor=True goes with a size or 'auto'; a shared Budget has its own")
            kw["shared_budget"] = budget._b
        elif (isinstance(budget, str) and budget.strip().lower() == "auto") or _flag("governor", governor):
            self._budget = Budget(budget, governor=True)
            kw["shared_budget"] = self._budget._b
        else:
            try:
                kw["budget"] = parse_size(budget)
            except (TypeError, ValueError) as e:
                raise type(e)(f"budget: {e}") from None
            if kw["budget"] == 0:
                raise ValueError("budget must be > 0 bytes")
        if workers is not None and workers != "auto":
            if isinstance(workers, str):
                raise ValueError(f'workers must be "auto" or a number of threads, got {workers!r}')
            kw["workers"] = _int("workers", workers, 1, 1024)
            if workers_max is not None:
                raise ValueError(f"workers_max goes with workers=\"auto\" (the tuner's ceiling); "
                                 f"workers={workers} fixes the count")
        elif workers_max is not None:
            kw["workers_max"] = _int("workers_max", workers_max, 1, 1024)
        if prefetch is not None:
            prefetch = _int("prefetch", prefetch, 0, 1 << 16)
            if prefetch == 1:
                raise ValueError(
                    "prefetch must be >= 2 (or None for automatic): a for loop still holds the "
                    "previous batch while it asks for the next one")
            kw["prefetch"] = prefetch
        kw["rank"], kw["world_size"] = _rank_world(rank, world_size)
        if max_pixels is not None:
            kw["max_pixels"] = _int("max_pixels", max_pixels, 1)
        if max_bytes is not None:
            kw["max_bytes"] = _int("max_bytes", max_bytes, 1)
        if max_error_records is not None:
            kw["max_error_records"] = _int("max_error_records", max_error_records, 0, _U32)
        kw["size"], kw["recipe"] = _recipe(preset, size, scale, ratio, interpolation, crop_pct, resize, hflip)
        if max_scans is not None:
            kw["max_scans"] = _int("max_scans", max_scans, 1, _U32)
        if max_error_rate is not None:
            if isinstance(max_error_rate, bool) or not isinstance(max_error_rate, numbers.Real):
                raise TypeError(f"max_error_rate must be a number from 0 to 1, got {max_error_rate!r}")
            if not 0 <= max_error_rate <= 1:
                raise ValueError(f"max_error_rate must be from 0 to 1 (1: never stop), got {max_error_rate}")
            kw["max_error_rate"] = float(max_error_rate)
        kw["flags"] = ((_sluice.FLAG_CHECKSUM if _flag("checksum", checksum) else 0)
                       | (_sluice.FLAG_EXIF if _flag("exif", exif) else 0)
                       | (_sluice.FLAG_KEEP_ALPHA if _flag("keep_alpha", keep_alpha) else 0)
                       | (_sluice.FLAG_FAST if _flag("fast", fast) else 0))
        if fields is not None:
            kw["fields"] = _schema_json(fields)
        kw.update(_cache_args(cache, cache_share, cache_what))
        if (local_rank is None) != (local_world_size is None):
            raise ValueError("local_rank and local_world_size go together: give both or neither")
        if local_world_size is not None:
            kw["local_world_size"] = _int("local_world_size", local_world_size, 1, _U32)
            kw["local_rank"] = _int("local_rank", local_rank, 0, kw["local_world_size"] - 1)
        kw["decode"] = _choice("decode", decode, _DECODE)
        if gpu_device is not None:
            kw["gpu_device"] = _int("gpu_device", gpu_device, 0, 1024)
        for name, value in (("gpu_budget", gpu_budget), ("gpu_staging", gpu_staging)):
            if value is not None:
                try:
                    kw[name] = parse_size(value)
                except (TypeError, ValueError) as e:
                    raise type(e)(f"{name}: {e}") from None
        if gpu_max_pixels is not None:
            kw["gpu_max_pixels"] = _int("gpu_max_pixels", gpu_max_pixels, 1)
        if gpu_engines is not None:
            kw["gpu_engines"] = _int("gpu_engines", gpu_engines, 1, 4)
        if worker_nice is not None:
            kw["worker_nice"] = _int("worker_nice", worker_nice, 0, 19)
        if order_range is not None:
            kw["order_begin"], kw["order_end"] = _order_range(order_range)
        kw.update(_io_args(io_requests, io_timeout, io_retries, io_hedge, io_readahead))
        self.fields = fields
        self.source = source
        self.batch_size = kw["batch_size"]
        self.rank, self.world_size = kw["rank"], kw["world_size"]
        try:
            self._ld = _sluice._Loader(source, **kw)
        except BudgetError as e:  # the library's sentence, then this front end's words
            e.args = (f"{e.args[0]}; in Python: the budget=, batch_size=, size=, workers= and cache= "
                      "arguments of sluice.Loader",)
            raise

    # -- iteration --
    def __iter__(self):
        """One pass: batches of one epoch (see the class docstring for which)."""
        self._begin_pass()
        yield from self._batches()

    def _batches(self):
        """The rest of the current epoch, from where the loader is."""
        while True:
            raw = self._next_raw()
            if raw is None:
                return
            batch = Batch(raw)
            del raw
            yield batch
            del batch  # hold nothing while waiting for the next one

    def _begin_pass(self):
        """Position the loader for a new ``for`` loop, as a DataLoader would:
        where set_epoch/load_state_dict (or construction) put it, else at the
        start of the epoch after the one the last pass was in. Returns True
        when it moved the loader (batches staged ahead are then stale)."""
        if self._positioned:
            self._positioned = False
            return False
        st = self._handle().get_state()  # after the last delivered batch
        # batch 0: the last pass took the epoch's last batch (the loader is at
        # the next epoch's start already; set_epoch there costs nothing)
        self._handle().set_epoch(st["epoch"] + (1 if st["batch"] else 0))
        return True

    def next_batch(self):
        """The next batch, or None at the end of the epoch (then the next call
        starts the next epoch). It continues the current pass; a ``for`` after
        it starts the next epoch, as after a loop."""
        self._positioned = False
        raw = self._next_raw()
        return None if raw is None else Batch(raw)

    def _next_raw(self):
        try:
            raw = self._next_raw_once()
        except (SampleError, SlotsHeldError):
            # The loader stopped the pass, not you: the next loop goes on with it.
            self._positioned = True
            raise
        if raw is None:  # the pass ended: what it measured
            if not self._hinted:
                hint = _gpu_held_hint(self.stats(), first=self._passes_ended == 0, world=_world())
                if hint:
                    self._hinted = True
                    warnings.warn(hint, PerformanceWarning, stacklevel=3)
            self._passes_ended += 1
        return raw

    def _next_raw_once(self):
        ld = self._handle()
        try:
            return ld.next()
        except SlotsHeldError:
            # Views caught in reference cycles hold slots until the cycle
            # collector runs: run it once before blaming the caller.
            if gc.collect() == 0:
                raise
        return ld.next()

    def _handle(self):
        if self._ld is None or self._ld.closed:
            raise ValueError("the loader is closed")
        return self._ld

    def __len__(self):
        """Nominal batches per epoch for this rank."""
        return self._handle().len()

    @property
    def num_samples(self):
        """Samples per epoch for this rank."""
        return self._handle().num_samples()

    @property
    def dataset_size(self):
        """Samples in the whole dataset."""
        return self._handle().dataset_size()

    def set_epoch(self, epoch):
        """Restart iteration at the start of ``epoch`` (batches you hold stay
        valid); the next ``for`` runs it."""
        self._handle().set_epoch(_int("epoch", epoch))
        self._positioned = True

    def state_dict(self):
        """Iteration state after the last delivered batch: a plain dict of ints
        (and ``gone``, a list of ints). To resume on another number of ranks,
        merge every rank's with :func:`sluice.merge_states`."""
        return self._handle().get_state()

    def load_state_dict(self, state):
        """Resume from :meth:`state_dict` of this rank of a loader over the same
        dataset and configuration (the next batch is the one after the saved
        position), or from :func:`sluice.merge_states` of every rank's on any
        number of ranks (this rank's share of what they left)."""
        if not isinstance(state, dict):
            raise TypeError(f"load_state_dict expects the dict state_dict() returned, got {type(state).__name__}")
        unknown = set(state) - _STATE_KEYS
        if unknown:
            raise ValueError(f"load_state_dict: unknown keys {sorted(unknown)}")
        self._handle().set_state(dict(state))
        self._positioned = True

    def stats(self):
        """Throughput, consumer wait, memory by category against the budget,
        slots, errors: a dict (see docs/python.md)."""
        return self._handle().stats()

    def errors(self, first=0, max=None):
        """Error records: dicts {index, path, epoch, code, code_name, reason}."""
        return self._handle().errors(_int("first", first), -1 if max is None else _int("max", max))

    def sample_path(self, index):
        """Path of dataset sample ``index``."""
        return self._handle().sample_path(_int("index", index))

    def slot_region(self):
        """(address, length) of the one memory region all batch slots live in,
        for pinning it. From this call on the slots are fixed in the budget
        (pinned pages cannot be given back): BudgetError while a lowered limit
        keeps some retired and the budget cannot hold them again."""
        return self._handle().slot_region()

    # -- lifetime --
    def close(self):
        """Stop the workers and free the loader. Batches you still hold stay
        valid; the memory goes when the last of them is dropped."""
        if self._ld is not None:
            self._ld.close()
        if self._budget is not None:
            self._budget.close()  # the loader keeps its own reference until it is gone

    def __copy__(self):
        raise TypeError("a sluice.Loader cannot be copied (it owns worker threads and its memory); "
                        "create another Loader with the same arguments")

    def __deepcopy__(self, memo):
        self.__copy__()

    def __reduce_ex__(self, protocol):
        raise TypeError("a sluice.Loader cannot be pickled (it owns worker threads and its memory); "
                        "create the Loader in the process that iterates it (e.g. in the Dataset's "
                        "__iter__ or a DataLoader's worker_init_fn)")

    @property
    def closed(self):
        return self._ld is None or self._ld.closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        ld = getattr(self, "_ld", None)
        if ld is not None:
            ld.close()

    def __repr__(self):
        state = "closed" if self.closed else f"{len(self)} batches/epoch"
        return f"<sluice.Loader {self.source!r} batch_size={self.batch_size} {state}>"


_STATE_KEYS = {"version", "seed", "epoch", "batch", "tail", "dataset_size", "rank", "world_size", "batch_size",
               "flags", "pad", "span_begin", "span_end", "gone"}


def merge_states(states):
    """Merge the ``state_dict()`` of every rank of one world (taken at the same
    epoch, e.g. after the same number of DDP steps; any order) into one state:
    the positions of the epoch's order that none of them delivered or found
    bad. ``load_state_dict`` of it on any number of ranks shares those, so
    every sample of the epoch is delivered once over both runs (docs/python.md,
    "Resume on another number of ranks")."""
    states = list(states)
    for i, st in enumerate(states):
        if not isinstance(st, dict):
            raise TypeError(f"merge_states: state {i} is a {type(st).__name__}, not a state_dict() dict")
        unknown = set(st) - _STATE_KEYS
        if unknown:
            raise ValueError(f"merge_states: state {i} has unknown keys {sorted(unknown)}")
    if not states:
        raise ValueError("merge_states: no states (give every rank's state_dict())")
    try:
        states.sort(key=lambda st: int(st["rank"]))
    except (KeyError, TypeError, ValueError):
        raise ValueError("merge_states: every state needs an int 'rank'") from None
    return _sluice._merge_states(states)


def _order_range(value):
    """(begin, end) of an order range, checked."""
    try:
        begin, end = value
    except (TypeError, ValueError):
        raise TypeError(f"order_range must be a pair (begin, end) of ints, got {value!r}") from None
    begin, end = _int("order_range begin", begin), _int("order_range end", end)
    if begin >= end:
        raise ValueError(f"order_range ({begin}, {end}) is empty: begin must be < end")
    return begin, end


# sluice.Loader's own argument names (for "did you mean" on a typo)
_ARGS = [n for n, p in inspect.signature(Loader).parameters.items() if p.kind is p.POSITIONAL_OR_KEYWORD]


# ---- single images ---------------------------------------------------------
def _crop_group(crop_group):
    """The crop_group argument of the single-sample calls: None or a field's group."""
    if crop_group is not None and (not isinstance(crop_group, str) or not crop_group):
        raise TypeError(f"crop_group must be a field's crop_group or name (a non-empty str) or None, "
                        f"got {crop_group!r}")
    return crop_group


def decode_image(data, preset=None, size=224, seed=0, epoch=0, index=0, exif=False,
                 keep_alpha=False, max_pixels=None, max_bytes=None, scale=(0.08, 1.0),
                 ratio=(3.0 / 4.0, 4.0 / 3.0), interpolation="bilinear", crop_pct=None, resize=None,
                 hflip=0.5, fast=False, max_scans=None, crop_group=None):
    """Decode one JPEG/PNG (bytes-like) with the library's own decode path.

    preset None: the full image, HWC uint8. "train"/"val": the preset's output,
    CHW uint8 [C, height, width] (size is an int or (height, width)); "train"
    randomness is that of sample ``index`` in ``epoch`` of a loader seeded
    with ``seed``, for the field of a schema whose ``crop_group`` is
    ``crop_group`` (a field without one: its name); None: the field "image"
    (the loader without ``fields=``). The recipe options are those of
    :class:`Loader` (with ``fields=``, the field's own).
    """
    import numpy as np

    if preset is None:
        p = _sluice.TRANSFORM_NONE
    else:
        p = _choice("preset", preset, _PRESETS)
    side, recipe = _recipe(preset, size, scale, ratio, interpolation, crop_pct, resize, hflip)
    flags = ((_sluice.FLAG_EXIF if _flag("exif", exif) else 0)
             | (_sluice.FLAG_KEEP_ALPHA if _flag("keep_alpha", keep_alpha) else 0)
             | (_sluice.FLAG_FAST if _flag("fast", fast) else 0))
    kw = {"recipe": recipe, "crop_group": _crop_group(crop_group)}
    if max_pixels is not None:
        kw["max_pixels"] = _int("max_pixels", max_pixels, 1)
    if max_bytes is not None:
        kw["max_bytes"] = _int("max_bytes", max_bytes, 1)
    if max_scans is not None:
        kw["max_scans"] = _int("max_scans", max_scans, 1, _U32)
    buf, shape = _sluice._decode_image(
        data, p, side, _int("seed", seed), _int("epoch", epoch), _int("index", index), flags, **kw)
    return np.frombuffer(buf, dtype=np.uint8).reshape(shape)


def build_info():
    """What this build decodes: a dict with the keys ``version`` ("0.2.0"),
    ``jpeg`` ("libjpeg-turbo 2.1.5 (libjpeg API 62)"), ``png`` ("libspng
    0.7.3"), ``webp``, ``video`` (FFmpeg's libraries), ``nvjpeg`` (the
    library found at run time) and ``remote`` (libcurl, for s3:// and
    http(s):// sources); a part this build lacks is None. From
    sl_build_info()."""
    info = {}
    for item in _sluice.build_info().split(";"):
        key, _, value = item.partition("=")
        info[key] = None if value in ("off", "not loadable") else value
    return info


def train_crop(width, height, seed=0, epoch=0, index=0, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0),
               hflip=0.5, crop_group=None):
    """The train preset's crop for a sample: (x, y, w, h, flip) in source pixels,
    for the given RandomResizedCrop ``scale`` and ``ratio`` and flip probability
    (``crop_group`` as in :func:`decode_image`)."""
    _, recipe = _recipe("train", 1, scale, ratio, "bilinear", None, None, hflip)
    return _sluice.train_crop(_int("width", width, 1, _U32), _int("height", height, 1, _U32),
                              _int("seed", seed), _int("epoch", epoch), _int("index", index), recipe,
                              _crop_group(crop_group))


# ---- single video clips ------------------------------------------------------
_SHORT_CLIP = {"pad": 0, "loop": 1, "error": 2}


def _video_kw(frames, stride, fps, size, preset, short, seed, epoch, index, max_pixels, max_frames,
              max_bytes, max_seconds, codecs, crop_group=None):
    kw = dict(frames=_int("frames", frames, 1, 512), stride=_int("stride", stride, 1, _U32),
              fps=float(fps), size=_int("size", size, 1, 4096), preset=_choice("preset", preset, _PRESETS),
              short_clip=_choice("short", short, _SHORT_CLIP), seed=_int("seed", seed),
              epoch=_int("epoch", epoch), index=_int("index", index), max_seconds=float(max_seconds or 0),
              codecs=codecs, crop_group=_crop_group(crop_group))
    for name, v in (("max_pixels", max_pixels), ("max_frames", max_frames), ("max_bytes", max_bytes)):
        if v is not None:  # max_pixels >= 1, as the Loader's and decode_image's (None: the default)
            kw[name] = _int(name, v, 1 if name == "max_pixels" else 0)
    return kw


def decode_video(path, frames=16, stride=2, fps=0.0, size=112, preset="train", short="pad", seed=0,
                 epoch=0, index=0, max_pixels=None, max_frames=None, max_bytes=None, max_seconds=None,
                 codecs=None, crop_group=None):
    """Decode one clip of a video file as a loader's ``kind: "video"`` field does.

    Returns ``(clip, taken)``: clip is uint8 ``[frames, 3, size, size]`` (RGB
    planes); taken a dict: ``frames`` (the stream's frame indices used),
    ``box`` (x, y, w, h of the crop in displayed pixels), ``flip``, ``scaled``
    and ``window`` (val: the box scaled to this size, then the centre window). ``frames`` every
    ``stride`` frames (or at ``fps`` when > 0); train: a seeded start and one
    RandomResizedCrop box + flip for every frame (the randomness of sample
    ``index`` in ``epoch`` of a loader seeded with ``seed``, for the field whose
    ``crop_group`` is ``crop_group``, or whose name it is when the field has no
    group; None: a field named "image" or in the group "image"); val: the centred
    clip, resize + centre crop. ``short``: a clip longer than the video
    repeats its last frame ("pad"), wraps around ("loop") or fails ("error").
    """
    import numpy as np

    buf, shape, taken = _sluice._decode_video(
        os.fspath(path), **_video_kw(frames, stride, fps, size, preset, short, seed, epoch, index,
                                     max_pixels, max_frames, max_bytes, max_seconds, codecs, crop_group))
    return np.frombuffer(buf, dtype=np.uint8).reshape(shape), taken


def probe_video(path, max_pixels=None, max_frames=None, max_bytes=None, max_seconds=None, codecs=None):
    """Stream headers only (nothing decoded), limits checked: a dict with
    width, height (displayed), rotation, fps, duration, frames, codec."""
    return _sluice._probe_video(
        os.fspath(path), **{k: v for k, v in _video_kw(1, 1, 0, 1, "train", "pad", 0, 0, 0, max_pixels,
                                                        max_frames, max_bytes, max_seconds, codecs).items()
                            if k in ("max_pixels", "max_frames", "max_bytes", "max_seconds", "codecs")})

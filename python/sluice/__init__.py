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
import numbers
import os

from . import _sluice
from ._sluice import (  # noqa: F401  (re-exported)
    BudgetError,
    DecodeError,
    Field,
    SampleError,
    SlotsHeldError,
    probe_image,
)

#: "0.1.0": the version of the libsluice built into this extension.
__version__ = _sluice.version().split()[0]
#: The full runtime version string, e.g. "0.1.0 (libjpeg turbo, png libspng)".
build_info = _sluice.version()

__all__ = [
    "Loader", "Budget", "Batch", "Field", "decode_image", "probe_image", "train_crop", "parse_size",
    "BudgetError", "DecodeError", "SampleError", "SlotsHeldError", "__version__", "build_info",
]

_U32 = (1 << 32) - 1
_U64 = (1 << 64) - 1
_PRESETS = {"train": _sluice.PRESET_TRAIN, "val": _sluice.PRESET_VAL}
_ON_ERROR = {"skip": _sluice.ON_ERROR_SKIP, "raise": _sluice.ON_ERROR_RAISE}


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
        s = self._b.stats()
        return f"<sluice.Budget limit={s['limit']} used={s['used']} loaders={s['loaders']}>"


# ---- batches ---------------------------------------------------------------
class Batch(dict):
    """One batch: a dict {"image", "label", "index"} of :class:`Field` views.

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
      size         output height = width (224)
      shuffle      new seeded permutation each epoch (True)
      seed         seeds the order and the augmentation (0)
      drop_last    drop the uneven rank tail and the last short batch (False)
      budget       bytes the loader may hold, int or "512M"/"2G" ("512M"); a shared
                   sluice.Budget several loaders draw from; or "auto" (what the
                   container allows, governed: see Budget)
      governor     True: a governor moves this loader's budget (at most `budget`)
                   to keep the container's memory cgroup under its limit
      workers      decode threads; None = the CPUs this process may run on
      prefetch     batch slots (in flight + held by you); None = as the budget allows
      on_error     "skip" (record and go on) or "raise" (SampleError, batch dropped)
      rank, world_size   shard of the dataset; default from RANK / WORLD_SIZE
      max_pixels, max_bytes  per-sample limits checked from headers (library defaults)
      checksum     hash every batch (Batch.checksum)
      exif         apply EXIF orientation
      keep_alpha   4 output channels (RGBA)

    A ``for`` loop runs over the rest of the current epoch; the next loop runs
    the next epoch. Errors: ValueError/TypeError for bad arguments,
    FileNotFoundError for a missing source, BudgetError (a ValueError and a
    MemoryError) for a budget below the pipeline's minimum (the message states
    it), SlotsHeldError when every slot is held by your views.
    """

    def __init__(self, source, batch_size=256, preset="train", size=224, shuffle=True, seed=0,
                 drop_last=False, budget="512M", workers=None, prefetch=None, on_error="skip",
                 rank=None, world_size=None, max_pixels=None, max_bytes=None, checksum=False,
                 exif=False, keep_alpha=False, max_error_records=None, governor=False):
        self._ld = None
        if not isinstance(source, (str, bytes, os.PathLike)):
            raise TypeError(f"source must be a path (str or os.PathLike), got {type(source).__name__}")
        source = os.fspath(source)
        if isinstance(source, bytes):
            source = os.fsdecode(source)
        if not source:
            raise ValueError("source is empty: give an image folder or a .csv/.jsonl manifest")
        if not os.path.exists(source):
            raise FileNotFoundError(f"source {source!r} does not exist")
        kw = {
            "batch_size": _int("batch_size", batch_size, 1, _U32),
            "size": _int("size", size, 1, 1 << 16),
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
            kw["workers"] = _int("workers", workers, 1, 4096)
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
        kw["flags"] = ((_sluice.FLAG_CHECKSUM if _flag("checksum", checksum) else 0)
                       | (_sluice.FLAG_EXIF if _flag("exif", exif) else 0)
                       | (_sluice.FLAG_KEEP_ALPHA if _flag("keep_alpha", keep_alpha) else 0))
        self.source = source
        self.batch_size = kw["batch_size"]
        self.rank, self.world_size = kw["rank"], kw["world_size"]
        self._ld = _sluice._Loader(source, **kw)

    # -- iteration --
    def __iter__(self):
        """Batches for the rest of the current epoch (the next loop: the next epoch)."""
        while True:
            raw = self._next_raw()
            if raw is None:
                return
            batch = Batch(raw)
            del raw
            yield batch
            del batch  # hold nothing while waiting for the next one

    def next_batch(self):
        """The next batch, or None at the end of the epoch (then the next call
        starts the next epoch)."""
        raw = self._next_raw()
        return None if raw is None else Batch(raw)

    def _next_raw(self):
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
        """Restart iteration at the start of ``epoch`` (batches you hold stay valid)."""
        self._handle().set_epoch(_int("epoch", epoch))

    def state_dict(self):
        """Iteration state after the last delivered batch: a plain dict of ints."""
        return self._handle().get_state()

    def load_state_dict(self, state):
        """Resume from :meth:`state_dict` of a loader over the same dataset and
        configuration; the next batch is the one after the saved position."""
        if not isinstance(state, dict):
            raise TypeError(f"load_state_dict expects the dict state_dict() returned, got {type(state).__name__}")
        known = {"version", "seed", "epoch", "batch", "tail", "dataset_size", "rank", "world_size",
                 "batch_size", "flags"}
        unknown = set(state) - known
        if unknown:
            raise ValueError(f"load_state_dict: unknown keys {sorted(unknown)}")
        self._handle().set_state(dict(state))

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
        """(address, length) of the one memory region all batch slots live in."""
        return self._handle().slot_region()

    # -- lifetime --
    def close(self):
        """Stop the workers and free the loader. Batches you still hold stay
        valid; the memory goes when the last of them is dropped."""
        if self._ld is not None:
            self._ld.close()
        if self._budget is not None:
            self._budget.close()  # the loader keeps its own reference until it is gone

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


# ---- single images ---------------------------------------------------------
def decode_image(data, preset=None, size=224, seed=0, epoch=0, index=0, exif=False,
                 keep_alpha=False, max_pixels=None, max_bytes=None):
    """Decode one JPEG/PNG (bytes-like) with the library's own decode path.

    preset None: the full image, HWC uint8. "train"/"val": the preset's output,
    CHW uint8 [C, size, size]; "train" randomness is that of sample ``index``
    in ``epoch`` of a loader seeded with ``seed``.
    """
    import numpy as np

    if preset is None:
        p = _sluice.TRANSFORM_NONE
    else:
        p = _choice("preset", preset, _PRESETS)
    flags = ((_sluice.FLAG_EXIF if _flag("exif", exif) else 0)
             | (_sluice.FLAG_KEEP_ALPHA if _flag("keep_alpha", keep_alpha) else 0))
    kw = {}
    if max_pixels is not None:
        kw["max_pixels"] = _int("max_pixels", max_pixels, 1)
    if max_bytes is not None:
        kw["max_bytes"] = _int("max_bytes", max_bytes, 1)
    buf, shape = _sluice._decode_image(
        data, p, _int("size", size, 1, 1 << 16), _int("seed", seed), _int("epoch", epoch),
        _int("index", index), flags, **kw)
    return np.frombuffer(buf, dtype=np.uint8).reshape(shape)


def train_crop(width, height, seed=0, epoch=0, index=0):
    """The train preset's crop for a sample: (x, y, w, h, flip) in source pixels."""
    return _sluice.train_crop(_int("width", width, 1, _U32), _int("height", height, 1, _U32),
                              _int("seed", seed), _int("epoch", epoch), _int("index", index))

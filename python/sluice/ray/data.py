"""sluice as a Ray Data source: read tasks that lease slices of the seeded epoch order.

    ds = sluice.ray.read("/data/train", epoch=3, budget="1G", workers=4)
    for batch in ds.iter_torch_batches(batch_size=256):   # "image" uint8 [N, 3, 224, 224], "label", "index"
        ...

How it works (docs/ray.md):
  * The epoch's order is the one a plain sluice.Loader with the same seed
    delivers: one seeded permutation of the dataset. It is cut into leases,
    contiguous slices [begin, end) of it, each read by a loader with that
    order_range: together they hold every sample of the epoch exactly once,
    and read in order they are the epoch's order.
  * One read task per lease runs a sluice.Loader over it (``workers``
    threads inside the task, ``budget`` bytes) and yields its batches as
    blocks of at most DataContext.target_max_block_size bytes. Ray is told
    what a task holds: ``num_cpus=workers`` and ``memory=`` the budget plus
    two blocks (the copy out of the batch slot and the Arrow block).
  * Every sample's bytes depend on (seed, epoch, sample) only, so a lease
    read again yields the same bytes in the same order: a task Ray re-runs
    (its worker died, its node was lost) gives the blocks it gave before.
    A transient I/O error (OSError) inside a task is retried in the task,
    from the loader state after the last block it yielded.
  * Each task reports its loader's stats() when its lease is done; stats(ds)
    collects them (with how many times each lease was started).
"""
import dataclasses
import math
import os
import time

import numpy as np
import ray
from ray.data import Datasource, ReadTask
from ray.data.block import BlockAccessor, BlockMetadata
from ray.data.context import DataContext

import sluice

# sluice.Loader arguments a lease decides, or that cannot cross to a read task
_LEASE_OWNS = {
    "rank": "each read task takes one lease of the epoch's order (leases=)",
    "world_size": "each read task takes one lease of the epoch's order (leases=)",
    "drop_last": "the dataset holds every sample of the epoch once",
    "num_workers": "use workers= (decode threads inside each read task)",
}
# A block's size when Ray's target allows more: Ray Data's own readers make
# blocks of a few MiB to tens of MiB; the smaller the block, the sooner a read
# task's first one leaves (it waits for its batch to be decoded whole).
BLOCK_BYTES = 32 << 20
_RETRIED = (OSError,)  # transient I/O; a vanished dataset is not transient
_NOT_RETRIED = (FileNotFoundError,)


@dataclasses.dataclass(frozen=True)
class Lease:
    """Lease ``index`` of ``count``: the positions [begin, end) of the epoch's
    seeded order, ``rows`` = end - begin samples (before failed files)."""

    index: int
    count: int
    rows: int
    begin: int
    end: int


def plan_leases(n, count):
    """Contiguous leases covering the n positions of an epoch's order exactly once."""
    count = max(1, min(int(count), n))
    cuts = [i * n // count for i in range(count + 1)]
    return [Lease(i, count, cuts[i + 1] - cuts[i], cuts[i], cuts[i + 1]) for i in range(count)]


@ray.remote(num_cpus=0)
class _StatsSink:
    """Where read tasks leave their loaders' stats (one small actor a dataset)."""

    def __init__(self):
        self.starts = {}
        self.done = {}

    def started(self, lease, node, pid):
        self.starts.setdefault(lease, []).append({"node": node, "pid": pid})

    def finished(self, lease, info):
        self.done[lease] = info

    def collect(self):
        return self.starts, self.done


def _options(loader_options):
    """Loader arguments checked once on the driver; refused where a lease decides."""
    for name, why in _LEASE_OWNS.items():
        if name in loader_options:
            raise TypeError(f"sluice.ray.read: {name}= is not taken: {why}")
    budget = loader_options.get("budget", "512M")
    if isinstance(budget, sluice.Budget) or (isinstance(budget, str) and budget.strip().lower() == "auto"):
        raise TypeError("sluice.ray.read: budget must be a size (each read task has its own, declared to Ray as "
                        "memory=); a sluice.Budget or 'auto' cannot cross to a read task")
    if loader_options.get("cache_share", "none") != "none":
        raise ValueError("sluice.ray.read: cache_share must be 'none' (a read task's cache is its own)")
    if loader_options.get("decode", "cpu") != "cpu":
        raise ValueError("sluice.ray.read: read tasks decode on the CPU (decode='cpu'); the GPU decodes in "
                         "sluice.ray.Loader inside a Ray Train worker")
    return dict(loader_options, budget=budget)


def _probe(source, options):
    """(dataset size, bytes a row, {column: (dtype, per-row shape)}) from one
    sample decoded on the driver by a loader of one-sample batches."""
    probe_opts = dict(options, workers=1, prefetch=2, shuffle=False)
    with sluice.Loader(source, batch_size=1, **probe_opts) as ld:
        n = ld.dataset_size
        batch = ld.next_batch()
        if batch is None:
            raise ValueError(f"sluice.ray.read: {source!r} delivered no sample (see the loader's errors())")
        columns = {name: (f.dtype, tuple(f.shape[1:])) for name, f in batch.items()}
        row_bytes = sum(f.nbytes for f in batch.values())
        del batch
    return n, row_bytes, columns


class SluiceDatasource(Datasource):
    """A Ray Data Datasource over one epoch of a sluice loader (see the module doc).

    ``source`` and ``loader_options`` are those of :class:`sluice.Loader`
    (``preset``, ``size``, ``fields``, ``seed``, ``shuffle``, ``budget``,
    ``workers``, ``on_error``, ...); ``rank``, ``world_size`` and
    ``drop_last`` belong to the leases. ``batch_size`` is the loader's batch
    in a read task, so the rows of one block: None for as many as fit
    ``DataContext.target_max_block_size``, 32 MiB (BLOCK_BYTES), an eighth
    of the budget and a lease.
    ``leases``: how many read tasks (None: the parallelism Ray asks for,
    at most one a block's worth of samples). ``retries``: OSError retries in a
    task. Subclasses may wrap :meth:`read_lease`.
    """

    def __init__(self, source, *, epoch=0, leases=None, batch_size=None, retries=3, **loader_options):
        super().__init__()
        self._source = os.fspath(source)
        if "://" not in self._source:  # read tasks run where Ray puts them: not in the driver's folder
            self._source = os.path.abspath(self._source)
        self._epoch = sluice._int("epoch", epoch)
        self._leases = None if leases is None else sluice._int("leases", leases, 1, sluice._U32)
        self._batch_size = None if batch_size is None else sluice._int("batch_size", batch_size, 1, sluice._U32)
        self._retries = sluice._int("retries", retries, 0, 1000)
        self._options = _options(loader_options)
        self._budget = sluice.parse_size(self._options["budget"])
        self._n, self._row_bytes, self._columns = _probe(self._source, self._options)
        self._sink = _StatsSink.remote()  # shared by the copies Ray Data makes of this object

    # -- what Ray asks --
    def get_name(self):
        return "Sluice"

    def estimate_inmemory_data_size(self):
        return self._n * self._row_bytes

    def rows_per_block(self, target=None):
        """Rows of one block: within Ray's target block size, BLOCK_BYTES (a
        task's first block comes sooner) and an eighth of the budget (the
        loader keeps two batch slots and a quarter of the budget for one
        sample's decode), at least 1; at most batch_size and the samples of
        the largest lease."""
        if target is None:
            target = DataContext.get_current().target_max_block_size
        rows = max(1, min(self._budget // 8, BLOCK_BYTES) // self._row_bytes)
        if self._leases is not None:
            rows = min(rows, -(-self._n // self._leases))
        if target:
            rows = min(rows, max(1, target // self._row_bytes))
        if self._batch_size is not None:
            rows = min(rows, self._batch_size)
        return rows

    @property
    def dataset_size(self):
        return self._n

    @property
    def columns(self):
        """{column: (dtype, shape of one row)}"""
        return dict(self._columns)

    def task_memory(self, target=None):
        """Bytes a read task holds at most: the budget and two blocks."""
        return self._budget + 2 * self.rows_per_block(target) * self._row_bytes

    def get_read_tasks(self, parallelism, per_task_row_limit=None, data_context=None):
        target = (data_context or DataContext.get_current()).target_max_block_size
        rows = self.rows_per_block(target)
        count = self._leases or max(1, min(int(parallelism), math.ceil(self._n / rows)))
        rows = min(rows, -(-self._n // count))  # no slot larger than a lease
        tasks = []
        for lease in plan_leases(self._n, count):
            meta = BlockMetadata(num_rows=lease.rows, size_bytes=int(lease.rows * self._row_bytes),
                                 exec_stats=None, input_files=None)
            tasks.append(ReadTask(_LeaseRead(self, lease, rows), meta))
        return tasks

    # -- one lease --
    def _loader(self, lease, rows, state=None):
        """The lease's loader, over the order range [lease.begin, lease.end)
        (one rank of one), at the epoch's start or at ``state``."""
        ld = sluice.Loader(self._source, batch_size=rows, rank=0, world_size=1, drop_last=False,
                           order_range=(lease.begin, lease.end), **self._options)
        try:
            if state is None:
                ld.set_epoch(self._epoch)
            else:
                ld.load_state_dict(state)
        except BaseException:
            ld.close()
            raise
        return ld

    def read_lease(self, lease, rows):
        """Yield the lease's blocks (dicts of numpy arrays, copies out of the
        batch slots), the same bytes every time it runs. OSError from the
        loader is retried up to ``retries`` times, from the state after the
        last block yielded."""
        state, failures, delivered = None, 0, 0
        t0 = time.monotonic()
        while True:
            try:
                with self._loader(lease, rows, state) as ld:
                    while True:
                        batch = ld.next_batch()
                        if batch is None:
                            break
                        block = {name: np.array(f) for name, f in batch.items()}
                        del batch  # the slot goes back to the loader
                        state = ld.state_dict()
                        delivered += len(block["index"])
                        yield block
                    info = ld.stats()
                    info["error_records"] = ld.errors(max=16)
                break
            except _NOT_RETRIED:
                raise
            except _RETRIED:
                failures += 1
                if failures > self._retries:
                    raise
        info.update(lease=lease.index, leases=lease.count, rows=delivered, retries=failures,
                    task_seconds=time.monotonic() - t0, node=_node_id(), pid=os.getpid())
        self._finished(lease, info)

    def _started(self, lease):
        self._sink.started.remote(lease.index, _node_id(), os.getpid())

    def _finished(self, lease, info):
        ray.get(self._sink.finished.remote(lease.index, info))

    def stats(self):
        """The read tasks' reports so far: see :func:`stats`."""
        starts, done = ray.get(self._sink.collect.remote())
        return _summary(starts, done, self._budget)


def _node_id():
    """This process's Ray node (None outside Ray: never starts one)."""
    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None


class _LeaseRead:
    """A read task's function: one lease through the datasource's read_lease,
    as Arrow blocks (tensor columns for the fixed-shape fields)."""

    def __init__(self, datasource, lease, rows):
        self.datasource, self.lease, self.rows = datasource, lease, rows

    def __call__(self):
        self.datasource._started(self.lease)
        for block in self.datasource.read_lease(self.lease, self.rows):
            yield BlockAccessor.batch_to_block(block)


def _summary(starts, done, budget):
    leases = {}
    for i in sorted(set(starts) | set(done)):
        d = dict(done.get(i, {}))
        d["runs"] = len(starts.get(i, []))
        d["done"] = i in done
        leases[i] = d
    fin = list(done.values())
    return {
        "leases": leases,
        "leases_done": len(fin),
        "samples": sum(d.get("rows", 0) for d in fin),
        "errors": sum(d.get("errors", 0) for d in fin),
        "runs": sum(len(v) for v in starts.values()),
        "retries": sum(d.get("retries", 0) for d in fin),
        "budget_bytes": budget,
        "peak_accounted_bytes": max((d.get("peak_accounted_bytes", 0) for d in fin), default=0),
        "nodes": sorted({d["node"] for d in fin if d.get("node")}),
        "task_seconds": sum(d.get("task_seconds", 0.0) for d in fin),
    }


def read(source, *, epoch=0, leases=None, batch_size=None, workers=None, budget="512M", retries=3,
         num_cpus=None, memory=None, concurrency=None, **loader_options):
    """A ``ray.data.Dataset`` of one epoch of ``source``, read by sluice.

    Rows are samples: one column a field of the batch ("image" uint8 [C, H,
    W], "label", "index"; with ``fields=`` one a field, and "<f>_len"), the
    bytes a plain ``sluice.Loader(source, ...)`` with the same options gives
    each sample. ``epoch`` picks the epoch's order and augmentation (a new
    read per epoch re-shuffles). Each read task takes one lease and runs a
    loader with ``workers`` threads (None: 4, at most the CPUs of the
    largest node) in ``budget`` bytes; Ray reserves ``num_cpus`` (default
    workers) and ``memory`` (default: the budget plus two blocks) for it.
    ``concurrency``: at most that many read tasks at once. Other arguments:
    :class:`SluiceDatasource` and :class:`sluice.Loader`. ``stats(ds)``
    returns what the tasks reported.
    """
    if not ray.is_initialized():
        ray.init()  # as Ray Data's own read functions do
    if workers is None:
        node_cpus = [n["Resources"].get("CPU", 0) for n in ray.nodes() if n.get("Alive")]
        workers = max(1, min(4, int(max(node_cpus, default=1))))
    workers = sluice._int("workers", workers, 1, 4096)
    ds = SluiceDatasource(source, epoch=epoch, leases=leases, batch_size=batch_size, retries=retries,
                          workers=workers, budget=budget, **loader_options)
    return ray.data.read_datasource(
        ds, num_cpus=workers if num_cpus is None else num_cpus,
        memory=ds.task_memory() if memory is None else memory, concurrency=concurrency)


def _find_datasource(ds):
    """The SluiceDatasource a dataset reads, through its logical plan."""
    if isinstance(ds, SluiceDatasource):
        return ds
    plan = getattr(ds, "_logical_plan", None)
    todo = [plan.dag] if plan is not None else []
    while todo:
        op = todo.pop()
        src = getattr(op, "datasource", None)
        if isinstance(src, SluiceDatasource):
            return src
        todo.extend(getattr(op, "input_dependencies", []))
    raise ValueError("stats: this dataset reads no SluiceDatasource (pass the dataset sluice.ray.read returned, "
                     "one made from it, or the SluiceDatasource)")


def stats(ds):
    """What the read tasks of a dataset from :func:`read` reported, once it ran:
    a dict with ``leases`` ({lease: that task's loader stats() plus rows,
    retries, runs (times Ray started it), node, pid, task_seconds,
    error_records}) and totals: samples, errors, runs, retries,
    peak_accounted_bytes (the largest of one task), budget_bytes, nodes."""
    return _find_datasource(ds).stats()

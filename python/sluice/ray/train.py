"""sluice inside Ray Train: the loader of a ``train_loop_per_worker``.

    def train_loop_per_worker(config):
        loader = sluice.ray.Loader(config["data"], batch_size=256, budget="4G")   # resumes from
        for epoch in range(loader.epoch, config["epochs"]):                   # get_checkpoint()
            for images, labels in loader:
                ...
            sluice.ray.report({"epoch": epoch}, loader)

* rank and world size come from ``ray.train.get_context()`` (world rank and
  world size), the device from ``ray.train.torch.get_device()``;
* the node's CPUs are shared among the workers of the node: ``workers``
  defaults to the node's CPUs (Ray's CPU resource of the node, at most the
  process's affinity mask) divided by the local world size; a ``cache`` is
  one node cache for the workers of a node (``cache_share="node"`` with the
  local rank and local world size of Ray's context);
* its state goes into Ray Train checkpoints: :func:`report` writes this
  worker's state (``sluice-loader-rank00000.json``, one file a rank; Ray
  merges the workers' files into one checkpoint) beside what you saved, and a
  Loader made while ``ray.train.get_checkpoint()`` holds such files resumes
  from them (``resume=True``).
"""
import glob
import json
import os
import re
import tempfile

import ray
import ray.train

import sluice
import sluice.torch

STATE_FILE = "sluice-loader-rank{:05d}.json"
_STATE_RE = re.compile(r"sluice-loader-rank(\d+)\.json$")


class TrainContext:
    """This worker's place in the Ray Train worker group."""

    def __init__(self, rank, world_size, local_rank, local_world_size, node_rank):
        self.rank, self.world_size = rank, world_size
        self.local_rank, self.local_world_size = local_rank, local_world_size
        self.node_rank = node_rank

    def __repr__(self):
        return (f"TrainContext(rank={self.rank}, world_size={self.world_size}, local_rank={self.local_rank}, "
                f"local_world_size={self.local_world_size}, node_rank={self.node_rank})")


def train_context():
    """Rank, world size, local rank, local world size and node rank of this Ray
    Train worker, from ``ray.train.get_context()``. RuntimeError outside one."""
    try:
        ctx = ray.train.get_context()
        return TrainContext(ctx.get_world_rank(), ctx.get_world_size(), ctx.get_local_rank(),
                            ctx.get_local_world_size(), ctx.get_node_rank())
    except Exception as e:  # not in a worker: Ray says so in its own words
        raise RuntimeError("sluice.ray.Loader runs inside a Ray Train worker (train_loop_per_worker); "
                           f"elsewhere use sluice.torch.Loader ({type(e).__name__}: {e})") from None


def node_cpus():
    """The CPUs of this node for Ray: its CPU resource, at most the affinity mask."""
    cpus = len(os.sched_getaffinity(0))
    node = ray.get_runtime_context().get_node_id()
    for n in ray.nodes():
        if n.get("NodeID") == node and "CPU" in n.get("Resources", {}):
            cpus = min(cpus, int(n["Resources"]["CPU"]))
    return max(1, cpus)


class Loader(sluice.torch.Loader):
    """A :class:`sluice.torch.Loader` for a Ray Train worker.

    Arguments: those of sluice.torch.Loader, but ``rank``, ``world_size``,
    ``local_rank`` and ``local_world_size``, which Ray Train's context gives.
    ``device``: None for ``ray.train.torch.get_device()``. ``workers``: None
    for this worker's share of the node's CPUs. ``cache``: a node cache shared
    by the node's workers (``cache_share="node"`` unless given). ``resume``:
    True to resume from ``ray.train.get_checkpoint()`` when it holds loader
    states (:meth:`load_checkpoint`).

    ``epoch``: the epoch the next ``for`` runs; ``context``: the TrainContext.
    """

    def __init__(self, source, *, device=None, workers=None, resume=True, **kwargs):
        for name in ("rank", "world_size", "local_rank", "local_world_size"):
            if name in kwargs:
                raise TypeError(f"sluice.ray.Loader: {name}= comes from Ray Train's context "
                                "(ray.train.get_context()); leave it out")
        ctx = train_context()
        self.context = ctx
        if device is None:
            import ray.train.torch

            device = str(ray.train.torch.get_device())
        if workers is None and "num_workers" not in kwargs:
            workers = max(1, node_cpus() // max(1, ctx.local_world_size))
        if kwargs.get("cache") is not None:
            kwargs.setdefault("cache_share", "node")
        if kwargs.get("cache_share") == "node":
            kwargs["local_rank"], kwargs["local_world_size"] = ctx.local_rank, ctx.local_world_size
        super().__init__(source, device=device, workers=workers, rank=ctx.rank, world_size=ctx.world_size,
                         **kwargs)
        self.resumed_from = None
        if resume:
            self.load_checkpoint()

    @property
    def epoch(self):
        """The epoch the next ``for`` runs (after a resume: the one it resumes in)."""
        st = self.state_dict()
        if self.loader._positioned:
            return st["epoch"]
        return st["epoch"] + (1 if st["batch"] else 0)

    def save_state(self, directory):
        """Write this worker's loader state into ``directory`` (a checkpoint's
        folder); returns the file's path."""
        return write_state(directory, self.context.rank, self.context.world_size, self.state_dict())

    def load_checkpoint(self, checkpoint=None):
        """Resume from the loader states in ``checkpoint`` (a ray.train.Checkpoint;
        None: ``ray.train.get_checkpoint()``). Returns True when it resumed,
        False when there is no checkpoint or it holds no loader state.

        States of a worker group of this size: each worker resumes its own.
        Of another size: every worker's state merged (sluice.merge_states),
        shared by this group, where the library has it (ValueError naming
        both sizes otherwise)."""
        if checkpoint is None:
            checkpoint = ray.train.get_checkpoint()
        if checkpoint is None:
            return False
        with checkpoint.as_directory() as d:
            state = resume_state(d, self.context.rank, self.context.world_size)
        if state is None:
            return False
        self.load_state_dict(state)
        self.resumed_from = dict(state)
        return True


def write_state(directory, rank, world_size, state):
    """Write one worker's loader state (``state_dict()``) into a checkpoint's
    folder as sluice-loader-rankNNNNN.json; returns the path."""
    path = os.path.join(os.fspath(directory), STATE_FILE.format(rank))
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"format": 1, "rank": rank, "world_size": world_size, "state": state}, f)
    os.replace(tmp, path)
    return path


def resume_state(directory, rank, world_size):
    """The state rank ``rank`` of a worker group of ``world_size`` resumes from,
    out of the loader states in a checkpoint's folder: its own where the group
    that saved them had this size, else all of them merged
    (sluice.merge_states; ValueError where the library lacks it). None when
    the folder holds none."""
    states = read_states(directory)
    if not states:
        return None
    saved_world = next(iter(states.values()))["world_size"]
    if saved_world == world_size:
        return states[rank]["state"]
    if hasattr(sluice, "merge_states"):
        # the positions of the epoch none of the saved workers consumed,
        # which this group shares again: each sample once over both runs
        return sluice.merge_states([rec["state"] for rec in states.values()])
    raise ValueError(
        f"sluice.ray.Loader: the checkpoint holds the loader states of {saved_world} workers and this worker "
        f"group has {world_size}; resuming an epoch on another number of workers needs the world-size resume "
        "of the library (sluice.merge_states), which this build lacks (docs/ray.md). Resume with the same "
        "number of workers, or start the next epoch with set_epoch()")


def read_states(directory):
    """{rank: saved record} of the loader states in a checkpoint's folder;
    ValueError when they are not one consistent worker group."""
    states = {}
    for path in glob.glob(os.path.join(os.fspath(directory), "sluice-loader-rank*.json")):
        m = _STATE_RE.search(os.path.basename(path))
        if not m:
            continue
        with open(path) as f:
            rec = json.load(f)
        if not isinstance(rec, dict) or rec.get("format") != 1 or rec.get("rank") != int(m.group(1)):
            raise ValueError(f"sluice.ray: {path} is not a loader state this version wrote")
        states[rec["rank"]] = rec
    worlds = {rec["world_size"] for rec in states.values()}
    if len(worlds) > 1:
        raise ValueError(f"sluice.ray: the checkpoint mixes loader states of worker groups of sizes {sorted(worlds)}")
    if states and len(states) != next(iter(worlds)):
        raise ValueError(f"sluice.ray: the checkpoint holds {len(states)} loader states of a worker group of "
                         f"{next(iter(worlds))}: ranks {sorted(states)}")
    return states


def report(metrics, loader, checkpoint_dir=None, **kwargs):
    """``ray.train.report(metrics, checkpoint=...)`` with ``loader``'s state in
    the checkpoint. ``checkpoint_dir``: a folder holding what else you save
    (the model, the optimizer), into which the state is written; None: a
    temporary folder with the state alone. Every worker must call it (Ray
    Train's rule for report); the workers' files make one checkpoint.
    ``kwargs`` go to ray.train.report."""
    if checkpoint_dir is not None:
        loader.save_state(checkpoint_dir)
        return ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(checkpoint_dir), **kwargs)
    with tempfile.TemporaryDirectory(prefix="sluice-ckpt-") as d:
        loader.save_state(d)
        return ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(d), **kwargs)

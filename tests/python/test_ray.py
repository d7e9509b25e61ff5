"""sluice.ray on a real local Ray cluster (ray.init with 2 CPUs and a 200 MB
object store): Ray Data reads (every sample of the epoch once, the bytes of a
plain sluice.Loader, a read task that raises or whose worker is killed
mid-lease re-run with the same result) and Ray Train (two CPU workers over
gloo: disjoint and complete shards, a checkpoint mid-epoch and a worker group
restarted from it). The two-node case is in test_ray_cluster.py."""
import hashlib
import json
import os
import signal
import sys
import threading
import time

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (tools/setup.sh installs it for make test)")
pytest.importorskip("ray.data", reason="Ray Data is not installed (ray[data])")

import sluice  # noqa: E402
import sluice.ray  # noqa: E402
from sluice.ray import SluiceDatasource  # noqa: E402

OPTS = dict(seed=3, size=32, workers=1, budget="64M")
ROW_BYTES = 3 * 32 * 32 + 8 + 8  # image, label, index


@pytest.fixture(scope="module")
def ray_local():
    ray.init(num_cpus=2, object_store_memory=200 << 20, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.execution_options.preserve_order = True  # the order of the leases, each in the epoch's order
    # the workers cannot import this test module: send its functions and classes by value
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield ray
    ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    ray.shutdown()


def reference(dataset, epoch, **opts):
    """{index: image bytes} and the order of a plain sluice.Loader's epoch."""
    images, order = {}, []
    with sluice.Loader(dataset, batch_size=8, **dict(OPTS, **opts)) as ld:
        ld.set_epoch(epoch)
        for b in ld:
            idx = np.asarray(b["index"])
            img = np.asarray(b["image"])
            for i, k in enumerate(idx):
                images[int(k)] = img[i].copy()
                order.append(int(k))
    return images, order


def check_exactly_once(rows, ref):
    idx = [int(r["index"]) for r in rows]
    assert sorted(idx) == sorted(ref), f"{len(idx)} rows, {len(set(idx))} distinct, {len(ref)} in the epoch"
    for r in rows:
        assert np.array_equal(np.asarray(r["image"]), ref[int(r["index"])]), f"sample {r['index']} differs"
    return idx


def test_read_every_sample_once_same_bytes(ray_local, dataset):
    ref, _ = reference(dataset, 2)
    ds = sluice.ray.read(dataset, epoch=2, leases=5, batch_size=6, **OPTS)
    assert ds.count() == len(ref)
    rows = ds.take_all()
    order = check_exactly_once(rows, ref)
    assert rows[0]["image"].shape == (3, 32, 32) and rows[0]["image"].dtype == np.uint8
    # deterministic: the same dataset read again gives the same rows in the same order
    assert [int(r["index"]) for r in ds.take_all()] == order
    assert order == reference(dataset, 2)[1]  # contiguous leases read in order: the epoch's order itself
    st = sluice.ray.stats(ds)
    assert st["leases_done"] == 5 and st["errors"] == 0
    assert 0 < st["peak_accounted_bytes"] <= st["budget_bytes"] == 64 << 20
    assert all(v["runs"] >= 1 and v["rows"] == v["samples"] for v in st["leases"].values())
    # another epoch: another order, the same samples
    ds3 = sluice.ray.read(dataset, epoch=3, leases=5, **OPTS)
    assert [int(r["index"]) for r in ds3.take_all()] != order


def test_read_takes_a_relative_path_from_the_drivers_folder(ray_local, dataset, monkeypatch):
    # a read task's working directory is the raylet's (on another node, wherever `ray start` ran)
    parent, name = os.path.split(os.path.abspath(os.fspath(dataset)))
    monkeypatch.chdir(parent)
    ref, _ = reference(dataset, 0)
    ds = sluice.ray.read(name, leases=2, **OPTS)
    assert sluice.ray.data._find_datasource(ds)._source == os.path.join(parent, name)
    check_exactly_once(ds.take_all(), ref)


def test_read_blocks_within_target_and_torch_batches(ray_local, dataset):
    torch = pytest.importorskip("torch")
    ctx = ray.data.DataContext.get_current()
    old = ctx.target_max_block_size
    ctx.target_max_block_size = 5 * ROW_BYTES
    try:
        src = SluiceDatasource(dataset, epoch=0, **OPTS)
        assert src.rows_per_block() == 5
        assert src.task_memory() == (64 << 20) + 2 * 5 * ROW_BYTES
        ds = ray.data.read_datasource(src, num_cpus=1, memory=src.task_memory())
        sizes = [b["index"].shape[0] for b in ds.iter_batches(batch_size=None, batch_format="numpy")]
        assert max(sizes) <= 5 and sum(sizes) == src.dataset_size
        seen = []
        for b in ds.iter_torch_batches(batch_size=16):
            assert b["image"].dtype == torch.uint8 and tuple(b["image"].shape[1:]) == (3, 32, 32)
            seen += b["index"].tolist()
        assert sorted(seen) == list(range(src.dataset_size))
    finally:
        ctx.target_max_block_size = old


def test_read_fields(ray_local, dataset):
    fields = {"image": {"kind": "image", "preset": "val", "size": 24}, "label": {"kind": "label"}}
    ds = sluice.ray.read(dataset, epoch=0, leases=3, fields=fields, seed=1, workers=1, budget="64M")
    rows = ds.take_all()
    assert sorted(int(r["index"]) for r in rows) == list(range(64))
    assert rows[0]["image"].shape == (3, 24, 24)
    with sluice.Loader(dataset, batch_size=64, fields=fields, seed=1, workers=1, budget="64M") as ld:
        b = next(iter(ld))
        ref = {int(k): (np.asarray(b["image"])[i].copy(), int(np.asarray(b["label"])[i]))
               for i, k in enumerate(np.asarray(b["index"]))}
    for r in rows:
        img, label = ref[int(r["index"])]
        assert np.array_equal(r["image"], img) and int(r["label"]) == label


def test_read_arrays_points_sequences(ray_local, tmp_path):
    rng = np.random.default_rng(0)
    rows = []
    for i in range(23):
        np.save(tmp_path / f"x{i}.npy", rng.standard_normal((8, 8)).astype(np.float32))
        np.save(tmp_path / f"p{i}.npy", rng.standard_normal((3 + i % 9, 4)).astype(np.float32))
        for t in range(2):
            np.save(tmp_path / f"s{i}_{t}.npy", rng.integers(0, 100, (3, 3)).astype(np.int16))
        rows.append({"x": f"x{i}.npy", "pts": f"p{i}.npy", "seq": [f"s{i}_0.npy", f"s{i}_1.npy"], "label": i % 3})
    with open(tmp_path / "m.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    fields = {"x": {"kind": "array", "layout": "HW", "crop": [4, 4]},
              "pts": {"kind": "array", "points": 6},
              "seq": {"kind": "sequence", "of": {"kind": "array"}},
              "label": {"kind": "label"}}
    opts = dict(fields=fields, seed=4, workers=1, budget="32M")
    ds = sluice.ray.read(str(tmp_path / "m.jsonl"), epoch=1, leases=3, **opts)
    got = {int(r["index"]): r for r in ds.take_all()}
    assert sorted(got) == list(range(23))
    with sluice.Loader(str(tmp_path / "m.jsonl"), batch_size=23, **opts) as ld:
        ld.set_epoch(1)
        b = {k: np.asarray(v) for k, v in next(iter(ld)).items()}
    assert set(b) == {"x", "pts", "pts_len", "seq", "label", "index"}
    for j, k in enumerate(b["index"]):
        r = got[int(k)]
        assert set(r) == set(b)
        for name in b:
            assert np.array_equal(np.asarray(r[name]), b[name][j]), (name, int(k))
    assert got[0]["seq"].shape == (2, 3, 3) and got[0]["seq"].dtype == np.int16
    assert got[0]["pts"].shape == (6, 4) and got[0]["x"].shape == (4, 4)


def test_read_refuses_what_a_lease_decides(ray_local, dataset):
    for bad in ({"rank": 0}, {"world_size": 2}, {"drop_last": True}):
        with pytest.raises(TypeError, match="not taken"):
            sluice.ray.read(dataset, **bad)
    with pytest.raises(TypeError, match="budget must be a size"):
        sluice.ray.read(dataset, budget=sluice.Budget("64M"))
    with pytest.raises(ValueError, match="cache_share"):
        sluice.ray.read(dataset, cache="8M", cache_share="node")


def _lease_runs(tmp, name):
    """A SluiceDatasource that misbehaves once on lease 2, after its first
    block: ``name`` "raise": the loader's next batch raises OSError (an I/O
    error: retried inside the task from the state after that block);
    "stall": the task writes its pid and waits to be killed (Ray re-runs the
    task)."""
    mark = os.path.join(tmp, name)

    class Flaky:
        def __init__(self, ld):
            self.ld, self.calls = ld, 0

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.ld.close()

        def next_batch(self):
            self.calls += 1
            if self.calls == 2 and not os.path.exists(mark):
                open(mark, "w").close()
                raise OSError(5, "injected I/O error after the first block")
            return self.ld.next_batch()

        def __getattr__(self, attr):
            return getattr(self.ld, attr)

    class Once(SluiceDatasource):
        def _loader(self, lease, rows, state=None):
            ld = super()._loader(lease, rows, state)
            return Flaky(ld) if name == "raise" and lease.index == 2 else ld

        def read_lease(self, lease, rows):
            for k, block in enumerate(super().read_lease(lease, rows)):
                yield block
                if name != "stall" or lease.index != 2 or k != 0 or os.path.exists(mark):
                    continue
                open(mark, "w").close()
                with open(mark + ".tmp", "w") as f:
                    f.write(str(os.getpid()))
                os.rename(mark + ".tmp", mark + ".pid")
                while True:  # killed by the test
                    time.sleep(0.05)

    return Once, mark


def test_read_task_raising_once_gives_the_same_rows(ray_local, dataset, tmp_path):
    ref, _ = reference(dataset, 1)
    clean = [int(r["index"]) for r in sluice.ray.read(dataset, epoch=1, leases=4, batch_size=4, **OPTS).take_all()]
    ctx = ray.data.DataContext.get_current()
    old, ctx.target_max_block_size = ctx.target_max_block_size, 4 * ROW_BYTES  # a block leaves per batch
    try:
        Once, mark = _lease_runs(str(tmp_path), "raise")
        src = Once(dataset, epoch=1, leases=4, batch_size=4, **OPTS)
        rows = ray.data.read_datasource(src, num_cpus=1, memory=src.task_memory()).take_all()
    finally:
        ctx.target_max_block_size = old
    assert os.path.exists(mark), "the injected failure did not happen"
    assert check_exactly_once(rows, ref) == clean
    st = sluice.ray.stats(src)
    assert st["leases"][2]["retries"] == 1 and st["retries"] == 1


def test_read_task_killed_mid_lease_is_rerun(ray_local, dataset, tmp_path):
    ref, _ = reference(dataset, 1)
    clean = [int(r["index"]) for r in sluice.ray.read(dataset, epoch=1, leases=4, batch_size=4, **OPTS).take_all()]
    ctx = ray.data.DataContext.get_current()
    old, ctx.target_max_block_size = ctx.target_max_block_size, 4 * ROW_BYTES
    Once, mark = _lease_runs(str(tmp_path), "stall")
    killed = []

    def killer():  # waits on the task's progress (its pid file), not on a clock
        while not os.path.exists(mark + ".pid"):
            time.sleep(0.02)
        pid = int(open(mark + ".pid").read())
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    try:
        src = Once(dataset, epoch=1, leases=4, batch_size=4, **OPTS)
        rows = list(ray.data.read_datasource(src, num_cpus=1, memory=src.task_memory()).iter_rows())
    finally:
        ctx.target_max_block_size = old
    t.join(5)
    assert killed, "the stalled read task was never killed"
    assert check_exactly_once(rows, ref) == clean
    st = sluice.ray.stats(src)
    assert st["leases"][2]["runs"] == 2, st["leases"][2]
    assert st["leases"][2]["pid"] != killed[0]


def test_plan_leases_cover_the_order_once():
    from sluice.ray.data import plan_leases

    for n, count in ((64, 5), (7, 7), (7, 20), (1000, 64), (3, 1)):
        leases = plan_leases(n, count)
        assert len(leases) == min(count, n) and sum(le.rows for le in leases) == n
        assert [p for le in leases for p in range(le.begin, le.end)] == list(range(n))


def test_resume_state_same_and_other_world(dataset, tmp_path):
    """Checkpoint files of a 2-worker group: each worker of a 2-worker group
    resumes its own state; a 1-worker group resumes the merged one (where the
    library merges states) and delivers the rest of the epoch, or is refused
    saying why."""
    from sluice.ray.train import read_states, resume_state, write_state

    fields = {"image": {"kind": "image", "size": 16}, "label": {"kind": "label"}}
    opts = dict(batch_size=4, fields=fields, seed=9, workers=1, budget="64M")
    before = []
    for r in (0, 1):
        with sluice.Loader(dataset, rank=r, world_size=2, **opts) as ld:
            ld.set_epoch(1)
            for _ in range(3):
                before += np.asarray(ld.next_batch()["index"]).tolist()
            write_state(tmp_path, r, 2, ld.state_dict())
    assert sorted(read_states(tmp_path)) == [0, 1]
    for r in (0, 1):
        st = resume_state(tmp_path, r, 2)
        assert (st["rank"], st["epoch"], st["batch"]) == (r, 1, 3)
    part = tmp_path / "part"
    part.mkdir()
    write_state(part, 0, 2, resume_state(tmp_path, 0, 2))
    with pytest.raises(ValueError, match="holds 1 loader states of a worker group of 2"):
        resume_state(part, 0, 1)
    if not hasattr(sluice, "merge_states"):
        with pytest.raises(ValueError, match="2 workers and this worker group has 1"):
            resume_state(tmp_path, 0, 1)
        return
    with sluice.Loader(dataset, rank=0, world_size=1, **opts) as ld:
        ld.load_state_dict(resume_state(tmp_path, 0, 1))
        after = []
        while (b := ld.next_batch()) is not None:
            after += np.asarray(b["index"]).tolist()
    assert sorted(before + after) == list(range(64)), "not every sample of the epoch once over both runs"


# ---- Ray Train --------------------------------------------------------------------------------
def _train_loop(config):
    """Two epochs on each worker; in epoch 1, after batch 2, a checkpoint with
    the loader's state; the first run of rank 0 then fails once (the group
    restarts from that checkpoint). Each run writes what it saw."""
    import hashlib
    import json
    import os

    import torch

    import sluice.ray

    fields = {"image": {"kind": "image", "preset": "train", "size": 16}, "label": {"kind": "label"}}
    loader = sluice.ray.Loader(config["data"], batch_size=4, fields=fields, dtype=torch.uint8, seed=5,
                               budget="64M")
    ctx = loader.context
    run = {"rank": ctx.rank, "world": ctx.world_size, "local_rank": ctx.local_rank,
           "local_world": ctx.local_world_size, "workers": loader.stats()["workers"],
           "device": loader.stats()["device"], "resumed": loader.resumed_from, "epochs": {}}
    for epoch in range(loader.epoch, 2):
        seen = run["epochs"].setdefault(str(epoch), [])
        for i, b in enumerate(loader):
            seen += [[int(k), hashlib.sha1(b["image"][j].numpy().tobytes()).hexdigest()]
                     for j, k in enumerate(b["index"].tolist())]
            if epoch == 1 and i == 2 and loader.resumed_from is None:
                sluice.ray.report({"epoch": epoch, "batch": i}, loader)
                if ctx.rank == 0 and not os.path.exists(config["mark"]):
                    open(config["mark"], "w").close()
                    with open(os.path.join(config["out"], f"run0-rank{ctx.rank}.json"), "w") as f:
                        json.dump(run, f)
                    raise RuntimeError("injected worker failure after the checkpoint")
    tag = "run1" if loader.resumed_from is not None else "run0"
    with open(os.path.join(config["out"], f"{tag}-rank{ctx.rank}.json"), "w") as f:
        json.dump(run, f)
    loader.close()


def test_train_two_workers_shards_checkpoint_restart(ray_local, dataset, tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("ray.train.torch")
    import sluice.torch
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    out = tmp_path / "runs"
    out.mkdir()
    trainer = TorchTrainer(
        _train_loop,
        train_loop_config={"data": dataset, "out": str(out), "mark": str(tmp_path / "failed-once")},
        scaling_config=ScalingConfig(num_workers=2, use_gpu=False, resources_per_worker={"CPU": 1}),
        torch_config=TorchConfig(backend="gloo"),
        run_config=RunConfig(storage_path=str(tmp_path / "results"), name="sluice",
                             failure_config=FailureConfig(max_failures=1)),
    )
    result = trainer.fit()
    assert result.error is None, result.error
    assert (tmp_path / "failed-once").exists(), "the injected failure did not happen"
    runs = {p.name: json.loads(p.read_text()) for p in out.iterdir()}
    assert set(runs) == {"run0-rank0.json", "run0-rank1.json", "run1-rank0.json", "run1-rank1.json"}, set(runs)
    # the context: two workers on one node, each its rank, half the node's CPUs
    for r in (0, 1):
        a = runs[f"run0-rank{r}.json"]
        assert (a["rank"], a["world"], a["local_rank"], a["local_world"]) == (r, 2, r, 2)
        assert a["workers"] == 1 and a["device"] == "cpu"
    # epoch 0: disjoint shards that together are the dataset
    s0, s1 = ({k for k, _ in runs[f"run0-rank{r}.json"]["epochs"]["0"]} for r in (0, 1))
    assert not s0 & s1 and s0 | s1 == set(range(64))
    # epoch 1 across the restart: the batches before the checkpoint (run 0) then
    # those after it (run 1, resumed) are the rank's uninterrupted epoch, same bytes
    fields = {"image": {"kind": "image", "preset": "train", "size": 16}, "label": {"kind": "label"}}
    for r in (0, 1):
        before = runs[f"run0-rank{r}.json"]["epochs"]["1"][:12]  # 3 batches of 4
        after = runs[f"run1-rank{r}.json"]["epochs"]["1"]
        resumed = runs[f"run1-rank{r}.json"]["resumed"]
        assert resumed["epoch"] == 1 and resumed["batch"] == 3 and "0" not in runs[f"run1-rank{r}.json"]["epochs"]
        with sluice.torch.Loader(dataset, batch_size=4, fields=fields, dtype=torch.uint8, seed=5, budget="64M",
                                 device="cpu", rank=r, world_size=2, workers=1) as ld:
            ld.set_epoch(1)
            whole = [[int(k), hashlib.sha1(b["image"][j].numpy().tobytes()).hexdigest()]
                     for b in ld for j, k in enumerate(b["index"].tolist())]
        assert before + after == whole, f"rank {r}: the resumed epoch differs from an uninterrupted one"



def _train_part(config):
    """Epoch 0 on each worker: a group of 2 stops after 3 batches and reports a
    checkpoint; a group of 1 resumes from that checkpoint (config["ckpt"]) and
    runs the rest of the epoch. Each worker writes the indices it saw."""
    import json
    import os

    import ray.train
    import torch

    import sluice.ray

    fields = {"image": {"kind": "image", "size": 16}, "label": {"kind": "label"}}
    loader = sluice.ray.Loader(config["data"], batch_size=4, fields=fields, dtype=torch.uint8, seed=6,
                               budget="64M", resume=False)
    ctx = loader.context
    if config.get("ckpt"):
        assert loader.load_checkpoint(ray.train.Checkpoint(config["ckpt"]))
    seen = []
    for i, b in enumerate(loader):
        seen += b["index"].tolist()
        if not config.get("ckpt") and i == 2:
            break
    if not config.get("ckpt"):
        sluice.ray.report({"batch": 2}, loader)
    with open(os.path.join(config["out"], f"{config['tag']}-rank{ctx.rank}.json"), "w") as f:
        json.dump({"world": ctx.world_size, "seen": seen}, f)
    loader.close()


def test_train_resume_on_another_number_of_workers(ray_local, dataset, tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("ray.train.torch")
    if not hasattr(sluice, "merge_states"):
        pytest.skip("this library has no world-size resume (sluice.merge_states): "
                    "test_resume_state_same_and_other_world checks the refusal")
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    out = tmp_path / "runs"
    out.mkdir()

    def fit(workers, tag, ckpt=None):
        return TorchTrainer(
            _train_part, train_loop_config={"data": dataset, "out": str(out), "tag": tag, "ckpt": ckpt},
            scaling_config=ScalingConfig(num_workers=workers, use_gpu=False, resources_per_worker={"CPU": 1}),
            torch_config=TorchConfig(backend="gloo"),
            run_config=RunConfig(storage_path=str(tmp_path / "results"), name=tag)).fit()

    first = fit(2, "two")
    assert first.error is None and first.checkpoint is not None, first.error
    second = fit(1, "one", first.checkpoint.path)
    assert second.error is None, second.error
    runs = {p.name: json.loads(p.read_text()) for p in out.iterdir()}
    before = runs["two-rank0.json"]["seen"] + runs["two-rank1.json"]["seen"]
    after = runs["one-rank0.json"]["seen"]
    assert len(before) == 24 and runs["one-rank0.json"]["world"] == 1
    assert sorted(before + after) == list(range(64)), "not every sample of the epoch once over both groups"

"""sluice.Loader: zero-copy views, slot lifetime, resume, sharding, errors."""
import gc
import os
import re
import threading

import numpy as np
import pytest

import sluice
from conftest import CLASSES, PER_CLASS, make_dataset

N = len(CLASSES) * PER_CLASS  # 64 samples
BS = 8


def make(dataset, **kw):
    kw.setdefault("batch_size", BS)
    kw.setdefault("size", 32)
    kw.setdefault("budget", "64M")
    kw.setdefault("workers", 2)
    return sluice.Loader(dataset, **kw)


def in_region(loader, addr, nbytes):
    base, length = loader.slot_region()
    return base <= addr and addr + nbytes <= base + length


def test_version():
    assert sluice.__version__ == "0.2.0"
    assert sluice.build_info()["version"] == "0.2.0"


def test_one_epoch_covers_the_dataset_once(dataset):
    with make(dataset) as ld:
        assert len(ld) == N // BS
        assert ld.dataset_size == N and ld.num_samples == N
        seen = []
        for b in ld:
            assert set(b) >= {"image", "label", "index"}
            img, lab, idx = (np.asarray(b[k]) for k in ("image", "label", "index"))
            assert img.dtype == np.uint8 and img.shape == (BS, 3, 32, 32)
            assert lab.dtype == np.int64 and idx.dtype == np.int64
            assert b.epoch == 0 and b.size == BS
            for i, l in zip(idx.tolist(), lab.tolist()):
                cls = os.path.basename(os.path.dirname(ld.sample_path(i)))
                assert CLASSES.index(cls) == l  # labels by sorted class name
            seen += idx.tolist()
        assert sorted(seen) == list(range(N))
        # the next loop is the next epoch
        assert [b.epoch for b in ld] == [1] * (N // BS)


def test_zero_copy(dataset):
    with make(dataset) as ld:
        for b in ld:
            for name in ("image", "label", "index"):
                f = b[name]
                a = np.asarray(f)
                assert a.__array_interface__["data"][0] == f.ptr
                assert in_region(ld, a.ctypes.data, a.nbytes)
                assert a.nbytes == f.nbytes and a.strides == f.strides
                assert not a.flags.owndata
            break


def test_view_outlives_loop_and_slot_returns(dataset):
    with make(dataset, prefetch=3) as ld:
        kept = None
        for b in ld:
            if kept is None:
                kept = np.asarray(b["image"])
                snapshot = kept.copy()
        del b
        assert ld.stats()["slots_held"] == 1  # only the kept view's slot
        # another full epoch reuses the other slots, never the held one
        for b in ld:
            assert not in_region_of(kept, b["image"])
        del b
        assert np.array_equal(kept, snapshot)
        assert ld.stats()["slots_held"] == 1
        del kept
        gc.collect()
        assert ld.stats()["slots_held"] == 0


def in_region_of(arr, field):
    return arr.__array_interface__["data"][0] == field.ptr


def test_view_outlives_close(dataset):
    ld = make(dataset)
    b = next(iter(ld))
    a = np.asarray(b["image"])
    snapshot = a.copy()
    del b
    ld.close()
    assert ld.closed
    assert np.array_equal(a, snapshot)  # the slot stays mapped while viewed
    with pytest.raises(ValueError, match="closed"):
        next(iter(ld))
    del a, ld
    gc.collect()


def test_all_slots_held_is_an_error_not_a_hang(dataset):
    with make(dataset, prefetch=2) as ld:
        it = iter(ld)
        held = [next(it), next(it)]
        with pytest.raises(sluice.SlotsHeldError, match=r"all 2 batch slots are held") as ei:
            next(it)
        assert isinstance(ei.value, RuntimeError)
        assert ei.value.code_name == "SL_EHELD"
        del held
        # releasing makes room again; iteration goes on where it stopped
        idx = [np.asarray(b["index"]).copy() for b in ld]
        assert len(idx) == N // BS - 2


def test_slots_held_by_cycles_are_collected(dataset):
    with make(dataset, prefetch=2) as ld:
        it = iter(ld)
        for _ in range(3):  # each batch caught in a reference cycle
            cyc = [next(it)]
            cyc.append(cyc)
            del cyc
        assert ld.stats()["slots"] == 2


def run_epochs(loader, epochs):
    out = []
    for _ in range(epochs):
        for b in loader:
            out.append((b.epoch, b.index, np.asarray(b["index"]).copy(), np.asarray(b["image"]).copy()))
    return out


@pytest.mark.parametrize("stop", [1, 3, 7])
def test_resume_equals_uninterrupted(dataset, stop):
    with make(dataset, seed=7) as ld:
        ref = run_epochs(ld, 2)
    with make(dataset, seed=7) as ld:
        it = iter(ld)
        for _ in range(stop):
            next(it)
        del it
        state = ld.state_dict()
        size = ld.dataset_size
    # ints, and the positions an earlier world consumed (none here): the whole order is the span
    assert all(isinstance(v, int) for k, v in state.items() if k != "gone")
    assert (state["span_begin"], state["span_end"], state["gone"]) == (0, size, [])
    with make(dataset, seed=7, workers=1) as ld:  # any worker count
        ld.load_state_dict(state)
        rest = run_epochs(ld, 2)
    # the rest of epoch 0, then all of epoch 1
    assert len(rest) == len(ref) - stop
    for (e1, i1, x1, im1), (e2, i2, x2, im2) in zip(ref[stop:], rest):
        assert (e1, i1) == (e2, i2)
        assert np.array_equal(x1, x2)
        assert np.array_equal(im1, im2)


def test_state_from_another_configuration_is_refused(dataset):
    with make(dataset, seed=1) as ld:
        next(iter(ld))
        state = ld.state_dict()
    with make(dataset, seed=2) as ld:
        with pytest.raises(ValueError, match="load_state_dict: the state is of seed 1, the loader's is 2"):
            ld.load_state_dict(state)
    with make(dataset) as ld:
        with pytest.raises(ValueError, match="unknown keys"):
            ld.load_state_dict(dict(state, bogus=1))
        with pytest.raises(ValueError, match="missing key 'tail'"):
            ld.load_state_dict({k: v for k, v in state.items() if k != "tail"})
        with pytest.raises(TypeError):
            ld.load_state_dict([1, 2])


def test_load_state_dict_names_the_field_that_differs(dataset, tmp_path):
    """The refusal names the one field that differs, with both values, not
    every cause there could be."""
    with make(dataset, seed=1) as ld:
        next(iter(ld))
        state = ld.state_dict()  # mid-epoch

    def refused(pattern, **kw):
        with make(dataset, **dict(dict(seed=1), **kw)) as ld:
            with pytest.raises(ValueError) as e:
                ld.load_state_dict(state)
        msg = str(e.value)
        assert re.search(pattern, msg), msg
        assert "another dataset or configuration" not in msg and "(SL_ESTATE" in msg
        return msg

    refused(r"^load_state_dict: the state is of a loader with shuffle on, this one has it off", shuffle=False)
    refused(r"^load_state_dict: the state's batch_size is %d, this loader's 4:" % BS, batch_size=4)
    refused(r"^load_state_dict: the state's drop_last is off, this loader's on:", drop_last=True)
    refused(r"^load_state_dict: the state's world_size is 1, this loader's 2:", rank=0, world_size=2)
    with make(dataset, seed=1) as ld:
        with pytest.raises(ValueError, match=r"^load_state_dict: the state names batch 999 with tail"):
            ld.load_state_dict(dict(state, batch=999))
    other = str(tmp_path / "other")
    make_dataset(other, per_class=2)
    with make(other, seed=1) as ld:
        with pytest.raises(ValueError, match=r"^load_state_dict: the state is of a dataset of %d samples, "
                                             r"the loader's has %d" % (state["dataset_size"], ld.dataset_size)):
            ld.load_state_dict(state)


def test_same_seed_same_batches_whatever_the_workers(dataset):
    with make(dataset, seed=3, workers=1, checksum=True) as a, \
         make(dataset, seed=3, workers=3, checksum=True) as b:
        ra = [(x.checksum, np.asarray(x["image"]).copy()) for x in a]
        rb = [(x.checksum, np.asarray(x["image"]).copy()) for x in b]
    assert [c for c, _ in ra] == [c for c, _ in rb]
    assert all(c != 0 for c, _ in ra)
    assert all(np.array_equal(x, y) for (_, x), (_, y) in zip(ra, rb))


def _thread_nices():
    """nice of each of this process's threads (proc(5): stat field 19)."""
    out = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                out.append(int(f.read().rsplit(")", 1)[1].split()[16]))
        except OSError:
            pass  # a thread that just ended
    return out


@pytest.mark.parametrize("nice", [None, 3])
def test_workers_run_below_the_process_priority(dataset, nice):
    base = os.getpriority(os.PRIO_PROCESS, 0)
    if base > 9:
        pytest.skip(f"this process runs at nice {base}: no room below 19 to tell the settings apart")
    want = base + (10 if nice is None else nice)
    before = _thread_nices().count(want)
    kw = {} if nice is None else {"worker_nice": nice}
    with make(dataset, workers=2, **kw) as ld:
        next(iter(ld))  # the workers have started
        assert _thread_nices().count(want) - before == 2
        assert os.getpriority(os.PRIO_PROCESS, 0) == base  # this thread as it was
    with pytest.raises(ValueError, match="worker_nice must be <= 19"):
        make(dataset, worker_nice=20)
    with pytest.raises(TypeError, match="worker_nice must be an int"):
        make(dataset, worker_nice=1.5)


def test_set_epoch(dataset):
    with make(dataset, seed=5) as ld:
        e0 = [np.asarray(b["index"]).copy() for b in ld]
        ld.set_epoch(3)
        e3 = [(b.epoch, np.asarray(b["index"]).copy()) for b in ld]
        assert {e for e, _ in e3} == {3}
        assert any(not np.array_equal(x, y) for x, (_, y) in zip(e0, e3))
        ld.set_epoch(0)
        again = [np.asarray(b["index"]).copy() for b in ld]
        assert all(np.array_equal(x, y) for x, y in zip(e0, again))


def test_sharding_from_environment(dataset, monkeypatch):
    world = 4
    shards = []
    for rank in range(world):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", str(world))
        with make(dataset, seed=9) as ld:
            assert (ld.rank, ld.world_size) == (rank, world)
            assert ld.num_samples == N // world
            shards.append([i for b in ld for i in np.asarray(b["index"]).tolist()])
    for r in range(world):
        for s in range(r + 1, world):
            assert not set(shards[r]) & set(shards[s]), "shards overlap"
    assert sorted(sum(shards, [])) == list(range(N)), "shards do not cover the dataset"
    # explicit arguments win over the environment
    monkeypatch.setenv("RANK", "3")
    with make(dataset, rank=0, world_size=1) as ld:
        assert ld.num_samples == N


def test_bad_rank_environment(dataset, monkeypatch):
    monkeypatch.setenv("RANK", "two")
    with pytest.raises(ValueError, match="RANK='two'"):
        make(dataset)
    monkeypatch.setenv("RANK", "4")
    monkeypatch.setenv("WORLD_SIZE", "4")
    with pytest.raises(ValueError, match="rank must be < world_size"):
        make(dataset)


def test_dlpack_and_numpy_agree(dataset):
    torch = pytest.importorskip("torch")
    with make(dataset) as ld:
        for b in ld:
            for name in ("image", "label", "index"):
                t = torch.from_dlpack(b[name])
                a = np.asarray(b[name])
                assert t.data_ptr() == b[name].ptr  # zero-copy
                assert tuple(t.shape) == a.shape
                assert np.array_equal(t.numpy(), a)
            assert t.dtype == torch.int64
            assert torch.from_dlpack(b["image"]).dtype == torch.uint8
            assert np.array_equal(np.from_dlpack(b["image"]), np.asarray(b["image"]))


def test_dlpack_tensor_keeps_the_slot(dataset):
    torch = pytest.importorskip("torch")
    with make(dataset, prefetch=3) as ld:
        it = iter(ld)
        b = next(it)
        t = torch.from_dlpack(b["image"])
        snapshot = t.clone()
        del b
        gc.collect()
        assert ld.stats()["slots_held"] == 1
        rest = [np.asarray(x["index"]).copy() for x in it]
        assert len(rest) == N // BS - 1
        assert torch.equal(t, snapshot)
        del t
        gc.collect()
        assert ld.stats()["slots_held"] == 0


def test_dlpack_protocol_details(dataset):
    with make(dataset) as ld:
        b = next(iter(ld))
        f = b["image"]
        assert f.__dlpack_device__() == (1, 0)
        cap = f.__dlpack__()
        assert "dltensor" in repr(cap)
        vcap = f.__dlpack__(max_version=(1, 0))
        assert "dltensor_versioned" in repr(vcap)
        del cap, vcap  # unconsumed capsules run the deleter
        with pytest.raises(BufferError):
            f.__dlpack__(dl_device=(2, 0))
        with pytest.raises(BufferError):
            f.__dlpack__(copy=True)


def test_stats(dataset):
    with make(dataset) as ld:
        for b in ld:
            pass
        del b
        s = ld.stats()
    assert s["samples"] == N and s["batches"] == N // BS
    assert s["budget_bytes"] == 64 << 20
    assert 0 < s["peak_accounted_bytes"] <= s["budget_bytes"]
    assert set(s["memory"]) == {"index", "batches", "scratch", "decoder", "other", "pinned", "cache", "gpu_host",
                                "io"}
    assert s["memory"]["batches"] > 0
    for k in ("samples_per_s", "consumer_wait_s", "workers", "slots", "slots_held", "errors"):
        assert k in s


def test_error_records_skip(bad_dataset):
    with make(bad_dataset) as ld:
        got = sum(b.size for b in ld)
        errs = ld.errors()
        assert ld.stats()["errors"] == 2
    assert got == N  # the two bad files were skipped, the run went on
    assert len(errs) == 2
    paths = sorted(os.path.basename(e["path"]) for e in errs)
    assert paths == ["bee_truncated.jpg", "cat_text.jpg"]
    for e in errs:
        assert e["code_name"].startswith("SL_E") and e["reason"] and e["epoch"] == 0


def test_error_records_raise(bad_dataset):
    with make(bad_dataset, on_error="raise", shuffle=False) as ld:
        failures, got = [], 0
        while True:
            try:
                for b in ld:
                    got += b.size
                break
            except sluice.SampleError as e:
                failures.append(e)
        assert len(failures) == 2
        for e in failures:
            assert isinstance(e, RuntimeError)
            assert os.path.basename(e.path) in ("bee_truncated.jpg", "cat_text.jpg")
            assert e.path in str(e) and e.reason
        # the two failed batches (different ones, in dataset order) were dropped
        assert got == N + 2 - 2 * BS
        assert ld.stats()["errors"] == 2


def test_len_and_drop_last(dataset):
    with make(dataset, batch_size=10) as ld:
        assert len(ld) == 7
        assert [b.size for b in ld][-1] == 4
    with make(dataset, batch_size=10, drop_last=True) as ld:
        assert len(ld) == 6
        assert [b.size for b in ld] == [10] * 6


def test_val_preset_and_sizes(dataset):
    with make(dataset, preset="val", size=48, shuffle=False) as ld:
        b = next(iter(ld))
        assert np.asarray(b["image"]).shape == (BS, 3, 48, 48)
        assert np.asarray(b["index"]).tolist() == list(range(BS))  # no shuffle: dataset order


def test_keep_alpha_gives_four_channels(dataset):
    with make(dataset, keep_alpha=True) as ld:
        img = np.asarray(next(iter(ld))["image"])
        assert img.shape[1] == 4 and (img[:, 3] == 255).all()


@pytest.mark.parametrize("kw, exc, msg", [
    ({"batch_size": 0}, ValueError, "batch_size must be >= 1"),
    ({"batch_size": 2.5}, TypeError, "batch_size must be an int"),
    ({"batch_size": True}, TypeError, "batch_size must be an int"),
    ({"preset": "test"}, ValueError, "preset must be one of"),
    ({"preset": 1}, TypeError, "preset must be one of"),
    ({"on_error": "ignore"}, ValueError, "on_error must be one of"),
    ({"budget": "lots"}, ValueError, "budget: 'lots' is not a size"),
    ({"budget": -1}, ValueError, "budget: a size must be >= 0"),
    ({"budget": 1.5}, TypeError, "budget: a size must be an int or a string"),
    ({"budget": 0}, ValueError, "budget must be > 0"),
    ({"workers": 0}, ValueError, "workers must be >= 1"),
    ({"prefetch": 1}, ValueError, "prefetch must be >= 2"),
    ({"seed": -3}, ValueError, "seed must be >= 0"),
    ({"size": 0}, ValueError, "size must be >= 1"),
    ({"shuffle": "yes"}, TypeError, "shuffle must be True or False"),
    ({"rank": 2, "world_size": 2}, ValueError, "rank must be < world_size"),
    ({"world_size": 0}, ValueError, "world_size must be >= 1"),
    ({"max_pixels": 0}, ValueError, "max_pixels must be >= 1"),
])
def test_argument_errors(dataset, kw, exc, msg):
    with pytest.raises(exc, match=msg):
        make(dataset, **kw)


def test_source_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        sluice.Loader(str(tmp_path / "nope"))
    with pytest.raises(TypeError, match="source must be a path"):
        sluice.Loader(42)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError) as ei:
        sluice.Loader(str(empty), batch_size=4, budget="16M")
    assert "SL_E" in str(ei.value)


def test_budget_below_minimum_is_refused(dataset):
    with pytest.raises(sluice.BudgetError) as ei:
        make(dataset, batch_size=64, size=224, budget="1M")
    e = ei.value
    assert isinstance(e, ValueError) and isinstance(e, MemoryError)
    assert e.code_name == "SL_EBUDGET"
    assert "budget" in str(e).lower()


def test_iteration_from_another_thread_while_busy(dataset):
    # The GIL is released while waiting for a batch: another Python thread
    # keeps running meanwhile.
    with make(dataset) as ld:
        ticks = []
        stop = threading.Event()

        def spin():
            while not stop.is_set():
                ticks.append(1)

        t = threading.Thread(target=spin)
        t.start()
        try:
            for _ in range(3):
                for b in ld:
                    pass
        finally:
            stop.set()
            t.join()
        assert ticks


def test_decode_probe_crop_parse(dataset):
    from PIL import Image

    path = os.path.join(dataset, "cat", "cat_000.jpg")
    data = open(path, "rb").read()
    w, h = Image.open(path).size
    info = sluice.probe_image(data)
    assert (info["width"], info["height"], info["format"]) == (w, h, "jpeg")
    full = sluice.decode_image(data)
    assert full.shape == (h, w, 3) and full.dtype == np.uint8
    ref = np.asarray(Image.open(path).convert("RGB")).astype(int)
    assert np.abs(full.astype(int) - ref).mean() < 2.0  # same libjpeg, maybe another IDCT
    crop = sluice.decode_image(data, preset="train", size=32, seed=1, index=5)
    assert crop.shape == (3, 32, 32)
    assert np.array_equal(crop, sluice.decode_image(memoryview(data), preset="train", size=32, seed=1, index=5))
    val = sluice.decode_image(bytearray(data), preset="val", size=32)
    assert val.shape == (3, 32, 32)
    x, y, cw, ch, flip = sluice.train_crop(w, h, seed=1, epoch=0, index=5)
    assert 0 <= x and x + cw <= w and 0 <= y and y + ch <= h and isinstance(flip, bool)
    assert sluice.parse_size("512M") == 512 << 20
    assert sluice.parse_size("2G") == 2 << 30
    assert sluice.parse_size(1000) == 1000
    with pytest.raises(ValueError, match="is not a size"):
        sluice.parse_size("12Q")
    with pytest.raises(sluice.DecodeError) as ei:
        sluice.decode_image(b"not an image at all")
    assert isinstance(ei.value, ValueError) and ei.value.code_name.startswith("SL_E")
    with pytest.raises(sluice.DecodeError):
        sluice.decode_image(data, max_pixels=100)
    with pytest.raises(ValueError, match="preset must be one of"):
        sluice.decode_image(data, preset="big")


def test_loop_that_stops_at_len_starts_the_next_epoch(dataset):
    """Lightning (and zip(range(len(loader)), loader)) stops after len() batches
    without reading the epoch's end: the next loop is the next epoch, not empty."""
    with sluice.Loader(dataset, batch_size=16, size=16, budget="64M", workers=2) as ld:
        epochs = []
        for _ in range(3):
            it = iter(ld)
            batches = [next(it) for _ in range(len(ld))]
            epochs.append({b.epoch for b in batches})
            del it, batches
        assert epochs == [{0}, {1}, {2}]

"""Resuming on another number of ranks (sluice.merge_states) and order ranges (order_range=), from
Python and through sluice.torch's state_dict. Ranks are loaders with rank=r, world_size=W in this
process, one after another (no torchrun): what a world of W ranks does, rank by rank."""
import collections
import json
import os
import subprocess

import numpy as np
import pytest

import sluice

from conftest import SLUICE

KW = dict(batch_size=4, size=32, budget="64M", seed=5, workers=2)


def take(loader, batches=None):
    """Indices and image bytes of the next `batches` batches (None: to the epoch's end)."""
    out = []
    n = 0
    while batches is None or n < batches:
        b = loader.next_batch()
        if b is None:
            break
        idx = np.asarray(b["index"])
        img = np.asarray(b["image"])
        out += [(int(k), img[j].tobytes()) for j, k in enumerate(idx)]
        n += 1
    return out


def world(source, W, batches, start=None, **kw):
    """W ranks, each from `start` (None: the epoch's start): (deliveries, states, errors, batch counts)."""
    got, states, errors, counts = [], [], [], []
    for r in range(W):
        with sluice.Loader(source, rank=r, world_size=W, **dict(KW, **kw)) as ld:
            if start is not None:
                ld.load_state_dict(start)
            share = ld.state_dict()["tail"]
            mine = take(ld, batches)
            got += mine
            states.append(ld.state_dict())
            errors += [e["index"] for e in ld.errors()]
            counts.append((len(mine), share))
    return got, states, errors, counts


def reference(source, **kw):
    with sluice.Loader(source, **dict(KW, **kw)) as ld:
        return dict(take(ld))


@pytest.mark.parametrize("W2", [2, 3])
@pytest.mark.parametrize("cache", [None, "private", "node"])
def test_four_ranks_resume_on_two_and_three(dataset, W2, cache, monkeypatch):
    kw = {}
    if cache:
        monkeypatch.setenv("SLUICE_CACHE_JOB", f"test-elastic-{os.getpid()}")
        kw = dict(cache="4M", cache_share="none" if cache == "private" else "node")
    ref = reference(dataset)
    first, states, _, _ = world(dataset, 4, 2, **kw)  # 4 ranks x 2 batches x 4 = 32 of 64
    merged = sluice.merge_states(reversed(states))  # any order
    assert (merged["world_size"], merged["batch"], merged["span_end"] - merged["span_begin"]) == (0, 0, 32)
    assert json.loads(json.dumps(merged)) == merged  # plain data: any checkpoint format holds it
    rest, _, _, counts = world(dataset, W2, None, start=merged, **kw)
    assert len({n for n, _ in counts}) == 1  # every rank the same number of samples (and batches)
    seen = collections.Counter(k for k, _ in first + rest)
    # each of the 64 once; with 3 ranks the 32 left are padded to 33 by wrapping round to their first
    want = collections.Counter(range(64))
    if W2 == 3:
        want[rest[0][0]] += 1
    assert seen == want
    for k, img in first + rest:
        assert img == ref[k], f"sample {k}: other bytes than an uninterrupted loader's"


def test_bad_files_and_torch_state_dict(bad_dataset):
    """With bad files each rank refills from its own tail, so what 4 ranks leave has holes; merged and
    resumed on 3 ranks, every good sample comes once (plus padding), each bad one is recorded once,
    and every rank takes the same number of batches (a rank pads for its bad samples)."""
    torch = pytest.importorskip("torch")
    import sluice.torch

    ref = reference(bad_dataset)
    first, states, err1, _ = world(bad_dataset, 4, 3)
    merged = sluice.merge_states(states)
    assert merged["gone"] or merged["span_end"] < 66  # refills took from the ranks' tails
    rest, _, err2, counts = world(bad_dataset, 3, None, start=merged)
    seen = collections.Counter(k for k, _ in first + rest)
    bad = set(err1 + err2)
    assert len(bad) == 2 and collections.Counter(err1 + err2) == collections.Counter(bad)
    assert not bad & set(seen)
    assert set(seen) | bad == set(range(66))
    assert all(n == share for n, share in counts)  # each rank its share's size: padded for its bad samples
    extra = sum(seen.values()) - 64
    # wrap padding: 66 on 4 ranks is 17 each, entries 66 and 67 repeat the first two, and a refill
    # from a rank's tail may have taken one; the 3 ranks pad what is left to a multiple of 3
    wrap = sum(1 for r, st in enumerate(states) for i in range(st["tail"], 17) if r + 4 * i >= 66)
    wrap += 3 * counts[0][1] - (merged["span_end"] - merged["span_begin"] - len(merged["gone"]))
    assert extra == len(err2) + wrap  # a pad per bad sample of the resumed run, and the wrap padding
    for k, img in first + rest:
        assert img == ref[k]

    # the same resume through sluice.torch: its state_dict counts the batches handed out
    kw = dict(KW, device="cpu", dtype=torch.uint8)
    tstates = []
    for r in range(4):
        with sluice.torch.Loader(bad_dataset, rank=r, world_size=4, **kw) as tl:
            it = iter(tl)
            for _ in range(3):
                next(it)
            tstates.append(tl.state_dict())
    assert sluice.merge_states(tstates) == merged
    for r in range(3):
        with sluice.torch.Loader(bad_dataset, rank=r, world_size=3, **kw) as tl, \
                sluice.Loader(bad_dataset, rank=r, world_size=3, **KW) as ld:
            tl.load_state_dict(merged)
            ld.load_state_dict(merged)
            for images, _ in tl:
                b = ld.next_batch()
                assert np.array_equal(images.numpy(), np.asarray(b["image"]))
            assert ld.next_batch() is None


def test_shards_resume_on_three(dataset, tmp_path):
    out = str(tmp_path / "shards")
    subprocess.run([SLUICE, "pack", dataset, out, "--samples-per-shard", "10"], check=True,
                   stdout=subprocess.DEVNULL)
    first, states, _, _ = world(out, 4, 1)
    rest, _, _, _ = world(out, 3, None, start=sluice.merge_states(states))
    # 16 taken, 48 left: 16 on each of 3 ranks, each sample once
    assert collections.Counter(k for k, _ in first + rest) == collections.Counter(range(64))


def test_one_ranks_state_resumes_only_that_rank(dataset):
    _, states, _, _ = world(dataset, 2, 1)
    with sluice.Loader(dataset, rank=0, world_size=3, **KW) as ld:
        with pytest.raises(ValueError, match="merge the states of all 2 ranks"):
            ld.load_state_dict(states[0])
    with pytest.raises(ValueError, match="give every rank's state"):
        sluice.merge_states(states[:1])
    with pytest.raises(ValueError, match="merged state already"):
        sluice.merge_states([sluice.merge_states(states)])
    with pytest.raises(ValueError, match="unknown keys"):
        sluice.merge_states([dict(states[0], x=1), states[1]])
    with pytest.raises(TypeError):
        sluice.merge_states([1, 2])
    with pytest.raises(ValueError, match="no states"):
        sluice.merge_states([])
    # hostile gone lists: refused before use
    bad = dict(sluice.merge_states(states), gone=[40, 30])
    with sluice.Loader(dataset, **KW) as ld:
        with pytest.raises(ValueError, match="not ascending"):
            ld.load_state_dict(bad)
        with pytest.raises(ValueError, match="gone"):
            ld.load_state_dict(dict(bad, gone=list(range(100))))
        with pytest.raises(ValueError, match="gone"):
            ld.load_state_dict(dict(bad, gone=["x"]))


def test_order_ranges_cover_the_epoch(bad_dataset):
    """Ranges [b, e) of the seeded order (a Ray read task's lease): one after another they deliver
    the whole loader's samples in its order with its bytes; bad samples are refilled inside the
    range; a re-run of a range gives the same bytes."""
    with sluice.Loader(bad_dataset, **KW) as ld:
        whole = take(ld)
        bad = {e["index"] for e in ld.errors()}
    assert len(whole) == 64 and len(bad) == 2
    got, errors = [], []
    for b, e in [(0, 9), (9, 10), (10, 40), (40, 66)]:
        with sluice.Loader(bad_dataset, order_range=(b, e), **KW) as ld:
            assert ld.num_samples == e - b
            part = take(ld)
            errors += [x["index"] for x in ld.errors()]
        with sluice.Loader(bad_dataset, order_range=(b, e), **dict(KW, workers=1)) as ld:
            assert take(ld) == part  # a task re-run from its lease: the same bytes
        got += part
    assert sorted(errors) == sorted(bad)
    assert sorted(k for k, _ in got) == sorted(k for k, _ in whole)
    assert dict(got) == dict(whole)
    with sluice.Loader(bad_dataset, order_range=(3, 9), shuffle=False, **KW) as ld:
        assert [k for k, _ in take(ld)] == [3, 4, 5, 6, 7, 8]
        st = ld.state_dict()
        assert (st["span_begin"], st["span_end"], st["epoch"]) == (3, 9, 1)


def test_order_range_arguments(dataset):
    for bad, exc in [((5, 5), ValueError), ((5, 3), ValueError), (5, TypeError), (("a", 3), TypeError),
                     ((-1, 3), ValueError)]:
        with pytest.raises(exc, match="order_range"):
            sluice.Loader(dataset, order_range=bad, **KW)
    with pytest.raises(ValueError, match="not inside the dataset's order of 64 samples"):
        sluice.Loader(dataset, order_range=(10, 65), **KW)
    with sluice.Loader(dataset, order_range=(10, 30), **KW) as ld:
        assert (len(ld), ld.num_samples, ld.dataset_size) == (5, 20, 64)
        take(ld, 2)
        st = ld.state_dict()
    with sluice.Loader(dataset, order_range=(10, 30), **KW) as ld:
        ld.load_state_dict(st)
        assert len(take(ld)) == 12
    with sluice.Loader(dataset, order_range=(20, 40), **KW) as ld:
        with pytest.raises(ValueError, match="order range"):
            ld.load_state_dict(st)

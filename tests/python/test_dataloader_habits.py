"""What a PyTorch user types: DataLoader argument names (mapped, or refused
naming sluice's option) and what a second `for` over a loader does (a new
pass, as with a DataLoader)."""
import numpy as np
import pytest

import sluice

from conftest import CLASSES, PER_CLASS

N = len(CLASSES) * PER_CLASS
BS = 8


def make(root, **kw):
    kw.setdefault("batch_size", BS)
    kw.setdefault("size", 32)
    kw.setdefault("budget", "64M")
    return sluice.Loader(root, **kw)


def passes(ld, n):
    """(epoch, batch index) of every batch of n `for` loops."""
    return [[(b.epoch, b.index) for b in ld] for _ in range(n)]


# ---- DataLoader names -------------------------------------------------------------
@pytest.mark.parametrize("num_workers,threads", [(3, 3), (1, 1), (0, 1)])
def test_num_workers_is_workers(dataset, num_workers, threads):
    with make(dataset, num_workers=num_workers) as ld:
        assert ld.stats()["workers"] == threads


def test_num_workers_zero_gives_the_same_batches(dataset):
    with make(dataset, num_workers=0) as a, make(dataset, workers=4) as b:
        for x, y in zip(a, b):
            assert np.array_equal(np.asarray(x["image"]), np.asarray(y["image"]))


def test_workers_named_twice_is_refused(dataset):
    with pytest.raises(TypeError, match="give workers= or num_workers= .* not both"):
        make(dataset, workers=2, num_workers=2)
    with pytest.raises(ValueError, match="num_workers must be an int >= 0, got -1"):
        make(dataset, num_workers=-1)


def test_persistent_workers_is_accepted(dataset):
    for value in (True, False):
        with make(dataset, persistent_workers=value) as ld:
            assert sum(1 for _ in ld) == N // BS
    with pytest.raises(TypeError, match="persistent_workers must be True or False"):
        make(dataset, persistent_workers="yes")


def test_prefetch_factor_names_prefetch(dataset):
    with pytest.raises(ValueError) as ei:
        make(dataset, prefetch_factor=2)
    msg = str(ei.value)
    assert "per DataLoader worker process" in msg and "prefetch=N" in msg
    with make(dataset, prefetch_factor=None) as ld:  # DataLoader's own default without workers
        assert len(ld) == N // BS


def test_pin_memory_on_host_views(dataset):
    with make(dataset, pin_memory=False) as ld:
        assert len(ld) == N // BS
    with pytest.raises(ValueError, match=r"sluice.torch.Loader\(device='cuda'\) pins the slot region"):
        make(dataset, pin_memory=True)


@pytest.mark.parametrize("name,says", [
    ("sampler", "shuffle=, seed= and rank=/world_size="),
    ("batch_sampler", "batch_size="),
    ("collate_fn", "fixed-shape arrays"),
    ("worker_init_fn", "C threads of this process"),
    ("generator", "seed="),
    ("timeout", "SlotsHeldError"),
    ("multiprocessing_context", "threads"),
])
def test_dataloader_arguments_without_an_equivalent(dataset, name, says):
    with pytest.raises(TypeError) as ei:
        make(dataset, **{name: object()})
    assert f"the DataLoader argument {name}= has no sluice equivalent" in str(ei.value)
    assert says in str(ei.value)


def test_a_typo_gets_the_nearest_names(dataset):
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'batchsize' \(did you mean batch_size"):
        make(dataset, batchsize=4)
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'frobnicate'$"):
        make(dataset, frobnicate=1)


# ---- a second `for` ---------------------------------------------------------------
def test_each_for_is_the_next_epoch(dataset):
    with make(dataset) as ld:
        got = passes(ld, 3)
    assert got == [[(e, i) for i in range(N // BS)] for e in range(3)]


def test_a_loop_left_early_ends_its_pass(dataset):
    with make(dataset) as ld, make(dataset) as ref:
        for b in ld:
            if b.index == 2:
                break
        ref.set_epoch(1)
        want = [np.asarray(b["index"]).copy() for b in ref]
        got = [(b.epoch, b.index, np.asarray(b["index"]).copy()) for b in ld]
    assert [(e, i) for e, i, _ in got] == [(1, i) for i in range(N // BS)]
    assert all(np.array_equal(w, g) for w, (_, _, g) in zip(want, got))


def test_a_loop_left_after_the_last_batch(dataset):
    with make(dataset) as ld:
        for b in ld:
            if b.index == N // BS - 1:
                break  # before the loop saw the end of the epoch
        assert passes(ld, 1) == [[(1, i) for i in range(N // BS)]]


def test_set_epoch_chooses_the_next_pass(dataset):
    with make(dataset) as ld:
        next(iter(ld))
        ld.set_epoch(5)
        assert passes(ld, 2) == [[(e, i) for i in range(N // BS)] for e in (5, 6)]


def test_load_state_dict_resumes_mid_epoch(dataset):
    with make(dataset) as ld:
        for b in ld:
            if b.index == 2:
                break
        state = ld.state_dict()
    with make(dataset) as ld:
        ld.load_state_dict(state)
        assert passes(ld, 1) == [[(0, i) for i in range(3, N // BS)]]


def test_next_batch_continues_and_a_for_after_it_is_a_new_pass(dataset):
    with make(dataset) as ld:
        assert (ld.next_batch().index, ld.next_batch().index) == (0, 1)
        assert passes(ld, 1) == [[(1, i) for i in range(N // BS)]]


def test_dataloader_does_the_same():
    # the behaviour sluice copies: a DataLoader's next `for` is a whole new pass
    torch = pytest.importorskip("torch")
    dl = torch.utils.data.DataLoader(list(range(10)), batch_size=2)
    for i, _ in enumerate(dl):
        if i == 1:
            break
    assert len(list(dl)) == 5


def test_torch_loader_passes_and_names(dataset):
    torch = pytest.importorskip("torch")
    import sluice.torch as st

    with st.Loader(dataset, device="cpu", dtype=torch.uint8, num_workers=2, pin_memory=False,
                   batch_size=BS, size=32, budget="64M") as ld:
        assert ld.stats()["workers"] == 2
        for i, _ in enumerate(ld):
            if i == 1:
                break
        assert sum(1 for _ in ld) == N // BS
        assert ld.state_dict()["epoch"] == 2
    with pytest.raises(ValueError, match="pin_memory=True pins host memory for copies to a GPU, but device='cpu'"):
        st.Loader(dataset, device="cpu", pin_memory=True)
    with pytest.raises(ValueError, match="prefetch_factor"):
        st.Loader(dataset, device="cpu", prefetch_factor=4)

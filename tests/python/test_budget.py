"""Memory from Python: the process's resident memory stays within the budget
(8 workers over large progressive 4:4:4 JPEGs and a 40 Mpx PNG, several
epochs, back near the start after close()), and sluice.Budget shared by
loaders, with set_limit and stats."""
import os
import subprocess
import sys

import pytest

import sluice

MIB = 1 << 20

_MAKE_BIG = r"""
import os, sys
import numpy as np
from PIL import Image
root = sys.argv[1]
d = os.path.join(root, "c0")
os.makedirs(d)
rng = np.random.default_rng(0)
def img(w, h):
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255 // w, y * 255 // h, (x + y) * 255 // (w + h)], -1).astype(np.int16)
    noise = rng.integers(-30, 30, size=(h // 4 + 1, w // 4 + 1, 3)).repeat(4, 0).repeat(4, 1)[:h, :w]
    return Image.fromarray(np.clip(base + noise, 0, 255).astype(np.uint8))
for i in range(5):
    img(3000, 2000).save(os.path.join(d, f"p{i}.jpg"), quality=90, progressive=True, subsampling=0)
img(8000, 5000).save(os.path.join(d, "big.png"), compress_level=1)
for i in range(4):
    img(40, 30).save(os.path.join(d, f"t{i}.jpg"), quality=90)
"""


def _status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    return 0


@pytest.fixture(scope="module")
def big_dataset(tmp_path_factory):
    """5 progressive 4:4:4 JPEGs of 3000x2000, a 40 Mpx PNG, 4 tiny JPEGs;
    made in a child process so this one's memory stays where it was."""
    root = str(tmp_path_factory.mktemp("big"))
    subprocess.run([sys.executable, "-c", _MAKE_BIG, root], check=True)
    return root


def test_rss_stays_within_budget_over_epochs(big_dataset):
    budget = 224 * MIB
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # VmHWM starts from here
        have_peak = True
    except OSError:
        have_peak = False
    base = _status("VmRSS:")
    loader = sluice.Loader(big_dataset, batch_size=2, budget=budget, workers=8, size=224, seed=1)
    peak_sampled = base
    for epoch in range(3):
        loader.set_epoch(epoch)
        for batch in loader:
            assert batch["image"].shape[1:] == (3, 224, 224)
            del batch
            peak_sampled = max(peak_sampled, _status("VmRSS:"))
    st = loader.stats()
    assert st["errors"] == 0, loader.errors()
    assert st["peak_accounted_bytes"] <= budget
    loader.close()
    after = _status("VmRSS:")
    peak = _status("VmHWM:") if have_peak else peak_sampled
    print(f"RSS before {base >> 20} MiB, peak +{(peak - base) >> 20} MiB, after close +{(after - base) >> 20} MiB,"
          f" peak accounted {st['peak_accounted_bytes'] >> 20} MiB of {budget >> 20}")
    assert peak - base <= budget + 48 * MIB
    assert after - base <= 24 * MIB


def test_budget_shared_by_train_and_val(dataset):
    budget = sluice.Budget("64M")
    train = sluice.Loader(dataset, batch_size=8, size=64, workers=2, budget=budget)
    val = sluice.Loader(dataset, batch_size=8, size=64, workers=2, budget=budget, preset="val")
    n = sum(len(b["label"]) for b in train) + sum(len(b["label"]) for b in val)
    assert n == 128
    s = budget.stats()
    assert s["loaders"] == 2 and s["limit"] == 64 * MIB and s["peak"] <= s["limit"]
    assert s["fixed"] == sum(s["loader_fixed"])
    assert train.stats()["budget_bytes"] == 64 * MIB
    with pytest.raises(sluice.BudgetError, match="minimum working sets"):
        budget.set_limit(s["fixed"] - 1)
    budget.set_limit("48M")  # while they run
    assert budget.stats()["limit"] == 48 * MIB
    assert sum(len(b["label"]) for b in train) == 64  # delivery goes on
    budget.close()  # the loaders keep it alive
    assert sum(len(b["label"]) for b in val) == 64
    train.close()
    val.close()


def test_loader_over_what_is_left_is_refused(dataset):
    probe = sluice.Loader(dataset, batch_size=8, size=64, workers=2, budget="64M")
    need = probe.stats()["fixed_bytes"]
    probe.close()
    with sluice.Budget(need + need // 2) as budget:
        one = sluice.Loader(dataset, batch_size=8, size=64, workers=2, budget=budget)
        with pytest.raises(sluice.BudgetError, match="shared budget of .* minimum working set"):
            sluice.Loader(dataset, batch_size=8, size=64, workers=2, budget=budget)
        assert budget.stats()["loaders"] == 1
        one.close()


def test_governed_budgets(dataset):
    with sluice.Budget("64M", governor=True, period_ms=20) as b:
        s = b.stats()
        assert s["governor"] and s["ceiling"] == 64 * MIB and s["limit"] <= 64 * MIB
        assert s["mem_available"] > 0
        assert isinstance(b.events(), list)
    ld = sluice.Loader(dataset, batch_size=8, size=64, workers=2, budget="auto")
    assert sum(len(b["label"]) for b in ld) == 64
    ld.close()
    ld = sluice.Loader(dataset, batch_size=8, size=64, workers=2, budget="64M", governor=True)
    assert ld.stats()["budget_bytes"] <= 64 * MIB
    ld.close()
    with pytest.raises(ValueError, match="governor=True goes with a size"):
        sluice.Loader(dataset, budget=sluice.Budget("64M"), governor=True)
    with pytest.raises(ValueError, match="budget must be > 0"):
        sluice.Budget(0)
    closed = sluice.Budget("1M")
    closed.close()
    with pytest.raises(ValueError, match="closed"):
        closed.stats()


def _wait_child(pid, secs=60):
    """The child's exit status; a child still running after `secs` is killed
    and the test fails (a hang is the bug looked for)."""
    import signal
    import time
    deadline = time.monotonic() + secs
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        time.sleep(0.01)


def test_budget_after_fork(dataset):
    """A Budget (with its governor) and a Loader on it, inherited by a child
    of fork(): every call raises RuntimeError saying to create the budget
    after the fork, a Loader made on it is refused the same way (not with the
    parent's counts), close() and garbage collection never hang, and a Budget
    made in the child works. The parent's go on."""
    budget = sluice.Budget("64M", governor=True, period_ms=5)
    ld = sluice.Loader(dataset, batch_size=8, size=64, workers=2, budget=budget)
    first = ld.next_batch()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            def refused(call):
                try:
                    call()
                except RuntimeError as e:
                    msg = str(e)
                    return ("fork()" in msg and f"this is process {os.getpid()}" in msg
                            and "create the budget" in msg and "after the fork" in msg
                            and "shared budget of" not in msg)
                return False
            for call in (budget.stats, budget.events, lambda: budget.set_limit("32M"),
                         lambda: sluice.Loader(dataset, batch_size=8, size=64, workers=2, budget=budget)):
                if not refused(call):
                    code = 1
            if "fork" not in repr(budget):
                code = 1
            try:
                ld.next_batch()
                code = 1
            except RuntimeError:
                pass
            del first
            ld.close()
            budget.close()  # the last reference: the child's copy, the governor thread not joined
            with sluice.Budget("64M") as own:
                mine = sluice.Loader(dataset, batch_size=8, size=64, workers=2, budget=own)
                if sum(b.size for b in mine) != 64 or own.stats()["loaders"] != 1:
                    code = 1
                mine.close()
        except BaseException:
            import traceback
            traceback.print_exc()
            code = 1
        finally:
            os._exit(code)
    status = _wait_child(pid)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    del first
    assert budget.stats()["governor"] and budget.stats()["loaders"] == 1
    assert sum(b.size for b in ld) == 64
    ld.close()
    budget.close()


def _settle(ld, stall=30.0):
    """Wait until every live slot is filled or held (the workers idle); fail
    only when `stall` seconds pass with no slot filled (a loaded machine is
    slow, and the tests are about what is filled, not how fast)."""
    import time
    last, since = None, time.monotonic()
    while True:
        s = ld.stats()
        filled = s["slots_ready"] + s["slots_held"]
        if filled >= s["slots"]:
            return s
        if filled != last:
            last, since = filled, time.monotonic()
        elif time.monotonic() - since > stall:
            raise AssertionError(f"slots never filled: {s}")
        time.sleep(0.005)


def _epochs(dataset, budget, on_batch=None):
    """Checksums of 4 epochs of 8 batches (8 slots of 8 samples of 3x320x320)."""
    ld = sluice.Loader(dataset, batch_size=8, size=320, workers=2, prefetch=8, budget=budget, checksum=True, seed=3)
    sums = []
    for epoch in range(4):
        ld.set_epoch(epoch)
        for b in ld:
            sums.append(b.checksum)
            if on_batch:
                on_batch(ld, len(sums))
    st = ld.stats()
    ld.close()
    return sums, st


def test_shrink_while_iterating_retires_slots_and_keeps_the_bytes(dataset):
    """Issue 8 item 3: set_limit(smaller) while the loader runs. Within a
    second the accounted total is under the new limit, resident memory
    falls with it, iteration goes on without an error, the batches are the
    same bytes as without the shrink, and growing back brings the slots back."""
    import time
    ref, _ = _epochs(dataset, sluice.Budget("128M"))
    budget = sluice.Budget("128M")
    seen = {}

    def on_batch(ld, n):
        if n == 6:  # shrink: keep 2 elastic slots and a little room
            s = _settle(ld)
            assert s["slots"] == 8 and s["slots_min"] == 2 and s["slots_retired"] == 0
            seen["slot"] = s["memory"]["batches"] // s["slots"]
            seen["rss_full"] = _status("VmRSS:")
            seen["limit"] = s["fixed_bytes"] + 2 * seen["slot"] + 2 * MIB
            assert budget.stats()["used"] > seen["limit"]
            seen["t0"] = time.monotonic()
            budget.set_limit(seen["limit"])
        elif "t0" in seen and "under_s" not in seen and budget.stats()["used"] <= seen["limit"]:
            seen["under_s"] = time.monotonic() - seen["t0"]
        if n == 18:
            s = _settle(ld)
            seen["shrunk"] = s
            seen["rss_shrunk"] = _status("VmRSS:")
            budget.set_limit("128M")  # grow back
        if n == 28:
            seen["grown"] = ld.stats()

    got, st = _epochs(dataset, budget, on_batch)
    shrunk, grown = seen["shrunk"], seen["grown"]
    print(f"under the new limit after {seen['under_s']:.3f} s; {shrunk['slots']} slots live, "
          f"{shrunk['slots_retired']} retired; RSS {seen['rss_full'] >> 20} -> {seen['rss_shrunk'] >> 20} MiB; "
          f"grown back to {grown['slots']}")
    assert seen["under_s"] < 1.0
    assert shrunk["slots_retired"] >= 3 and shrunk["slots"] + shrunk["slots_retired"] == 8
    assert shrunk["accounted_bytes"] <= seen["limit"]
    # the retired slots' pages went back, not only their count
    assert seen["rss_full"] - seen["rss_shrunk"] >= shrunk["slots_retired"] * seen["slot"] - 4 * MIB
    assert grown["slots"] == 8 and grown["slots_retired"] == 0
    assert st["errors"] == 0 and st["slot_reactivations"] == st["slot_retirements"] > 0
    assert got == ref  # determinism holds across the shrink
    budget.close()

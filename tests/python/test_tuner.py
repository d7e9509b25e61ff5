"""The tuner (workers="auto", the default; docs/tuner.md) through Python, torch and the CLI.

Consumers of known demand: one that sleeps 0.3 s a batch ends the epoch with
fewer than 1.2 of 2 workers active on average, parks one because the slots
were full (read from the tuner's log) and waits under 5 % of its time; one
that takes batches as fast as it can keeps both; the bytes equal static runs
while the tuner moves. Nothing asserts on a clock: waits come from the
loader's own stats, decisions from its log.
"""
import json
import os
import subprocess
import time
import warnings

import pytest

import sluice
from conftest import make_dataset


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """400 small JPEGs (4 classes of 100)."""
    root = str(tmp_path_factory.mktemp("tuner"))
    make_dataset(root, per_class=100, seed=3)
    return root


def test_auto_is_the_default_and_a_count_fixes_it(dataset):
    with sluice.Loader(dataset, batch_size=8, size=32, budget="64M", workers_max=2) as ld:
        for _ in ld:
            pass
        s = ld.stats()
        assert s["tuner"] is True and s["workers"] == 2
        for key in ("workers_active", "workers_active_mean", "slots_target", "tuner_decisions", "pass_seconds",
                    "pass_consumer_wait_s", "pass_consumer_wait_fraction", "pass_consumer_cpu_s",
                    "pass_gpu_samples", "pass_cpu_samples", "tuner_log"):
            assert key in s, key
        assert isinstance(s["tuner_log"], list)
        assert s["pass_consumer_wait_gpu_s"] == 0 and s["pass_consumer_wait_gpu_fraction"] == 0  # no GPU decode
        assert s["pass_consumer_wait_cpu_s"] == 0 and s["pass_consumer_wait_cpu_fraction"] == 0
    with sluice.Loader(dataset, batch_size=8, size=32, budget="64M", workers=2) as ld:
        s = ld.stats()
        assert s["tuner"] is False and s["workers_active"] == 2 and s["tuner_log"] == []
    with sluice.Loader(dataset, batch_size=8, size=32, budget="64M", num_workers=3) as ld:  # DataLoader's name
        assert ld.stats()["tuner"] is False and ld.stats()["workers"] == 3
    with pytest.raises(ValueError, match="workers_max goes with"):
        sluice.Loader(dataset, workers=2, workers_max=4)
    with pytest.raises(ValueError, match='"auto"'):
        sluice.Loader(dataset, workers="many")


def _performance_warnings(loader):
    """The PerformanceWarnings one pass of loader issued."""
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        for _ in loader:
            pass
    return [w for w in got if issubclass(w.category, sluice.PerformanceWarning)]


def test_a_pass_the_gpu_decode_held_up_warns_once(dataset, monkeypatch):
    """A pass whose loop waited on the GPU decode (its stats say so) ends with a PerformanceWarning
    that names decode='cpu', once a loader; a pass it did not hold up, a short one, a first pass
    under a minute (the model's warm-up in it) or the CPU path, none. (The wait itself is counted
    in C: test_gpu_loader's gpu_loader_counts_the_wait_the_gpu_held_up.)"""
    held = {"decode": "gpu", "pass_consumer_wait_gpu_fraction": 0.17, "pass_seconds": 30.0,
            "pass_consumer_wait_s": 6.0, "pass_gpu_samples": 90000, "pass_cpu_samples": 6000}
    hint = sluice._gpu_held_hint(held)
    assert "decode='cpu'" in hint and "about 4,000 images/s" in hint and "--decode cpu" in hint
    assert "all busy" not in hint and "(the costly ones) at 2,100/s" in sluice._gpu_held_hint({**held, "cpu_rate": 2100.0})
    assert "their share of the images at 2,100/s" in sluice._gpu_held_hint(
        {**held, "cpu_rate": 2100.0, "decode_reason": "decode=auto: 1 GPU engine on ..."})
    for quiet in ({**held, "decode": "cpu"}, {**held, "pass_consumer_wait_gpu_fraction": 0.05},
                  {**held, "pass_seconds": 1.0}):
        assert sluice._gpu_held_hint(quiet) is None
    assert sluice._gpu_held_hint(held, first=True) is None
    assert sluice._gpu_held_hint({**held, "pass_seconds": 90.0, "pass_consumer_wait_s": 18.0}, first=True)
    with sluice.Loader(dataset, batch_size=8, size=32, budget="64M", workers=2) as ld:
        assert _performance_warnings(ld) == []  # the CPU path
    with sluice.Loader(dataset, batch_size=8, size=32, budget="64M", workers=2) as ld:
        real = ld.stats
        monkeypatch.setattr(ld, "stats", lambda: {**real(), **held})
        assert _performance_warnings(ld) == []  # its first pass: 30 s, under a minute
        got = _performance_warnings(ld)
        assert len(got) == 1 and "waited 17% of the pass for the GPU decode" in str(got[0].message)
        assert _performance_warnings(ld) == []  # once a loader


def test_sleeping_consumer_parks_a_worker(big):
    with sluice.Loader(big, batch_size=8, size=32, budget="64M", workers_max=2) as ld:
        first = None
        n = 0
        for _ in ld:
            if first is None:
                first = ld.stats()
            time.sleep(0.3)  # the training step
            n += 1
        s = ld.stats()
    assert n == 50
    log = s["tuner_log"]
    for d in log:
        print(d)
    assert any(d["what"] == "workers" and d["why"] == "slots_full" and d["to"] < d["from"] for d in log)
    assert s["workers_active_mean"] <= 1.2, s["workers_active_mean"]
    wait = s["pass_consumer_wait_s"] - first["pass_consumer_wait_s"]
    span = s["pass_seconds"] - first["pass_seconds"]
    assert wait <= 0.05 * span, (wait, span)


def test_free_consumer_keeps_every_worker(big):
    with sluice.Loader(big, batch_size=8, size=96, budget="64M", workers_max=2, preset="val") as ld:
        for _ in ld:
            pass
        s = ld.stats()
    assert s["workers_active"] == 2
    assert s["workers_active_mean"] >= 1.8, s


def test_bytes_equal_while_the_tuner_moves(big):
    # The consumer stays slower than the workers (60 ms a batch) until the
    # tuner has moved, at most `slow` batches, then runs flat out: a fixed
    # number of short sleeps is no slower than workers on a loaded machine,
    # and nothing would move.
    def sums(slow, **kw):
        out = []
        with sluice.Loader(big, batch_size=4, size=32, budget="64M", checksum=True, **kw) as ld:
            for i, b in enumerate(ld):
                out.append(b.checksum)
                del b
                if i < slow and not ld.stats()["tuner_decisions"]:
                    time.sleep(0.06)
            return out, ld.stats()["tuner_log"]

    tuned, log = sums(60, workers_max=2)
    assert log, "the tuner made no decision"
    assert sums(0, workers=1)[0] == tuned
    assert sums(0, workers=2)[0] == tuned


def test_torch_loader_is_tuned(big):
    torch = pytest.importorskip("torch")
    import sluice.torch

    ld = sluice.torch.Loader(big, batch_size=8, size=32, budget="64M", workers_max=2, dtype=torch.uint8,
                             device="cpu")
    try:
        parked = False
        for _ in ld:  # slower than the workers until one has parked (see above)
            if not parked:
                time.sleep(0.05)
                parked = ld.stats()["workers_active"] < 2
        s = ld.stats()
    finally:
        ld.close()
    assert s["tuner"] is True and s["workers"] == 2
    assert s["tuner_decisions"] >= 1 and s["workers_active_mean"] < 2


def test_bench_reports_the_tuner(big, sluice_exe):
    out = subprocess.run([sluice_exe, "bench", big, "--batch", "8", "--size", "32", "--budget", "64M",
                          "--workers-max", "2", "--json"], capture_output=True, text=True, check=True).stdout
    r = json.loads(out)
    assert r["tuner"] is True and r["workers"] == 2
    for key in ("workers_active", "workers_active_mean", "slots_target", "tuner_decisions", "tuner_log",
                "consumer_wait_fraction", "pass_consumer_wait_fraction", "pass_consumer_wait_gpu_fraction",
                "pass_consumer_wait_cpu_fraction", "pass_gpu_samples"):
        assert key in r, key
    text = subprocess.run([sluice_exe, "bench", big, "--batch", "8", "--size", "32", "--budget", "64M",
                           "--workers", "auto"], capture_output=True, text=True, check=True).stdout
    assert "  tuner: " in text
    fixed = json.loads(subprocess.run([sluice_exe, "bench", big, "--batch", "8", "--size", "32", "--budget", "64M",
                                       "--workers", "2", "--json"], capture_output=True, text=True,
                                      check=True).stdout)
    assert fixed["tuner"] is False and fixed["workers_active"] == 2
    bad = subprocess.run([sluice_exe, "bench", big, "--workers", "2", "--workers-max", "3"], capture_output=True,
                         text=True)
    assert bad.returncode == 2 and "--workers-max goes with --workers auto" in bad.stderr


def test_top_shows_a_tuned_loader(big, sluice_exe, tmp_path, monkeypatch):
    monkeypatch.setenv("SLUICE_STATUS_DIR", str(tmp_path))
    with sluice.Loader(big, batch_size=8, size=32, budget="64M", workers_max=2) as ld:
        it = iter(ld)
        for _ in range(12):
            next(it)
            time.sleep(0.05)
        names = os.listdir(tmp_path)
        assert f"sluice-loader-{os.getpid()}-" in " ".join(names), names
        out = subprocess.run([sluice_exe, "top", str(os.getpid()), "--once", "--json"], capture_output=True,
                             text=True, check=True, env=dict(os.environ)).stdout
        loaders = json.loads(out)["loaders"]
        assert len(loaders) == 1 and loaders[0]["pid"] == os.getpid() and loaders[0]["workers"] == 2
        assert loaders[0]["source"] == big
        text = subprocess.run([sluice_exe, "top", str(os.getpid()), "--once"], capture_output=True, text=True,
                              check=True).stdout
        assert "loader  pid" in text
        del it
    assert not [n for n in os.listdir(tmp_path) if n.startswith("sluice-loader-")]

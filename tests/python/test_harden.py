"""Hardening (issue 9) through Python and the CLI: fork, Ctrl-C, loud errors,
non-regular files in every command, the review's defects."""
import copy
import os
import pickle
import resource
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import sluice
from conftest import ROOT, make_dataset

BUILD = os.environ.get("SLUICE_BUILD", os.path.join(ROOT, "build"))
SLUICE = os.path.join(BUILD, "sluice")


def make(src, **kw):
    kw.setdefault("batch_size", 8)
    kw.setdefault("size", 32)
    kw.setdefault("budget", "64M")
    kw.setdefault("workers", 2)
    return sluice.Loader(src, **kw)


def run_py(code, timeout=120):
    """Run code in a fresh interpreter (PYTHONPATH as ours); never hangs the suite."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, env=env)


def corrupt_dataset(root, good, bad):
    """good JPEGs (conftest's) in 4 classes and `bad` text files named .jpg."""
    make_dataset(root, per_class=good // 4)
    for i in range(bad):
        with open(os.path.join(root, "ant", f"zz_bad_{i:03d}.jpg"), "w") as f:
            f.write("not an image\n")
    return root


# ---- fork -------------------------------------------------------------------

def test_fork_child_raises_and_frees(dataset):
    ld = make(dataset)
    first = ld.next_batch()
    pid = os.fork()
    if pid == 0:  # the child: every use raises at once, close and GC never hang
        code = 1
        try:
            try:
                ld.next_batch()
            except RuntimeError as e:
                msg = str(e)
                if "fork()" in msg and "create a new loader after the fork" in msg:
                    code = 0
            for call in (ld.stats, ld.state_dict, lambda: ld.set_epoch(3)):
                try:
                    call()
                    code = 1
                except RuntimeError:
                    pass
            del first
            ld.close()
        finally:
            os._exit(code)
    deadline = time.monotonic() + 30
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        time.sleep(0.01)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    # the parent's loader goes on: a `for` after next_batch() is the next pass (docs/python.md)
    del first
    assert sum(b.size for b in ld) == 64
    ld.close()


def test_fork_child_garbage_collection_never_hangs(dataset):
    r = run_py(f"""
        import gc, os, sluice
        ld = sluice.Loader({dataset!r}, batch_size=8, size=32, budget="64M", workers=4)
        b = ld.next_batch()
        del b
        pid = os.fork()
        if pid == 0:
            del ld          # garbage collection in the child: frees the child's copy only
            gc.collect()
            os._exit(0)
        _, st = os.waitpid(pid, 0)
        print("child", os.WEXITSTATUS(st))
    """, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "child 0" in r.stdout


def test_inside_torch_dataloader_workers(dataset):
    """The common first attempt: a sluice.Loader inside a DataLoader(num_workers>0)."""
    pytest.importorskip("torch")
    r = run_py(f"""
        import torch, sluice
        class DS(torch.utils.data.IterableDataset):
            def __init__(self):
                self.ld = sluice.Loader({dataset!r}, batch_size=8, size=32, budget="64M", workers=2)
            def __iter__(self):
                for b in self.ld:
                    yield torch.from_dlpack(b["label"]).clone()
        dl = torch.utils.data.DataLoader(DS(), batch_size=None, num_workers=2)
        try:
            for x in dl:
                pass
            print("no error")
        except RuntimeError as e:
            print("raised:", str(e).replace("\\n", " "))
    """, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "raised:" in r.stdout, r.stdout
    assert "fork()" in r.stdout and "create a new loader after the fork" in r.stdout


# ---- Ctrl-C ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def slow_dataset(tmp_path_factory):
    """128 noise JPEGs of 2000x1500 (hard links of one): a batch of 64 takes
    over a second of CPU to decode on one worker."""
    from PIL import Image

    root = tmp_path_factory.mktemp("slow")
    os.makedirs(root / "a")
    rng = np.random.default_rng(1)
    Image.fromarray(rng.integers(0, 256, (1500, 2000, 3), dtype=np.uint8)).save(root / "a" / "img_000.jpg",
                                                                               quality=95)
    for i in range(1, 128):
        os.link(root / "a" / "img_000.jpg", root / "a" / f"img_{i:03d}.jpg")
    return str(root)


@pytest.fixture
def ctrl_c_raises():
    """Python's own SIGINT handler for the test: a process started in the background by a
    non-interactive shell (`(make test &)`, some CI runners) inherits SIGINT ignored, and Python
    then installs none, so no Ctrl-C would ever raise."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def interrupt_after(seconds):
    t = threading.Timer(seconds, lambda: os.kill(os.getpid(), signal.SIGINT))
    t.start()
    return t


def test_ctrl_c_interrupts_waiting_next_and_loses_nothing(slow_dataset, ctrl_c_raises):
    kw = dict(batch_size=64, size=64, preset="val", workers=1, budget="256M", checksum=True)
    ld = make(slow_dataset, **kw)
    t0 = time.monotonic()
    interrupt_after(0.15)
    with pytest.raises(KeyboardInterrupt):
        ld.next_batch()
    latency = time.monotonic() - t0 - 0.15
    print(f"KeyboardInterrupt {latency * 1000:.0f} ms after SIGINT")
    # interrupted while waiting: nothing was delivered, nothing counted
    assert ld.stats()["batches"] == 0
    assert ld.state_dict()["batch"] == 0
    assert latency < 1.0  # not after the batch (seconds): it did not wait for it
    # the batch awaited is the next one returned
    b = ld.next_batch()
    assert b.index == 0 and b.size == 64
    want = [b.checksum]
    del b
    # interrupted while waiting for batch 1: the state resumes at batch 1
    interrupt_after(0.15)
    with pytest.raises(KeyboardInterrupt):
        ld.next_batch()
    state = ld.state_dict()
    assert state["batch"] == 1
    b = ld.next_batch()
    assert b.index == 1
    want.append(b.checksum)
    del b
    ld.close()
    resumed = make(slow_dataset, **kw)
    resumed.load_state_dict(state)
    b = resumed.next_batch()
    assert b.index == 1 and b.checksum == want[1]
    del b
    resumed.close()


# ---- loud on bad data -------------------------------------------------------------

def test_every_file_corrupt_raises_instead_of_empty_epochs(tmp_path):
    root = str(tmp_path / "allbad")
    os.makedirs(os.path.join(root, "a"))
    for i in range(20):
        with open(os.path.join(root, "a", f"x{i}.jpg"), "wb") as f:
            f.write(b"junk" * 100)
    with make(root) as ld:
        assert len(ld) == 3
        with pytest.raises(sluice.ErrorRateError, match=r"every sample tried in epoch 0 failed"):
            list(ld)
        with pytest.raises(RuntimeError, match="every sample tried"):  # poisoned: later calls too
            list(ld)


def test_error_rate_guard(tmp_path):
    root = corrupt_dataset(str(tmp_path / "rate"), 96, 24)  # 20 % bad
    with make(root) as ld:
        with pytest.raises(sluice.ErrorRateError) as ei:
            for _ in ld:
                pass
        msg = str(ei.value)
        assert "over max_error_rate 10.0%" in msg and "first failures:" in msg and "zz_bad_" in msg
        assert ei.value.code_name == "SL_EERRORS"
    with make(root, max_error_rate=0.25) as ld:
        assert sum(b.size for b in ld) == 96
    with pytest.raises(ValueError):
        make(root, max_error_rate=1.5)
    with pytest.raises(TypeError):
        make(root, max_error_rate="0.1")


def test_vanished_dataset_raises(tmp_path):
    root = str(tmp_path / "gone")
    make_dataset(root, per_class=4)
    with make(root, prefetch=2) as ld:
        assert sum(b.size for b in ld) == 16
        shutil.rmtree(root)
        with pytest.raises(FileNotFoundError, match="was removed while the loader ran"):
            for _ in range(3):  # what was decoded before the removal may come first
                for _ in ld:
                    pass


def test_sample_error_names_its_own_sample(tmp_path):
    """Once max_error_records are kept, SampleError still names the sample of
    the batch it dropped (not the last kept record)."""
    root = str(tmp_path / "se")
    make_dataset(root, per_class=6)  # 24 files: ant_000..005, bee_..., ...
    for cls in ("ant", "cat"):
        with open(os.path.join(root, cls, f"{cls}_003.jpg"), "w") as f:
            f.write("broken\n")
    with make(root, shuffle=False, on_error="raise", max_error_records=1) as ld:
        failed = []
        while True:
            try:
                b = ld.next_batch()
                if b is None:
                    break
            except sluice.SampleError as e:
                failed.append(os.path.basename(e.path))
        assert failed == ["ant_003.jpg", "cat_003.jpg"]
        assert len(ld.errors()) == 1


# ---- non-regular files in every command ---------------------------------------------

@pytest.fixture()
def special_dataset(tmp_path):
    root = tmp_path / "special"
    make_dataset(str(root), per_class=2)
    os.mkfifo(root / "ant" / "fifo.jpg")
    os.symlink("/dev/zero", root / "bee" / "zero.jpg")
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(root / "cat" / "sock.jpg"))
    os.makedirs(root / "dog" / "dir.jpg" / "inner")  # a folder named like an image (a manifest lists it)
    with open(root / "list.csv", "w") as f:
        f.write("path,label\n")
        for rel in ("ant/fifo.jpg", "bee/zero.jpg", "cat/sock.jpg", "dog/dir.jpg", "ant/ant_000.jpg"):
            f.write(f"{rel},0\n")
    yield str(root)
    s.close()


def test_special_files_in_the_loader(special_dataset):
    with make(special_dataset + "/list.csv", max_error_rate=1) as ld:
        assert sum(b.size for b in ld) == 1
        reasons = {os.path.basename(e["path"]): e["reason"] for e in ld.errors()}
    assert reasons == {"fifo.jpg": "not a regular file (a FIFO)", "zero.jpg": "not a regular file (a device)",
                       "sock.jpg": "not a regular file (a socket)", "dir.jpg": "not a regular file (a directory)"}


def test_special_files_in_the_cli(special_dataset):
    for name in ("ant/fifo.jpg", "bee/zero.jpg", "cat/sock.jpg", "dog/dir.jpg"):
        r = subprocess.run([SLUICE, "decode", os.path.join(special_dataset, name), "-o",
                            os.path.join(special_dataset, "out.ppm")],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 1 and "not a regular file" in r.stderr, r.stderr
    r = subprocess.run([SLUICE, "decode", "/dev/zero", "--info"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "a character device, not a regular file" in r.stderr
    r = subprocess.run([SLUICE, "plan", special_dataset, "--no-python", "--sample", "16"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr  # the FIFO is skipped, not waited on
    r = subprocess.run([SLUICE, "bench", special_dataset + "/list.csv", "--batch", "2", "--budget", "32M",
                        "--workers", "2", "--json", "--max-error-rate", "1"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr


# ---- the CLI's exit codes ---------------------------------------------------------

def test_bench_exit_codes(tmp_path, bad_dataset):
    root = str(tmp_path / "allbad")
    os.makedirs(os.path.join(root, "a"))
    for i in range(10):
        with open(os.path.join(root, "a", f"x{i}.jpg"), "wb") as f:
            f.write(b"junk")
    base = ["--batch", "8", "--budget", "64M", "--workers", "2", "--size", "32"]
    r = subprocess.run([SLUICE, "bench", root, *base], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "every sample tried in epoch 0 failed" in r.stderr
    r = subprocess.run([SLUICE, "bench", bad_dataset, *base, "--on-error", "raise"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1 and "dropped" in r.stderr
    r = subprocess.run([SLUICE, "bench", bad_dataset, *base, "--json"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and '"stopped": null' in r.stdout
    r = subprocess.run([SLUICE, "bench", bad_dataset, *base, "--max-error-rate", "2"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "fraction" in r.stderr


def test_top_plot_unwritable(tmp_path):
    log = tmp_path / "top.jsonl"
    log.write_text('{"time": 1.0, "tree": {"pss_bytes": 1000}}\n{"time": 2.0, "tree": {"pss_bytes": 2000}}\n')
    r = subprocess.run([SLUICE, "top", "--plot", "/dev/full", str(log)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "cannot write /dev/full: No space left on device" in r.stderr
    assert "read" not in r.stderr
    out = tmp_path / "out.svg"

    def no_room():
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

    r = subprocess.run([SLUICE, "top", "--plot", str(out), str(log)], capture_output=True, text=True, timeout=30,
                       preexec_fn=no_room)
    assert r.returncode == 1 and "cannot write" in r.stderr, r.stderr
    assert os.listdir(tmp_path) == ["top.jsonl"]  # no empty or partial file left
    r = subprocess.run([SLUICE, "top", "--plot", str(out), str(log)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and out.read_text().startswith("<svg")


def test_csv_with_cr_line_ends(tmp_path, dataset):
    m = tmp_path / "mac.csv"
    m.write_bytes(b"path,label\r" + b"".join(f"{dataset}/ant/ant_{i:03d}.jpg,{i % 3}\r".encode() for i in range(10)))
    with make(str(m), shuffle=False) as ld:
        labels = [l for b in ld for l in np.asarray(b["label"]).tolist()]
    assert labels == [i % 3 for i in range(10)]


# ---- the review's defects ----------------------------------------------------------

def test_copy_and_pickle_refused(dataset):
    with make(dataset) as ld:
        for f in (copy.copy, copy.deepcopy, pickle.dumps):
            with pytest.raises(TypeError, match="cannot be"):
                f(ld)
        assert sum(b.size for b in ld) == 64  # the original still works


def test_load_state_dict_numpy_ints_and_unreachable(dataset):
    with make(dataset) as ld:
        next(iter(ld))
        state = ld.state_dict()
    with make(dataset) as ld:
        ld.load_state_dict({k: np.int64(v) for k, v in state.items()})
        assert ld.next_batch().index == 1
        bad = dict(state, tail=0)
        with pytest.raises(ValueError, match="position no loader can be at"):
            ld.load_state_dict(bad)
        with pytest.raises(TypeError):
            ld.load_state_dict(dict(state, batch=1.0))
        with pytest.raises(TypeError):
            ld.load_state_dict(dict(state, batch=True))


def test_dlpack_argument_errors(dataset):
    with make(dataset) as ld:
        b = ld.next_batch()
        f = b["label"]
        with pytest.raises(BufferError):
            f.__dlpack__(stream=2 ** 100)
        with pytest.raises(BufferError):
            f.__dlpack__(stream=5)
        with pytest.raises(TypeError, match="max_version"):
            f.__dlpack__(max_version="xy")
        with pytest.raises(TypeError, match="dl_device"):
            f.__dlpack__(dl_device="cpu")
        assert f.__dlpack__(stream=-1) is not None
        del b, f


def test_header_reasons_reach_python(dataset):
    with pytest.raises(sluice.DecodeError, match="empty file"):
        sluice.decode_image(b"")
    with pytest.raises(sluice.DecodeError, match="empty file"):
        sluice.probe_image(b"")
    with open(os.path.join(dataset, "ant", "ant_000.jpg"), "rb") as f:
        data = f.read()
    with pytest.raises(sluice.DecodeError, match=r"over the max_pixels limit of 100"):
        sluice.decode_image(data, max_pixels=100)


def test_torch_keep_alpha_default_normalization(dataset):
    torch = pytest.importorskip("torch")
    import sluice.torch as st

    with st.Loader(dataset, device="cpu", dtype=torch.float32, keep_alpha=True, batch_size=8, size=32,
                   budget="64M", workers=2) as ld:
        images, labels = next(iter(ld))
    assert images.shape == (8, 4, 32, 32)
    assert torch.allclose(images[:, 3], torch.ones(8, 32, 32))  # opaque alpha: 255 / 255
    with pytest.raises(TypeError, match="cannot be"):
        copy.copy(ld)

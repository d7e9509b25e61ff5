"""Shared fixtures: small image datasets made with Pillow under pytest's tmp dirs."""
import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SLUICE = os.path.join(os.environ.get("SLUICE_BUILD", os.path.join(ROOT, "build")), "sluice")  # the command
try:  # an installed sluice (pip install .) or PYTHONPATH=python (make test-python)
    import sluice  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(ROOT, "python"))

CLASSES = ["ant", "bee", "cat", "dog"]  # label = position in sorted order
PER_CLASS = 16
SIZES = [(64, 48), (80, 80), (120, 90), (50, 100), (300, 200)]


def child_env(drop=(), **items):
    """A child process's environment: this one's less the names in drop, this tree's package first
    on PYTHONPATH, then items (each a string)."""
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "python"), os.environ.get("PYTHONPATH", "")])
    env.update(items)
    return env


def skip_without_ffmpeg(clip):
    """Skip the calling fixture's tests where this build has no FFmpeg (probing clip says so)."""
    import sluice
    try:
        sluice.probe_video(clip)
    except sluice.DecodeError as e:
        if e.code_name == "SL_EUNSUPPORTED":
            pytest.skip("built without FFmpeg")
        raise


def _image(rng, w, h):
    from PIL import Image

    y, x = np.mgrid[0:h, 0:w]
    base = rng.integers(0, 256, size=3)
    img = np.stack([(x * (c + 1) * 3 + y * (3 - c) * 2 + base[c]) % 256 for c in range(3)], axis=-1)
    img = img + rng.integers(-20, 21, size=img.shape)
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")


def make_dataset(root, per_class=PER_CLASS, seed=0):
    rng = np.random.default_rng(seed)
    n = 0
    for ci, name in enumerate(CLASSES):
        d = os.path.join(root, name)
        os.makedirs(d, exist_ok=True)
        for i in range(per_class):
            w, h = SIZES[(ci + i) % len(SIZES)]
            _image(rng, w, h).save(os.path.join(d, f"{name}_{i:03d}.jpg"), quality=90)
            n += 1
    return n


@pytest.fixture(scope="session")
def dataset(tmp_path_factory):
    """64 JPEGs of five sizes in 4 classes (ImageFolder layout)."""
    root = str(tmp_path_factory.mktemp("ds"))
    make_dataset(root)
    return root


@pytest.fixture(scope="session")
def bad_dataset(tmp_path_factory):
    """The 64 good JPEGs plus a truncated JPEG and a text file named .jpg."""
    root = str(tmp_path_factory.mktemp("bad"))
    make_dataset(root)
    good = os.path.join(root, "ant", "ant_000.jpg")
    with open(good, "rb") as f:
        data = f.read()
    with open(os.path.join(root, "bee", "bee_truncated.jpg"), "wb") as f:
        f.write(data[: len(data) // 3])
    with open(os.path.join(root, "cat", "cat_text.jpg"), "w") as f:
        f.write("this is not an image\n")
    return root


@pytest.fixture
def sluice_exe():
    """The built sluice command (SLUICE_BUILD, else build/); skips the test where it is not built."""
    if not os.access(SLUICE, os.X_OK):
        pytest.skip("build/sluice not built")
    return SLUICE


def torch_gloo_teardown_abort(proc, markers):
    """A torchrun run that failed only because a rank died of std::terminate
    at interpreter exit (SIGABRT, "terminate called without an active
    exception") after printing every marker. torch's own bug on the CPU
    (gloo), not sluice's: a plain DDP script without sluice does it too, in
    4 of 12 torchrun runs on a busy 2-core machine (torch 2.13). The caller
    then checks what the run wrote, as it would have."""
    out = proc.stdout + proc.stderr
    return (proc.returncode != 0 and "terminate called without an active exception" in out
            and "exitcode  : -6" in out and all(m in out for m in markers))

"""bench/make_imagenet_like.py, the project's own generator of the ImageNet-like
sets that bench/ and docs/ measure on: the layout and command line of the one
the numbers were first taken with (OUT/train/<class>/<name>.JPEG, manifest.csv),
deterministic for a seed whatever --jobs, the quirks of real sets, JPEGs with
a photograph's bytes per pixel, and --photos over a folder of pictures."""
import csv
import io
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

import sluice
from conftest import ROOT

SCRIPT = os.path.join(ROOT, "bench", "make_imagenet_like.py")


def make(out, *args):
    r = subprocess.run([sys.executable, SCRIPT, str(out), *map(str, args)], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    return r.stderr


def files(root):
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            out[os.path.relpath(p, root)] = open(p, "rb").read()
    return out


QUIRKS = ["--png-frac", 0.15, "--progressive-frac", 0.3, "--gray-frac", 0.15, "--cmyk-frac", 0.1]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    d = tmp_path_factory.mktemp("inet")
    make(d / "a", "--images", 40, "--classes", 4, "--seed", 3, "--jobs", 1, *QUIRKS)
    return d


def test_layout_and_manifest(made):
    root = made / "a"
    rows = list(csv.reader(open(root / "manifest.csv")))
    assert rows[0] == ["path", "label"] and len(rows) == 41
    for i, (path, label) in enumerate(rows[1:]):
        assert path == os.path.join("train", "n%08d" % (i % 4), "img_%08d.JPEG" % i) and int(label) == i % 4
        assert (root / path).is_file()
    with sluice.Loader(str(root), batch_size=8, size=32, budget="64M", workers=2, shuffle=False) as ld:
        assert ld.dataset_size == 40
        labels = [int(x) for b in ld for x in np.asarray(b["label"])]
        assert sorted(labels) == sorted(i % 4 for i in range(40)) and ld.stats()["errors"] == 0


def test_deterministic_whatever_the_jobs(made):
    make(made / "b", "--images", 40, "--classes", 4, "--seed", 3, "--jobs", 2, *QUIRKS)
    assert files(made / "a") == files(made / "b")
    make(made / "c", "--images", 40, "--classes", 4, "--seed", 4, "--jobs", 2, *QUIRKS)
    assert files(made / "a") != files(made / "c")


def test_quirks_and_photo_like_sizes(made):
    kinds = {"PNG": 0, "progressive": 0, "L": 0, "CMYK": 0, "RGB": 0}
    nbytes = npx = 0
    for path, data in files(made / "a" / "train").items():
        im = Image.open(io.BytesIO(data))
        long_side = max(im.size)
        assert 200 <= long_side <= 1200 and min(im.size) >= 32
        if im.format == "PNG":
            kinds["PNG"] += 1
            continue
        assert im.format == "JPEG"
        kinds["progressive"] += bool(im.info.get("progressive"))
        kinds[im.mode] += 1
        if im.mode == "RGB":
            nbytes += len(data)
            npx += im.size[0] * im.size[1]
    assert all(kinds.values()), kinds
    # a photograph's entropy: JPEG at quality 88-96 of camera pictures holds
    # about 0.3 bytes a pixel (the shared photographs' crops: 0.32)
    assert 0.2 < nbytes / npx < 0.5, nbytes / npx


def test_photos_folder(tmp_path):
    photos = tmp_path / "photos"
    photos.mkdir()
    rng = np.random.default_rng(0)
    for k in range(3):
        Image.fromarray(rng.integers(0, 255, (300, 400, 3), dtype=np.uint8)).save(photos / f"p{k}.jpg")
    (photos / "COPYRIGHT").write_text("not a picture")
    make(tmp_path / "out", "--images", 6, "--classes", 2, "--photos", photos, "--jobs", 1)
    assert len(list((tmp_path / "out" / "train").rglob("*.JPEG"))) == 6
    empty = tmp_path / "empty"
    empty.mkdir()
    r = subprocess.run([sys.executable, SCRIPT, str(tmp_path / "x"), "--photos", str(empty)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode != 0 and "no .jpg, .jpeg or .png photos" in r.stderr

"""WebP through sluice against Pillow (which decodes with libwebp too).

- Full decodes equal Pillow's `convert("RGB")` / `convert("RGBA")` exactly:
  lossy, lossy with alpha, lossless, odd sizes.
- `val` preset: mean abs difference <= 1.0 from Pillow's resize + center
  crop (as for JPEG and PNG in test_reference.py); `train` preset: Pillow's
  crop of the same box + resize + flip, within the same tolerance.
- Animated, truncated and corrupt files are DecodeErrors; a folder of WebP
  files loads through sluice.Loader like JPEGs.
The windowed decode's exactness and the memory bound are in tests/c/test_webp.c.
"""
import io
import os

import numpy as np
import pytest
from PIL import Image

import sluice

pytestmark = pytest.mark.skipif(sluice.build_info()["webp"] is None, reason="built without libwebp")


def _photo(w, h, seed, alpha=False):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    chans = [(np.sin(x / (7 + 3 * c)) + np.cos(y / (5 + 2 * c))) * 60 + 128 + rng.normal(0, 12, (h, w))
             for c in range(4 if alpha else 3)]
    return np.clip(np.stack(chans, -1), 0, 255).astype(np.uint8)


def _webp(pix, **kw):
    b = io.BytesIO()
    Image.fromarray(pix, "RGBA" if pix.shape[2] == 4 else "RGB").save(b, "WEBP", **kw)
    return b.getvalue()


@pytest.fixture(scope="module")
def webps():
    return {
        "lossy": _webp(_photo(500, 375, 1), quality=85),
        "lossy_portrait_odd": _webp(_photo(333, 501, 2), quality=75),
        "lossy_alpha": _webp(_photo(320, 240, 3, alpha=True), quality=80),
        "lossless": _webp(_photo(257, 193, 4), lossless=True),
        "lossless_alpha": _webp(_photo(200, 300, 5, alpha=True), lossless=True),
    }


NAMES = ["lossy", "lossy_portrait_odd", "lossy_alpha", "lossless", "lossless_alpha"]


@pytest.mark.parametrize("name", NAMES)
def test_full_decode_equals_pillow(webps, name):
    data = webps[name]
    info = sluice.probe_image(data)
    assert info["format"] == "webp"
    ref = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    got = sluice.decode_image(data)
    assert got.shape == ref.shape
    assert np.array_equal(got, ref), f"{name}: {int((got != ref).sum())} bytes differ"
    ref4 = np.asarray(Image.open(io.BytesIO(data)).convert("RGBA"))
    got4 = sluice.decode_image(data, keep_alpha=True)
    assert np.array_equal(got4, ref4)


def _pil_val(data, size):
    im = Image.open(io.BytesIO(data)).convert("RGB")
    short = size * 256 // 224
    w, h = im.size
    rw, rh = (short, int(short * h / w)) if w <= h else (int(short * w / h), short)
    a = np.asarray(im.resize((rw, rh), Image.BILINEAR, reducing_gap=None))
    top, left = int(round((rh - size) / 2.0)), int(round((rw - size) / 2.0))
    return a[top:top + size, left:left + size].transpose(2, 0, 1)


@pytest.mark.parametrize("name", NAMES)
def test_val_matches_pillow(webps, name):
    data = webps[name]
    got = sluice.decode_image(data, preset="val", size=160)
    mad = np.abs(got.astype(np.float64) - _pil_val(data, 160)).mean()
    assert mad <= 1.0, f"{name}: mean abs diff {mad:.3f}"


@pytest.mark.parametrize("name", NAMES)
def test_train_matches_pillow_crop_resize(webps, name):
    data = webps[name]
    im = Image.open(io.BytesIO(data)).convert("RGB")
    for index in range(6):  # crops all over the image: exercises libwebp's cropping
        x, y, w, h, flip = sluice.train_crop(im.width, im.height, seed=3, epoch=0, index=index)
        box = (x, y, w, h)
        ref = im.crop((x, y, x + w, y + h)).resize((96, 96), Image.BILINEAR, reducing_gap=None)
        ref = np.asarray(ref)[:, ::-1] if flip else np.asarray(ref)
        got = sluice.decode_image(data, preset="train", size=96, seed=3, index=index)
        mad = np.abs(got.astype(np.float64) - ref.transpose(2, 0, 1)).mean()
        assert mad <= 1.0, f"{name} index {index} box {box}: mean abs diff {mad:.3f}"


def test_animated_truncated_corrupt_are_decode_errors(webps):
    frames = [Image.fromarray(_photo(64, 48, s)) for s in (6, 7)]
    b = io.BytesIO()
    frames[0].save(b, "WEBP", save_all=True, append_images=frames[1:], duration=50)
    with pytest.raises(sluice.DecodeError, match="SL_EUNSUPPORTED"):  # the reason is in test_webp.c
        sluice.decode_image(b.getvalue())
    data = webps["lossy"]
    with pytest.raises(sluice.DecodeError, match="SL_ECORRUPT"):
        sluice.decode_image(data[: len(data) // 2])
    bad = bytearray(data)
    bad[40:] = bytes((i * 37) % 256 for i in range(len(bad) - 40))
    with pytest.raises(sluice.DecodeError):
        sluice.decode_image(bytes(bad))


def test_loader_reads_a_webp_folder(tmp_path, webps):
    for c, names in enumerate([NAMES[:3], NAMES[3:]]):
        d = tmp_path / f"class{c}"
        d.mkdir()
        for n in names:
            (d / f"{n}.webp").write_bytes(webps[n])
    (tmp_path / "class1" / "broken.webp").write_bytes(webps["lossy"][:100])
    ld = sluice.Loader(str(tmp_path), batch_size=2, preset="val", size=64, shuffle=False, budget="64M",
                       drop_last=False)
    labels, seen = [], 0
    for batch in ld:
        labels += list(np.asarray(batch["label"]))
        seen += len(np.asarray(batch["label"]))
    assert seen == 5 and sorted(labels) == [0, 0, 0, 1, 1]
    assert ld.stats()["errors"] == 1

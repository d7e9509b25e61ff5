"""Recipes (scale, ratio, (h, w) output, bicubic, crop_pct, resize, hflip,
fast, max_scans) against the references their users trust.

- Pixels given the box, on PNG (no DCT scaling): bit-exact to Pillow's
  crop + resize (BILINEAR or BICUBIC, reducing_gap=None) + flip, which is
  what torchvision's RandomResizedCrop does on PIL images; val exact to
  Pillow's resize + centre crop for torchvision Resize(resize), timm
  crop_pct and timm ResizeKeepRatio (non-square).
- Pillow >= 13 runs the vertical pass first when the height shrinks by
  more than twice the pixels the width does; sluice follows it. The
  reference here is built from two single-axis Pillow resizes in that
  order, so it is the same whatever Pillow is installed, and a test pins
  that Pillow's own one-call resize agrees where Pillow >= 13 is present.
- JPEG: the default presets stay within a mean abs diff of 1.0 of the
  Pillow reference (DCT scaling only where a >= 2x resize follows), on
  images whose short side is 1x, 2x, 3x, 4x the resize target and odd.
- Crop boxes for custom scale/ratio follow torchvision's get_params (KS).
"""
import io
import math
import os
import random
import sys

import numpy as np
import pytest
from PIL import Image

import sluice

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_reference import _box_stats, _ks, _photo, _tv_get_params, KS_CRIT, N_DRAWS  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fuzz"))
import make_seed_corpus  # noqa: E402

FILTERS = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC}
PIL_MAJOR = int(Image.__version__.split(".")[0]) if hasattr(Image, "__version__") else 0
PNG_BUILT = sluice.build_info()["png"] is not None


def _vertical_first(in_w, in_h, out_w, out_h):
    """Pillow >= 13's pass order (src/ops/resize.c follows it)."""
    return out_h < in_h and (in_h - out_h) > 2 * (in_w - out_w)


def _pil_resize(im, size_wh, filt):
    """Pillow's resize of the whole image, passes in Pillow 13's order,
    each pass a single-axis Pillow resize (uint8 between them, as inside
    one Pillow call)."""
    (w, h), (ow, oh) = im.size, size_wh
    f = FILTERS[filt]
    if (w, h) == (ow, oh):
        return im.copy()
    if _vertical_first(w, h, ow, oh):
        return im.resize((w, oh), f, reducing_gap=None).resize((ow, oh), f, reducing_gap=None)
    return im.resize((ow, h), f, reducing_gap=None).resize((ow, oh), f, reducing_gap=None)


def _chw(im):
    return np.asarray(im).transpose(2, 0, 1)


def _train_ref(im, box, flip, out_hw, filt):
    x, y, w, h = box
    r = _chw(_pil_resize(im.crop((x, y, x + w, y + h)), (out_hw[1], out_hw[0]), filt))
    return r[:, :, ::-1] if flip else r


def _center_crop(arr, h, w):
    H, W = arr.shape[1:]
    top, left = int(round((H - h) / 2.0)), int(round((W - w) / 2.0))
    return arr[:, top:top + h, left:left + w]


def _val_ref(im, out_hw, filt, crop_pct=None, resize=None):
    """torchvision Resize(resize) + CenterCrop, timm's crop_pct (square:
    Resize(floor(size / crop_pct)); non-square: ResizeKeepRatio of
    floor(side / crop_pct)) + CenterCrop; classic: Resize(size * 256 // 224)."""
    W, H = im.size
    oh, ow = out_hw
    if resize is not None or oh == ow:
        short = resize if resize is not None else (
            int(math.floor(oh / crop_pct)) if crop_pct is not None else oh * 256 // 224)
        size = (short, int(short * H / W)) if W <= H else (int(short * W / H), short)
    else:
        th, tw = (int(math.floor(s / crop_pct)) for s in out_hw) if crop_pct is not None else \
            (s * 256 // 224 for s in out_hw)
        r = min(H / th, W / tw)
        size = (round(W / r), round(H / r))
    return _center_crop(_chw(_pil_resize(im, size, filt)), oh, ow)


def _png(arr):
    b = io.BytesIO()
    Image.fromarray(arr).save(b, "PNG")
    return b.getvalue()


def _jpeg(arr, **kw):
    b = io.BytesIO()
    Image.fromarray(arr).save(b, "JPEG", **kw)
    return b.getvalue()


def _texture(w, h, seed):
    rng = np.random.default_rng(seed)
    return np.cumsum((rng.random((h, w, 3)) * 60).astype(np.uint8), axis=1).astype(np.uint8)


@pytest.fixture(scope="module")
def pngs():
    if not PNG_BUILT:
        pytest.skip("built without libspng: " + str(sluice.build_info()))
    # landscape, portrait, small (upscaled), tall (vertical-first val)
    return {(w, h): _png(_texture(w, h, w + h)) for w, h in [(640, 480), (360, 500), (90, 70), (300, 1000)]}


# ---- Pillow's pass order ------------------------------------------------------

@pytest.mark.skipif(PIL_MAJOR < 13, reason="Pillow < 13 always runs the horizontal pass first")
@pytest.mark.parametrize("filt", ["bilinear", "bicubic"])
def test_reference_order_is_pillows(filt):
    im = Image.fromarray(_texture(362, 444, 1))
    for size in [(300, 37), (37, 300), (300, 100), (120, 500), (500, 120)]:
        one = np.asarray(im.resize(size, FILTERS[filt], reducing_gap=None))
        assert np.array_equal(one, np.asarray(_pil_resize(im, size, filt))), size


# ---- train: exact given the box (PNG) -----------------------------------------

TRAIN_RECIPES = [
    dict(size=224),
    dict(size=(160, 96), interpolation="bicubic"),
    dict(size=(37, 300), interpolation="bicubic"),  # vertical first
    dict(size=(300, 37)),
    dict(size=64, interpolation="bicubic", scale=(0.02, 1.0), ratio=(0.2, 5.0)),
    dict(size=(96, 128), interpolation="bicubic", scale=(0.5, 1.0), ratio=(1.0, 1.0), hflip=1.0),
]


@pytest.mark.parametrize("recipe", range(len(TRAIN_RECIPES)))
def test_train_png_bit_exact(pngs, recipe):
    kw = TRAIN_RECIPES[recipe]
    size = kw["size"] if isinstance(kw["size"], tuple) else (kw["size"], kw["size"])
    box_kw = {k: kw[k] for k in ("scale", "ratio", "hflip") if k in kw}
    filt = kw.get("interpolation", "bilinear")
    for (w, h), data in pngs.items():
        im = Image.open(io.BytesIO(data)).convert("RGB")
        for index in range(6):
            x, y, bw, bh, flip = sluice.train_crop(w, h, 3, 1, index, **box_kw)
            got = sluice.decode_image(data, preset="train", seed=3, epoch=1, index=index, **kw)
            ref = _train_ref(im, (x, y, bw, bh), flip, size, filt)
            assert got.shape == ref.shape
            assert np.array_equal(got, ref), \
                f"{w}x{h} box {(x, y, bw, bh)} -> {size} {filt}: max diff {np.abs(got.astype(int) - ref).max()}"


# ---- val: exact (PNG) ----------------------------------------------------------

VAL_RECIPES = [
    dict(size=224),
    dict(size=224, interpolation="bicubic", crop_pct=0.95),
    dict(size=200, interpolation="bicubic", crop_pct=1.0),
    dict(size=64, resize=80),
    dict(size=(64, 96), interpolation="bicubic", crop_pct=0.9),  # timm ResizeKeepRatio
    dict(size=(96, 64), resize=100),
]


@pytest.mark.parametrize("recipe", range(len(VAL_RECIPES)))
def test_val_png_bit_exact(pngs, recipe):
    kw = VAL_RECIPES[recipe]
    size = kw["size"] if isinstance(kw["size"], tuple) else (kw["size"], kw["size"])
    for (w, h), data in pngs.items():
        if min(w, h) < max(size):
            continue
        im = Image.open(io.BytesIO(data)).convert("RGB")
        got = sluice.decode_image(data, preset="val", **kw)
        ref = _val_ref(im, size, kw.get("interpolation", "bilinear"), kw.get("crop_pct"), kw.get("resize"))
        assert got.shape == ref.shape
        assert np.array_equal(got, ref), f"{w}x{h} {kw}: max diff {np.abs(got.astype(int) - ref).max()}"


# ---- JPEG: within 1.0 by default -------------------------------------------------

def _mad(a, b):
    return float(np.abs(a.astype(np.float64) - b).mean())


# short side 1x, 2x, 3x, 4x the val resize target (256) and odd sizes
VAL_SIZES = [(341, 256), (768, 512), (512, 768), (1024, 768), (1365, 1024), (457, 301), (999, 517), (517, 999)]


@pytest.fixture(scope="module")
def photos():
    return {(w, h): _jpeg(_photo(w, h, w * h % 1000), quality=92) for w, h in VAL_SIZES}


@pytest.mark.parametrize("filt", ["bilinear", "bicubic"])
def test_val_jpeg_within_one_by_default(photos, filt):
    worst = {}
    for (w, h), data in photos.items():
        im = Image.open(io.BytesIO(data)).convert("RGB")
        ref = _val_ref(im, (224, 224), filt)
        got = sluice.decode_image(data, preset="val", size=224, interpolation=filt)
        worst[(w, h)] = _mad(got, ref)
    assert max(worst.values()) <= 1.0, worst


@pytest.mark.parametrize("filt", ["bilinear", "bicubic"])
def test_train_jpeg_within_one_by_default(photos, filt):
    mads = []
    for (w, h), data in photos.items():
        im = Image.open(io.BytesIO(data)).convert("RGB")
        for index in range(4):
            x, y, bw, bh, flip = sluice.train_crop(w, h, 0, 0, index)
            got = sluice.decode_image(data, preset="train", size=224, index=index, interpolation=filt)
            mads.append(_mad(got, _train_ref(im, (x, y, bw, bh), flip, (224, 224), filt)))
    assert max(mads) <= 1.0, [round(m, 3) for m in mads]


def test_fast_is_an_opt_in(photos):
    """fast=True may DCT-scale down to the output: the 2x case is then the
    DCT output itself (not Pillow's filter); the default is not."""
    data = photos[(768, 512)]
    im = Image.open(io.BytesIO(data)).convert("RGB")
    ref = _val_ref(im, (224, 224), "bilinear")
    exact = sluice.decode_image(data, preset="val", size=224)
    fast = sluice.decode_image(data, preset="val", size=224, fast=True)
    assert _mad(exact, ref) <= 1.0
    assert not np.array_equal(exact, fast)


# ---- crop boxes: torchvision's distribution for any scale/ratio ------------------

@pytest.mark.parametrize("scale,ratio", [((0.35, 1.0), (3 / 4, 4 / 3)), ((0.08, 0.5), (0.5, 2.0)),
                                         ((0.9, 1.0), (1.0, 1.0))])
def test_crop_distribution_matches_torchvision(scale, ratio):
    width, height = 500, 375
    ours = [sluice.train_crop(width, height, 4, 0, i, scale=scale, ratio=ratio)[:4] for i in range(N_DRAWS)]
    rng = random.Random(7)
    ref = [_tv_get_params(rng, width, height, scale, ratio) for _ in range(N_DRAWS)]
    so, sr = _box_stats(ours, width, height), _box_stats(ref, width, height)
    for key in so:
        d = _ks(so[key], sr[key])
        assert d < KS_CRIT, f"{scale} {ratio} {key}: KS {d:.4f}"


def test_hflip_probability():
    flips = [sluice.train_crop(500, 375, 0, 0, i, hflip=p)[4] for p in (0.0, 1.0, 0.25) for i in range(2000)]
    assert sum(flips[:2000]) == 0 and sum(flips[2000:4000]) == 2000
    assert abs(sum(flips[4000:]) / 2000 - 0.25) < 4 * math.sqrt(0.25 * 0.75 / 2000)


# ---- the loader ----------------------------------------------------------------------

def test_loader_recipe_matches_decode_image(dataset):
    kw = dict(size=(48, 64), interpolation="bicubic", scale=(0.3, 1.0), ratio=(0.5, 2.0), hflip=0.3)
    with sluice.Loader(dataset, batch_size=8, shuffle=False, seed=2, budget="64M", workers=2, **kw) as ld:
        batch = next(iter(ld))
        images = np.asarray(batch["image"])
        assert images.shape == (8, 3, 48, 64)
        for img, index in zip(images, np.asarray(batch["index"])):
            with open(ld.sample_path(int(index)), "rb") as f:
                want = sluice.decode_image(f.read(), preset="train", seed=2, index=int(index), **kw)
            assert np.array_equal(img, want)


def test_loader_val_crop_pct(dataset):
    with sluice.Loader(dataset, batch_size=4, preset="val", size=40, crop_pct=0.9, interpolation="bicubic",
                       shuffle=False, budget="64M") as ld:
        batch = next(iter(ld))
        assert np.asarray(batch["image"]).shape == (4, 3, 40, 40)


@pytest.mark.parametrize("kw,exc,msg", [
    (dict(size=(0, 5)), ValueError, "size height must be >= 1"),
    (dict(size="224"), TypeError, "size must be an int or a pair"),
    (dict(interpolation="lanczos"), ValueError, "interpolation must be one of"),
    (dict(scale=(0.5,)), TypeError, "scale must be a pair"),
    (dict(scale=(0.9, 0.1)), ValueError, "scale (0.9, 0.1) must satisfy"),
    (dict(ratio=(2.0, 1.0)), ValueError, "ratio (2, 1) must satisfy"),
    (dict(hflip=1.5), ValueError, "hflip must be a probability"),
    (dict(crop_pct=0.9), ValueError, "crop_pct and resize apply to preset='val'"),
    (dict(preset="val", crop_pct=1.5), ValueError, "crop_pct 1.5 is out of range"),
    (dict(preset="val", resize=10, size=32), ValueError, "resize 10 must be from"),
    (dict(max_scans=0), ValueError, "max_scans must be >= 1"),
])
def test_loader_recipe_errors(dataset, kw, exc, msg):
    with pytest.raises(exc) as e:
        sluice.Loader(dataset, budget="64M", **kw)
    assert msg in str(e.value)


def test_scan_bomb_is_a_decode_error():
    base = _jpeg(_texture(64, 48, 3), quality=80, progressive=True)
    bomb = make_seed_corpus.jpeg_repeat_last_scan(base, 300)
    scans = sum(1 for _, m in make_seed_corpus.jpeg_markers(bomb) if m == 0xDA)
    with pytest.raises(sluice.DecodeError) as e:
        sluice.decode_image(bomb, preset="val", size=32)
    assert f"JPEG has {scans} scans, over the max_scans limit of 64" in str(e.value)
    out = sluice.decode_image(bomb, preset="val", size=32, max_scans=scans)  # a raised limit admits it
    assert out.shape == (3, 32, 32)

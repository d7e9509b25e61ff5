"""Video clips against FFmpeg's own decode of the same frames.

Clips are made with the ffmpeg CLI (tiny, a second or two); the reference
is the ffmpeg CLI decoding the same frames (``select=eq(n,i)``), cropping
the same box (origin on the chroma grid, as sluice takes it), scaling with
the same filter (bilinear) and writing planar RGB. Criterion (issue 11):
mean absolute difference <= 1 per clip; on unrotated clips the bytes are
in fact equal. Skipped without the ffmpeg CLI or in a build without FFmpeg.
"""
import os
import shutil
import subprocess

import numpy as np
import pytest

import sluice
from conftest import skip_without_ffmpeg

pytestmark = pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="no ffmpeg CLI to make clips")

H264 = ["-c:v", "libx264", "-preset", "ultrafast", "-g", "12", "-bf", "2", "-pix_fmt", "yuv420p"]


def _src(size="96x64", rate=25, dur=2, extra=""):
    return ["-f", "lavfi", "-i", f"testsrc2=size={size}:rate={rate}:duration={dur}{extra}"]


def _ffmpeg(*args):
    subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-y", *args], check=True)


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    d = tmp_path_factory.mktemp("clips")
    p = {k: str(d / v) for k, v in dict(
        mp4="a.mp4", mkv="a.mkv", avi="a.avi", webm="a.webm", odd="odd.mp4", opengop="og.mp4",
        vfr="vfr.mp4", blur="blur.mp4", rot90="rot90.mp4", rot180="rot180.mp4", rot270="rot270.mp4",
        sound="sound.m4a", pyramid="pyramid.mp4").items()}
    _ffmpeg(*_src(), *H264, p["mp4"])
    _ffmpeg(*_src(), *H264, p["mkv"])
    _ffmpeg(*_src(), "-c:v", "mpeg4", "-bf", "2", "-g", "10", p["avi"])
    _ffmpeg(*_src(), "-c:v", "libvpx-vp9", "-deadline", "realtime", "-g", "10", p["webm"])
    _ffmpeg(*_src(), "-vf", "scale=33:25", "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv444p",
            p["odd"])
    _ffmpeg(*_src(dur=3), "-c:v", "libx264", "-preset", "ultrafast", "-bf", "3", "-x264-params",
            "open-gop=1:keyint=10:min-keyint=10:b-adapt=0", "-pix_fmt", "yuv420p", p["opengop"])
    _ffmpeg(*_src(), "-vf", "setpts=(N+2*floor(N/5))/25/TB", "-fps_mode", "passthrough", *H264, p["vfr"])
    _ffmpeg(*_src(size="96x64"), "-vf", "gblur=sigma=4", *H264, p["blur"])
    for r in (90, 180, 270):
        _ffmpeg("-i", p["blur"], "-c", "copy", "-metadata:s:v:0", f"rotate={r}", p[f"rot{r}"])
    _ffmpeg("-f", "lavfi", "-i", "sine=duration=1", "-c:a", "aac", p["sound"])
    # x264's defaults: B-pyramid (some B-frames are references, some not), GOP 50
    _ffmpeg(*_src(dur=4), "-c:v", "libx264", "-preset", "medium", "-g", "50", "-bf", "3", "-pix_fmt", "yuv420p",
            p["pyramid"])
    skip_without_ffmpeg(p["mp4"])
    return p


def reference(path, frames, taken, size, autorotate=True, chroma=2):
    """ffmpeg's decode of the clip: [T, 3, size, size] RGB planes. chroma:
    the chroma grid the crop's origin aligns to (2 for 4:2:0, 1 for 4:4:4)."""
    sel = "+".join(f"eq(n\\,{i})" for i in sorted(set(frames)))
    x, y, w, h = taken["box"]
    if taken["window"] != (0, 0) or taken["scaled"] != (size, size):  # val: scale, then the window
        sw, sh = taken["scaled"]
        wx, wy = taken["window"]
        chain = f"select='{sel}',scale={sw}:{sh}:flags=bilinear,crop={size}:{size}:{wx}:{wy}"
    else:
        chain = f"select='{sel}',crop={w}:{h}:{x - x % chroma}:{y - y % chroma}:exact=1,scale={size}:{size}:flags=bilinear"
    if taken["flip"]:
        chain += ",hflip"
    chain += ",format=gbrp"
    cmd = ["ffmpeg", "-nostdin", "-v", "error"] + ([] if autorotate else ["-noautorotate"])
    raw = subprocess.run(cmd + ["-i", path, "-vf", chain, "-fps_mode", "passthrough", "-f", "rawvideo", "-"],
                         capture_output=True, check=True).stdout
    planes = np.frombuffer(raw, np.uint8).reshape(-1, 3, size, size)[:, [2, 0, 1]]  # GBR -> RGB
    pos = {v: i for i, v in enumerate(sorted(set(frames)))}
    assert len(planes) == len(pos), "ffmpeg selected a different number of frames"
    return np.stack([planes[pos[f]] for f in frames])


def mean_abs(a, b):
    return float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean())


@pytest.mark.parametrize("kind", ["mp4", "mkv", "avi", "webm", "odd"])
@pytest.mark.parametrize("preset", ["train", "val"])
def test_matches_ffmpeg(clips, kind, preset):
    for index in range(4 if preset == "train" else 1):
        clip, taken = sluice.decode_video(clips[kind], frames=8, stride=3, size=32, preset=preset, index=index)
        ref = reference(clips[kind], taken["frames"], taken, 32, chroma=1 if kind == "odd" else 2)
        assert mean_abs(clip, ref) <= 1.0, (kind, preset, index, taken)
        assert mean_abs(clip, ref) == 0.0  # the same swscale path: in fact equal


def test_train_flips_some(clips):
    flips = {sluice.decode_video(clips["mp4"], frames=2, size=16, index=i)[1]["flip"] for i in range(16)}
    assert flips == {True, False}


def test_open_gop_seeks(clips):
    """Open GOPs put frames before a keyframe after it in decode order: a
    seek by decode time lands past the first frame and is retried earlier."""
    info = sluice.probe_video(clips["opengop"])
    for index in range(12):
        clip, taken = sluice.decode_video(clips["opengop"], frames=4, stride=5, size=24, preset="train",
                                          index=index)
        assert taken["frames"][-1] < info["frames"]
        assert mean_abs(clip, reference(clips["opengop"], taken["frames"], taken, 24)) == 0.0


@pytest.mark.parametrize("stride", [1, 2, 3, 5])
def test_skipped_frames_change_nothing(clips, stride):
    """Non-reference frames that no target shows are not decoded (GOP
    lead-in, frames between strided targets): the clip is still exactly
    ffmpeg's decode of its frames."""
    for index in range(6):
        clip, taken = sluice.decode_video(clips["pyramid"], frames=6, stride=stride, size=24, preset="train",
                                          index=index)
        assert mean_abs(clip, reference(clips["pyramid"], taken["frames"], taken, 24)) == 0.0, (stride, taken)


def test_every_frame_index(clips):
    """Clips of one frame at each start cover every frame of the stream."""
    n = sluice.probe_video(clips["mp4"])["frames"]
    seen = set()
    for index in range(200):
        clip, taken = sluice.decode_video(clips["mp4"], frames=1, size=16, preset="train", index=index)
        f = taken["frames"][0]
        if f in seen:
            continue
        seen.add(f)
        assert mean_abs(clip, reference(clips["mp4"], [f], taken, 16)) == 0.0
    assert len(seen) > n // 2


def test_fps_resampling(clips):
    clip, taken = sluice.decode_video(clips["mp4"], frames=6, fps=12.5, size=24, preset="val")
    f = taken["frames"]
    assert [b - a for a, b in zip(f, f[1:])] == [2] * 5
    assert mean_abs(clip, reference(clips["mp4"], f, taken, 24)) == 0.0


def _pts(path):
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
                          "frame=pts_time", "-of", "default=nw=1:nk=1", path], capture_output=True, text=True,
                         check=True).stdout
    return [float(t.strip(",")) for t in out.split()]


def test_variable_frame_rate_display_time(clips):
    """Frame i is the frame on screen at start + (i + 0.5) / average rate."""
    pts = _pts(clips["vfr"])
    info = sluice.probe_video(clips["vfr"])
    clip, taken = sluice.decode_video(clips["vfr"], frames=10, stride=3, size=24, preset="val")
    shown = []
    for i in taken["frames"]:
        t = pts[0] + (i + 0.5) / info["fps"]
        shown.append(max(k for k, p in enumerate(pts) if p <= t + 1e-9))
    assert shown != taken["frames"]  # the grid and the stream's frames part ways here
    assert mean_abs(clip, reference(clips["vfr"], shown, taken, 24)) == 0.0


@pytest.mark.parametrize("rot", [90, 180, 270])
def test_rotation_val(clips, rot):
    """Display matrix: the frame turned as ffmpeg turns it (autorotate)."""
    path = clips[f"rot{rot}"]
    info = sluice.probe_video(path)
    assert (info["width"], info["height"]) == ((64, 96) if rot != 180 else (96, 64))
    clip, taken = sluice.decode_video(path, frames=4, size=32, preset="val")
    assert mean_abs(clip, reference(path, taken["frames"], taken, 32)) <= 1.0


def _coded_box(box, rot, disp_w, disp_h):
    """The box sluice crops in the coded (unrotated) frame: the displayed
    box turned back, its origin moved down to the 4:2:0 chroma grid."""
    x, y, w, h = box
    cw, ch = (disp_h, disp_w) if rot in (90, 270) else (disp_w, disp_h)
    bx, by = {0: (x, y), 90: (y, ch - x - w), 180: (cw - x - w, ch - y - h), 270: (cw - y - h, x)}[rot]
    bw, bh = (h, w) if rot in (90, 270) else (w, h)
    return bx & ~1, by & ~1, bw, bh, cw, ch


@pytest.mark.parametrize("rot", [90, 180, 270])
def test_rotation_train(clips, rot):
    """The crop box is in displayed pixels. Exact: ffmpeg without autorotate
    crops the box sluice takes in the coded frame, scales, and numpy turns
    it for display. Within 1: ffmpeg's own autorotate, then the same box in
    displayed pixels."""
    path = clips[f"rot{rot}"]
    info = sluice.probe_video(path)
    turn = info["rotation"]  # clockwise, as ffmpeg's autorotate turns the matrix it wrote for rotate=rot
    assert turn == (360 - rot) % 360
    for index in range(6):
        clip, taken = sluice.decode_video(path, frames=4, size=32, preset="train", index=index)
        bx, by, bw, bh, cw, ch = _coded_box(taken["box"], turn, info["width"], info["height"])
        coded = reference(path, taken["frames"], dict(taken, box=(bx, by, bw, bh), flip=False), 32,
                          autorotate=False)
        shown = np.rot90(coded, {90: -1, 180: 2, 270: 1}[turn], axes=(2, 3))
        if taken["flip"]:
            shown = shown[..., ::-1]
        assert mean_abs(clip, shown) == 0.0, (rot, index, taken)
        back = {90: (ch - by - bh, bx), 180: (cw - bx - bw, ch - by - bh), 270: (by, cw - bx - bw)}[turn]
        ref = reference(path, taken["frames"], dict(taken, box=(*back, *taken["box"][2:])), 32, chroma=1)
        assert mean_abs(clip, ref) <= 1.0, (rot, index, taken)


def test_deterministic(clips):
    a = sluice.decode_video(clips["mkv"], frames=8, size=32, seed=3, epoch=1, index=5)
    b = sluice.decode_video(clips["mkv"], frames=8, size=32, seed=3, epoch=1, index=5)
    c = sluice.decode_video(clips["mkv"], frames=8, size=32, seed=3, epoch=2, index=5)
    assert np.array_equal(a[0], b[0]) and a[1] == b[1]
    assert a[1] != c[1]


def test_short_clip_policies(clips):
    n = sluice.probe_video(clips["mp4"])["frames"]
    _, pad = sluice.decode_video(clips["mp4"], frames=30, stride=2, size=16, short="pad")
    assert pad["frames"][-1] == n - 1
    _, loop = sluice.decode_video(clips["mp4"], frames=30, stride=2, size=16, short="loop")
    assert loop["frames"][-1] == (29 * 2) % n
    with pytest.raises(sluice.DecodeError, match="clip needs 59 frames, the video has 50") as e:
        sluice.decode_video(clips["mp4"], frames=30, stride=2, size=16, short="error")
    assert e.value.code_name == "SL_ELIMIT"


def test_errors_name_the_reason(clips):
    with pytest.raises(sluice.DecodeError, match="no video stream") as e:
        sluice.probe_video(clips["sound"])
    assert e.value.code_name == "SL_EFORMAT"
    with pytest.raises(sluice.DecodeError, match="over the max_frames limit of 10"):
        sluice.decode_video(clips["mp4"], max_frames=10)
    with pytest.raises(sluice.DecodeError, match="not in the allowed list"):
        sluice.decode_video(clips["webm"], codecs="h264")
    with pytest.raises(FileNotFoundError, match="cannot open"):
        sluice.decode_video(os.path.join(os.path.dirname(clips["mp4"]), "missing.mp4"))


def test_max_pixels_has_the_loaders_meaning(clips):
    """max_pixels is an int >= 1 or None (the default), as for the Loader and decode_image."""
    for call in (sluice.probe_video, sluice.decode_video):
        with pytest.raises(ValueError, match="max_pixels must be >= 1"):
            call(clips["mp4"], max_pixels=0)
        with pytest.raises(sluice.DecodeError, match="over the max_pixels limit of 100"):
            call(clips["mp4"], max_pixels=100)
    assert sluice.probe_video(clips["mp4"], max_pixels=None)["width"] > 0


# ---- the video field kind in a loader ------------------------------------------
@pytest.fixture(scope="module")
def video_folder(tmp_path_factory, clips):
    """Class folders of clips (the UCF101 layout), and an image among them that a video folder ignores."""
    root = tmp_path_factory.mktemp("vfolder")
    for ci, cls in enumerate(("run", "jump")):
        os.makedirs(root / cls)
        for k in range(3):
            shutil.copy(clips["mp4"] if (ci + k) % 2 else clips["mkv"], root / cls / f"v{k}.{'mp4' if (ci + k) % 2 else 'mkv'}")
    (root / "run" / "still.jpg").write_bytes(b"\xff\xd8\xff")
    return str(root)


FIELDS = {"clip": {"kind": "video", "frames": 4, "stride": 3, "size": 32, "crop_group": "image"},
          "label": {"kind": "label"}}


def test_video_field_batches(video_folder):
    with sluice.Loader(video_folder, batch_size=3, budget="256M", workers=2, fields=FIELDS, shuffle=False) as ld:
        batches = list(ld)
        assert [b.size for b in batches] == [3, 3]
        b = batches[0]
        assert b["clip"].shape == (3, 4, 3, 32, 32) and b["clip"].kind == "video"
        np.testing.assert_array_equal(np.asarray(b["label"]), [0, 0, 0])  # "jump" sorts first: label 0
        assert ld.stats()["errors"] == 0
        # the loader's clip is sl_video_decode's for the same sample (crop_group "image": stream 0)
        idx = int(np.asarray(b["index"])[1])
        clip, _ = sluice.decode_video(ld.sample_path(idx), frames=4, stride=3, size=32, preset="train", seed=0,
                                      epoch=0, index=idx)
        np.testing.assert_array_equal(np.asarray(b["clip"])[1], clip)


def test_decode_video_redoes_a_field_of_any_name_or_group(video_folder):
    """decode_video(crop_group=) gives a loader's clip for a video field with
    another name ("clip", no group: its name) and for one in a group ("g"),
    each field's own crop; without crop_group it is the group "image"'s."""
    other = 0
    for name, group in (("clip", None), ("moving", "g")):  # a folder has one file a sample: one field each
        field = {"kind": "video", "frames": 4, "stride": 3, "size": 32}
        if group:
            field["crop_group"] = group
        with sluice.Loader(video_folder, batch_size=3, budget="256M", workers=2, seed=7,
                           fields={name: field, "label": {"kind": "label"}}) as ld:
            ld.set_epoch(1)
            b = next(iter(ld))
            for k, idx in enumerate(np.asarray(b["index"]).tolist()):
                path = ld.sample_path(idx)
                args = dict(frames=4, stride=3, size=32, preset="train", seed=7, epoch=1, index=idx)
                clip, _ = sluice.decode_video(path, crop_group=group or name, **args)
                np.testing.assert_array_equal(np.asarray(b[name])[k], clip)
                other += not np.array_equal(clip, sluice.decode_video(path, **args)[0])
    assert other > 0  # the group "image" draws other crops
    with pytest.raises(TypeError, match="crop_group"):
        sluice.decode_video(path, crop_group="")


def test_video_field_same_bytes_any_workers(video_folder):
    sums = []
    for w in (1, 3):
        with sluice.Loader(video_folder, batch_size=2, budget="256M", workers=w, fields=FIELDS, checksum=True,
                           seed=5) as ld:
            sums.append([b.checksum for b in ld] + [b.checksum for b in ld])
    assert sums[0] == sums[1]


def test_video_field_errors_are_records(tmp_path, clips):
    root = tmp_path / "v"
    os.makedirs(root / "a")
    shutil.copy(clips["mp4"], root / "a" / "good.mp4")
    shutil.copy(clips["sound"], root / "a" / "sound.mov")  # no video stream
    (root / "a" / "junk.mp4").write_bytes(b"not a video at all" * 10)
    with sluice.Loader(str(root), batch_size=4, budget="256M", workers=2, fields=FIELDS) as ld:
        got = [b.size for b in ld]
        errs = sorted(e["reason"] for e in ld.errors())
    assert got == [1] and len(errs) == 2


def test_video_field_torch_layouts(video_folder):
    torch = pytest.importorskip("torch")
    import sluice.torch as st

    outs = {}
    for layout in ("TCHW", "CTHW"):
        with st.Loader(video_folder, batch_size=2, budget="256M", workers=2, fields=FIELDS, device="cpu",
                       dtype=torch.float32, video_layout=layout, shuffle=False) as ld:
            outs[layout] = next(iter(ld))["clip"]
    assert outs["TCHW"].shape == (2, 4, 3, 32, 32) and outs["CTHW"].shape == (2, 3, 4, 32, 32)
    assert torch.equal(outs["TCHW"].permute(0, 2, 1, 3, 4), outs["CTHW"])


def test_show_draws_the_middle_frame(video_folder, tmp_path, sluice_exe):
    """`sluice show --fields` draws each clip by its middle frame, exactly as delivered."""
    import json

    from PIL import Image

    schema = tmp_path / "clip.fields.json"
    schema.write_text(json.dumps(FIELDS))
    out = tmp_path / "grid.png"
    p = subprocess.run([sluice_exe, "show", video_folder, "--fields", str(schema), "--batch", "3", "--cols", "3",
                        "--seed", "2", "-o", str(out)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "3x1 tiles of clip (picture)" in p.stdout
    grid = np.asarray(Image.open(out))
    with sluice.Loader(video_folder, batch_size=3, budget="256M", workers=2, fields=FIELDS, seed=2) as ld:
        clips = np.asarray(ld.next_batch()["clip"])
    for i in range(3):
        x = 4 + i * (32 + 4)
        np.testing.assert_array_equal(grid[4:36, x:x + 32], clips[i, 2].transpose(1, 2, 0))

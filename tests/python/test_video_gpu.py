"""Video clips on the GPU (issue 23): NVDEC through FFmpeg's hwaccel, the conversion
and resize kernels, clips in device memory (sluice._gpu.VideoEngine, and the loader's
decode="gpu" for a video field).

Everywhere: the GPU path's arithmetic on the CPU (sluice._gpu.video_reference, what
the GPU writes byte for byte) against the CPU path's clips within the documented
difference (docs/video.md), and the loader's refusal without a GPU. On a GPU host with
NVDEC: the GPU's clips equal that reference byte for byte, on the same frames; streams
the GPU cannot take go to the CPU with their reason; hostile streams become the CPU
path's records; the device bytes do not depend on the worker count; device memory and
decoders are flat over 100 epochs and released.

Clips are made with the ffmpeg CLI, or with PyAV where there is none (the GPU host);
without either the tests are skipped.
"""
import os
import shutil
import subprocess

import numpy as np
import pytest

import sluice
from conftest import skip_without_ffmpeg

try:
    from sluice import _gpu

    VIDEO_GPU, VIDEO_WHY = _gpu.video_available()
except ImportError as e:
    _gpu, VIDEO_GPU, VIDEO_WHY = None, False, f"sluice._gpu not built: {e}"
try:
    import torch

    CUDA = torch.cuda.is_available()
except ImportError:
    torch, CUDA = None, False
need_gpu = pytest.mark.skipif(not (VIDEO_GPU and CUDA), reason=f"no GPU video engine here: {VIDEO_WHY}"
                              if not VIDEO_GPU else "torch sees no CUDA device")

MEAN_BOUND, FRAME_BOUND = 0.6, 1.0  # docs/video.md: GPU path vs CPU path, mean abs per frame


# ---- clips ---------------------------------------------------------------------------------
def _have_av():
    try:
        import av  # noqa: F401

        return True
    except ImportError:
        return False


MAKER = "ffmpeg" if shutil.which("ffmpeg") else "pyav" if _have_av() else None
pytestmark = pytest.mark.skipif(MAKER is None, reason="no ffmpeg CLI and no PyAV to make clips")


def make_clip(path, size="320x240", seconds=2, codec="libx264", pix_fmt="yuv420p", src="testsrc2",
              options=None):
    """A clip of lavfi's `src` at 25 fps; options: the encoder's (g, bf, preset, colorspace...)."""
    opts = {"preset": "ultrafast", "g": "12", "bf": "2"} if codec == "libx264" else {"g": "12"}
    opts.update(options or {})
    if MAKER == "ffmpeg":
        args = ["ffmpeg", "-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i",
                f"{src}=size={size}:rate=25", "-t", str(seconds), "-c:v", codec, "-pix_fmt", pix_fmt]
        for k, v in opts.items():
            args += [f"-{k}", str(v)]
        subprocess.run(args + [path], check=True)
        return path
    import av

    w, h = (int(x) for x in size.split("x"))
    graph = av.filter.Graph()
    node = graph.add(src, f"size={size}:rate=25")
    fmt = graph.add("format", pix_fmt)
    sink = graph.add("buffersink")
    node.link_to(fmt)
    fmt.link_to(sink)
    graph.configure()
    with av.open(path, "w") as c:
        st = c.add_stream(codec, rate=25, options={k: str(v) for k, v in opts.items()})
        st.width, st.height, st.pix_fmt = w, h, pix_fmt
        for _ in range(int(seconds * 25)):
            frame = sink.pull()
            frame.pict_type = av.video.frame.PictureType.NONE  # the encoder's GOP, not lavfi's I marks
            for p in st.encode(frame):
                c.mux(p)
        for p in st.encode(None):
            c.mux(p)
    return path


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    d = tmp_path_factory.mktemp("vgpu")
    out = {
        "h264": make_clip(str(d / "h264.mp4")),
        "fractal": make_clip(str(d / "fractal.mp4"), src="mandelbrot"),
        "odd": make_clip(str(d / "odd.mp4"), size="66x50"),
        "full": make_clip(str(d / "full.mp4"), size="160x120", pix_fmt="yuvj420p"),
        "bt709": make_clip(str(d / "bt709.mp4"), size="160x120",
                           options={"colorspace": "bt709", "color_primaries": "bt709", "color_trc": "bt709"}),
        "twin": make_clip(str(d / "twin.mp4"), src="mandelbrot"),  # the same stream parameters as fractal
        "hd": make_clip(str(d / "hd.mp4"), size="1280x720", seconds=3, options={"g": "50", "bf": "3"}),
    }
    for name, codec, pix in (("hevc", "libx265", "yuv420p"), ("vp9", "libvpx-vp9", "yuv420p"),
                             ("h264_444", "libx264", "yuv444p")):
        try:
            out[name] = make_clip(str(d / f"{name}.mkv"), codec=codec, pix_fmt=pix,
                                  options={"preset": "ultrafast"} if codec != "libvpx-vp9" else {"deadline": "realtime"})
        except Exception:  # an encoder this FFmpeg lacks: the cases that need it say so
            pass
    skip_without_ffmpeg(out["h264"])
    return out


def _cpu(path, **kw):
    clip, taken = sluice.decode_video(path, **kw)
    return clip, taken


def _ref(path, **kw):
    k = dict(kw)
    shape = (k.get("frames", 16), 3, k.get("size", 112), k.get("size", 112))
    return np.frombuffer(_gpu.video_reference(path, **k), np.uint8).reshape(shape)


def _per_frame(a, b):
    return np.abs(a.astype(np.int16) - b.astype(np.int16)).reshape(a.shape[0], -1).mean(axis=1)


KW = [dict(frames=8, stride=3, size=112, preset="train", seed=5, index=i) for i in range(4)] + \
     [dict(frames=8, stride=3, size=96, preset="val", seed=5, index=0)]


# ---- everywhere: the GPU path's arithmetic against the CPU path --------------------------------
@pytest.mark.skipif(_gpu is None, reason="sluice._gpu not built")
@pytest.mark.parametrize("name", ["h264", "fractal", "odd", "full", "bt709", "hd"])
def test_reference_within_the_documented_difference(clips, name):
    diffs = []
    for kw in KW:
        kw = dict(kw, size=32) if name == "odd" else kw
        cpu, taken = _cpu(clips[name], **kw)
        ref = _ref(clips[name], **kw)
        diffs.append(_per_frame(cpu, ref))
    d = np.concatenate(diffs)
    print(f"{name}: mean abs per frame {d.mean():.3f}, worst frame {d.max():.3f}")
    assert d.mean() <= MEAN_BOUND and d.max() <= FRAME_BOUND


def test_video_field_gpu_without_a_gpu_says_why(clips, tmp_path):
    if VIDEO_GPU:
        pytest.skip("this machine has the GPU video engine")
    table = tmp_path / "v.jsonl"
    table.write_text("".join('{"clip": "%s", "label": %d}\n' % (clips["h264"], i % 2) for i in range(8)))
    fields = {"clip": {"kind": "video", "frames": 4, "stride": 2, "size": 32}, "label": {"kind": "label"}}
    with pytest.raises(sluice.DecodeError, match="decode=gpu: "):
        sluice.Loader(str(table), batch_size=4, fields=fields, decode="gpu")
    with sluice.Loader(str(table), batch_size=4, fields=fields, decode="auto") as ld:
        assert ld.stats()["decode"] == "cpu"
        assert ld.stats()["decode_reason"].startswith("decode=auto, the CPU: ")
        assert next(iter(ld))["clip"].shape == (4, 4, 3, 32, 32)


# ---- on a GPU with NVDEC ---------------------------------------------------------------------
def _engine(**kw):
    args = dict(pool_bytes=256 << 20, sessions=2, session_cap=512 << 20)
    args.update(kw)
    return _gpu.VideoEngine(**args)


def _gpu_clip(eng, path, kw):
    shape = (kw.get("frames", 16), 3, kw.get("size", 112), kw.get("size", 112))
    dst = torch.full(shape, 7, dtype=torch.uint8, device="cuda")
    status, why = eng.clip(path, dst.data_ptr(), **kw)
    return status, why, dst.cpu().numpy()


@need_gpu
def test_gpu_clip_equals_the_cpu_reference(clips):
    eng = _engine()
    try:
        for name in ("h264", "fractal", "odd", "full", "bt709", "hd", "hevc", "vp9"):
            if name not in clips:
                print(f"{name}: no encoder here, not tried")
                continue
            for kw in KW:
                kw = dict(kw, size=32) if name == "odd" else kw
                status, why, got = _gpu_clip(eng, clips[name], kw)
                assert status == _gpu.DONE, f"{name} {kw}: {why}"
                ref = _ref(clips[name], **kw)
                if not np.array_equal(got, ref):
                    d = np.abs(got.astype(int) - ref.astype(int))
                    pytest.fail(f"{name} {kw}: {int((d > 0).sum())} bytes differ (max {d.max()}), "
                                f"per frame {np.round(_per_frame(got, ref), 3).tolist()}")
        print(eng.stats())
    finally:
        eng.close()


@need_gpu
def test_gpu_clip_same_frames_as_the_cpu_path(clips):
    """The GPU clip's frame t is nearest to the CPU path's frame t (every frame of
    testsrc2 differs), and within the documented difference of it."""
    eng = _engine()
    try:
        kw = dict(frames=12, stride=3, size=64, preset="train", seed=1, index=2)
        status, why, got = _gpu_clip(eng, clips["h264"], kw)
        assert status == _gpu.DONE, why
        cpu, taken = _cpu(clips["h264"], **kw)
        for t in range(12):
            d = [np.abs(got[t].astype(int) - cpu[u].astype(int)).mean() for u in range(12)]
            assert int(np.argmin(d)) == t, (t, d)
        f = _per_frame(got, cpu)
        assert f.mean() <= MEAN_BOUND and f.max() <= FRAME_BOUND
    finally:
        eng.close()


@need_gpu
def test_gpu_hands_to_the_cpu_what_it_cannot_take(clips, tmp_path):
    eng = _engine()
    try:
        if "h264_444" in clips:
            status, why, _ = _gpu_clip(eng, clips["h264_444"], KW[0])
            assert status == _gpu.CPU and why.startswith("for the CPU: "), why
        # a cap below what the stream's decoder needs: refused before the decoder exists
        small = _engine(session_cap=1 << 20)
        try:
            status, why, _ = _gpu_clip(small, clips["hd"], KW[0])
            assert status == _gpu.CPU and "surfaces" in why and "over the session's" in why, why
            assert small.stats()["decoders"] == 0
        finally:
            small.close()
        # hostile bytes: the GPU hands them to the CPU, whose decoder makes the record
        with open(clips["h264"], "rb") as f:
            data = bytearray(f.read())
        rng = np.random.default_rng(3)
        for i in rng.integers(len(data) // 4, len(data), 400):
            data[i] ^= 0xA5
        bad = tmp_path / "bad.mp4"
        bad.write_bytes(bytes(data))
        cut = tmp_path / "cut.mp4"
        cut.write_bytes(bytes(data[: len(data) // 2]))
        for p in (bad, cut):
            try:
                status, why, _ = _gpu_clip(eng, str(p), KW[0])
            except ValueError as e:  # the probe refused it (nothing reached the GPU)
                print(f"{p.name}: {e}")
                continue
            print(f"{p.name}: status {status} {why}")
            assert status in (_gpu.DONE, _gpu.CPU)
        status, why, got = _gpu_clip(eng, clips["h264"], KW[1])  # the engine goes on
        assert status == _gpu.DONE and np.array_equal(got, _ref(clips["h264"], **KW[1]))
    finally:
        eng.close()


@need_gpu
def test_gpu_keeps_the_decoder_between_identical_streams(clips):
    eng = _engine(sessions=1)
    try:
        for name in ("fractal", "twin", "fractal", "twin"):  # same parameters: one NVDEC decoder
            status, why, got = _gpu_clip(eng, clips[name], KW[2])
            assert status == _gpu.DONE, why
            assert np.array_equal(got, _ref(clips[name], **KW[2])), name
        s = eng.stats()
        # H.264's flush would make a new NVDEC decoder: each clip starts at its IDR without one
        assert s["decoders"] == 1 and s["reused"] == 3 and s["soft_resets"] >= 3, s
        status, why, got = _gpu_clip(eng, clips["hd"], KW[2])  # another size: a new one
        assert status == _gpu.DONE and np.array_equal(got, _ref(clips["hd"], **KW[2]))
        assert eng.stats()["decoders"] == 2
    finally:
        eng.close()


def _fds():
    return len(os.listdir("/proc/self/fd"))


@need_gpu
@pytest.mark.parametrize("keep", [True, False])
def test_gpu_memory_flat_over_100_epochs_and_released(clips, keep):
    torch.cuda.synchronize()
    eng = _engine(keep=keep)
    idle = eng.stats()["pool_used"]  # the sessions' descriptors
    free, seen = [], []
    try:
        for epoch in range(100):
            for k, name in enumerate(("h264", "fractal", "odd")):
                kw = dict(frames=4, stride=2, size=32, preset="train", seed=9, epoch=epoch, index=k)
                status, why, _ = _gpu_clip(eng, clips[name], kw)
                assert status == _gpu.DONE, why
            s = eng.stats()
            assert s["pool_used"] == idle, s  # every clip's block came back
            free.append(torch.cuda.mem_get_info()[0])
            seen.append(s["host_decoder_bytes"])
        assert len(set(free[1:])) == 1, f"device free memory moved over epochs: {sorted(set(free))[:5]}"
        assert len(set(seen[1:])) == 1
        print(eng.stats())
    finally:
        eng.close()
    torch.cuda.synchronize()


@need_gpu
def test_gpu_engines_release_everything(clips):
    fds0 = _fds()
    after = []
    for _ in range(8):
        eng = _engine()
        for name in ("h264", "hd"):
            status, why, _ = _gpu_clip(eng, clips[name], KW[0])
            assert status == _gpu.DONE, why
        eng.close()
        torch.cuda.synchronize()
        after.append(torch.cuda.mem_get_info()[0])
    assert len(set(after[1:])) == 1, after  # the first round loads modules for the process's life
    assert _fds() == fds0


# ---- the loader (decode="gpu" on a video field) -----------------------------------------------
def _table(tmp_path, paths, n):
    t = tmp_path / "clips.jsonl"
    t.write_text("".join('{"clip": "%s", "label": %d}\n' % (paths[i % len(paths)], i % 3) for i in range(n)))
    return str(t)


def _device_bytes(field):
    return torch.from_dlpack(field).cpu().numpy()


@need_gpu
def test_loader_gpu_clips_equal_the_reference_for_any_worker_count(clips, tmp_path):
    paths = [clips[k] for k in ("h264", "fractal", "full", "bt709", "twin")]
    table = _table(tmp_path, paths, 20)
    fields = {"clip": {"kind": "video", "frames": 6, "stride": 2, "size": 48}, "label": {"kind": "label"}}
    runs = []
    for workers in (1, 8):
        got = []
        with sluice.Loader(table, batch_size=4, fields=fields, decode="gpu", workers=workers, seed=3,
                           gpu_budget="1G") as ld:
            st = ld.stats()
            assert st["decode"] == "gpu", st["decode_reason"]
            for b in ld:
                assert b["clip"].device.startswith("cuda")
                got.append(_device_bytes(b["clip"]))
            st = ld.stats()
        runs.append(np.concatenate(got))
        assert st["gpu_samples"] >= 20 and st["cpu_samples"] == 0, st  # (the next epoch may have begun)
    assert np.array_equal(runs[0], runs[1])


@need_gpu
def test_loader_gpu_hostile_streams_become_the_cpu_paths_records(clips, tmp_path):
    with open(clips["h264"], "rb") as f:
        data = f.read()
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(data[: len(data) // 3])
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 40)
    paths = [clips["h264"], str(cut), clips["fractal"], str(junk)]
    table = _table(tmp_path, paths, 8)
    fields = {"clip": {"kind": "video", "frames": 4, "stride": 2, "size": 32}, "label": {"kind": "label"}}
    records = {}
    for decode in ("cpu", "gpu"):
        with sluice.Loader(table, batch_size=2, fields=fields, decode=decode, workers=2, seed=1,
                           gpu_budget="1G") as ld:
            n = sum(b["label"].shape[0] for b in ld)
            records[decode] = sorted((e["path"], e["reason"]) for e in ld.errors())
            assert n == 8 - len(records[decode])
    assert records["gpu"] == records["cpu"] and records["cpu"], records

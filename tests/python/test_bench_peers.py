"""bench/gpu_peers.py and tools/wheel_lzma.py, where they can run without a GPU: the JPEG header
walk that makes the list every peer reads, the list as sluice's manifest, one row of the harness
in its own process (a measured row, a refused one), and a wheel's members dropped with their
RECORD lines."""
import argparse
import io
import json
import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from conftest import child_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import gpu_peers  # noqa: E402

Image = pytest.importorskip("PIL.Image")


def _jpeg(mode, **kw):
    b = io.BytesIO()
    Image.new(mode, (40, 30), {"RGB": (200, 10, 10), "L": 90, "CMYK": (0, 50, 50, 0)}[mode]).save(b, "JPEG", **kw)
    return b.getvalue()


def _write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def test_jpeg_components(tmp_path):
    png = io.BytesIO()
    Image.new("RGB", (8, 8)).save(png, "PNG")
    cases = {"rgb.jpg": (_jpeg("RGB"), 3), "grey.jpg": (_jpeg("L"), 1), "cmyk.jpg": (_jpeg("CMYK"), 4),
             "progressive.jpg": (_jpeg("RGB", progressive=True), 3),
             # the frame header past the first 64 KiB read: APP2 segments of an ICC profile first
             "icc.jpg": (_jpeg("RGB", icc_profile=bytes(200_000)), 3),
             "png.JPEG": (png.getvalue(), None), "cut.jpg": (b"\xff\xd8\xff\xe0\x00\x10JFIF", None),
             "empty.jpg": (b"", None), "bad_marker.jpg": (b"\xff\xd8\x00\x00\x00\x00", None)}
    for name, (data, want) in cases.items():
        _write(str(tmp_path / name), data)
        assert gpu_peers.jpeg_components(str(tmp_path / name)) == want, name


def _folder(root):
    files = {"a/rgb1.JPEG": _jpeg("RGB"), "a/grey.JPEG": _jpeg("L"), "a/cmyk.JPEG": _jpeg("CMYK"),
             'b/with,comma "q".JPEG': _jpeg("RGB"), "b/rgb2.JPEG": _jpeg("RGB")}
    png = io.BytesIO()
    Image.new("RGB", (8, 8)).save(png, "PNG")
    files["b/png.JPEG"] = png.getvalue()
    for rel, data in files.items():
        _write(os.path.join(root, "train", rel), data)


def test_list_is_sluices_manifest_and_dalis_file_list(tmp_path):
    _folder(str(tmp_path / "set"))
    info = gpu_peers.write_list(str(tmp_path / "set"), str(tmp_path / "work"), "clean")
    assert info["set_images"] == 6 and info["images"] == 4 and info["classes"] == 2
    assert info["left_out"] == {"JPEG with 4 components": 1, "not a JPEG": 1}
    paths, labels = gpu_peers.read_list(info)
    assert sorted(os.path.basename(p) for p in paths) == ["grey.JPEG", "rgb1.JPEG", "rgb2.JPEG",
                                                           'with,comma "q".JPEG']
    assert all(os.path.isfile(p) for p in paths)
    assert labels == [0, 0, 1, 1]
    sluice = pytest.importorskip("sluice")
    with sluice.Loader(info["csv"], batch_size=4, size=16, shuffle=False, workers=1, budget="64M") as ld:
        batch = next(iter(ld))
        assert sorted(int(x) for x in np.asarray(batch["label"])) == labels
        assert ld.errors() == []
    again = gpu_peers.write_list(str(tmp_path / "set"), str(tmp_path / "work"), "clean")
    assert again == info
    everything = gpu_peers.write_list(str(tmp_path / "set"), str(tmp_path / "work"), "all")
    assert everything["images"] == 6 and everything["left_out"] == {}


def _script_env(**items):
    """A bench script's environment: this tree's package first, no CUDA_DEVICE_MAX_CONNECTIONS (a
    fresh script's, which this process's `import sluice` may have set), then items."""
    return child_env(drop=("CUDA_DEVICE_MAX_CONNECTIONS",), **items)


def _row(tmp_path, *args, launcher=(), **env_items):
    env = _script_env(**env_items)
    p = subprocess.run([sys.executable, *launcher, os.path.join(ROOT, "bench", "gpu_peers.py"), str(tmp_path / "set"), "row",
                        "--work", str(tmp_path / "work"), "--device", "cpu", "--batch", "2", "--size", "32",
                        "--warmup", "1", "--batches", "2", "--steps", "2"] + list(args),
                       capture_output=True, text=True, timeout=240, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_a_row_in_its_own_process(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("sluice")
    _folder(str(tmp_path / "set"))
    gpu_peers.write_list(str(tmp_path / "set"), str(tmp_path / "work"), "clean")
    r = _row(tmp_path, "--mode", "loaders", "--row", "sluice:decode=cpu:workers=1")
    assert r["images"] == 4 and r["images_per_s"] > 0 and r["decode"] == "cpu" and r["workers"] == 1
    assert r["memory_peak_mb"]["batches"] >= 0 and set(r["memory_peak_mb"]) <= {  # the accounted peak by category
        "index", "batches", "scratch", "decoder", "other", "pinned", "cache", "gpu_host", "io"}
    assert r["tree_pss_peak_mb"] >= r["tree_pss_base_mb"] > 0
    assert r["cuda_connections"] == [None, "single"]  # one process: CUDA's own number of queues
    assert r["gpu_samples"] == 0 and r["gpu_samples_per_call"] is None  # decode=cpu: no hardware call
    r = _row(tmp_path, "--mode", "train", "--arch", "tiny", "--row", "sluice:decode=cpu:workers=1",
             CUDA_DEVICE_MAX_CONNECTIONS="8")
    assert r["steps"] == 2 and 0 <= r["data_wait_fraction"] <= 1 and r["stream"] == "default"
    assert r["step_ms"]["max"] >= r["step_ms"]["mean"] > 0 and "_step_ms" not in r  # the steps' periods
    assert "feed" not in r
    assert r["cuda_connections"] == ["8", "user"]
    r = _row(tmp_path, "--mode", "train", "--arch", "tiny", "--row", "sluice:decode=cpu:workers=1",
             PEERS_FEED="synthetic")
    assert r["feed"] == "synthetic" and r["steps"] == 2 and r["images"] == 4  # the loader ran; the model took synthetic
    # the timed part's cores by thread group (the loop's thread among them) and the CPUs' clock
    assert isinstance(r["cores"], dict) and all(v >= 0.01 for v in r["cores"].values())
    assert r["cpu_mhz"] is None or r["cpu_mhz"] > 0
    r = _row(tmp_path, "--mode", "loaders", "--row", "nosuch")  # an error is the row's, not the table's
    assert "no row named 'nosuch'" in r["error"] and "Traceback" in r["error"]
    r = _row(tmp_path, "--mode", "loaders", "--row", "synthetic")
    assert r["skipped"] == "the synthetic ceiling is a training row"


def test_ddp_rows_with_and_without_the_all_reduce(tmp_path):
    """--mode ddp's rows under torchrun (gloo on the CPU): rank 0's line holds the node's images;
    PEERS_DDP=0 trains the same ranks apart (no DistributedDataParallel), which the line says."""
    pytest.importorskip("torch")
    pytest.importorskip("sluice")
    _folder(str(tmp_path / "set"))
    gpu_peers.write_list(str(tmp_path / "set"), str(tmp_path / "work"), "clean")
    run = ("-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2")
    for ddp in ("1", "0"):
        r = _row(tmp_path, "--mode", "train", "--arch", "tiny", "--row", "sluice:decode=cpu:workers=1",
                 launcher=run, PEERS_DDP=ddp, OMP_NUM_THREADS="1")
        assert "error" not in r, r.get("error")
        assert r["world"] == 2 and r["ddp"] is (ddp == "1") and r["images"] == 2 * 2 * 2  # ranks x steps x batch
        assert r["cuda_connections"] == ["32", "sluice"]  # a rank imports sluice first, as a torchrun script does
        # each rank's steps, and what they would make in lockstep (never more than the slower rank allows)
        assert len(r["rank_step_ms"]) == 2 and all(x["max"] >= x["p50"] > 0 for x in r["rank_step_ms"])
        assert len(r["rank_data_wait_fraction"]) == 2 and "_step_ms" not in r
        assert r["lockstep_step_ms"] >= max(x["mean"] for x in r["rank_step_ms"]) * 0.999


def test_lockstep_is_the_mean_of_the_slowest_ranks_step():
    assert gpu_peers.lockstep_mean_ms([[1, 2], [1, 2]]) == pytest.approx(1.75)  # max of two draws of each
    assert gpu_peers.lockstep_mean_ms([[3, 5]]) == pytest.approx(4)  # one rank: its own mean
    assert gpu_peers.lockstep_mean_ms([[10] * 9 + [30]] * 2) == pytest.approx(13.8)  # a rare slow step, twice as often
    assert gpu_peers.lockstep_mean_ms([]) is None


def test_the_summary_shows_the_median_step_and_the_lockstep():
    a = gpu_peers.argparse.Namespace(mode="ddp", batch=256, set="clean", peer_workers="16", nproc=2)
    base = {"arch": "resnet18", "world": 2, "data_wait_fraction": 0.0, "loader_pss_mb": 10.0}
    rows = [{**base, "row": "synthetic", "ddp": True, "images_per_s": 25000.0, "step_ms": {"p50": 20.0}},
            {**base, "row": "sluice:env.PEERS_DDP=0", "ddp": False, "images_per_s": 24000.0,
             "step_ms": {"p50": 20.75}, "lockstep_images_per_s": 23200.0}]
    text = gpu_peers.summary(rows, a)
    assert "step50" in text and " 20.00 " in text and " 20.75 " in text
    assert "lockstep=23200" in text  # only on the row whose ranks trained apart
    assert text.count("lockstep=") == 1
    rows.append({**base, "row": "synthetic:env.PEERS_DDP=0", "ddp": False, "images_per_s": 26000.0})
    text = gpu_peers.summary(rows, a)
    assert " 92.3%" in text  # the ranks apart against the synthetic ranks apart (24,000 / 26,000), not DDP's
    assert "sluice:env.PEERS_DDP=0 24000 img/s" not in text  # nor held to the DDP target


def test_wheel_members_dropped_with_their_record_lines(tmp_path):
    src, dst = str(tmp_path / "w-1.0-py3-none-any.whl"), str(tmp_path / "out.whl")
    members = {"w/__init__.py": b"x = 1\n", "w/_impl.cpython-311-x86_64-linux-gnu.so": b"\0" * 100,
               "w/_impl.cpython-312-x86_64-linux-gnu.so": b"\1" * 100, "w/include/w.h": b"int w;\n"}
    record = "".join(f"{n},sha256=x,{len(d)}\n" for n, d in members.items()) + "w-1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(src, "w", zipfile.ZIP_DEFLATED) as z:
        for n, d in members.items():
            z.writestr(n, d)
        z.writestr("w-1.0.dist-info/RECORD", record)
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "wheel_lzma.py"), "--stored",
                    "--drop", "*.cpython-311-*", "--drop", "w/include/*", src, dst], check=True)
    with zipfile.ZipFile(dst) as z:
        names = z.namelist()
        assert names == ["w/__init__.py", "w/_impl.cpython-312-x86_64-linux-gnu.so", "w-1.0.dist-info/RECORD"]
        assert all(i.compress_type == zipfile.ZIP_STORED for i in z.infolist())
        assert z.read("w/_impl.cpython-312-x86_64-linux-gnu.so") == members["w/_impl.cpython-312-x86_64-linux-gnu.so"]
        assert [l.split(",")[0] for l in z.read("w-1.0.dist-info/RECORD").decode().splitlines()] == names
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "wheel_lzma.py"), src, dst], check=True)
    with zipfile.ZipFile(dst) as z:  # no --drop: every member, LZMA
        assert len(z.namelist()) == 5 and all(i.compress_type == zipfile.ZIP_LZMA for i in z.infolist())
        assert z.read("w-1.0.dist-info/RECORD").decode() == record


def test_env_items_are_the_rows_environment_not_loader_options():
    assert gpu_peers.parse_row("sluice:env.SLUICE_GPU_PIN_SLOTS=0") == ("sluice", {})
    assert gpu_peers.parse_row("sluice:decode=gpu:env.A=1:workers=8") == ("sluice", {"decode": "gpu", "workers": "8"})
    env = gpu_peers.row_env("sluice:decode=gpu:env.A=1:env.B=x=y")
    assert env["A"] == "1" and env["B"] == "x=y" and env["PATH"] == os.environ["PATH"]


def test_a_row_without_decode_or_workers_keeps_the_librarys_defaults():
    a = argparse.Namespace(budget="4G", gpu_budget="512M")
    assert gpu_peers.sluice_kwargs(a, {}, True) == {}
    assert gpu_peers.sluice_kwargs(a, {"gpu_engines": "2"}, True) == {"gpu_engines": 2}
    assert gpu_peers.sluice_kwargs(a, {"decode": "gpu", "workers": "8", "gpu_engines": "2"}, True) == {
        "workers": 8, "decode": "gpu", "budget": "4G", "gpu_budget": "512M", "gpu_engines": 2}
    assert gpu_peers.sluice_kwargs(a, {"workers": "auto", "budget": "1G"}, False) == {
        "workers": "auto", "decode": "auto", "budget": "1G"}


def test_sync_probe_without_a_gpu_says_why(tmp_path):
    """bench/gpu_sync_probe.py on a machine without CUDA: one line saying why, nothing measured;
    the engine's mode flags it passes are the module's."""
    pytest.importorskip("torch")
    _gpu = pytest.importorskip("sluice._gpu")
    assert _gpu.HW_PIPELINED != _gpu.HW_UNPIPELINED and _gpu.HW_PIPELINED & _gpu.HW_UNPIPELINED == 0
    ok, _ = _gpu.available()
    if ok:
        pytest.skip("a GPU is here: the probe measures (bench/gpu_host.sh syncprobe)")
    _folder(str(tmp_path / "set"))
    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "gpu_sync_probe.py"), str(tmp_path / "set")],
                       capture_output=True, text=True, timeout=120, env=_script_env())
    assert p.returncode == 0, p.stderr[-2000:]
    assert "skipped" in json.loads(p.stdout.strip().splitlines()[-1])

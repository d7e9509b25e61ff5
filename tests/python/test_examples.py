"""The integration examples run: Lightning, torchrun DDP (CPU, gloo), timm (where installed), Ray
Train (where Ray is installed)."""
import glob
import json
import os
import subprocess
import sys

import pytest

from conftest import CLASSES, PER_CLASS, ROOT, child_env, torch_gloo_teardown_abort

EX = os.path.join(ROOT, "examples")


def _env():
    return child_env(CUDA_VISIBLE_DEVICES=os.environ.get("SLUICE_TEST_CUDA_DEVICES", ""))  # CPU unless asked


def test_lightning_datamodule(dataset):
    pytest.importorskip("torch")
    if not any(__import__("importlib").util.find_spec(m) for m in ("lightning", "pytorch_lightning")):
        pytest.skip("Lightning is not installed")
    r = subprocess.run([sys.executable, os.path.join(EX, "lightning_datamodule.py"), dataset, "--epochs", "2",
                        "--batch", "16", "--size", "32", "--classes", str(len(CLASSES)), "--accelerator",
                        "gpu" if os.environ.get("SLUICE_TEST_CUDA_DEVICES") else "cpu",
                        "--devices", "1"], env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    n = len(CLASSES) * PER_CLASS
    assert f"2 epochs, {2 * n} samples seen" in r.stdout, r.stdout


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ddp_torchrun_shards(dataset, tmp_path):
    pytest.importorskip("torch")
    dump = str(tmp_path / "seen")
    env = _env()
    if len([d for d in env["CUDA_VISIBLE_DEVICES"].split(",") if d.strip()]) < 2:
        env["CUDA_VISIBLE_DEVICES"] = ""  # NCCL takes one GPU a rank: two ranks on one GPU run on the CPU (gloo)
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                        str(_free_port()), os.path.join(EX, "ddp_torchrun.py"), dataset, "--batch", "8", "--size", "32",
                        "--classes", str(len(CLASSES)), "--workers", "1", "--dump", dump],
                       env=env, capture_output=True, text=True, timeout=300)
    if torch_gloo_teardown_abort(r, ["rank 0/2:", "rank 1/2:"]):  # torch's bug (conftest.py): the dumps are written
        print("torch's gloo teardown abort after both ranks finished")
    else:
        assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    ranks = [json.load(open(p)) for p in sorted(glob.glob(dump + ".*"))]
    assert [x["rank"] for x in ranks] == [0, 1]
    a, b = set(ranks[0]["indices"]), set(ranks[1]["indices"])
    assert not a & b  # disjoint shards
    n = len(CLASSES) * PER_CLASS
    assert len(a) == len(b) == n // 2 // 8 * 8  # drop_last: whole batches of each rank's half
    assert len(ranks[0]["indices"]) == len(a)  # each sample once


def test_timm_train(dataset):
    pytest.importorskip("torch")
    pytest.importorskip("timm")
    r = subprocess.run([sys.executable, os.path.join(EX, "timm_train.py"), dataset, "--model", "resnet18",
                        "--classes", str(len(CLASSES)), "--steps", "3", "--batch", "8", "--size", "64",
                        "--budget", "256M"], env=_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "3 steps, 24 images" in r.stdout, r.stdout


def test_ray_train_resnet_example(dataset, tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("ray.train.torch", reason="Ray Train is not installed (tools/setup.sh installs it)")
    env = _env()
    env.pop("RAY_ADDRESS", None)  # a local cluster of its own
    r = subprocess.run([sys.executable, os.path.join(EX, "ray_train_resnet.py"), dataset, "--num-workers", "2",
                        "--model", "tiny", "--size", "32", "--batch", "8", "--classes", str(len(CLASSES)),
                        "--budget", "64M", "--ckpt-every", "2", "--storage", str(tmp_path / "results"),
                        "--object-store-memory", str(100 << 20)],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    last = json.loads([line for line in r.stdout.splitlines() if line.startswith('{"metrics"')][-1])
    n = len(CLASSES) * PER_CLASS
    assert last["metrics"]["epoch"] == 0 and last["metrics"]["step"] == n // 2 // 8  # each worker: half, batches of 8
    assert last["checkpoint"] and os.path.exists(os.path.join(last["checkpoint"], "model.pt"))
    assert all(os.path.exists(os.path.join(last["checkpoint"], f"sluice-loader-rank{r:05d}.json")) for r in (0, 1))

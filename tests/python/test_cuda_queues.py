"""CUDA's hardware queues: `import sluice` asks for 32 where CUDA_DEVICE_MAX_CONNECTIONS is unset
and CUDA has not started, keeps a value of yours, and the GPU-held warning says what to set under
DDP when the queues stayed few (docs/gpu.md, "DDP"). What the queues do is measured on a GPU
(bench/gpu_queue_probe.py); here, what the import and the warning decide."""
import json
import os
import subprocess
import sys

import pytest

import sluice

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HELD = {"decode": "gpu", "pass_consumer_wait_gpu_fraction": 0.17, "pass_seconds": 30.0,
        "pass_consumer_wait_s": 6.0, "pass_gpu_samples": 90000, "pass_cpu_samples": 6000}


def _import_in_child(env_value, before=""):
    """What a fresh process's `import sluice` did: (its verdict, the variable after)."""
    env = {k: v for k, v in os.environ.items() if k != "CUDA_DEVICE_MAX_CONNECTIONS"}
    if env_value is not None:
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = env_value
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "python"), os.environ.get("PYTHONPATH", "")])
    code = (before + "import os, json, sluice; print(json.dumps([sluice._CUDA_CONNECTIONS_BY, "
            "os.environ.get('CUDA_DEVICE_MAX_CONNECTIONS')]))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    return tuple(json.loads(p.stdout.strip().splitlines()[-1]))


def test_import_asks_for_32_queues_where_unset_and_keeps_yours():
    assert _import_in_child(None) == ("sluice", str(sluice.CUDA_CONNECTIONS))
    assert _import_in_child("1") == ("user", "1")  # Megatron-style ordering, say: kept


def test_import_after_torch_without_cuda_started_still_sets_them():
    pytest.importorskip("torch")
    # torch imported, CUDA not started (a CPU build never starts it): the variable is still in time
    assert _import_in_child(None, before="import torch; ") == ("sluice", str(sluice.CUDA_CONNECTIONS))


def test_the_held_warning_names_the_queues_only_under_ddp_with_few(monkeypatch):
    monkeypatch.setattr(sluice, "_CUDA_CONNECTIONS_BY", "sluice")
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32")
    for world in (1, 2):
        assert "CUDA_DEVICE_MAX_CONNECTIONS" not in sluice._gpu_held_hint(HELD, world=world)
    monkeypatch.setattr(sluice, "_CUDA_CONNECTIONS_BY", "user")
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "8")
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in sluice._gpu_held_hint(HELD, world=1)
    hint = sluice._gpu_held_hint(HELD, world=2)
    assert "(CUDA_DEVICE_MAX_CONNECTIONS=8)" in hint and "CUDA_DEVICE_MAX_CONNECTIONS=32 before CUDA starts" in hint
    monkeypatch.setattr(sluice, "_CUDA_CONNECTIONS_BY", "late")
    monkeypatch.delenv("CUDA_DEVICE_MAX_CONNECTIONS")
    assert "CUDA started before `import sluice`" in sluice._gpu_held_hint(HELD, world=4)
    assert sluice._gpu_held_hint({**HELD, "pass_consumer_wait_gpu_fraction": 0.01}, world=2) is None


def test_world_is_one_without_torch_distributed_started():
    assert sluice._world() == 1


def test_queue_probe_without_a_gpu_says_why():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the probe measures (bench/gpu_host.sh syncprobe)")
    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "gpu_queue_probe.py")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "skipped" in json.loads(p.stdout.strip().splitlines()[-1])

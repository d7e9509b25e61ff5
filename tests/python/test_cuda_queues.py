"""CUDA's hardware queues: `import sluice` in a DDP rank (WORLD_SIZE > 1) asks for 32 where
CUDA_DEVICE_MAX_CONNECTIONS is unset and CUDA has not started, leaves a single process at CUDA's 8
(their memory), keeps a value of yours, and the GPU-held warning says what to set when the queues
stayed few, and in a single process what 16 did (docs/gpu.md, "CUDA's hardware queues"). What the
queues do is measured on a GPU (bench/README.md, thirteenth, fourteenth and eighteenth sessions);
here, what the import and the warning decide."""
import json
import subprocess
import sys

import pytest

import sluice
from conftest import child_env

HELD = {"decode": "gpu", "pass_consumer_wait_gpu_fraction": 0.17, "pass_seconds": 30.0,
        "pass_consumer_wait_s": 6.0, "pass_gpu_samples": 90000, "pass_cpu_samples": 6000}


def _import_in_child(env_value, before="", world=None):
    """What a fresh process's `import sluice` did: (its verdict, the variable after)."""
    env = child_env(drop=("CUDA_DEVICE_MAX_CONNECTIONS", "WORLD_SIZE"))
    if env_value is not None:
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = env_value
    if world is not None:
        env["WORLD_SIZE"] = world
    code = (before + "import os, json, sluice; print(json.dumps([sluice._CUDA_CONNECTIONS_BY, "
            "os.environ.get('CUDA_DEVICE_MAX_CONNECTIONS')]))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    return tuple(json.loads(p.stdout.strip().splitlines()[-1]))


def test_a_rank_asks_for_32_queues_a_single_process_keeps_cudas():
    assert _import_in_child(None, world="2") == ("sluice", str(sluice.CUDA_CONNECTIONS))
    assert _import_in_child(None) == ("single", None)  # no launcher: CUDA's 8, and their memory
    assert _import_in_child(None, world="1") == ("single", None)
    assert _import_in_child(None, world="two") == ("single", None)
    assert _import_in_child("1", world="8") == ("user", "1")  # Megatron-style ordering, say: kept


def test_import_after_torch_without_cuda_started_still_sets_them():
    pytest.importorskip("torch")
    # torch imported, CUDA not started (a CPU build never starts it): the variable is still in time
    assert _import_in_child(None, before="import torch; ", world="4") == ("sluice", str(sluice.CUDA_CONNECTIONS))


def test_the_held_warning_names_the_queues_where_they_stayed_few(monkeypatch):
    monkeypatch.setattr(sluice, "_CUDA_CONNECTIONS_BY", "sluice")
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32")
    for world in (1, 2):
        assert "CUDA_DEVICE_MAX_CONNECTIONS" not in sluice._gpu_held_hint(HELD, world=world)
    monkeypatch.setattr(sluice, "_CUDA_CONNECTIONS_BY", "user")
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "8")
    hint = sluice._gpu_held_hint(HELD, world=2)
    assert "(CUDA_DEVICE_MAX_CONNECTIONS=8)" in hint and "CUDA_DEVICE_MAX_CONNECTIONS=32 before CUDA starts" in hint
    monkeypatch.delenv("CUDA_DEVICE_MAX_CONNECTIONS")
    monkeypatch.setattr(sluice, "_CUDA_CONNECTIONS_BY", "late")
    assert "CUDA started before `import sluice`" in sluice._gpu_held_hint(HELD, world=4)
    monkeypatch.setattr(sluice, "_CUDA_CONNECTIONS_BY", "single")  # a group started without WORLD_SIZE (mp.spawn)
    assert "WORLD_SIZE was not set" in sluice._gpu_held_hint(HELD, world=2)
    # a single process keeps CUDA's 8 (their memory): the warning says what 16 did and costs, to choose
    hint = sluice._gpu_held_hint(HELD, world=1)
    assert "share CUDA's 8 hardware queues" in hint and "CUDA_DEVICE_MAX_CONNECTIONS=16 before CUDA starts" in hint
    assert "105 MB" in hint and "DDP" not in hint
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "16")  # set by you: enough for one process, not for a rank
    monkeypatch.setattr(sluice, "_CUDA_CONNECTIONS_BY", "user")
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in sluice._gpu_held_hint(HELD, world=1)
    assert "CUDA_DEVICE_MAX_CONNECTIONS=32 before CUDA starts" in sluice._gpu_held_hint(HELD, world=2)
    assert sluice._gpu_held_hint({**HELD, "pass_consumer_wait_gpu_fraction": 0.01}, world=2) is None
    assert sluice._gpu_held_hint({**HELD, "pass_consumer_wait_gpu_fraction": 0.01}, world=1) is None


def test_world_is_one_without_torch_distributed_started():
    assert sluice._world() == 1

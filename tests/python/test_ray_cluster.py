"""sluice.ray.read on two Ray nodes of this machine, each its own raylet and
object store: `ray start --head` with no CPUs (a GPU node that trains, say)
and `ray start --address=...` with 2 CPUs (a CPU node that preprocesses).
Every read task must run on the CPU node and its blocks travel to the
driver's node; the dataset still holds every sample of the epoch once, with
the bytes of a plain sluice.Loader. Both nodes are started here (`--block`,
each in its own process group) and stopped by their process groups."""
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (tools/setup.sh installs it for make test)")
pytest.importorskip("ray.data", reason="Ray Data is not installed (ray[data])")

import sluice  # noqa: E402
import sluice.ray  # noqa: E402

RAY = os.path.join(os.path.dirname(sys.executable), "ray")
# a cluster of this machine's loopback only, for this test: no token to hand around
ENV = {"RAY_AUTH_MODE": "disabled"}


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(args, log):
    """`ray start ... --block` in a process group of its own (so that the
    group's processes, and only they, are stopped at the end)."""
    return subprocess.Popen([RAY, "start", "--block", "--disable-usage-stats", *args], stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True, env=dict(os.environ, **ENV))


def _stop(proc):
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(30)
            return
        except subprocess.TimeoutExpired:
            continue


def _wait_for_nodes(count, log_path):
    """Until the cluster shows `count` live nodes (progress, not a clock: the
    raylets register when they are up); fails if that takes 5 minutes."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        alive = [n for n in ray.nodes() if n.get("Alive")]
        if len(alive) >= count:
            return alive
        time.sleep(0.2)
    pytest.fail(f"the cluster never had {count} nodes; logs: {open(log_path).read()[-3000:]}")


@pytest.fixture(scope="module")
def two_nodes():
    if not os.access(RAY, os.X_OK):
        pytest.skip(f"the ray command is not at {RAY}")
    saved = {k: os.environ.get(k) for k in ENV}
    os.environ.update(ENV)  # for this process's ray.init too
    tmp = tempfile.mkdtemp(prefix="slray", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    port = _free_port()
    address = f"127.0.0.1:{port}"
    log_path = os.path.join(tmp, "nodes.log")
    log = open(log_path, "w")
    common = ["--object-store-memory", str(100 << 20), "--num-gpus", "0"]
    head = _start(["--head", "--node-ip-address", "127.0.0.1", "--port", str(port), "--num-cpus", "0",
                   "--include-dashboard", "false", "--temp-dir", tmp, *common], log)
    cpu = None
    try:
        # the worker node joins once the head's GCS answers: `ray start --address` waits for it
        cpu = _start(["--address", address, "--node-ip-address", "127.0.0.1", "--num-cpus", "2",
                      "--resources", '{"sluice_cpu_node": 1}', *common], log)
        ray.init(address=address, log_to_driver=False, configure_logging=False)
        nodes = _wait_for_nodes(2, log_path)
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        ctx.execution_options.preserve_order = True
        yield nodes
    finally:
        if ray.is_initialized():
            ray.shutdown()
        for p in (cpu, head):
            if p is not None:
                _stop(p)
        log.close()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_read_on_a_cpu_node_for_the_driver_node(two_nodes, dataset):
    cpu_node = [n["NodeID"] for n in two_nodes if n["Resources"].get("CPU", 0) > 0]
    driver_node = ray.get_runtime_context().get_node_id()
    assert len(cpu_node) == 1 and cpu_node[0] != driver_node
    opts = dict(seed=7, size=32, budget="64M")
    ds = sluice.ray.read(dataset, epoch=1, leases=4, workers=1, **opts)
    rows = ds.take_all()
    ref = {}
    with sluice.Loader(dataset, batch_size=16, workers=1, **opts) as ld:
        ld.set_epoch(1)
        for b in ld:
            for i, k in enumerate(np.asarray(b["index"])):
                ref[int(k)] = np.asarray(b["image"])[i].copy()
    assert sorted(int(r["index"]) for r in rows) == sorted(ref)
    for r in rows:
        assert np.array_equal(r["image"], ref[int(r["index"])])
    st = sluice.ray.stats(ds)
    assert st["nodes"] == cpu_node, f"read tasks ran on {st['nodes']}, the CPU node is {cpu_node}"
    assert st["leases_done"] == 4 and st["samples"] == len(ref)

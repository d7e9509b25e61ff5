"""sluice.ray.read on two Ray nodes of this machine, each its own raylet and
object store: `ray start --head` with no CPUs (a GPU node that trains, say)
and `ray start --address=...` with 2 CPUs (a CPU node that preprocesses).
Every read task must run on the CPU node and its blocks travel to the
driver's node; the dataset still holds every sample of the epoch once, with
the bytes of a plain sluice.Loader. Both nodes are started here (`--block`,
each in its own process group) and stopped by their process groups; the
driver is a process of its own (a Ray driver connects to one cluster in its
life, and this pytest process may have run a local cluster before)."""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap

import pytest

pytest.importorskip("ray", reason="Ray is not installed (tools/setup.sh installs it for make test)")
pytest.importorskip("ray.data", reason="Ray Data is not installed (ray[data])")

RAY = os.path.join(os.path.dirname(sys.executable), "ray")
# a cluster of this machine's loopback only, for this test: no token to hand around
ENV = {"RAY_AUTH_MODE": "disabled"}

DRIVER = textwrap.dedent("""
    import json, sys, time
    import numpy as np
    import ray, sluice, sluice.ray
    address, dataset = sys.argv[1], sys.argv[2]
    ray.init(address=address, log_to_driver=False, configure_logging=False)
    deadline = time.monotonic() + 300  # the raylets register once they are up: wait on that
    while len([n for n in ray.nodes() if n.get("Alive")]) < 2:
        assert time.monotonic() < deadline, "the cluster never had 2 nodes"
        time.sleep(0.2)
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.execution_options.preserve_order = True
    opts = dict(seed=7, size=32, budget="64M")
    ds = sluice.ray.read(dataset, epoch=1, leases=4, workers=1, **opts)
    rows = ds.take_all()
    st = sluice.ray.stats(ds)
    ref = {}
    with sluice.Loader(dataset, batch_size=16, workers=1, **opts) as ld:
        ld.set_epoch(1)
        for b in ld:
            for i, k in enumerate(np.asarray(b["index"])):
                ref[int(k)] = np.asarray(b["image"])[i].copy()
    print("RESULT " + json.dumps({
        "indices": [int(r["index"]) for r in rows], "epoch": sorted(ref),
        "same_bytes": all(np.array_equal(r["image"], ref[int(r["index"])]) for r in rows),
        "cpu_nodes": [n["NodeID"] for n in ray.nodes() if n.get("Alive") and n["Resources"].get("CPU", 0) > 0],
        "driver_node": ray.get_runtime_context().get_node_id(),
        "task_nodes": st["nodes"], "leases_done": st["leases_done"], "samples": st["samples"]}), flush=True)
""")


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


@pytest.fixture(scope="module")
def two_nodes():
    """(address, log path) of a head node with no CPUs and a worker node with 2."""
    if not os.access(RAY, os.X_OK):
        pytest.skip(f"the ray command is not at {RAY}")
    tmp = tempfile.mkdtemp(prefix="slray", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    port = _free_port()
    address = f"127.0.0.1:{port}"
    log_path = os.path.join(tmp, "nodes.log")
    common = ["--object-store-memory", str(100 << 20), "--num-gpus", "0"]
    with open(log_path, "w") as log:
        head = _start(["--head", "--node-ip-address", "127.0.0.1", "--port", str(port), "--num-cpus", "0",
                       "--include-dashboard", "false", "--temp-dir", tmp, *common], log)
        cpu = None
        try:
            # the worker node joins once the head's GCS answers: `ray start --address` waits for it
            cpu = _start(["--address", address, "--node-ip-address", "127.0.0.1", "--num-cpus", "2",
                          "--resources", '{"sluice_cpu_node": 1}', *common], log)
            yield address, log_path
        finally:
            for p in (cpu, head):
                if p is not None:
                    _stop(p)


def test_read_on_a_cpu_node_for_the_driver_node(two_nodes, dataset):
    address, log_path = two_nodes
    r = subprocess.run([sys.executable, "-c", DRIVER, address, dataset], env=dict(os.environ, **ENV),
                       capture_output=True, text=True, timeout=400)
    line = [x for x in r.stdout.splitlines() if x.startswith("RESULT ")]
    assert r.returncode == 0 and line, (r.stdout + r.stderr)[-3000:] + open(log_path).read()[-2000:]
    res = json.loads(line[0][len("RESULT "):])
    assert sorted(res["indices"]) == res["epoch"] and len(res["epoch"]) == 64, "not every sample once"
    assert res["same_bytes"], "a sample's bytes differ from a plain sluice.Loader's"
    assert len(res["cpu_nodes"]) == 1 and res["cpu_nodes"][0] != res["driver_node"]
    assert res["task_nodes"] == res["cpu_nodes"], f"read tasks ran on {res['task_nodes']}"
    assert res["leases_done"] == 4 and res["samples"] == 64

"""Remote sources (docs/remote.md) against real servers on loopback: moto's S3
in server mode, a Range-capable http.server, and a proxy that fails a share of
the requests in front of either (tests/python/remote_servers.py).

Shown here: the same bytes (batch checksums) from s3:// shards (a prefix and a
brace pattern), http:// shards and local shards, for 1 and 8 workers, and from
a manifest whose relative paths resolve against its s3:// URL; with a tenth of
the requests failed by the proxy, the same bytes and no error record; an object
deleted, one error record naming its URL; create's refusals (no such key or
bucket, an endpoint nobody answers, missing or wrong credentials against moto
with its signature checks on); the node cache as the local tier (epoch 2
fetches only what the cache cannot hold); resume across local and remote;
peak RSS within budget + 48 MiB with many requests in flight on large objects.
"""
import json
import os
import socket
import subprocess
import sys
import time

import pytest

from conftest import ROOT, SLUICE

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from remote_servers import FaultProxy, RangeServer, moto_s3, s3_client  # noqa: E402

import sluice  # noqa: E402

# tools/setup.sh installs moto[server] and boto3 for the tests; a machine where
# that install could not happen skips them, saying so
pytest.importorskip("moto.server", reason="moto[server] is not installed (tools/setup.sh installs it)")
pytest.importorskip("boto3", reason="boto3 is not installed (tools/setup.sh installs it)")
if sluice.build_info()["remote"] is None:
    pytest.skip("this sluice was built without libcurl (libcurl4-openssl-dev)", allow_module_level=True)

BUCKET = "train-data"


def _quiet_moto():
    import logging
    for name in ("werkzeug", "moto"):
        logging.getLogger(name).setLevel(logging.ERROR)


def _epoch_sums(source, workers, epochs=1, **kw):
    """The batches' checksums of the first epochs, and the loader's stats."""
    kw.setdefault("batch_size", 8)
    kw.setdefault("size", 32)
    kw.setdefault("budget", "128M")
    with sluice.Loader(source, workers=workers, seed=11, checksum=True, **kw) as ld:
        sums = []
        for e in range(epochs):
            ld.set_epoch(e)
            sums.append([b.checksum for b in ld])
        return sums, ld.stats(), ld.errors()


@pytest.fixture(scope="module")
def packed(tmp_path_factory, dataset):
    """The session's 64-image dataset as 3 tar shards (sluice pack) and as a
    manifest of its files with relative paths."""
    if not os.access(SLUICE, os.X_OK):
        pytest.skip("build/sluice not built")
    # the node's records of shard scans (docs/remote.md): a folder of the tests' own, not ~/.cache
    os.environ["SLUICE_INDEX_CACHE"] = str(tmp_path_factory.mktemp("records"))
    out = str(tmp_path_factory.mktemp("shards"))
    subprocess.run([SLUICE, "pack", dataset, out, "--samples-per-shard", "24"], check=True, capture_output=True)
    rows = []
    for cls in sorted(os.listdir(dataset)):
        for f in sorted(os.listdir(os.path.join(dataset, cls))):
            rows.append(f"{cls}/{f},{sorted(os.listdir(dataset)).index(cls)}")
    man = os.path.join(out, "m.csv")
    with open(man, "w") as f:
        f.write("path,label\n" + "\n".join(rows) + "\n")
    return {"shards": out, "pattern": "shard-{000000..000002}.tar", "folder": dataset, "rows": rows}


@pytest.fixture(scope="module")
def s3(packed):
    """moto's S3 with the shards under shards/ and the images + manifest under ds/."""
    _quiet_moto()
    server, endpoint = moto_s3()
    old = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION",
                                          "AWS_ENDPOINT_URL", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE",
                                          "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE")}
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_REGION="us-east-1",
                      AWS_ENDPOINT_URL=endpoint, AWS_SHARED_CREDENTIALS_FILE="/nonexistent/credentials",
                      AWS_CONFIG_FILE="/nonexistent/config")
    for k in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
        os.environ.pop(k, None)
    client = s3_client(endpoint)
    client.create_bucket(Bucket=BUCKET)
    for f in sorted(os.listdir(packed["shards"])):
        if f.endswith(".tar"):
            client.upload_file(os.path.join(packed["shards"], f), BUCKET, "shards/" + f)
    for row in packed["rows"]:
        rel = row.rsplit(",", 1)[0]
        client.upload_file(os.path.join(packed["folder"], rel), BUCKET, "ds/" + rel)
    client.upload_file(os.path.join(packed["shards"], "m.csv"), BUCKET, "ds/m.csv")
    yield {"client": client, "endpoint": endpoint, "port": int(endpoint.rsplit(":", 1)[1])}
    server.stop()
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="module")
def http(packed):
    srv = RangeServer(packed["shards"])
    yield srv
    srv.stop()


@pytest.mark.parametrize("workers", [1, 8])
def test_same_bytes_from_s3_http_and_local_shards(packed, s3, http, workers):
    local = os.path.join(packed["shards"], packed["pattern"])
    want, _, _ = _epoch_sums(local, 2)
    for source in (f"s3://{BUCKET}/shards/", f"s3://{BUCKET}/shards/{packed['pattern']}",
                   http.url(packed["pattern"])):
        got, st, errs = _epoch_sums(source, workers)
        assert got == want, source
        assert not errs
        assert st["net_requests"] > 0 and st["net_bytes"] > 0 and st["net_failures"] == 0
        assert st["memory"]["io"] > 0


def test_manifest_paths_resolve_against_its_url(packed, s3):
    want, _, _ = _epoch_sums(packed["folder"], 2)
    got, st, errs = _epoch_sums(f"s3://{BUCKET}/ds/m.csv", 3)
    assert got == want and not errs
    assert st["readahead_hits"] > 0  # the files came read ahead along the order


def test_a_tenth_of_requests_failed_same_bytes_no_error_record(packed, s3, http, monkeypatch):
    want, _, _ = _epoch_sums(os.path.join(packed["shards"], packed["pattern"]), 2)
    proxy = FaultProxy(s3["port"], every=10, kinds=("503", "cut", "reset"))
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url())
    try:
        got, st, errs = _epoch_sums(f"s3://{BUCKET}/shards/", 4, io_retries=20, io_hedge=False)
        assert got == want and not errs and st["errors"] == 0
        assert st["net_retries"] > 0
        assert all(proxy.faults[k] > 0 for k in ("503", "cut", "reset")), proxy.faults
    finally:
        proxy.stop()
    proxy = FaultProxy(http.port, every=10, kinds=("503", "cut", "reset"))
    try:
        got, st, errs = _epoch_sums(proxy.url(packed["pattern"]), 4, io_retries=20, io_hedge=False)
        assert got == want and not errs and st["net_retries"] > 0
    finally:
        proxy.stop()


def test_an_object_deleted_is_one_error_record_naming_its_url(packed, s3):
    rel = packed["rows"][5].rsplit(",", 1)[0]
    s3["client"].delete_object(Bucket=BUCKET, Key="ds/" + rel)
    try:
        _, st, errs = _epoch_sums(f"s3://{BUCKET}/ds/m.csv", 2)
        assert st["errors"] == 1 and len(errs) == 1
        assert errs[0]["path"] == f"s3://{BUCKET}/ds/{rel}"
        assert "HTTP 404 NoSuchKey" in errs[0]["reason"]
        assert errs[0]["code_name"] == "SL_ENOENT"
    finally:
        s3["client"].upload_file(os.path.join(packed["folder"], rel), BUCKET, "ds/" + rel)


def test_create_refuses_with_which_and_what_to_do(packed, s3, monkeypatch):
    with pytest.raises(FileNotFoundError, match=r"shard-000003.tar: HTTP 404 NoSuchKey: no such object"):
        sluice.Loader(f"s3://{BUCKET}/shards/shard-{{000000..000007}}.tar", batch_size=8)
    with pytest.raises(FileNotFoundError, match=r"HTTP 404 NoSuchBucket: no such bucket"):
        sluice.Loader("s3://no-such-bucket/shards/", batch_size=8)
    with pytest.raises(ValueError, match="holds subfolders"):
        sluice.Loader(f"s3://{BUCKET}/ds/", batch_size=8)
    with pytest.raises(ValueError, match="no .tar shards"):
        sluice.Loader(f"s3://{BUCKET}/nothing-here/", batch_size=8)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))  # bound, never listening: nobody answers
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:%d" % s.getsockname()[1])
    try:
        with pytest.raises(OSError, match=r"cannot reach the endpoint .* \(AWS_ENDPOINT_URL\)"):
            sluice.Loader(f"s3://{BUCKET}/shards/", batch_size=8)
    finally:
        s.close()
    monkeypatch.setenv("AWS_PROFILE", "nobody")
    with pytest.raises(ValueError, match="profile 'nobody' is in neither"):
        sluice.Loader(f"s3://{BUCKET}/shards/", batch_size=8)


@pytest.fixture(scope="module")
def moto_auth(packed):
    """moto with its signature and policy checks on (a server process of its
    own: INITIAL_NO_AUTH_ACTION_COUNT): a user allowed s3:*, its key, a bucket
    with one shard. Its listing check mishandles an encoded '/' in a query
    (boto3's own list_objects_v2(Prefix='a/b') fails it too), so only GETs are
    checked here."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    env = dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT="4")
    proc = subprocess.Popen([sys.executable, "-c", "from moto.server import main; main()", "-H", "127.0.0.1",
                             "-p", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = "http://127.0.0.1:%d" % port
    try:
        for _ in range(600):  # the server's start: progress, polled
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail("moto_server exited")
                time.sleep(0.05)
        import boto3
        iam = boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="x",
                           aws_secret_access_key="x")
        iam.create_user(UserName="trainer")
        iam.put_user_policy(UserName="trainer", PolicyName="s3", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
        key = iam.create_access_key(UserName="trainer")["AccessKey"]
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                              aws_access_key_id=key["AccessKeyId"], aws_secret_access_key=key["SecretAccessKey"])
        client.create_bucket(Bucket="private")
        client.upload_file(os.path.join(packed["shards"], "shard-000000.tar"), "private", "s/shard-000000.tar")
        yield {"endpoint": endpoint, "key": key["AccessKeyId"], "secret": key["SecretAccessKey"]}
    finally:
        proc.terminate()
        proc.wait()


def test_credentials_signed_by_libcurl_and_checked_by_moto(packed, moto_auth, monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_auth["endpoint"])
    want, _, _ = _epoch_sums(os.path.join(packed["shards"], "shard-000000.tar"), 2)
    # the environment's keys
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", moto_auth["key"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", moto_auth["secret"])
    got, _, errs = _epoch_sums("s3://private/s/shard-000000.tar", 2)
    assert got == want and not errs
    # a profile of ~/.aws/credentials (AWS_PROFILE), region from ~/.aws/config
    creds, conf = tmp_path / "credentials", tmp_path / "config"
    creds.write_text(f"[default]\naws_access_key_id = nope\naws_secret_access_key = nope\n\n[train]\n"
                     f"aws_access_key_id = {moto_auth['key']}\naws_secret_access_key = {moto_auth['secret']}\n")
    conf.write_text("[profile train]\nregion = us-east-1\n")
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(conf))
    monkeypatch.setenv("AWS_PROFILE", "train")
    got, _, errs = _epoch_sums("s3://private/s/shard-000000.tar", 1)
    assert got == want and not errs
    # a wrong secret, an unknown key, no credentials at all: refused at create, saying which
    monkeypatch.setenv("AWS_PROFILE", "default")
    with pytest.raises(OSError, match="HTTP 403 (InvalidAccessKeyId|SignatureDoesNotMatch)"):
        sluice.Loader("s3://private/s/shard-000000.tar", batch_size=8)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", moto_auth["key"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    with pytest.raises(OSError, match="SignatureDoesNotMatch: the signature does not match"):
        sluice.Loader("s3://private/s/shard-000000.tar", batch_size=8)
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.delenv("AWS_PROFILE")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    with pytest.raises(OSError, match="no AWS credentials were found"):
        sluice.Loader("s3://private/s/shard-000000.tar", batch_size=8)


def test_node_cache_is_the_local_tier(packed, s3, tmp_path):
    """From the second epoch only what the cache cannot hold is fetched."""
    src = f"s3://{BUCKET}/ds/m.csv"
    sizes = sum(os.path.getsize(os.path.join(packed["folder"], r.rsplit(",", 1)[0])) for r in packed["rows"])
    for cache, share in ((4 * sizes + (8 << 20), "none"), (4 * sizes + (8 << 20), "node")):
        env_job = os.environ.get("SLUICE_CACHE_JOB")
        os.environ["SLUICE_CACHE_JOB"] = str(tmp_path)  # a segment of its own
        try:
            with sluice.Loader(src, batch_size=8, size=32, workers=2, budget="256M", seed=3, cache=cache,
                               cache_share=share) as ld:
                for _ in ld:
                    pass
                first = ld.stats()
                ld.set_epoch(1)
                for _ in ld:
                    pass
                second = ld.stats()
        finally:
            if env_job is None:
                os.environ.pop("SLUICE_CACHE_JOB", None)
            else:
                os.environ["SLUICE_CACHE_JOB"] = env_job
        assert first["net_bytes"] >= sizes
        # epoch 2: every file from the cache, nothing fetched but nothing (no read-ahead either)
        assert second["net_bytes"] - first["net_bytes"] == 0, share
        assert second["cache_hits"] >= len(packed["rows"])


def test_resume_across_local_and_remote(packed, s3):
    local = os.path.join(packed["shards"], packed["pattern"])
    remote = f"s3://{BUCKET}/shards/"
    kw = dict(batch_size=8, size=32, budget="128M", seed=4, checksum=True)
    with sluice.Loader(local, workers=2, **kw) as ld:
        full = [b.checksum for b in ld]
    with sluice.Loader(local, workers=2, **kw) as ld:
        it = iter(ld)
        head = [next(it).checksum for _ in range(3)]
        state = ld.state_dict()
    with sluice.Loader(remote, workers=5, **kw) as ld:
        ld.load_state_dict(state)
        tail = [b.checksum for b in ld]
    assert head + tail == full



@pytest.mark.parametrize("W2", [2, 3])
@pytest.mark.parametrize("cache", [None, "node"])
def test_four_ranks_resume_on_two_and_three_over_s3(packed, s3, W2, cache, monkeypatch):
    """Issue 21, item 4 over remote shards: 4 ranks read s3:// shards, stop mid-epoch, their states
    are merged and resumed on 2 and on 3 ranks (with and without a node cache): every sample of the
    epoch once over both phases (3 ranks pad the 32 left to 33 by wrapping), each with the bytes an
    uninterrupted loader over the same shards, local, gives it."""
    import collections

    from test_elastic import reference, world  # ranks as loaders rank=r, world_size=W, one after another

    remote = f"s3://{BUCKET}/shards/"
    kw = {}
    if cache:
        monkeypatch.setenv("SLUICE_CACHE_JOB", f"test-remote-elastic-{os.getpid()}")
        kw = dict(cache="4M", cache_share="node")
    ref = reference(os.path.join(packed["shards"], packed["pattern"]))
    first, states, err1, _ = world(remote, 4, 2, **kw)  # 4 ranks x 2 batches x 4 = 32 of 64
    merged = sluice.merge_states(states)
    assert (merged["batch"], merged["span_end"] - merged["span_begin"]) == (0, 32)
    rest, _, err2, counts = world(remote, W2, None, start=merged, **kw)
    assert not err1 and not err2
    assert len({n for n, _ in counts}) == 1  # every rank the same number of samples (and batches)
    seen = collections.Counter(k for k, _ in first + rest)
    want = collections.Counter(range(len(packed["rows"])))
    if W2 == 3:
        want[rest[0][0]] += 1
    assert seen == want
    for k, img in first + rest:
        assert img == ref[k], f"sample {k}: other bytes than an uninterrupted loader's over local shards"


_RSS_SCRIPT = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import sluice
def rss(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
base = rss("VmRSS:")
budget = int(sys.argv[3])
with sluice.Loader(sys.argv[2], batch_size=4, size=64, workers=4, budget=budget, io_requests=64,
                   io_readahead=budget // 2, preset="val") as ld:
    for e in range(2):
        ld.set_epoch(e)
        for b in ld:
            pass
    st = ld.stats()
print(json.dumps({"base": base, "hwm": rss("VmHWM:"), "peak_accounted": st["peak_accounted_bytes"],
                  "inflight_peak": st["net_inflight_peak"], "io_peak": st["memory_peak"]["io"],
                  "readahead_hits": st["readahead_hits"]}))
"""


def test_peak_rss_within_budget_with_many_requests_on_large_objects(tmp_path):
    """Large noise JPEGs (about 3 MB each) over http, 64 requests in flight, a
    half of the budget read ahead: the process's peak RSS grows by at most
    budget + 48 MiB over what it held before the loader (VmHWM, measured)."""
    from PIL import Image
    import numpy as np
    rng = np.random.default_rng(5)
    rows = []
    for i in range(48):
        Image.fromarray(rng.integers(0, 256, (1100, 1400, 3), dtype=np.uint8)).save(tmp_path / f"n{i:02d}.jpg",
                                                                                   quality=95)
        rows.append(f"n{i:02d}.jpg,{i % 3}")
    (tmp_path / "m.csv").write_text("path,label\n" + "\n".join(rows) + "\n")
    srv = RangeServer(str(tmp_path))
    budget = 128 << 20
    try:
        out = subprocess.run([sys.executable, "-c", _RSS_SCRIPT, os.path.join(ROOT, "python"), srv.url("m.csv"),
                              str(budget)], capture_output=True, text=True, timeout=600)
    finally:
        srv.stop()
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout)
    assert r["peak_accounted"] <= budget
    assert r["inflight_peak"] >= 8 and r["io_peak"] > 16 << 20, r  # many requests, large buffers
    print("rss:", r)
    assert r["hwm"] - r["base"] <= budget + (48 << 20), r


def test_cli_bench_and_plan_over_s3(packed, s3, sluice_exe):
    """`sluice bench` reports what it fetched; `sluice plan --net-limit` the
    cache that keeps the fetches under a rate, from samples read over S3."""
    out = subprocess.run([sluice_exe, "bench", f"s3://{BUCKET}/shards/", "--batch", "8", "--size", "32",
                          "--budget", "128M", "--workers", "2", "--io-requests", "16", "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["samples"] == len(packed["rows"]) and r["errors"] == 0
    assert r["net_requests"] > 0 and r["net_bytes"] > 0 and r["net_inflight_peak"] <= 16
    assert r["mem_peak_bytes"]["io"] > 0
    out = subprocess.run([sluice_exe, "plan", f"s3://{BUCKET}/shards/", "--no-python", "--sample", "16",
                          "--net-limit", "1M", "--rate", "100", "--json"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    p = json.loads(out.stdout)
    net = p["network"]
    assert p["sampled"] == 16 and p["failed"] == 0  # read through the library, over S3
    demand = 100 * p["encoded_bytes_mean"]
    assert abs(net["fetch_bytes_per_s_without_cache"] - demand) <= 100 * 0.5 + 1  # the mean is printed rounded
    # the cache's share of the bytes is cache/dataset: what is left fits the limit
    values = net["dataset_bytes"] * (1 - (1 << 20) / demand)
    assert 0.99 * values < net["cache_bytes"] < 1.01 * (values + 4 * p["dataset_samples"] + 64 * values / p["encoded_bytes_mean"])

#!/usr/bin/env python3
"""Remote shards: throughput and bytes fetched as requests in flight grow, with
latency injected per request, beside the same shards read locally (issue 21).

A folder of images is packed into tar shards (`sluice pack`), served over
http:// from loopback with LAT_MIN..LAT_MAX seconds added to every request:
by bench/remote_serve.c (the C test server of tests/c/httpd.h, compiled here:
one thread a connection, the shards in memory), or with --server python by a
Range-capable http.server behind a latency proxy (tests/python/remote_servers.py;
on many cores the Python server, not the loader, is then the ceiling). No moto,
no network: it runs on a host without network access.
`sluice bench` then reads the local shards (the reference) and the http://
shards with --io-requests 1, 4, 16, 64, ... , each in its own process, and
prints one JSON line per run and a table: samples/s, bytes fetched per sample,
requests per sample, requests in flight at most, peak RSS growth. Every run
scans its shards at create (SLUICE_INDEX_CACHE=off: no record of an earlier
run's scan), so the bytes fetched include the scan.

    bench/remote_bench.py DATA [--workers N] [--requests 1,4,16,64] [--latency 0.02,0.05]
                          [--images N] [--epochs 1] [--batch 64] [--budget 512M]
                          [--max-side 320] [--work DIR] [--sluice build/sluice]

DATA: an image folder (ImageFolder layout, e.g. from make_imagenet_like.py or
tools/make_demo_data.py); --images N takes its first N files. The servers run
in this process, the loaders in child processes.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
from remote_servers import FaultProxy, RangeServer  # noqa: E402


def pack(args, out):
    made_from = json.dumps([os.path.abspath(args.data), args.images, args.max_side])
    mark = os.path.join(out, ".made-from")
    if os.path.isfile(mark) and open(mark).read() == made_from:
        return  # kept from an earlier run (--keep) of the same data
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out, exist_ok=True)
    src = args.data
    if args.images:  # the first N files, as a manifest
        # absolute paths: a manifest's relative ones resolve against its own folder (WORK), and DATA
        # is relative on the GPU host (.data/inet20k)
        rows, root = [], os.path.abspath(args.data)
        if os.path.isdir(os.path.join(root, "train")):
            root = os.path.join(root, "train")
        classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
        for ci, c in enumerate(classes):
            for dirpath, _, files in sorted(os.walk(os.path.join(root, c))):
                for f in sorted(files):
                    rows.append((os.path.join(dirpath, f), ci))
        rows = rows[: args.images]
        src = os.path.join(args.work, "first.csv")
        with open(src, "w") as f:
            f.write("path,label\n" + "".join(f"{p},{c}\n" for p, c in rows))
    cmd = [args.sluice, "pack", src, out, "--shard-size", "64M"]
    if args.max_side:
        cmd += ["--max-side", str(args.max_side)]
    subprocess.run(cmd, check=True)
    with open(mark, "w") as f:
        f.write(made_from)


def bench(args, source, extra):
    cmd = [args.sluice, "bench", source, "--batch", str(args.batch), "--budget", args.budget, "--workers",
           str(args.workers), "--epochs", str(args.epochs), "--json"] + extra
    t0 = time.time()
    # every run scans its shards (no node records from the run before: each row pays the same)
    env = dict(os.environ, SLUICE_INDEX_CACHE="off")
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed: {out.stderr[-2000:]}")
    r = json.loads(out.stdout)
    r["wall_s"] = time.time() - t0
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data")
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--requests", default="1,4,16,64")
    ap.add_argument("--latency", default="0.02,0.05", help="seconds added to each request: LO,HI")
    ap.add_argument("--images", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--budget", default="512M")
    ap.add_argument("--max-side", type=int, default=0)
    ap.add_argument("--work", default="/tmp/sluice-remote-bench")
    ap.add_argument("--sluice", default=os.path.join(ROOT, "build", "sluice"))
    ap.add_argument("--keep", action="store_true", help="keep the shards in WORK for the next run")
    ap.add_argument("--server", choices=("c", "python"), default="c")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    shards = os.path.join(args.work, "shards")
    pack(args, shards)
    names = sorted(f for f in os.listdir(shards) if f.endswith(".tar"))
    pattern = "shard-{%06d..%06d}.tar" % (0, len(names) - 1)
    lo, hi = (float(x) for x in args.latency.split(","))
    srv = proxy = cserver = None
    if args.server == "c":
        exe = os.path.join(args.work, "remote_serve")
        subprocess.run(["cc", "-O2", "-pthread", "-I" + os.path.join(ROOT, "tests", "c"),
                        os.path.join(HERE, "remote_serve.c"), "-o", exe], check=True)
        cserver = subprocess.Popen([exe, shards, str(lo * 1e3), str(hi * 1e3), "1"], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, text=True)
        port = int(cserver.stdout.readline())
        url = lambda rel: "http://127.0.0.1:%d/%s" % (port, rel)  # noqa: E731
    else:
        srv = RangeServer(shards)
        proxy = FaultProxy(srv.port, latency=(lo, hi), seed=1)
        url = proxy.url
    rows = []
    try:
        local = bench(args, os.path.join(shards, pattern), [])
        local["loader"] = "local shards"
        rows.append(local)
        print(json.dumps({k: local[k] for k in ("loader", "samples", "samples_per_s", "rss_growth_bytes",
                                                 "peak_accounted_bytes", "budget_bytes", "checksum")}), flush=True)
        for n in (int(x) for x in args.requests.split(",")):
            r = bench(args, url(pattern), ["--io-requests", str(n)])
            r["loader"] = f"http, {n} in flight"
            r["io_requests"] = n
            rows.append(r)
            print(json.dumps({k: r.get(k) for k in ("loader", "samples", "samples_per_s", "net_bytes", "net_requests",
                                                     "net_inflight_peak", "net_hedges", "net_retries",
                                                     "readahead_hits", "rss_growth_bytes", "peak_accounted_bytes",
                                                     "budget_bytes", "checksum")}), flush=True)
    finally:
        if cserver:
            cserver.stdin.close()
            cserver.wait()
        if proxy:
            proxy.stop()
            srv.stop()
        if not args.keep:
            shutil.rmtree(shards, ignore_errors=True)
    same = all(r["checksum"] == rows[0]["checksum"] for r in rows)
    print(f"\nremote shards over http ({args.server} server) with {lo * 1e3:.0f}-{hi * 1e3:.0f} ms added per request, "
          f"{args.workers} workers, "
          f"batch {args.batch}, budget {args.budget}; {rows[0]['samples']} samples; checksums "
          f"{'equal' if same else 'DIFFER'}")
    print(f"{'case':24} {'samples/s':>10} {'vs local':>9} {'MB fetched':>11} {'bytes/sample':>13} "
          f"{'req/sample':>11} {'in flight':>10} {'RSS +MB':>8}")
    for r in rows:
        n = max(r["samples"], 1)
        fetched = r.get("net_bytes", 0)
        print(f"{r['loader']:24} {r['samples_per_s']:10.0f} {r['samples_per_s'] / rows[0]['samples_per_s']:9.2f} "
              f"{fetched / 1e6:11.1f} {fetched / n:13.0f} {r.get('net_requests', 0) / n:11.2f} "
              f"{r.get('net_inflight_peak', 0):10d} {r['rss_growth_bytes'] / 1e6:8.1f}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

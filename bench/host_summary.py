#!/usr/bin/env python3
"""The summary of a gpu_host.sh run: one table of every result line in
results.jsonl (rate, memory), the ratios each issue asks for, and the
time of each step.

    bench/host_summary.py OUT/results.jsonl
"""
import json
import sys

RATES = ("clips_per_s", "samples_per_s", "images_per_s", "file_mb_per_s", "libjpeg_full_decode_per_s",
         "pil_decode_per_s")
MB = 1e6


def rate_of(r):
    for k in RATES:
        if isinstance(r.get(k), (int, float)):
            return r[k], k.replace("_per_s", "/s")
    return None, ""


def memory_of(r):
    """The memory figure a result carries, as text (tree PSS for peers, RSS for sluice bench)."""
    if "peak_pss_mb_by_epoch" in r:
        dev = " device +%.0f MiB" % r["device_peak_mb"] if isinstance(r.get("device_peak_mb"), (int, float)) else ""
        cpu = " cpu %.0f ms/clip util %.2f" % (r["cpu_ms_per_clip"], r.get("cpu_util") or 0) \
            if isinstance(r.get("cpu_ms_per_clip"), (int, float)) else ""
        return "PSS " + " > ".join("%.0f" % x for x in r["peak_pss_mb_by_epoch"]) + " MiB" + dev + cpu
    if isinstance(r.get("peak_tree_pss_mb"), (int, float)):
        return "PSS %.0f MiB" % r["peak_tree_pss_mb"]
    if "soft_resets" in r:  # bench/video_engine.py: the GPU video engine alone
        ms = r.get("ms_per_clip", {})
        return "decoders %s reused %s soft %s flushes %s; ms/clip wait %s decode %s sink %s; syncs/clip %s" % (
            r["decoders"], r["reused"], r["soft_resets"], r["flushes"], ms.get("wait"), ms.get("decode"),
            ms.get("sink"), r.get("syncs_per_clip"))
    if "set" in r:  # a dataset made by the step
        return "%s clips, %s MiB, made in %s s" % (r.get("clips"), r.get("mib"), r.get("seconds"))
    if isinstance(r.get("rss_growth_bytes"), int):
        return "RSS +%.0f MB (accounted %.0f of %.0f)" % (r["rss_growth_bytes"] / MB, r.get("peak_accounted_bytes", 0) / MB,
                                                        r.get("budget_bytes", 0) / MB)
    return ""


def label_of(r):
    for k in ("loader", "pipeline", "set", "step"):
        if k in r:
            return str(r[k])
    return ""


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                d = json.loads(line)
            except ValueError:
                continue
            run, res = d.get("run", "?"), d.get("result", d)
            rows.append((run, res if isinstance(res, dict) else {"value": res}))
    return rows


def ratios(rows):
    """sluice against the best peer of the same case, as the issues state their targets."""
    out, groups = [], {}
    for run, r in rows:
        if run.startswith("video_"):
            groups.setdefault(run, []).append(r)
        elif run.startswith("fields_") and run.count("_") >= 2:
            groups.setdefault(run.rsplit("_", 1)[0], []).append(r)
    for case, rs in sorted(groups.items()):
        mine = [r for r in rs if str(r.get("loader", "")).startswith("sluice") and rate_of(r)[0]]
        peers = [r for r in rs if not str(r.get("loader", "")).startswith(("sluice", "cat")) and rate_of(r)[0]]
        cat = [r for r in rs if str(r.get("loader", "")).startswith("cat")]
        if mine and peers:
            s, best = mine[0], max(peers, key=lambda r: rate_of(r)[0])
            sp, bp = s.get("peak_tree_pss_mb"), best.get("peak_tree_pss_mb")
            out.append("%-24s sluice %.1f vs %s %.1f %s: %.2fx, peak PSS %s" % (
                case, rate_of(s)[0], best["loader"], rate_of(best)[0], rate_of(s)[1], rate_of(s)[0] / rate_of(best)[0],
                "%.0f / %.0f MiB = %.2f" % (sp, bp, sp / bp) if sp and bp else "?"))
        if mine and cat and "file_mb_per_s" in mine[0] and cat[0].get("file_mb_per_s"):
            out.append("%-24s sluice file bytes %.0f MB/s = %.2f of cat's %.0f" % (
                case, mine[0]["file_mb_per_s"], mine[0]["file_mb_per_s"] / cat[0]["file_mb_per_s"], cat[0]["file_mb_per_s"]))
    out += videogpu_ratios(rows)
    tars = [r for run, r in rows if run.startswith("shards_tar") and "samples_per_s" in r]
    folders = [r for run, r in rows if run.startswith("shards_folder") and "samples_per_s" in r]
    if tars and folders:
        t, f = max(x["samples_per_s"] for x in tars), max(x["samples_per_s"] for x in folders)
        out.append("%-24s tar shards %.0f vs folder %.0f samples/s: %.2f" % ("shards", t, f, t / f))
    return out


def videogpu_ratios(rows):
    """Issue 23: at each size, the best of the repetitions of each pipeline; sluice GPU against
    sluice CPU (>= 3x at 1080p) and every peer; sluice CPU against the best CPU peer (>= 2x at 720p)."""
    best, out = {}, []
    for run, r in rows:
        if run.startswith("videogpu_") and "_r" in run and rate_of(r)[0]:
            size = run[len("videogpu_"):].rsplit("_r", 1)[0]
            key = (size, r.get("loader"))
            if key not in best or rate_of(r)[0] > rate_of(best[key])[0]:
                best[key] = r
    for size in sorted({k[0] for k in best}):
        at = {k[1]: v for k, v in best.items() if k[0] == size}
        gpu, cpu = at.get("sluice-gpu"), at.get("sluice")
        cpu_peers = {k: v for k, v in at.items() if not k.startswith("sluice") and "cuda" not in k}
        peers = {k: v for k, v in at.items() if not k.startswith("sluice")}
        if gpu and cpu:
            out.append("%-24s sluice GPU %.1f vs sluice CPU %.1f clips/s: %.2fx" % (
                "videogpu_" + size, gpu["clips_per_s"], cpu["clips_per_s"], gpu["clips_per_s"] / cpu["clips_per_s"]))
        if gpu and peers:
            name, b = max(peers.items(), key=lambda kv: kv[1]["clips_per_s"])
            out.append("%-24s sluice GPU %.1f vs the best peer %s %.1f: %.2fx" % (
                "videogpu_" + size, gpu["clips_per_s"], name, b["clips_per_s"], gpu["clips_per_s"] / b["clips_per_s"]))
        if cpu and cpu_peers:
            name, b = max(cpu_peers.items(), key=lambda kv: kv[1]["clips_per_s"])
            out.append("%-24s sluice CPU %.1f vs the best CPU peer %s %.1f: %.2fx" % (
                "videogpu_" + size, cpu["clips_per_s"], name, b["clips_per_s"], cpu["clips_per_s"] / b["clips_per_s"]))
    return out


def main():
    rows = load(sys.argv[1] if len(sys.argv) > 1 else "/tmp/sluice-bench/results.jsonl")
    steps = [(r.get("step"), r.get("seconds"), r.get("rc"), r.get("skipped")) for run, r in rows if run == "step"]
    print("\n## Results (%s)" % (sys.argv[1] if len(sys.argv) > 1 else ""))
    print("%-30s %-48s %12s %-9s %s" % ("run", "what", "rate", "unit", "memory / notes"))
    for run, r in rows:
        if run in ("step", "deps"):
            continue
        rate, unit = rate_of(r)
        note = memory_of(r) or (r.get("skipped") and "skipped: " + r["skipped"]) or ""
        if r == {"value": None}:
            note = "no result: the command failed (its error is in the log)"
        if "errors" in r and r["errors"]:
            note += " errors %s" % r["errors"]
        print("%-30s %-48s %12s %-9s %s" % (run[:30], label_of(r)[:48], "%.1f" % rate if rate is not None else "-",
                                           unit, note))
    lines = ratios(rows)
    if lines:
        print("\n## Ratios")
        print("\n".join(lines))
    for run, r in rows:
        if run == "deps":
            print("\n## Host: " + ", ".join("%s %s" % kv for kv in r.items()))
    if steps:
        print("\n## Steps")
        for name, secs, rc, skipped in steps:
            if skipped:
                print("%-10s skipped: %s" % (name, skipped))
            else:
                print("%-10s %7.1f s%s" % (name, secs, "" if rc == 0 else "  rc=%s" % rc))
        print("%-10s %7.1f s" % ("total", sum(s[1] or 0 for s in steps)))


if __name__ == "__main__":
    main()

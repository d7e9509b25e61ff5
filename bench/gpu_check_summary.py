#!/usr/bin/env python3
"""The summary of a bench/gpu_check.sh run: the default decode's determinism
(equal or not, per set), the RSS table (mode x budget x bench/Python against
budget + 48 MiB), what each step of the engine's create added, and the
suites' summary lines.

    bench/gpu_check_summary.py OUT
"""
import json
import os
import re
import sys

MIB = 1 << 20


def load(out):
    rows = {}
    try:
        with open(os.path.join(out, "results.jsonl")) as f:
            for line in f:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                if "run" in r and "result" in r:
                    rows.setdefault(r["run"], []).append(r["result"])
    except OSError:
        pass
    return rows


def last(rows, name):
    return rows.get(name, [None])[-1]


def determinism(rows):
    print("Determinism: the default decode (prefer-gpu), device bytes of the first batches")
    ok_all = True
    for tag in ("clean", "corrupt"):
        for kind, key in (("bench_prefer_gpu", "checksum"), ("torch_default", "device_hash")):
            first16 = rows.get(f"{kind}_{tag}_w16", [])  # the run at 16 workers, before and after the one at 4
            seq = [first16[0] if first16 else None, last(rows, f"{kind}_{tag}_w4"),
                   first16[1] if len(first16) > 1 else None]
            vals = [r.get(key) if isinstance(r, dict) else None for r in seq]
            equal = None not in vals and len(set(vals)) == 1
            ok_all &= equal
            r0 = next((r for r in seq if isinstance(r, dict) and key in r), {})
            share = r0.get("gpu_share", "")
            if kind == "bench_prefer_gpu" and r0:
                tot = r0.get("gpu_samples", 0) + r0.get("cpu_samples", 0)
                share = round(r0.get("gpu_samples", 0) / tot, 3) if tot else ""
            print(f"  {tag:8s} {kind:17s} workers 16, 4, 16: {'EQUAL' if equal else 'DIFFER'}  {vals}  "
                  f"decode {r0.get('decode', '?')}, GPU share {share}, errors {r0.get('errors', '?')}")
    print(f"  => {'PASS' if ok_all else 'FAIL'}\n")
    return ok_all


def minimum_named(text):
    """The minimum budget a refusal names ("... raise the budget to at least 313.9 MiB ..."), or ""."""
    m = re.findall(r"(?:at least|minimum working set of) ([0-9.]+ [KMGT]iB)", text or "")
    return m[-1] if m else ""


def rss_table(rows):
    """decode=gpu refusing a budget that cannot hold the GPU stage, naming the minimum, is the
    promised behaviour: such a row reads "refused (minimum X)", and the "min" row is the same run
    at that minimum (gpu_check.sh rss)."""
    print("RSS growth against the budget (limit: budget + 48 MiB)")
    print(f"  {'mode':5s} {'budget':>7s} {'how':7s} {'growth MiB':>10s} {'limit MiB':>9s} {'accounted MiB':>13s} "
          f"{'gpu_host MiB':>12s}  verdict")
    ok_all = True
    for mode in ("gpu", "auto"):
        for budget in ("256M", "min", "512M") if mode == "gpu" else ("256M", "512M"):
            for how, name in (("bench", f"bench_rss_{mode}_{budget}"), ("python", f"python_rss_{mode}_{budget}")):
                r = last(rows, name)
                if budget == "min" and r is None:
                    continue  # nothing was refused at 256M
                why = (r or {}).get("last_line", "")
                log = (r or {}).get("log", "")
                if "failed" in (r or {}) and os.path.isfile(log):  # the refusal is above sluice bench's hint line
                    with open(log, errors="replace") as f:
                        why = next((ln.strip() for ln in f if minimum_named(ln)), why)
                if isinstance(r, dict) and "failed" in r and minimum_named(why):
                    r = {"refused": why}  # sluice bench said why on stderr
                if not isinstance(r, dict) or "failed" in r:
                    print(f"  {mode:5s} {budget:>7s} {how:7s} {'-':>10s} {'-':>9s}  not run or failed "
                          f"({(r or {}).get('log', '')}: {why[:100]})")
                    ok_all = False
                    continue
                if "refused" in r or (how == "bench" and r.get("samples", 1) == 0):
                    again = budget == "min"  # refused at the minimum an earlier refusal named: wrong
                    ok_all &= not again
                    print(f"  {mode:5s} {budget:>7s} {how:7s} {'-':>10s} {'-':>9s}  refused (minimum "
                          f"{minimum_named(r.get('refused', '')) or '?'}){'  WRONG: at the minimum named' if again else ''}")
                    continue
                bud = r.get("budget_bytes") or (int(budget[:-1]) * MIB if budget != "min" else 0)
                lim = bud / MIB + 48
                g = r.get("rss_growth_bytes", 0) / MIB
                acc = r.get("peak_accounted_bytes", 0) / MIB
                gh = (r.get("mem_peak_bytes") or r.get("memory_peak") or r.get("memory") or {}).get("gpu_host", 0) / MIB
                ok = g <= lim
                ok_all &= ok
                label = f"{bud / MIB:.0f}M" if budget == "min" else budget
                print(f"  {mode:5s} {label:>7s} {how:7s} {g:10.1f} {lim:9.0f} {acc:13.1f} {gh:12.1f}  "
                      f"{'ok' if ok else 'OVER'}  ({r.get('decode_used', r.get('decode', '?'))})")
    print(f"  => {'PASS' if ok_all else 'FAIL'}\n")
    for name in ("engine_parts_cold_cache", "engine_parts_warm_cache"):
        r = last(rows, name)
        if isinstance(r, dict) and "host_rss_total" in r:
            parts = ", ".join(f"{k[9:]} {r[k] / MIB:.1f}" for k in ("host_rss_context", "host_rss_kernels",
                                                                     "host_rss_pinned", "host_rss_nvjpeg",
                                                                     "host_rss_first_decode"))
            print(f"  engine create, {name[14:]}: RSS +{r['host_rss_total'] / MIB:.1f} MiB ({parts} MiB; pinned pool "
                  f"{r['pinned_pool_bytes'] / MIB:.0f} MiB); kernels {r['kernels']}")
    print()
    return ok_all


def share(rows):
    """Issue 20 item 2: the model fed by the default decode, and where the GPU's time went."""
    syn = last(rows, "share_synthetic")
    names = sorted(k for k in rows if k.startswith("share_default_"))
    if not names:
        return
    ceiling = syn.get("images_per_s") if isinstance(syn, dict) else None
    print(f"ResNet-18 fed by the default decode (synthetic ceiling {ceiling} images/s)")
    for n in names:
        r = last(rows, n)
        if not isinstance(r, dict) or "images_per_s" not in r:
            print(f"  {n}: not run or failed")
            continue
        frac = f"{100 * r['images_per_s'] / ceiling:.0f} %" if ceiling else "?"
        print(f"  {n}: {r['images_per_s']} images/s ({frac}); GPU share {r.get('gpu_share')}; GPU time "
              f"hw {r.get('gpu_hw_s')} s, hybrid {r.get('gpu_hybrid_s')} s, resize {r.get('gpu_resize_s')} s, "
              f"copies {r.get('gpu_copy_s')} s; consumer waited {r.get('consumer_wait_fraction')}")
    print()


def suites(out):
    print("Suites")
    for name in ("failed", "suite_c", "suite_python"):
        try:
            with open(os.path.join(out, name + ".txt")) as f:
                text = f.read().strip()
        except OSError:
            if name == "failed":
                continue  # the step is not in CHECK_STEPS
            text = "not run"
        for line in text.splitlines()[-12:]:
            print(f"  {name}: {line}")
    print()


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/sluice-check"
    rows = load(out)
    det = determinism(rows)
    mem = rss_table(rows)
    share(rows)
    suites(out)
    print("Steps: " + ", ".join(f"{s.get('step')} skipped ({s['skipped']})" if "skipped" in s else
                                f"{s.get('step')} {s.get('seconds')} s rc {s.get('rc', '-')}"
                                for s in rows.get("step", [])))
    print(f"determinism {'PASS' if det else 'FAIL'}, memory {'PASS' if mem else 'FAIL'}")


if __name__ == "__main__":
    main()

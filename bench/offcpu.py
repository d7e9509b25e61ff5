#!/usr/bin/env python3
"""Where a process's threads wait: sample them from outside while a command runs.

    offcpu.py [--delay 20] [--seconds 6] [--every 0.002] [--threads main,pt_autograd]
              [--probe LIB [--probe-threads main] [--probe-when "S futex"]] -- CMD ...

Starts CMD, waits --delay seconds (its warm-up), then for --seconds samples every --every seconds,
for each thread whose name starts with one of --threads ("main": the process's first thread), its
state (/proc/PID/task/TID/stat), the system call it is in (/proc/.../syscall) and the kernel
function it sleeps in (/proc/.../wchan), and every 0.25 s sends SIGUSR1: a Python program that
registered faulthandler for it (bench/gpu_decode.py does) prints every thread's Python stack to its
stderr, which this script reads back. With --probe LIB (bench/stackprobe.c built as a shared
library), CMD runs with LIB preloaded, and each time a thread of the --probe-threads groups (the
main thread by default) is caught in the state --probe-when names (a prefix of "STATE SYSCALL":
"S futex" by default, whose lock it sleeps on; "any": every sample, a profile of where its wall
goes, e.g. the GPU engine's thread `sl-gpu` inside nvJPEG and the driver) it gets SIGUSR2 (tgkill)
and LIB records its native stack. Prints one JSON line: per thread group, the share of samples in
each (state, syscall, wchan), the most common innermost Python frames of the main thread and, with
--probe, per probed group ("native"; the main thread's also at the top level) the most common
native callers (the first frames outside libc and libpthread), libraries and stacks. Needs no
debugger (the GPU host has none); Linux only.
"""
import argparse
import collections
import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

SYSCALLS = {"0": "read", "1": "write", "7": "poll", "16": "ioctl", "23": "select", "24": "sched_yield",
            "35": "nanosleep", "202": "futex", "230": "clock_nanosleep", "232": "epoll_wait", "271": "ppoll",
            "281": "epoll_pwait", "17": "pread64", "3": "close", "9": "mmap", "11": "munmap"}


def read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def threads(pid, prefixes):
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        name = "main" if tid == str(pid) else read(f"/proc/{pid}/task/{tid}/comm")
        for p in prefixes:
            if name.startswith(p):
                out[tid] = p
    return out


def sample(pid, tid):
    base = f"/proc/{pid}/task/{tid}"
    st = read(base + "/stat")
    state = st[st.rindex(")") + 2] if ")" in st else "?"
    sc = read(base + "/syscall").split()
    call = "running" if not sc or sc[0] == "running" else SYSCALLS.get(sc[0], "sys" + sc[0])
    return f"{state} {call} {read(base + '/wchan') or '-'}"


def main_frames(text, pid):
    """The innermost frames of the main thread in each faulthandler dump."""
    frames = []
    for block in re.split(r"\n(?=(?:Current thread|Thread) 0x)", text):
        lines = block.strip().splitlines()
        if not lines or "most recent call first" not in lines[0]:
            continue
        # faulthandler names the thread that ran the handler (the main thread) "Current thread"
        if not lines[0].startswith("Current thread"):
            continue
        fr = [ln.strip() for ln in lines[1:4] if ln.strip().startswith("File")]
        if fr:
            frames.append(" <- ".join(re.sub(r'File "(?:.*/)?([^"]+)", line (\d+) in (\S+)', r"\1:\2 \3", f)
                                      for f in fr))
    return frames


NATIVE_SKIP = ("libc.so", "libpthread", "ld-linux", "libstackprobe", "stackprobe")
SYS_TGKILL = 234  # x86_64: a signal to one thread of another process


def native_summary(path, group_of):
    """The probe's samples by thread group (group_of: tid -> group): the first frames outside libc
    (whose lock, or whose code), the libraries of the stack in order (the owner even where symbols
    are missing), whole stacks."""
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return {}
    by = collections.defaultdict(lambda: (collections.Counter(), collections.Counter(), collections.Counter()))
    count = collections.Counter()
    for ln in lines:
        tid, _, frames = ln.partition("\t")
        if tid not in group_of:
            continue
        g = group_of[tid]
        callers, libs, stacks = by[g]
        count[g] += 1
        fr = frames.split(";")
        callers[" <- ".join([f for f in fr if not f.startswith(NATIVE_SKIP)][:3]) or "?"] += 1
        libs[" <- ".join(dict.fromkeys(f.split(":")[0].split("+")[0] for f in fr[:12]))] += 1
        stacks[" <- ".join(fr[:8])] += 1
    return {g: {"native_samples": count[g],
                "native_callers": [[k, v] for k, v in callers.most_common(12)],
                "native_libs": [[k, v] for k, v in libs.most_common(8)],
                "native_stacks": [[k, v] for k, v in stacks.most_common(6)]} for g, (callers, libs, stacks) in by.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--delay", type=float, default=20)
    p.add_argument("--seconds", type=float, default=6)
    p.add_argument("--every", type=float, default=0.002)
    p.add_argument("--threads", default="main,pt_autograd")
    p.add_argument("--probe", help="bench/stackprobe.c built as a shared library: native stacks in futex")
    p.add_argument("--probe-threads", default="main", help="the groups (of --threads) whose threads are probed")
    p.add_argument("--probe-when", default="S futex",
                   help='a prefix of "STATE SYSCALL" that probes a sample, or "any" (every sample)')
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    a = p.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    if not cmd:
        p.error("no command")
    err = tempfile.TemporaryFile(mode="w+")
    env, probe_out = dict(os.environ), None
    if a.probe:
        with tempfile.NamedTemporaryFile(prefix="stackprobe.", delete=False) as f:
            probe_out = f.name  # the probe writes it at the child's exit
        env["LD_PRELOAD"] = os.path.abspath(a.probe) + (" " + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
        env["STACKPROBE_OUT"] = probe_out
    libc = ctypes.CDLL(None, use_errno=True)
    child = subprocess.Popen(cmd, stderr=err, env=env)
    prefixes = a.threads.split(",")
    probed = set(a.probe_threads.split(","))
    if not probed <= set(prefixes):
        p.error("--probe-threads names a group --threads does not")
    when = "" if a.probe_when == "any" else a.probe_when
    group_of = {}  # every sampled tid -> its group, for the probe's table
    counts = collections.defaultdict(collections.Counter)
    time.sleep(a.delay)
    end, next_dump, n = time.monotonic() + a.seconds, 0.0, 0
    while time.monotonic() < end and child.poll() is None:
        for tid, grp in threads(child.pid, prefixes).items():
            what = sample(child.pid, tid)
            counts[grp][what] += 1
            group_of[tid] = grp
            if probe_out and grp in probed and what.startswith(when):
                libc.syscall(SYS_TGKILL, child.pid, int(tid), signal.SIGUSR2)
        n += 1
        if time.monotonic() >= next_dump:
            child.send_signal(signal.SIGUSR1)
            next_dump = time.monotonic() + 0.25
        time.sleep(a.every)
    child.wait()
    err.seek(0)
    text = err.read()
    frames = collections.Counter(main_frames(text, child.pid))
    r = {"cmd": " ".join(cmd)[-160:], "samples": n, "rc": child.returncode,
         "threads": {g: {k: round(v / max(sum(c.values()), 1), 3) for k, v in c.most_common(12)}
                     for g, c in counts.items()},
         "main_python": [[f, v] for f, v in frames.most_common(10)], "dumps": sum(frames.values())}
    if probe_out:
        native = native_summary(probe_out, group_of)
        r.update(native.get("main", {"native_samples": 0}))  # the main thread's, where they always were
        r["native"] = native
        os.unlink(probe_out)
    print(json.dumps(r), flush=True)
    tail = [ln for ln in text.splitlines() if not ln.startswith(("Thread 0x", "Current thread", "  File"))]
    sys.stdout.write("".join(ln + "\n" for ln in tail[-5:] if ln.strip()))


if __name__ == "__main__":
    main()

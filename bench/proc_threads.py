"""What a process's threads and CPUs did over a stretch of a bench: CPU seconds and run-queue
waits by thread name (/proc/self/task), and the clock of the CPUs it may run on (cpufreq, else
/proc/cpuinfo). Shared by gpu_decode.py and gpu_peers.py; Linux only, nothing to install."""
import os
import threading


def thread_cpu():
    """CPU seconds of this process's threads, summed by name (the loader's are sl-worker-N, sl-gpu-N)."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                st = f.read()
        except OSError:
            continue
        name = st[st.index("(") + 1:st.rindex(")")]
        rest = st[st.rindex(")") + 2:].split()
        cpu = (int(rest[11]) + int(rest[12])) / tick
        grp = "main" if int(tid) == os.getpid() else name.rstrip("0123456789").rstrip("-") or name
        out[grp] = out.get(grp, 0.0) + cpu
        try:  # run-queue wait: runnable, not running (ns)
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                out["runq:" + grp] = out.get("runq:" + grp, 0.0) + int(f.read().split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            pass
    return out


def cores_used(before, after, dt):
    """Cores each thread group kept busy between two thread_cpu() readings, over dt seconds."""
    return {k: round((v - before.get(k, 0.0)) / dt, 2) for k, v in sorted(after.items())
            if (v - before.get(k, 0.0)) / dt >= 0.01}


def _cpu_mhz(cpus):
    """Mean current clock of cpus, MHz: cpufreq's scaling_cur_freq, else /proc/cpuinfo's "cpu MHz"
    (which some VMs report fixed); None where neither is readable."""
    vals = []
    for c in cpus:
        try:
            with open(f"/sys/devices/system/cpu/cpu{c}/cpufreq/scaling_cur_freq") as f:
                vals.append(int(f.read()) / 1000.0)
        except (OSError, ValueError):
            pass
    if not vals:
        want, cur = set(cpus), None
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    if line.startswith("processor"):
                        cur = int(line.split(":")[1])
                    elif line.startswith("cpu MHz") and cur in want:
                        vals.append(float(line.split(":")[1]))
        except (OSError, ValueError):
            pass
    return sum(vals) / len(vals) if vals else None


class ClockSampler:
    """Samples the mean clock of this process's CPUs every period seconds from start() to stop(),
    on a daemon thread (a few file reads a sample); stop() returns the mean MHz, or None."""

    def __init__(self, period=0.5):
        self.period, self.vals, self._stop = period, [], threading.Event()
        self.cpus = sorted(os.sched_getaffinity(0))
        self._t = threading.Thread(target=self._run, name="clock-sampler", daemon=True)

    def _run(self):
        while not self._stop.wait(self.period):
            v = _cpu_mhz(self.cpus)
            if v is not None:
                self.vals.append(v)

    def start(self):
        self._t.start()
        return self

    def stop(self):
        self._stop.set()
        self._t.join()
        return round(sum(self.vals) / len(self.vals), 0) if self.vals else None

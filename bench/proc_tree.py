"""A process tree as the bench scripts measure it: a root's pids and their summed PSS, from /proc."""
import os


def pids(root):
    """root and its descendants' pids (a process that exits while read is left out)."""
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                kids.setdefault(ppid, []).append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += kids.get(pid, [])
    return out


def pss_kb(pid_list):
    """PSS of the processes, kB (smaps_rollup's Pss line; a process gone meanwhile counts 0)."""
    total = 0
    for pid in pid_list:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                total += sum(int(line.split()[1]) for line in f if line.startswith("Pss:"))
        except OSError:
            pass
    return total


def pss_mb(pid_list):
    """PSS of the processes, MiB."""
    return pss_kb(pid_list) / 1024

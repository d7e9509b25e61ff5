"""bench/offcpu.py with bench/stackprobe.c, where they can run without a GPU: sluice's own threads
(which block asynchronous signals) are probed too, so a GPU host's trace of the engine's thread
(`--probe-threads sl-gpu`) gets its native stacks, not an empty table."""
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc, tgkill")
def test_probe_reaches_the_loaders_threads(dataset, tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    probe = str(tmp_path / "stackprobe.so")
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", probe, os.path.join(ROOT, "bench", "stackprobe.c"), "-ldl"],
                   check=True)
    script = tmp_path / "load.py"
    script.write_text(textwrap.dedent(f"""
        import faulthandler, signal, sys, time
        faulthandler.register(signal.SIGUSR1, all_threads=True)  # offcpu.py asks for Python stacks with it
        sys.path.insert(0, {os.path.join(ROOT, "python")!r})
        import sluice
        t0, seed = time.time(), 0
        while time.time() - t0 < 4:
            with sluice.Loader({dataset!r}, batch_size=16, preset="train", workers=2, budget="128M",
                               seed=seed) as ld:
                for _ in ld:
                    pass
            seed += 1
    """))
    out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "offcpu.py"), "--delay", "1", "--seconds", "2",
                          "--threads", "main,sl-worker", "--probe", probe, "--probe-threads", "main,sl-worker",
                          "--probe-when", "any", "--", sys.executable, str(script)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout.splitlines()[0])
    assert r["rc"] == 0 and r["samples"] > 100
    assert set(r["threads"]) == {"main", "sl-worker"}
    # every sample probed: the workers' stacks are there although sluice's threads block asynchronous signals
    assert r["native"]["sl-worker"]["native_samples"] > 50
    assert r["native"]["main"]["native_samples"] == r["native_samples"] > 50
    libs = " ".join(k for k, _ in r["native"]["sl-worker"]["native_libs"])
    assert "_sluice" in libs or "libsluice" in libs

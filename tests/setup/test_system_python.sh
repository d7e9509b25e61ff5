#!/usr/bin/env bash
# The README's first command with the stock system Python: in a clean copy of
# HEAD, `make demo PYTHON=/usr/bin/python3` must set up (Debian 12's
# interpreter is externally managed, PEP 668: a project venv .venv/), build,
# make the demo data and run the bench; sluice then imports in that venv and
# `python -m sluice` runs; a second `make demo` installs nothing.
# SYSTEM_PYTHON overrides the interpreter. A few minutes on 2 cores.
set -uo pipefail  # so a pipe into grep reads the output whole (no -q): see test_pip_install.sh
. "$(dirname "$0")/common.sh"
SYS_PY=${SYSTEM_PYTHON:-/usr/bin/python3}
[ -x "$SYS_PY" ] || skip "no system Python at $SYS_PY"

work=$(clean_copy)
trap 'rm -rf "$work"' EXIT
cd "$work" || fail "cd $work"
log=$work/make-demo.log
nice make demo PYTHON="$SYS_PY" DEMO_IMAGES=48 JOBS=2 >"$log" 2>&1 || fail "make demo PYTHON=$SYS_PY" "$log"

# a venv exactly when the interpreter is externally managed and lacks the demo's packages
needs_venv=$("$SYS_PY" - <<'PY'
import importlib.util, os, sysconfig
managed = os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED"))
lacks = any(importlib.util.find_spec(m) is None for m in ("numpy", "PIL"))
print(int(managed and lacks))
PY
)
if [ "$needs_venv" = 1 ]; then
  [ -x .venv/bin/python ] || fail "$SYS_PY is externally managed and lacks numpy/Pillow, yet no .venv was made" "$log"
  grep -q "making a project virtual environment" "$log" || fail "setup did not say it made the venv" "$log"
  PY=$work/.venv/bin/python
else
  [ ! -e .venv ] || fail "a .venv was made though $SYS_PY could take the packages" "$log"
  PY=$SYS_PY
fi
# four benches: the images train and val, the fields demo's pairs and its tar shards
[ "$(grep -c 'samples/s' "$log")" = 4 ] || fail "the demo did not run its four benches" "$log"

out=$(PYTHONPATH=python "$PY" -c 'import sluice; print(sluice.__version__, sluice.build_info()["jpeg"])' 2>&1) ||
  fail "import sluice with $PY: $out"
grep -q "libjpeg" <<<"$out" || fail "sluice.build_info() names no JPEG library: $out"
PYTHONPATH=python "$PY" -m sluice --version | grep "^sluice " >/dev/null || fail "python -m sluice --version"

log2=$work/make-demo-again.log
nice make demo PYTHON="$SYS_PY" DEMO_IMAGES=48 JOBS=2 >"$log2" 2>&1 || fail "second make demo" "$log2"
if grep -q "setup: installing" "$log2"; then fail "the second make demo installed something" "$log2"; fi
echo "$TEST_NAME: passed ($SYS_PY, interpreter used: $PY)"

#!/usr/bin/env bash
# The package as pip installs it: in a clean copy of HEAD, `pip install .`
# into a fresh venv (of the stock system Python where there is one) gives
# `import sluice` outside the source tree, the `sluice` console script and
# `python -m sluice` (--version, bench on a few images); `pip wheel .` holds
# the extension and the executable sluice/bin/sluice. Needs the package
# index (numpy, and setuptools for the isolated build).
# PY: an interpreter with numpy and Pillow (make passes its own) to make the
# images; BASE_PYTHON overrides the venv's interpreter.
set -uo pipefail
# Under pipefail a pipe into grep -q fails when grep exits at its first match
# before the writer is done (it dies of SIGPIPE): a variable is matched from
# a here-string, a command's output is read whole (grep >/dev/null).
. "$(dirname "$0")/common.sh"
BASE=${BASE_PYTHON:-/usr/bin/python3}
[ -x "$BASE" ] || BASE=$(command -v python3)
MAKE_PY=${PY:-python3}

work=$(clean_copy)
trap 'rm -rf "$work"' EXIT
log=$work/pip.log
"$BASE" -m venv "$work/venv" >"$log" 2>&1 || fail "$BASE -m venv" "$log"
nice "$work/venv/bin/pip" install "$work" >>"$log" 2>&1 || fail "pip install . into a fresh venv ($BASE)" "$log"

cd "$work/venv" || fail "cd"  # away from the source tree: the installed package must be used
where=$("$work/venv/bin/python" -c 'import sluice; print(sluice.__file__)') || fail "import sluice"
case "$where" in "$work/venv/"*) ;; *) fail "import sluice took $where, not the venv's" ;; esac
version=$("$work/venv/bin/python" -c 'import sluice; print(sluice.__version__)')
"$work/venv/bin/sluice" --version | grep "^sluice $version" >/dev/null || fail "the sluice command's --version"
"$work/venv/bin/python" -m sluice help | grep "^usage: sluice COMMAND" >/dev/null || fail "python -m sluice help"

"$MAKE_PY" "$work/tools/make_demo_data.py" "$work/data" --images 24 --classes 3 >>"$log" 2>&1 ||
  fail "making 24 demo images with $MAKE_PY" "$log"
json=$("$work/venv/bin/sluice" bench "$work/data" --batch 8 --size 64 --batches 3 --json 2>>"$log") ||
  fail "sluice bench with the installed command" "$log"
grep -q '"samples": 24,' <<<"$json" || fail "sluice bench delivered other than 24 samples: $json"

nice "$work/venv/bin/pip" wheel --no-deps -w "$work/dist" "$work" >>"$log" 2>&1 || fail "pip wheel ." "$log"
listing=$("$work/venv/bin/python" - "$work"/dist/sluice-*.whl <<'PY'
import sys, zipfile
for info in zipfile.ZipFile(sys.argv[1]).infolist():
    print(oct(info.external_attr >> 16), info.filename)
PY
)
grep -q "0o1007[0-7][0-7] sluice/bin/sluice$" <<<"$listing" || fail "the wheel holds no executable sluice/bin/sluice: $listing"
grep -q " sluice/_sluice\..*\.so$" <<<"$listing" || fail "the wheel holds no extension: $listing"
echo "$TEST_NAME: passed ($BASE, sluice $version)"

# Helpers of the set-up tests (sourced). Each test works in a clean copy of
# the repository in a temporary folder, removed at exit.

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TEST_NAME=$(basename "$0" .sh)
# run by `make test`: the make inside the copy must not inherit the outer
# make's command-line variables or jobserver
unset MAKEFLAGS MFLAGS MAKELEVEL

skip() { echo "$TEST_NAME: SKIPPED: $*"; exit 0; }

# fail MESSAGE [LOG]: say what failed, show the end of the log, exit 1
fail() {
  echo "$TEST_NAME: FAILED: $1" >&2
  if [ -n "${2:-}" ] && [ -f "$2" ]; then echo "--- last lines of $2:" >&2; tail -n 40 "$2" >&2; fi
  exit 1
}

# A temporary folder holding HEAD's tree (git archive): what a fresh clone
# holds, nothing built, no venv. Outside git, the working tree without its
# build outputs. Prints the folder; the caller removes it (trap ... EXIT).
clean_copy() {
  local dir
  dir=$(mktemp -d "${TMPDIR:-/tmp}/sluice-$TEST_NAME-XXXXXX") || fail "mktemp"
  if git -C "$ROOT" rev-parse --verify -q HEAD >/dev/null 2>&1; then
    git -C "$ROOT" archive HEAD | tar -x -C "$dir" || fail "git archive HEAD of $ROOT"
  else
    tar -C "$ROOT" -c --exclude='./build*' --exclude=./.venv --exclude='./python/sluice/*.so' \
        --exclude=./python/sluice/bin . | tar -x -C "$dir" || fail "copying $ROOT"
  fi
  echo "$dir"
}

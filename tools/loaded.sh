#!/bin/sh
# Run a command with CPU hogs beside it: tools/loaded.sh HOGS COMMAND...
#
# Tests check behaviour, never timings. A test whose premise leans on
# timing (a consumer "slower than the workers", a pipeline that "fills in
# time") holds on an idle machine and fails on a loaded one, such as CI
# running the sanitizer builds two at a time. Running a suite beside HOGS
# busy loops (`yes`) finds such a test before CI does:
#     make test-loaded            # the TSan suite beside two hogs
#     tools/loaded.sh 2 build-tsan/test_tuner node_share_follows_demand
# Exits with the command's status; the hogs end with it.
set -u
hogs=${1:?usage: tools/loaded.sh HOGS COMMAND...}
shift
pids=
trap 'kill $pids 2>/dev/null' EXIT INT TERM
i=0
while [ "$i" -lt "$hogs" ]; do
    yes >/dev/null &
    pids="$pids $!"
    i=$((i + 1))
done
"$@"

# Sourced by the GPU-host scripts (gpu_host.sh, gpu_check.sh): a step's log
# line, and its JSON results gathered into $OUT/results.jsonl.
log() { echo "== $*" >&2; }
keep() { # name: wrap each JSON line of stdin as a result, append it; other lines go to stderr
  local line
  while IFS= read -r line; do
    case $line in
      "{"*) echo "{\"run\": \"$1\", \"result\": $line}" | tee -a "$OUT/results.jsonl";;
      *) echo "$line" >&2;;
    esac
  done
}

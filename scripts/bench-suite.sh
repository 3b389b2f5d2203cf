#!/usr/bin/env bash
# The single-node figures of BENCHMARKS.md: each run starts a fresh
# embedded server (this binary, temp dir, default flags) and loads it over
# HTTP from the same machine.
set -euo pipefail
. "$(dirname "$0")/bench-lock.sh" # one measurement at a time
BIN=${BIN:-bin/corvo}
# EXTRA=--server-arg=--no-mirror measures the engine without the SQLite mirror.
EXTRA=${EXTRA:-}
run() {
  echo "### corvo bench $* $EXTRA"
  "$BIN" bench "$@" $EXTRA 2>/dev/null
  echo
}
run --mode enqueue --jobs 200000 --producers 32
run --mode enqueue --jobs 2000000 --producers 8 --enqueue-batch 100
run --mode lifecycle --jobs 100000 --producers 32 --workers 32
run --mode e2e --duration 20s --producers 16 --workers 48 --queues 4
run --mode lifecycle --jobs 1000000 --producers 8 --workers 8 --enqueue-batch 100 --fetch-batch 100 --ack-batch 100 --queues 4
run --mode e2e --duration 20s --producers 8 --workers 8 --enqueue-batch 100 --fetch-batch 100 --ack-batch 100 --queues 4
run --mode e2e --duration 30s --rate 1000 --producers 4 --workers 8

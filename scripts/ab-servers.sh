#!/usr/bin/env bash
# Two corvo servers compared as separate processes, alternated, each on a
# fresh data dir; NEW's load generator drives both. Prints jobs/s per
# workload and round (compare within one run: this VM drifts ±15 %).
#
#   OLD=/tmp/corvo-old NEW=bin/corvo ROUNDS=3 scripts/ab-servers.sh
set -euo pipefail
. "$(dirname "$0")/bench-lock.sh" # one measurement at a time
ROUNDS=${ROUNDS:-2}
OLD=${OLD:?the old binary}
NEW=${NEW:-bin/corvo}
run() { # binary label workload args...
  local bin=$1 label=$2 workload=$3 dir pid out
  shift 3
  dir=$(mktemp -d)
  "$bin" server --data-dir "$dir" --bind 127.0.0.1:18095 --raft-bind 127.0.0.1:19495 --log-level warn 2>/dev/null &
  pid=$!
  for _ in $(seq 100); do curl -sf http://127.0.0.1:18095/healthz >/dev/null && break; sleep 0.1; done
  out=$("$NEW" bench --url http://127.0.0.1:18095 -o json "$@" 2>/dev/null)
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  rm -rf "$dir"
  python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print("%-4s %-20s enqueued %9.0f/s  completed %9.0f/s  errors %d" % (sys.argv[2], sys.argv[3], d["enqueue_rate"], d["complete_rate"], d["errors"]))' "$out" "$label" "$workload"
}
for _ in $(seq "$ROUNDS"); do
  for label in old new; do
    bin=$OLD
    if [ "$label" = new ]; then bin=$NEW; fi
    run "$bin" "$label" "enqueue 1/req" --mode enqueue --jobs 100000 --producers 32
    run "$bin" "$label" "lifecycle 1/req" --mode lifecycle --jobs 50000 --producers 32 --workers 32
    run "$bin" "$label" "lifecycle batched" --mode lifecycle --jobs 500000 --producers 8 --workers 8 \
      --enqueue-batch 100 --fetch-batch 100 --ack-batch 100 --queues 4
  done
done

#!/usr/bin/env bash
# Issue 16's fixed-rate phase (32 open-loop senders at RATE jobs/s, 8
# workers each long-polling all 8 queues in rotating order) against one or
# more corvo binaries, alternated, each a separate server on a fresh data
# dir; the last binary's load generator drives every run. Prints
# enqueue→start p50/p90/p99/max and the server's CPU s per 1,000 jobs per
# run. Extra bench flags (e.g. --ack-fetch) go in BENCH_FLAGS.
#
#   ROUNDS=3 scripts/ab-fixed-rate.sh /tmp/corvo-old bin/corvo
set -euo pipefail
. "$(dirname "$0")/bench-lock.sh" # one measurement at a time
ROUNDS=${ROUNDS:-3}
RATE=${RATE:-1000}
JOBS=${JOBS:-10000}
[ $# -ge 1 ] || { echo "usage: $0 corvo-binary..." >&2; exit 2; }
for b in "$@"; do [ -x "$b" ] || { echo "$b: not an executable" >&2; exit 2; }; done
GEN=${!#}
for r in $(seq "$ROUNDS"); do
  for bin in "$@"; do
    dir=$(mktemp -d)
    # Written-back data first: on ext4 (data=ordered) the server's fsyncs
    # otherwise wait for other files' dirty pages (a build or copy just
    # before; BENCHMARKS.md, session 19: p99 2.1-3.5 ms against 1.3-1.9).
    sync
    "$bin" server --data-dir "$dir" --bind 127.0.0.1:18097 --raft-bind 127.0.0.1:19497 --log-level warn 2>/dev/null &
    pid=$!
    for _ in $(seq 100); do curl -sf http://127.0.0.1:18097/healthz >/dev/null && break; sleep 0.1; done
    # shellcheck disable=SC2086
    out=$("$GEN" bench --url http://127.0.0.1:18097 --mode fixed-rate --rate "$RATE" --senders 32 \
      --workers 8 --queues 8 --jobs "$JOBS" ${BENCH_FLAGS:-} -o json 2>/dev/null)
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    rm -rf "$dir"
    python3 -c 'import json,sys
d=json.loads(sys.argv[1]); s=d["latency_ms"]["enqueue_to_start"]
print("round %s %-24s p50 %6.2f  p90 %6.2f  p99 %6.2f  max %6.1f ms  server CPU %.3f s/1k jobs  %.0f jobs/s" % (sys.argv[3], sys.argv[2], s["p50"], s["p90"], s["p99"], s["max"], d["server_cpu_s_per_1k_jobs"], d["complete_rate"]))' "$out" "$bin" "$r"
  done
done

#!/usr/bin/env bash
# BENCHMARKS.md's "reads under a sustained write load": a fresh server
# (mirror on) is loaded for 62 s by `corvo bench` (its flags: "$@") while
# scripts/readprobe GETs a job every 5 ms and searches every 50 ms; then
# the server gets SIGTERM and the time until it exits is printed.
#   scripts/reads-under-load.sh --rate 10000 --producers 8 --workers 8 --enqueue-batch 10 --fetch-batch 10 --ack-batch 10 --queues 4
set -euo pipefail
. "$(dirname "$0")/bench-lock.sh" # one measurement at a time
. "$(dirname "$0")/server-lib.sh"
start_server 18480
go build -o "$DIR/readprobe" ./scripts/readprobe
"$BIN" bench --url "$URL" --mode e2e --duration 62s "$@" 2>/dev/null | grep -E "completed|jobs/s|errors" &
LOAD=$!
sleep 1
"$DIR/readprobe" "$URL" 60s
wait $LOAD || true
start=$(date +%s.%N)
kill -TERM $SERVER
wait $SERVER || true
end=$(date +%s.%N)
echo "SIGTERM → exit: $(awk -v a="$start" -v b="$end" 'BEGIN{printf "%.2f", b-a}') s"

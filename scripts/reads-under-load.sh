#!/usr/bin/env bash
# BENCHMARKS.md's "reads under a sustained write load": a fresh server
# (mirror on) is loaded for 62 s by `corvo bench` (its flags: "$@") while
# scripts/readprobe GETs a job every 5 ms and searches every 50 ms; then
# the server gets SIGTERM and the time until it exits is printed.
#   scripts/reads-under-load.sh --rate 10000 --producers 8 --workers 8 --enqueue-batch 10 --fetch-batch 10 --ack-batch 10 --queues 4
set -euo pipefail
BIN=${BIN:-bin/corvo}
DIR=$(mktemp -d)
URL=http://127.0.0.1:18480
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$DIR"' EXIT
"$BIN" server --data-dir "$DIR/data" --bind 127.0.0.1:18480 --raft-bind 127.0.0.1:19480 --log-level warn &
SERVER=$!
for _ in $(seq 1 300); do curl -fs "$URL/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
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

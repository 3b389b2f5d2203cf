#!/usr/bin/env bash
# BENCHMARKS.md's mirror lag at a fixed load: a fresh default server (mirror
# on) takes RATE enqueues/s (default 50,000, batches of 100) for DURATION
# (default 30s) while scripts/lagprobe measures enqueue-to-searchable lag.
#   scripts/lag-at-rate.sh            # 50,000/s for 30 s
#   RATE=40000 scripts/lag-at-rate.sh
set -euo pipefail
. "$(dirname "$0")/bench-lock.sh" # one measurement at a time
. "$(dirname "$0")/server-lib.sh"
start_server 18580
RATE=${RATE:-50000}
DURATION=${DURATION:-30s}
go build -o "$DIR/lagprobe" ./scripts/lagprobe
"$BIN" bench --url "$URL" --mode enqueue --rate "$RATE" --duration "$DURATION" --producers "${PRODUCERS:-16}" --enqueue-batch 100 --queues 4 2>/dev/null | grep -E "enqueued|errors" &
LOAD=$!
sleep 2
# Probe while the load runs (it stops 2 s before the load does).
"$DIR/lagprobe" "$URL" "$(( ${DURATION%s} - 4 ))s"
wait $LOAD

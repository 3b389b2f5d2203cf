#!/usr/bin/env bash
# BENCHMARKS.md's search figures: load 1,000,000 jobs into a fresh server
# (mirror on), let the mirror catch up, then time each search three times
# (duration_ms as the server reports it, including the total).
set -euo pipefail
. "$(dirname "$0")/bench-lock.sh" # one measurement at a time
. "$(dirname "$0")/server-lib.sh"
start_server 18380
JOBS=${JOBS:-1000000}
# While loading, scripts/lagprobe measures enqueue-to-searchable lag.
go build -o "$DIR/lagprobe" ./scripts/lagprobe
"$DIR/lagprobe" "$URL" "${PROBE:-20s}" > "$DIR/lag.txt" &
PROBE_PID=$!
"$BIN" bench --url "$URL" --mode enqueue --jobs "$JOBS" --producers 8 --enqueue-batch 100 --queues 4 2>/dev/null | grep -E "enqueued|duration"
wait $PROBE_PID || true
echo "mirror lag while loading (ms):"; cat "$DIR/lag.txt"
# Wait for the mirror to apply everything.
for _ in $(seq 1 600); do
  lag=$(curl -fs "$URL/api/v1/metrics" | awk '/^corvo_mirror_lag_entries/{s+=$2} END{print s+0}')
  [ "$lag" = 0 ] && break
  sleep 0.5
done
search() { # $1: label, $2: JSON filter
  printf '| %s |' "$1"
  for _ in 1 2 3; do
    printf ' %s' "$(curl -fs -XPOST -H 'Content-Type: application/json' "$URL/api/v1/jobs/search" -d "$2" | jq -r '"\(.duration_ms) ms (total \(.total))"')"
  done
  echo ' |'
}
search 'queue + state' '{"queue":"bench.q1","state":["pending"]}'
search 'queue + state, order asc' '{"queue":"bench.q1","state":["pending"],"order":"asc"}'
search 'state only' '{"state":["pending"]}'
search 'state: dead (none)' '{"state":["dead"]}'
search 'queue + payload_jq (json_extract over 250k rows)' '{"queue":"bench.q1","payload_jq":".i > 999000"}'
search 'payload_jq over 1M rows' '{"payload_jq":".i == 123456"}'
search 'payload_contains over 1M rows' '{"payload_contains":"\"i\":123456,"}'

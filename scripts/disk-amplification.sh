#!/usr/bin/env bash
# BENCHMARKS.md's disk amplification: a fresh single-node server (extra
# server flags: "$@") is loaded by scripts/diskprobe (CONNS connections
# enqueueing SIZE-byte random payloads for DURATION; env, defaults 16,
# 65536, 30s); then the data dir's size is printed, by part, against the
# accepted payload bytes: right after the load, after IDLE seconds idle
# (default 30), and after a restart (SIGTERM, start, IDLE seconds idle).
#   BIN=bin/corvo scripts/disk-amplification.sh
#   BIN=bin/corvo scripts/disk-amplification.sh --mirror-payload-max 1024
set -euo pipefail
. "$(dirname "$0")/bench-lock.sh" # one measurement at a time
BIN=${BIN:-bin/corvo}
CONNS=${CONNS:-16} SIZE=${SIZE:-65536} DURATION=${DURATION:-30s} IDLE=${IDLE:-30}
PORT=18490
URL=http://127.0.0.1:$PORT
DIR=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$DIR"' EXIT
start() {
  "$BIN" server --data-dir "$DIR/data" --bind "127.0.0.1:$PORT" --raft-bind "127.0.0.1:$((PORT + 1000))" --log-level warn "$@" &
  SERVER=$!
  for _ in $(seq 1 600); do curl -fs "$URL/healthz" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "the server on $URL did not start" >&2; exit 1
}
# report prints the data dir's size on disk (allocated blocks: what fills
# the volume, preallocated files included) against the accepted payload
# bytes, then each part's, and the apparent size (du -b) of the whole.
report() {
  local disk apparent
  disk=$(du -s -B1 "$DIR/data" | cut -f1)
  apparent=$(du -sb "$DIR/data" | cut -f1)
  printf '%-24s data dir %6d MiB on disk = %.2f x accepted (' "$1" $((disk >> 20)) "$(awk -v t="$disk" -v a="$accepted" 'BEGIN{print t/a}')"
  for part in raft shards mirror.db mirror.db-wal; do
    [ -e "$DIR/data/$part" ] && printf ' %s %d' "$part" $(($(du -s -B1 "$DIR/data/$part" | cut -f1) >> 20))
  done
  printf ' MiB; apparent %d MiB)\n' $((apparent >> 20))
}
go build -o "$DIR/diskprobe" ./scripts/diskprobe
start "$@"
"$DIR/diskprobe" "$URL" "$CONNS" "$SIZE" "$DURATION" | tee "$DIR/probe.txt"
accepted=$(awk '/^accepted_payload_bytes/ {print $2}' "$DIR/probe.txt")
echo "accepted payload: $((accepted >> 20)) MiB"
report "after the load"
sleep "$IDLE"
report "after ${IDLE}s idle"
kill -TERM "$SERVER"
wait "$SERVER" || true
report "stopped"
start "$@"
sleep "$IDLE"
report "restarted, ${IDLE}s idle"
kill -TERM "$SERVER"
wait "$SERVER" || true

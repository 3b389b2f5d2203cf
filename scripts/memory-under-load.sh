#!/usr/bin/env bash
# Peak and idle RSS of a fresh single node under an enqueue burst of large
# payloads (docs/operating-under-load-memory.md). Bounded: LOAD seconds of
# load, then IDLE seconds of rest; stops by itself.
#   scripts/memory-under-load.sh [server flags...]
#   e.g. scripts/memory-under-load.sh --max-memory 1GiB
# Env: PORT (default 18180), PRODUCERS (16), PAYLOAD (65536), BATCH (jobs
# per enqueue request, 1), LOAD (30s), IDLE (60).
set -euo pipefail
. "$(dirname "$0")/bench-lock.sh" # one measurement at a time
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/corvo}
PORT=${PORT:-18180}
PRODUCERS=${PRODUCERS:-16}
PAYLOAD=${PAYLOAD:-65536}
BATCH=${BATCH:-1}
LOAD=${LOAD:-30s}
IDLE=${IDLE:-60}
URL=http://127.0.0.1:$PORT
if curl -fs "$URL/healthz" >/dev/null 2>&1; then
  echo "another server answers on $URL: set PORT" >&2
  exit 1
fi
DIR=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$DIR"' EXIT
"$BIN" server --data-dir "$DIR/data" --bind "127.0.0.1:$PORT" --raft-bind "127.0.0.1:$((PORT + 1000))" --log-level warn "$@" &
SERVER=$!
up=
for _ in $(seq 1 300); do curl -fs "$URL/healthz" >/dev/null 2>&1 && up=1 && break; sleep 0.1; done
if [ -z "$up" ]; then
  echo "the server on $URL did not start" >&2
  exit 1
fi
rss() { awk -v k="$1:" '$1 == k { printf "%d", $2 / 1024 }' "/proc/$SERVER/status"; }
sleep 2
echo "flags: ${*:-(defaults)}"
echo "rss before load: $(rss VmRSS) MiB"
"$BIN" bench --url "$URL" --mode enqueue --producers "$PRODUCERS" --payload-size "$PAYLOAD" --enqueue-batch "$BATCH" --duration "$LOAD" 2>&1 | tail -n 12
echo "rss right after load: $(rss VmRSS) MiB, peak (VmHWM): $(rss VmHWM) MiB"
sleep "$IDLE"
echo "rss ${IDLE}s after load: $(rss VmRSS) MiB, peak (VmHWM): $(rss VmHWM) MiB"
curl -fs "$URL/api/v1/metrics" | grep -E '^corvo_memory' || true

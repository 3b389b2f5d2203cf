#!/usr/bin/env bash
# A/B of per-request auth cost: the same corvo binary as a separate server,
# open on loopback (no key) vs --auth on with a key (rate limits lifted),
# alternated ROUNDS times; one job per request, 100k jobs, 32 producers.
# Prints jobs/s and server CPU-seconds per 1,000 jobs.
set -euo pipefail
. "$(dirname "$0")/bench-lock.sh" # one measurement at a time
BIN=${BIN:-/tmp/corvo}
ROUNDS=${ROUNDS:-3}
JOBS=${JOBS:-100000}
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
run() { # mode
  local mode=$1 dir; dir=$(mktemp -d)
  local args=(server --data-dir "$dir" --bind 127.0.0.1:18090 --raft-bind 127.0.0.1:19490 --log-level warn)
  local key=""
  if [ "$mode" = keys ]; then
    key=$($BIN --help >/dev/null; python3 -c 'import secrets,base64;print("corvo_"+secrets.token_hex(8)+"_"+base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("="))')
    args+=(--auth on --rate-limit-read -1 --rate-limit-write -1)
  fi
  CORVO_ADMIN_KEY=$key $BIN "${args[@]}" 2>"$dir.log" & local pid=$!
  for _ in $(seq 100); do curl -sf http://127.0.0.1:18090/healthz >/dev/null && break; sleep 0.1; done
  local c0; c0=$(cpu $pid)
  local out; out=$(CORVO_API_KEY=$key $BIN bench --url http://127.0.0.1:18090 --mode enqueue --jobs "$JOBS" --producers 32 -o json)
  local c1; c1=$(cpu $pid)
  kill $pid; wait $pid 2>/dev/null || true
  rm -rf "$dir" "$dir.log"
  python3 - "$mode" "$out" "$c0" "$c1" "$JOBS" <<'PY'
import json,sys,os
mode,out,c0,c1,jobs=sys.argv[1],json.loads(sys.argv[2]),int(sys.argv[3]),int(sys.argv[4]),int(sys.argv[5])
hz=os.sysconf('SC_CLK_TCK')
print(f"{mode:5s} {out['enqueue_rate']:,.0f} jobs/s  p50 {out['latency_ms']['enqueue_req']['p50']} ms  errors {out['errors']}  server CPU {(c1-c0)/hz/jobs*1000:.3f} s/1k jobs")
PY
}
for r in $(seq "$ROUNDS"); do run open; run keys; done

#!/usr/bin/env bash
# Issue 18's throughput acceptance: the Go, TypeScript and Python SDKs end
# to end in one run, untuned — a producer of PRODUCERS concurrent enqueue
# calls (goroutines, async loops, threads) and one worker of CONCURRENCY
# slots with a no-op handler, JOBS jobs on one queue, 64-byte payloads.
# Each run gets a fresh single-node server; the SDKs alternate for ROUNDS
# rounds. Prints jobs/s, the client's and the server's CPU s per 1,000
# jobs, and each SDK's mean as a ratio of Go's (targets: TypeScript
# ≥ 0.8, Python ≥ 0.5). Stops by itself.
#
#   make build sdk-ts-deps && scripts/bench-sdks.sh
#   ROUNDS=3 JOBS=30000 scripts/bench-sdks.sh
set -euo pipefail
. "$(dirname "$0")/bench-lock.sh" # one measurement at a time
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3} JOBS=${JOBS:-20000} PRODUCERS=${PRODUCERS:-16} CONCURRENCY=${CONCURRENCY:-32}
PORT=${PORT:-18730}
BIN=${BIN:-bin/corvo}
[ -x "$BIN" ] || { echo "$BIN: build it first (make build)" >&2; exit 2; }
(cd sdk/typescript && npm run -s build >/dev/null)
. scripts/server-lib.sh

# cpu_s PID: user+system CPU seconds of a live process.
cpu_s() { awk -v t="$(getconf CLK_TCK)" '{print ($14 + $15) / t}' "/proc/$1/stat"; }
# child_cpu_s CMD...: runs CMD, prints its stdout, then "CPU <its CPU seconds>".
child_cpu_s() {
  local TIMEFORMAT='%U %S'
  { time "$@" >"$WORK/out" 2>/dev/null; } 2>"$WORK/time"
  cat "$WORK/out"
  awk '{print "CPU", $1 + $2}' "$WORK/time"
}
WORK=$(mktemp -d)

run() { # sdk → "jobs/s client-cpu server-cpu"
  sync # as scripts/ab-fixed-rate.sh: nothing else's writeback in the run
  start_server "$PORT"
  trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK" "$DIR"' EXIT
  local before out rate
  before=$(cpu_s "$SERVER")
  case $1 in
  go) out=$(child_cpu_s "$BIN" bench --url "$URL" --client sdk --mode e2e --jobs "$JOBS" --producers "$PRODUCERS" \
      --workers "$CONCURRENCY" --payload-size 64 -o json 2>/dev/null)
    rate=$(echo "$out" | grep '^{' | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["complete_rate"]))') ;;
  ts) out=$(child_cpu_s node sdk/typescript/bench/e2e.mjs --url "$URL" --jobs "$JOBS" --producers "$PRODUCERS" \
      --concurrency "$CONCURRENCY" --queue bench)
    rate=$(echo "$out" | grep '^{' | python3 -c 'import json,sys; print(json.load(sys.stdin)["e2e_jobs_s"])') ;;
  py) out=$(child_cpu_s python3 sdk/python/bench/bench.py --url "$URL" --jobs "$JOBS" --producers "$PRODUCERS" \
      --concurrency "$CONCURRENCY" --queue bench)
    rate=$(echo "$out" | grep '^{' | python3 -c 'import json,sys; print(json.load(sys.stdin)["e2e_jobs_s"])') ;;
  esac
  local client server
  client=$(echo "$out" | awk '/^CPU /{print $2}')
  server=$(awk -v a="$(cpu_s "$SERVER")" -v b="$before" 'BEGIN{print a - b}')
  kill "$SERVER"; wait "$SERVER" 2>/dev/null || true; rm -rf "$DIR"
  awk -v r="$rate" -v c="$client" -v s="$server" -v j="$JOBS" 'BEGIN{printf "%d %.3f %.3f\n", r, c * 1000 / j, s * 1000 / j}'
}

declare -A sum
for r in $(seq "$ROUNDS"); do
  for sdk in go ts py; do
    read -r rate ccpu scpu < <(run "$sdk")
    printf 'round %d %-2s %6d jobs/s  client %.3f  server %.3f CPU s / 1k jobs\n' "$r" "$sdk" "$rate" "$ccpu" "$scpu"
    sum[$sdk]=$(( ${sum[$sdk]:-0} + rate ))
  done
done
go_mean=$(( sum[go] / ROUNDS ))
for sdk in go ts py; do
  mean=$(( sum[$sdk] / ROUNDS ))
  awk -v s="$sdk" -v m="$mean" -v g="$go_mean" 'BEGIN{printf "%-2s mean %6d jobs/s  %.2f of Go\n", s, m, m / g}'
done

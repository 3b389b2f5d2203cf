#!/usr/bin/env bash
# Issue 20's provider acceptance: a fresh default server (4 shards), one
# provider with rpm_limit RPM (default 600) linked to two queues on
# different shards, WORKERS (default 8) workers fetching both flat out for
# DURATION (default 60s): scripts/providerprobe prints the jobs/min
# delivered and the most in any 60 s window, each against the limit.
# MODE=uneven fills only the first queue (the second stays linked and
# idle): with the shares rebalanced by demand it should still get nearly
# the whole limit, not half.
#   scripts/provider-rate.sh
#   RPM=1200 DURATION=150s scripts/provider-rate.sh
#   MODE=uneven scripts/provider-rate.sh
#   MODE=uneven SERVER_FLAGS=--provider-rebalance=-1s scripts/provider-rate.sh  (the equal split)
set -euo pipefail
. "$(dirname "$0")/bench-lock.sh" # one measurement at a time
. "$(dirname "$0")/server-lib.sh"
start_server 18680
go build -o "$DIR/providerprobe" ./scripts/providerprobe
"$DIR/providerprobe" "$URL" "${RPM:-600}" "${DURATION:-60s}" "${WORKERS:-8}" "${MODE:-even}"

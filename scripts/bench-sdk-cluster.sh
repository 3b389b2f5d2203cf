#!/usr/bin/env bash
# The Go SDK's worker on a cluster: NODES fresh nodes on 127.0.0.1..NODES
# (--replicas 1, SHARDS shards, so each shard lives on one node), then
# `corvo bench --client sdk` against the first (the SDK reads the placement
# there): Client.Enqueue from 16 goroutines, one Worker of 32 slots over 8
# queues. Prints the bench's JSON line, then the delivery latency and every
# node's CPU seconds per 1,000 jobs (the bench itself reads one node's).
# HTTP=1 runs the load generator's own requests instead, spread over every
# node (LOAD then holds all the bench's flags: add --placement to send each
# to its shard's node).
#   scripts/bench-sdk-cluster.sh                      # --rate 1000 --duration 20s
#   LOAD="--jobs 50000" scripts/bench-sdk-cluster.sh  # as fast as it goes
#   HTTP=1 LOAD="--mode fixed-rate --rate 1000 --senders 32 --workers 8 --queues 8 --jobs 10000" scripts/bench-sdk-cluster.sh
set -euo pipefail
. "$(dirname "$0")/bench-lock.sh" # one measurement at a time
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/corvo} NODES=${NODES:-4} SHARDS=${SHARDS:-4} PORT=${PORT:-19300}
LOAD=${LOAD:---rate 1000 --duration 20s}
DIR=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$DIR"' EXIT
pids=()
for i in $(seq 1 "$NODES"); do
  extra=(--replicas 1 --shards "$SHARDS")
  [ "$i" -gt 1 ] && extra=(--join "127.0.0.1:$PORT" --cluster-secret-file "$DIR/n1/cluster-secret")
  "$BIN" server --data-dir "$DIR/n$i" --bind "127.0.0.$i:$((PORT + i - 1))" --raft-bind "127.0.0.$i:$((PORT + 1000 + i - 1))" \
    --node-id "n$i" --log-level warn "${extra[@]}" >/dev/null 2>&1 &
  pids+=($!)
  for _ in $(seq 1 300); do curl -fs "http://127.0.0.$i:$((PORT + i - 1))/healthz" >/dev/null 2>&1 && break; sleep 0.1; done
done
# Settled: no shard moving, and every node leads a shard.
for _ in $(seq 1 240); do
  st=$(curl -fs "http://127.0.0.1:$PORT/api/v1/cluster/status" || true)
  leaders=$(grep -o '"leader_node":[0-9]*' <<<"$st" | sort -u | wc -l || true)
  if [ -n "$st" ] && ! grep -q '"settled":false' <<<"$st" && [ "$leaders" -ge "$(( NODES < SHARDS ? NODES : SHARDS ))" ]; then break; fi
  sleep 0.5
done
cpu() { local t=0 f; for p in "${pids[@]}"; do read -r -a f < "/proc/$p/stat"; t=$((t + f[13] + f[14])); done; echo "$t"; }
sync # as scripts/ab-fixed-rate.sh: nothing else's writeback in the run
before=$(cpu)
urls=()
for i in $(seq 1 "$NODES"); do urls+=("http://127.0.0.$i:$((PORT + i - 1))"); done
# shellcheck disable=SC2086 # LOAD is a list of flags
if [ -n "${HTTP:-}" ]; then
  "$BIN" bench --url "$(IFS=,; echo "${urls[*]}")" $LOAD -o json 2>/dev/null | tee "$DIR/out.json"
else
  "$BIN" bench --url "${urls[0]}" --client sdk --mode e2e $LOAD --producers 16 --workers 32 --queues 8 -o json 2>/dev/null | tee "$DIR/out.json"
fi
after=$(cpu)
python3 - "$DIR/out.json" "$before" "$after" "$(getconf CLK_TCK)" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
l = d["latency_ms"]["enqueue_to_start"]
cpu = (int(sys.argv[3]) - int(sys.argv[2])) / int(sys.argv[4])
print("%d jobs/s; delivery p50 %.2f p90 %.2f p99 %.2f ms; the nodes' CPU %.3f s per 1,000 jobs"
      % (d["complete_rate"], l["p50"], l["p90"], l["p99"], cpu / d["completed"] * 1000))
PY

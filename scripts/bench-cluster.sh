#!/usr/bin/env bash
# BENCHMARKS.md's cluster figures: the same `corvo bench` runs against a
# single node and against a 3-node cluster on 127.0.0.1–3 of this machine
# (every node a replica of every shard), spreading the load over the nodes.
set -euo pipefail
BIN=${BIN:-bin/corvo}
DIR=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$DIR"' EXIT

wait_healthy() {
  for _ in $(seq 1 600); do
    curl -fs "http://$1/healthz" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "node $1 did not start" >&2; exit 1
}

runs() { # $1: comma-separated URLs
  for args in \
    "--mode e2e --duration 20s --producers 16 --workers 48 --queues 4" \
    "--mode e2e --duration 20s --producers 8 --workers 8 --enqueue-batch 100 --fetch-batch 100 --ack-batch 100 --queues 4" \
    "--mode e2e --duration 20s --rate 1000 --producers 4 --workers 8"; do
    echo "### corvo bench --url $1 $args"
    # shellcheck disable=SC2086
    "$BIN" bench --url "$1" $args 2>/dev/null
    echo
  done
}

echo "## single node"
"$BIN" server --data-dir "$DIR/s" --bind 127.0.0.1:18180 --raft-bind 127.0.0.1:19180 --log-level warn &
wait_healthy 127.0.0.1:18180
runs http://127.0.0.1:18180
kill %1; wait %1 || true

echo "## 3-node cluster"
"$BIN" server --data-dir "$DIR/n1" --bind 127.0.0.1:18181 --raft-bind 127.0.0.1:19181 --node-id n1 --log-level warn &
wait_healthy 127.0.0.1:18181
for i in 2 3; do
  "$BIN" server --data-dir "$DIR/n$i" --bind 127.0.0.$i:1818$i --raft-bind 127.0.0.$i:1918$i --node-id n$i --join 127.0.0.1:18181 --log-level warn &
done
wait_healthy 127.0.0.2:18182; wait_healthy 127.0.0.3:18183
sleep 3 # leaderships spread over the nodes
"$BIN" cluster status --url http://127.0.0.1:18181
runs http://127.0.0.1:18181,http://127.0.0.2:18182,http://127.0.0.3:18183

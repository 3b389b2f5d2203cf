#!/usr/bin/env bash
# BENCHMARKS.md's cluster figures: the same `corvo bench` runs against a
# single node, a 3-node cluster on 127.0.0.1–3 of this machine (every node
# a replica of every shard) and a 4-node cluster on 127.0.0.1–4 (each of
# the 4 shards placed on 3 of the 4 nodes), spreading the load over the
# nodes. STAGES picks some: STAGES="single 4" scripts/bench-cluster.sh
set -euo pipefail
. "$(dirname "$0")/bench-lock.sh" # one measurement at a time
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

STAGES=${STAGES:-single 3 4}

# cluster N [first port]: N fresh nodes on 127.0.0.1..N, joined to the
# first; sets URLS. It waits until every shard's placement is settled.
cluster() {
  local n=$1 p=$2 urls=()
  for i in $(seq 1 "$n"); do
    local join=()
    [ "$i" -gt 1 ] && join=(--join "127.0.0.1:$p")
    "$BIN" server --data-dir "$DIR/c$n-n$i" --bind "127.0.0.$i:$((p + i - 1))" --raft-bind "127.0.0.$i:$((p + 1000 + i - 1))" \
      --node-id "n$i" "${join[@]}" --log-level warn &
    wait_healthy "127.0.0.$i:$((p + i - 1))"
    urls+=("http://127.0.0.$i:$((p + i - 1))")
  done
  URLS=$(IFS=,; echo "${urls[*]}")
  # Settled: no shard moving, and the last node hosts its share (+ meta).
  for _ in $(seq 1 600); do
    st=$(curl -fs "${urls[0]}/api/v1/cluster/status" || true)
    last=$(curl -fs "${urls[n - 1]}/api/v1/cluster/status?local=true" | grep -o '"shard_id"' | wc -l)
    if [ -n "$st" ] && ! grep -q '"settled":false' <<<"$st" && [ "$last" -ge $(( (4 * (n < 3 ? n : 3) + n - 1) / n + 1 )) ]; then
      break
    fi
    sleep 0.5
  done
  sleep 3 # leaderships spread over the nodes
  "$BIN" cluster status --url "${urls[0]}"
}

for stage in $STAGES; do
  case $stage in
  single)
    echo "## single node"
    "$BIN" server --data-dir "$DIR/s" --bind 127.0.0.1:18180 --raft-bind 127.0.0.1:19180 --log-level warn &
    wait_healthy 127.0.0.1:18180
    runs http://127.0.0.1:18180
    ;;
  *)
    echo "## $stage-node cluster"
    cluster "$stage" $((18180 + 10 * stage))
    runs "$URLS"
    ;;
  esac
  kill $(jobs -p) 2>/dev/null || true
  wait 2>/dev/null || true
done

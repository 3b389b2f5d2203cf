#!/usr/bin/env bash
# Corvo beside its peers (BullMQ and Faktory, ../shared/peers/redis) with the
# workload shapes of issue 16, one after another in one run, and a table of
# the ratios: on a shared 2-core machine only figures measured in the same
# run compare.
#
#   scripts/bench-peers.sh                      # defaults below, ~5-8 min
#   JOBS=100000 RATE_JOBS=20000 scripts/bench-peers.sh   # the issue's sizes
#   PEERS=bullmq JOBS=5000 scripts/bench-peers.sh        # one peer, smoke run
#
# Shapes (the peers' phases a1, a2, b, c, d; one knob set for all):
#   enqueue 1/req       JOBS jobs, PRODUCERS producers, no workers
#   enqueue bulk        the same in batches of BULK_BATCH
#   work backlog        the bulk-enqueued jobs, WORKERS workers, fetch + ack one per request;
#                       again with --ack-fetch (each ack carries the next fetch, as BullMQ's
#                       worker takes its next job when it completes one)
#   end to end 1/req    producers and workers at once, one job per request; again with --ack-fetch
#   end to end batch    the same in batches of E2E_BATCH (Corvo only: the peers' harness has no batched fetch/ack)
#   fixed rate          RATE_SENDERS open-loop senders at RATE jobs/s for RATE_JOBS jobs,
#                       RATE_WORKERS workers; enqueue->delivery latency
# Corvo: every phase on a fresh single-node `bin/corvo server` (default flags:
# every Raft entry fsynced, SQLite mirror on), QUEUES queues, every worker
# fetching from all of them in rotating order. The peers run their own
# scripts twice: once with PRODUCERS/WORKERS (phases a1-c) and once with
# RATE_SENDERS/RATE_WORKERS (phase d), as their knobs are per script run.
# A peer whose script fails (apt-get, npm or the Go module proxy
# unreachable, a port in use, a phase timing out) is reported as skipped
# with its reason; its log stays in OUT.
#
# Knobs (env): JOBS=20000 PRODUCERS=16 WORKERS=32 QUEUES=8 PAYLOAD=35
# BULK_BATCH=1000 E2E_BATCH=100 RATE=1000 RATE_JOBS=10000 RATE_SENDERS=32
# RATE_WORKERS=8 PEERS="bullmq faktory" PEERS_DIR=../shared/peers/redis
# BIN=bin/corvo PORT=18120 PHASE_TIMEOUT=300 (s, each Corvo phase)
# PEER_TIMEOUT=600 (s, each peer script run) OUT=<temp dir: raw JSON lines, logs>
set -euo pipefail
. "$(dirname "$0")/bench-lock.sh" # one measurement at a time
cd "$(dirname "${BASH_SOURCE[0]}")/.."

JOBS=${JOBS:-20000}
PRODUCERS=${PRODUCERS:-16}
WORKERS=${WORKERS:-32}
QUEUES=${QUEUES:-8}
PAYLOAD=${PAYLOAD:-35}
BULK_BATCH=${BULK_BATCH:-1000}
E2E_BATCH=${E2E_BATCH:-100}
RATE=${RATE:-1000}
RATE_JOBS=${RATE_JOBS:-10000}
RATE_SENDERS=${RATE_SENDERS:-32}
RATE_WORKERS=${RATE_WORKERS:-8}
PEERS=${PEERS-bullmq faktory} # PEERS= (empty): Corvo only
PEERS_DIR=${PEERS_DIR:-../shared/peers/redis}
BIN=${BIN:-bin/corvo}
PORT=${PORT:-18120}
PHASE_TIMEOUT=${PHASE_TIMEOUT:-300}
PEER_TIMEOUT=${PEER_TIMEOUT:-600}
OUT=${OUT:-$(mktemp -d -t bench-peers.XXXXXX)}
mkdir -p "$OUT"

log() { echo "[$(date +%H:%M:%S)] $*" >&2; }

command -v python3 >/dev/null || { log "python3 is needed for the table"; exit 1; }
if [[ ! -x "$BIN" ]]; then
  log "building $BIN"
  go build -o "$BIN" ./cmd/corvo
fi

# ---- Corvo: one fresh server per phase ---------------------------------------
SERVER=""
DIR=""
stop_server() {
  if [[ -n "$SERVER" ]]; then
    kill "$SERVER" 2>/dev/null || true
    wait "$SERVER" 2>/dev/null || true
    SERVER=""
  fi
  if [[ -n "$DIR" ]]; then rm -rf "$DIR"; DIR=""; fi
}
trap stop_server EXIT
trap 'exit 130' INT TERM

start_server() {
  DIR=$(mktemp -d -t bench-peers-corvo.XXXXXX)
  # Written-back data first: on ext4 (data=ordered) the server's fsyncs
  # otherwise wait for other files' dirty pages (a build or copy just
  # before; BENCHMARKS.md, session 19: p99 2.1-3.5 ms against 1.3-1.9).
  sync
  "$BIN" server --data-dir "$DIR/data" --bind "127.0.0.1:$PORT" --raft-bind "127.0.0.1:$((PORT + 1000))" \
    --log-level warn >>"$OUT/corvo-server.log" 2>&1 &
  SERVER=$!
  for _ in $(seq 1 300); do
    curl -fs "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && return 0
    kill -0 "$SERVER" 2>/dev/null || break
    sleep 0.1
  done
  log "corvo server did not start on 127.0.0.1:$PORT (see $OUT/corvo-server.log)"
  exit 1
}

# corvo_phase NAME ARGS...: a fresh server, one `corvo bench -o json` run,
# its JSON line in $OUT/corvo-NAME.json.
corvo_phase() {
  local name=$1; shift
  log "corvo: $name: corvo bench $*"
  start_server
  local rc=0
  timeout "$PHASE_TIMEOUT" "$BIN" bench --url "http://127.0.0.1:$PORT" -o json --queues "$QUEUES" \
    --payload-size "$PAYLOAD" "$@" >"$OUT/corvo-$name.out" 2>"$OUT/corvo-$name.log" || rc=$?
  stop_server
  if ((rc != 0)); then
    log "corvo: $name failed (rc=$rc): $(tail -3 "$OUT/corvo-$name.log")"
    exit 1
  fi
  tail -1 "$OUT/corvo-$name.out" >"$OUT/corvo-$name.json"
  log "  $(cut -c1-300 "$OUT/corvo-$name.json")"
}

corvo_phase enqueue-single --mode enqueue --jobs "$JOBS" --producers "$PRODUCERS"
corvo_phase lifecycle-bulk --mode lifecycle --jobs "$JOBS" --producers "$PRODUCERS" --workers "$WORKERS" \
  --enqueue-batch "$BULK_BATCH"
corvo_phase lifecycle-bulk-ackfetch --mode lifecycle --jobs "$JOBS" --producers "$PRODUCERS" --workers "$WORKERS" \
  --enqueue-batch "$BULK_BATCH" --ack-fetch
corvo_phase e2e --mode e2e --jobs "$JOBS" --producers "$PRODUCERS" --workers "$WORKERS"
corvo_phase e2e-ackfetch --mode e2e --jobs "$JOBS" --producers "$PRODUCERS" --workers "$WORKERS" --ack-fetch
corvo_phase e2e-batched --mode e2e --jobs "$JOBS" --producers "$PRODUCERS" --workers "$WORKERS" \
  --enqueue-batch "$E2E_BATCH" --fetch-batch "$E2E_BATCH" --ack-batch "$E2E_BATCH"
corvo_phase fixed-rate --mode fixed-rate --rate "$RATE" --jobs "$RATE_JOBS" --senders "$RATE_SENDERS" \
  --workers "$RATE_WORKERS"

# ---- peers ---------------------------------------------------------------------
# peer_run PEER TAG ENV...: the peer's script with the knobs ENV; its JSON
# line in $OUT/PEER-TAG.json, or the reason it failed in $OUT/PEER.skipped.
peer_run() {
  local peer=$1 tag=$2; shift 2
  local script="$PEERS_DIR/run-$peer.sh" rc=0
  [[ -e "$OUT/$peer.skipped" ]] && return 0
  if [[ ! -x "$script" ]]; then
    echo "no $script" >"$OUT/$peer.skipped"
    return 0
  fi
  log "$peer ($tag): $* $script"
  sync # as start_server: nothing else's writeback in the run
  env "$@" timeout "$PEER_TIMEOUT" "$script" >"$OUT/$peer-$tag.out" 2>"$OUT/$peer-$tag.log" || rc=$?
  if ((rc == 0)) && python3 -c 'import json,sys; d=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); sys.exit("error" in d)' \
    "$OUT/$peer-$tag.out" 2>/dev/null; then
    tail -1 "$OUT/$peer-$tag.out" >"$OUT/$peer-$tag.json"
    log "  $(cut -c1-300 "$OUT/$peer-$tag.json")"
    return 0
  fi
  local why
  why=$(grep -E 'FATAL|failed|ERR|error' "$OUT/$peer-$tag.log" | tail -2 | tr '\n' ' ' || true)
  if ((rc == 124)); then why="timed out after ${PEER_TIMEOUT}s; $why"; fi
  case "$why" in
  *apt-get*) why="apt-get unreachable or failed (redis-server/jq not installed): $why" ;;
  *npm*) why="npm unreachable or failed: $why" ;;
  *"go build"*) why="go build failed (Go module proxy?): $why" ;;
  esac
  echo "${why:-exit $rc, see $OUT/$peer-$tag.log}" >"$OUT/$peer.skipped"
  log "$peer skipped: $(cat "$OUT/$peer.skipped")"
}

for peer in $PEERS; do
  # Phases a1-c with the main shape (phase d kept short: measured below).
  peer_run "$peer" main N="$JOBS" PRODUCERS="$PRODUCERS" CONCURRENCY="$WORKERS" BULK_BATCH="$BULK_BATCH" \
    RATE="$RATE" RATE_N=100 PHASE_TIMEOUT_S="$PHASE_TIMEOUT"
  # Phase d with the fixed-rate shape (phases a1-c kept short).
  peer_run "$peer" rate N=1000 PRODUCERS="$RATE_SENDERS" CONCURRENCY="$RATE_WORKERS" BULK_BATCH="$BULK_BATCH" \
    RATE="$RATE" RATE_N="$RATE_JOBS" PHASE_TIMEOUT_S="$PHASE_TIMEOUT"
done

# ---- table ---------------------------------------------------------------------
log "raw JSON lines and logs: $OUT"
python3 - "$OUT" "$PEERS" <<'EOF'
import json, os, sys

out, peers = sys.argv[1], sys.argv[2].split()

def load(name):
    p = os.path.join(out, name + ".json")
    return json.load(open(p)) if os.path.exists(p) else None

c = {k: load("corvo-" + k) for k in ["enqueue-single", "lifecycle-bulk", "lifecycle-bulk-ackfetch", "e2e", "e2e-ackfetch",
                                     "e2e-batched", "fixed-rate"]}
# (label, corvo phase, corvo field, peer run, peer field, higher is better)
rows = [
    ("enqueue 1/req (jobs/s)", "enqueue-single", "enqueue_single_jobs_s", "main", "enqueue_single_jobs_s", True),
    ("enqueue bulk (jobs/s)", "lifecycle-bulk", "enqueue_bulk_jobs_s", "main", "enqueue_bulk_jobs_s", True),
    ("work backlog 1/req (jobs/s)", "lifecycle-bulk", "process_jobs_s", "main", "process_jobs_s", True),
    ("work backlog, ack carries the next fetch (jobs/s)", "lifecycle-bulk-ackfetch", "process_jobs_s", "main", "process_jobs_s", True),
    ("end to end 1/req (jobs/s)", "e2e", "e2e_jobs_s", "main", "e2e_jobs_s", True),
    ("end to end, ack carries the next fetch (jobs/s)", "e2e-ackfetch", "e2e_jobs_s", "main", "e2e_jobs_s", True),
    ("end to end 1/req p50 (ms)", "e2e", "e2e_p50_ms", "main", "e2e_p50_ms", False),
    ("end to end batched (jobs/s)", "e2e-batched", "e2e_jobs_s", None, None, True),
    ("fixed rate achieved (jobs/s)", "fixed-rate", "fixed_rate_achieved_jobs_s", "rate", "fixed_rate_achieved_jobs_s", True),
    ("fixed rate p50 (ms)", "fixed-rate", "fixed_rate_p50_ms", "rate", "fixed_rate_p50_ms", False),
    ("fixed rate p90 (ms)", "fixed-rate", "fixed_rate_p90_ms", "rate", "fixed_rate_p90_ms", False),
    ("fixed rate p99 (ms)", "fixed-rate", "fixed_rate_p99_ms", "rate", "fixed_rate_p99_ms", False),
    ("fixed rate max (ms)", "fixed-rate", "fixed_rate_max_ms", "rate", "fixed_rate_max_ms", False),
]
# Corvo only: how late its senders were behind the schedule (large: the
# latencies above are understated).
lag = ((c["fixed-rate"] or {}).get("latency_ms") or {}).get("send_lag") or {}
p = {peer: {tag: load(peer + "-" + tag) for tag in ["main", "rate"]} for peer in peers}

def fmt(v):
    if v is None:
        return "—"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.2f}"

head = ["workload", "corvo"] + peers + ["corvo/" + peer for peer in peers] + ["corvo cpu s/1k jobs"]
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))
for label, cp, cf, run, pf, _ in rows:
    cv = (c[cp] or {}).get(cf)
    pv = [((p[peer][run] or {}).get(pf) if run else None) for peer in peers]
    ratios = [fmt(cv / v) if cv is not None and v else "—" for v in pv]
    cpu = (c[cp] or {}).get("server_cpu_s_per_1k_jobs")
    print("| " + " | ".join([label, fmt(cv)] + [fmt(v) for v in pv] + ratios + [fmt(cpu)]) + " |")
print()
dupes = sum((r or {}).get("duplicates_seen") or 0 for r in c.values())
if dupes:
    print(f"corvo: duplicates seen: {dupes}")
if lag:
    print(f"corvo fixed-rate send lag behind schedule: p99 {lag['p99']:.2f} ms, max {lag['max']:.2f} ms")
print("ratios: corvo/peer; above 1 is better for Corvo in jobs/s rows, below 1 in latency (ms) rows")
print("corvo cpu: the server's process_cpu_seconds_total over the whole `corvo bench` run of that row, per 1,000 jobs "
      "(enqueue bulk and work backlog are one lifecycle run); the peers' harness does not measure CPU")
for peer in peers:
    sk = os.path.join(out, peer + ".skipped")
    if os.path.exists(sk):
        print(f"{peer}: skipped: {open(sk).read().strip()}")
    for tag in ["main", "rate"]:
        if p[peer][tag] and p[peer][tag].get("duplicates_seen"):
            print(f"{peer} ({tag}): duplicates seen: {p[peer][tag]['duplicates_seen']}")
cfg = (c["e2e"] or {}).get("config", {})
print(f"corvo payload: {cfg.get('payload_size')} B asked, corvo bench jobs are at least their ~55-60 B header (send time, run id, index); peers' payload ~50 B; "
      "corvo spreads jobs over %s queues polled by every worker in rotating order, the peers use one queue" % cfg.get("queues"))
EOF

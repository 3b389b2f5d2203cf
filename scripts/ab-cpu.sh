#!/usr/bin/env bash
# Two corvo servers compared as separate processes, alternated, each on a
# fresh data dir and working directory; NEW's load generator drives both.
# Per run: server CPU-seconds per 1,000 jobs, Go heap bytes and objects
# allocated per job and GC cycles per 1,000 jobs (from /api/v1/metrics);
# the allocation figures hold steady where CPU drifts on a shared box.
# SOFT_NEW, when set, is written as NEW's dragonboat-soft-settings.json
# (experiments only).
#
#   OLD=/tmp/corvo-old NEW=bin/corvo ROUNDS=3 DUR=15s scripts/ab-cpu.sh
set -uo pipefail
. "$(dirname "$0")/bench-lock.sh" # one measurement at a time
ROUNDS=${ROUNDS:-3}
OLD=$(realpath "${OLD:?}"); NEW=$(realpath "${NEW:?}") # each server runs in its own directory
scrape() { curl -sf http://127.0.0.1:18195/api/v1/metrics | grep -E '^(go_memstats_alloc_bytes_total|go_memstats_mallocs_total|go_gc_duration_seconds_count) ' ; }
run() {
  local bin=$1 label=$2 workload=$3 dir pid out m0 m1
  shift 3
  dir=$(mktemp -d)
  if [ "$label" = new ] && [ -n "${SOFT_NEW:-}" ]; then echo "$SOFT_NEW" > "$dir/dragonboat-soft-settings.json"; fi
  (cd "$dir" && exec "$bin" server --data-dir "$dir/data" --bind 127.0.0.1:18195 --raft-bind 127.0.0.1:19595 --log-level warn 2>/dev/null) &
  pid=$!
  for _ in $(seq 100); do curl -sf http://127.0.0.1:18195/healthz >/dev/null && break; sleep 0.1; done
  m0=$(scrape | tr '\n' ';')
  out=$("$NEW" bench --url http://127.0.0.1:18195 -o json "$@" 2>/dev/null | tail -1)
  m1=$(scrape | tr '\n' ';')
  kill "$pid"; wait "$pid" 2>/dev/null || true
  rm -rf "$dir"
  python3 - "$out" "$label" "$workload" "$m0" "$m1" <<'PY'
import json,sys
d=json.loads(sys.argv[1]); lab,wl=sys.argv[2],sys.argv[3]
def parse(s):
    r={}
    for kv in s.split(';'):
        if kv.strip():
            k,v=kv.split(' ',1); r[k]=float(v)
    return r
m0,m1=parse(sys.argv[4]),parse(sys.argv[5])
jobs=d["enqueued"] if d["mode"]=="enqueue" else d["completed"]
dd=lambda k:(m1.get(k,0)-m0.get(k,0))
print("%-4s %-8s cpu_s/1k %.4f  alloc_B/job %7.0f  allocs/job %6.1f  gc/1k %.3f  jobs/s %7.0f  errors %d" % (lab,wl,d.get("server_cpu_s_per_1k_jobs",0),dd("go_memstats_alloc_bytes_total")/jobs,dd("go_memstats_mallocs_total")/jobs,dd("go_gc_duration_seconds_count")/jobs*1000,d.get("complete_rate") or d.get("enqueue_rate"),d.get("errors",0)))
PY
}
for _ in $(seq "$ROUNDS"); do
  for label in old new; do
    bin=$OLD; [ "$label" = new ] && bin=$NEW
    run "$bin" "$label" e2e --mode e2e --duration ${DUR:-15s} --producers 16 --workers 32 --queues 8
    run "$bin" "$label" enqueue --mode enqueue --duration ${DUR:-15s} --producers 16 --queues 8
  done
done

#!/usr/bin/env bash
# Issue 17's overload: a fresh single node (SERVER_FLAGS added to its
# flags, e.g. SERVER_FLAGS="--max-memory 1GiB") takes 16 connections
# enqueueing 64 KiB payloads for SMALL_FOR, then 1 MiB payloads for
# LARGE_FOR, never fetched, while scripts/overloadprobe searches and GETs
# jobs (see it). Then it prints the server's RSS before the load (after
# it idled SETTLE seconds), its peak RSS (sampled every 200 ms during the
# load), its idle RSS IDLE_AFTER after the load, the
# data dir's bytes per accepted payload byte (then, and after a restart),
# search and GET latencies during the load and the answers by status.
# Everything stops by itself (~SETTLE + SMALL_FOR + LARGE_FOR + IDLE_AFTER + a
# restart).
#   scripts/overload.sh
#   SMALL_FOR=20s LARGE_FOR=15s IDLE_AFTER=20 scripts/overload.sh
set -euo pipefail
. "$(dirname "$0")/bench-lock.sh" # one measurement at a time
cd "$(dirname "$0")/.."
SMALL_FOR=${SMALL_FOR:-60s} LARGE_FOR=${LARGE_FOR:-40s} IDLE_AFTER=${IDLE_AFTER:-60} SETTLE=${SETTLE:-60}
SMALL_SIZE=${SMALL_SIZE:-65536} LARGE_SIZE=${LARGE_SIZE:-1048576} CONNS=${CONNS:-16}
PORT=${PORT:-18680}
WORK=$(mktemp -d)
BIN=${BIN:-$WORK/corvo}
[ -x "$BIN" ] || go build -o "$BIN" ./cmd/corvo
go build -o "$WORK/overloadprobe" ./scripts/overloadprobe
. scripts/server-lib.sh
start_server "$PORT"
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$DIR" "$WORK"' EXIT
echo "server flags: ${SERVER_FLAGS:-(defaults)}; load: $CONNS connections, $SMALL_SIZE B for $SMALL_FOR, then $LARGE_SIZE B for $LARGE_FOR"

rss_kib() { awk '/^VmRSS/{print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
# RssAnon leaves out the binary's file pages (clean, shared with the page
# cache): how many of them are resident varies by ~6 MiB from run to run
# and grows as the load runs code paths the idle node never ran.
anon_kib() { awk '/^RssAnon/{print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
# The pre-load figure is taken once the node has idled SETTLE seconds, as
# the idle one IDLE_AFTER seconds after the load: an idle node's RSS grows
# by itself over its first minute (52 -> 55 MiB) as its GC cycles and
# timers run. The figure 5 s after the start is printed too.
sleep 5 # shards elected, first mirror sync
start=$(rss_kib "$SERVER")
[ "$SETTLE" -le 5 ] || sleep $((SETTLE - 5))
pre=$(rss_kib "$SERVER") pre_anon=$(anon_kib "$SERVER")
# AT_PRE, when set, runs now (before the load) as AT_IDLE does after it.
[ -z "${AT_PRE:-}" ] || SERVER=$SERVER bash -c "$AT_PRE" || true
(peak=0; while kill -0 "$SERVER" 2>/dev/null; do
  r=$(rss_kib "$SERVER"); [ "${r:-0}" -gt "$peak" ] && peak=$r && echo "$peak" > "$WORK/peak"
  sleep 0.2
done) &
SAMPLER=$!

"$WORK/overloadprobe" -conns "$CONNS" "$URL" "$SMALL_SIZE:$SMALL_FOR" "$LARGE_SIZE:$LARGE_FOR" | tee "$WORK/probe.txt"
peak=$(cat "$WORK/peak")
sleep "$IDLE_AFTER"
idle=$(rss_kib "$SERVER") idle_anon=$(anon_kib "$SERVER")
# AT_IDLE, when set, runs now with the server still up (e.g. a heap
# profile with SERVER_FLAGS="--pprof-bind 127.0.0.1:6061").
[ -z "${AT_IDLE:-}" ] || SERVER=$SERVER bash -c "$AT_IDLE" || true
kill "$SAMPLER" 2>/dev/null || true
accepted=$(awk '/^accepted_payload_bytes/{print $2}' "$WORK/probe.txt")
ratio() { awk -v d="$1" -v a="$accepted" 'BEGIN{ if (a > 0) printf "%.2f", d / a; else print "n/a" }'; }
bytes=$(du -sb "$DIR/data" | cut -f1)
kill -TERM "$SERVER"; wait "$SERVER" || true
run_server "$PORT"
bytes2=$(du -sb "$DIR/data" | cut -f1)
echo "RSS 5 s after the start $((start / 1024)) MiB; pre-load RSS (idle ${SETTLE}s) $((pre / 1024)) MiB; peak RSS $((peak / 1024)) MiB; idle RSS ${IDLE_AFTER}s after the load $((idle / 1024)) MiB"
echo "anonymous RSS (RssAnon, without the binary's file pages): pre-load $((pre_anon / 1024)) MiB; idle $((idle_anon / 1024)) MiB"
# The whole-MiB figures above are floored: the ratio comes from KiB.
echo "idle RSS over pre-load RSS: $(awk -v p="$pre" -v i="$idle" 'BEGIN{ if (p > 0) printf "%+.1f %%", 100 * (i - p) / p; else print "n/a" }') ($pre -> $idle KiB)"
echo "data dir $((bytes >> 20)) MiB for $((accepted >> 20)) MiB of accepted payloads: $(ratio "$bytes") B/B; after a restart $((bytes2 >> 20)) MiB: $(ratio "$bytes2") B/B"

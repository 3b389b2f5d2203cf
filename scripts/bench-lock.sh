# Sourced by every script that measures, right after its `set` line: one
# measurement at a time on this machine. Two runs at once share the cores
# and the disk, and each one's figures then measure the other too
# (BENCHMARKS.md, session 21: an A/B that overlapped an overload run showed
# GOGC=200 20 % slower end to end; alone, no difference).
#
# The lock is an flock on CORVO_BENCH_LOCK (default /tmp/corvo-bench.lock),
# held until the script and everything it started have exited: a second
# script says it waits, and waits. A script started by one that holds it
# (CORVO_BENCH_LOCKED is set) does not take it again. A wait that does not
# end means a process of an earlier run is still up:
# `fuser -v /tmp/corvo-bench.lock` names it.
if [ -z "${CORVO_BENCH_LOCKED:-}" ] && command -v flock >/dev/null 2>&1; then
  exec 9>"${CORVO_BENCH_LOCK:-/tmp/corvo-bench.lock}"
  if ! flock -n 9; then
    echo "$(basename "$0"): another measurement holds ${CORVO_BENCH_LOCK:-/tmp/corvo-bench.lock}; waiting for it to end" >&2
    flock 9
  fi
  export CORVO_BENCH_LOCKED=1
fi

# Sourced by the measurement scripts: a fresh single-node server in a temp
# dir, stopped and removed when the script exits.
#   start_server PORT   sets DIR, URL and SERVER (its pid)
#   run_server PORT     starts it again on the same DIR (after a stop)
# SERVER_FLAGS (word-split) are added to the server's flags, e.g.
# SERVER_FLAGS="--max-payload 2097152". BIN may be a wrapper script only
# if it execs the server (`exec corvo "$@"`): SERVER is what the scripts
# measure and stop, and a wrapper's child would be neither (and would
# outlive the script).
BIN=${BIN:-bin/corvo}
start_server() {
  DIR=$(mktemp -d)
  trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$DIR"' EXIT
  run_server "$1"
}
run_server() {
  URL=http://127.0.0.1:$1
  # shellcheck disable=SC2086 # SERVER_FLAGS is a list of flags
  "$BIN" server --data-dir "$DIR/data" --bind "127.0.0.1:$1" --raft-bind "127.0.0.1:$(($1 + 1000))" --log-level warn ${SERVER_FLAGS:-} &
  SERVER=$!
  for _ in $(seq 1 300); do curl -fs "$URL/healthz" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "the server on $URL did not start" >&2; exit 1
}

#!/usr/bin/env bash
# Runs every fuzz target of every Go module in the repository for FUZZTIME
# each (default 1m). The targets are discovered with `go test -list`, so a
# new Fuzz function is fuzzed without editing this script or the Makefile.
#
#   scripts/fuzz-all.sh            # every target
#   FUZZTIME=5s scripts/fuzz-all.sh
#   scripts/fuzz-all.sh --list     # only print "package target" lines
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/.."
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-1m}
# The gateway's TestMain starts a whole node for its API tests; fuzz targets
# decode bytes and need none (and each fuzz worker would start one).
export CORVO_GATEWAY_NO_SERVER=1

# targets prints "module-dir package FuzzName" for every fuzz target: the
# packages with a `func Fuzz` in a test file, asked for their exact list.
targets() {
  local mod pkgs
  for mod in $(git ls-files '*go.mod' ':!:**/testdata/**'); do
    mod=$(dirname "$mod")
    pkgs=$(cd "$mod" && { git grep -l '^func Fuzz' -- '*_test.go' || true; } | xargs -r -n1 dirname | sort -u | sed 's|^|./|')
    # A package of a nested module belongs to that module, not this one.
    pkgs=$(for p in $pkgs; do
      d=$p
      while [ "$d" != . ] && [ ! -f "$mod/$d/go.mod" ]; do d=$(dirname "$d"); done
      if [ "$d" = . ]; then echo "$p"; fi
    done)
    if [ -z "$pkgs" ]; then continue; fi
    # go test -list prints the matching names of a package, then its
    # "ok <package> <time>" line.
    # shellcheck disable=SC2086 # one argument per package
    (cd "$mod" && "$GO" test -list '^Fuzz' $pkgs) | awk -v mod="$mod" '
      /^Fuzz/ { names[n++] = $1; next }
      /^ok / { for (i = 0; i < n; i++) print mod, $2, names[i]; n = 0; next }
      /^(FAIL|panic)/ { print "fuzz-all: listing failed: " $0 > "/dev/stderr"; exit 1 }
    '
  done
}

list=$(targets)
if [ -z "$list" ]; then
  echo "fuzz-all: no fuzz targets found" >&2
  exit 1
fi
if [ "${1:-}" = "--list" ]; then
  echo "$list" | cut -d' ' -f2-
  exit 0
fi
n=0
while read -r mod pkg name; do
  echo "== $pkg $name ($FUZZTIME)"
  (cd "$mod" && "$GO" test "$pkg" -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME")
  n=$((n + 1))
done <<<"$list"
echo "fuzz-all: $n targets fuzzed for $FUZZTIME each"

#!/usr/bin/env bash
# Installs the command-line tools the end-to-end tests use to drive the
# server the way the README does (curl, jq), when they are missing; as
# root also iproute2, whose ip builds the partition test's network
# namespaces (that test runs only as root).
set -euo pipefail
missing=()
for t in curl jq; do
  command -v "$t" >/dev/null 2>&1 || missing+=("$t")
done
if [ "$(id -u)" = 0 ] && ! command -v ip >/dev/null 2>&1; then
  missing+=(iproute2)
fi
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing ${missing[*]} with apt-get" >&2
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
elif command -v sudo >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  sudo apt-get update -qq >/dev/null
  sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
else
  echo "missing ${missing[*]}: install them to run the quick-start test" >&2
  exit 1
fi

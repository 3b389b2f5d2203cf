#!/usr/bin/env bash
# Installs Debian's chromium for the UI's browser tests when it is missing.
# (Playwright's own browser download cannot reach its CDN here; the tests use
# playwright-core with executablePath = this binary.) Prints the path.
set -euo pipefail
for c in "${CORVO_CHROMIUM:-}" /usr/bin/chromium /usr/bin/chromium-browser; do
  if [ -n "$c" ] && [ -x "$c" ]; then echo "$c"; exit 0; fi
done
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  SUDO=""
elif command -v sudo >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  SUDO="sudo"
else
  echo "chromium is missing: install it (Debian: apt-get install chromium) or set CORVO_CHROMIUM" >&2
  exit 1
fi
echo "installing chromium with apt-get" >&2
$SUDO apt-get update -qq >/dev/null
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
echo /usr/bin/chromium

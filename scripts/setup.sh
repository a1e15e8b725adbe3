#!/usr/bin/env bash
# Install everything the tests and the book need on a fresh machine (run as root or with sudo rights).
#
#   bash scripts/setup.sh
#
# - Debian's chromium for the browser tests (skipped when /usr/bin/chromium exists; Playwright drives it
#   through executable_path, so `playwright install` is never needed)
# - this package with its book and test extras (editable)
# - the pinned npm packages whose files the built book serves offline (MathJax, ipywidgets HTML manager)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

if [[ ! -x /usr/bin/chromium ]]; then
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends chromium
fi

if ! command -v npm >/dev/null 2>&1; then
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends nodejs npm
fi

python3 -m pip install -e '.[book,test]'

npm ci --no-audit --no-fund --ignore-scripts

echo "setup done: python $(python3 -c 'import sys; print(sys.version.split()[0])'), chromium: $(/usr/bin/chromium --version 2>/dev/null || echo missing), node $(node --version)"

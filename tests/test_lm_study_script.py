"""``scripts/lm_study.sh start`` resumes a study from the checkout's results, not its commit's.

The study runs in a worktree at the (older) commit its runs are made at. That worktree holds its
commit's own results file, so on a fresh clone the script must replace the untouched copy with the
checkout's newer one, and must keep a copy its study has written to, tracked at that commit or not.
Each test builds a small repository with a stand-in Python that runs ``-c`` snippets (the script
counts runs with them) and exits at once otherwise, so nothing is trained.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FILE = "results/lm/round2.json"

pytestmark = pytest.mark.skipif(shutil.which("git") is None or shutil.which("setsid") is None,
                                reason="needs git and setsid")


def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def _write_runs(repo: Path, n: int) -> None:
    (repo / FILE).parent.mkdir(parents=True, exist_ok=True)
    (repo / FILE).write_text(json.dumps({"runs": [{"git_commit": "0" * 40, "i": i} for i in range(n)]}))


def _repo_with_an_older_run_commit(tmp_path: Path, tracked: bool = True) -> tuple[Path, str]:
    """A checkout whose results file has 5 runs, at a commit after the one its runs name.

    At that commit the file holds 2 runs (``tracked``) or does not exist yet.
    """
    repo = tmp_path / "main"
    (repo / "scripts").mkdir(parents=True)
    (repo / "results" / "lm").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "lm_study.sh", repo / "scripts" / "lm_study.sh")
    python = repo / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\n[ "$1" = -c ] && exec {sys.executable} "$@"\nexit 0\n')
    python.chmod(0o755)
    (repo / ".gitignore").write_text(".venv\nnode_modules\n")
    _git(repo, "init", "-q")
    if tracked:
        _write_runs(repo, 2)
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "the study's commit")
    run_commit = _git(repo, "rev-parse", "--short", "HEAD").strip()
    _write_runs(repo, 5)
    _git(repo, "add", FILE)
    _git(repo, "commit", "-qm", "results: 5 runs")
    # The corpus package is already there, so `start` does not call npm.
    worktree = tmp_path / f"run-{run_commit}"
    _git(repo, "worktree", "add", "-q", str(worktree), run_commit)
    (worktree / "node_modules" / "@stdlib" / "datasets-sotu").mkdir(parents=True)
    return repo, run_commit


def _start(repo: Path, commit: str) -> int:
    subprocess.run(["bash", "scripts/lm_study.sh", "start", commit], cwd=repo, check=True, capture_output=True,
                   env={**os.environ, "ROUND": "2"})
    worktree = repo.parent / f"run-{commit}"
    return len(json.loads((worktree / FILE).read_text())["runs"])


def test_start_replaces_the_worktrees_untouched_results_with_the_checkouts(tmp_path):
    repo, commit = _repo_with_an_older_run_commit(tmp_path)
    assert _start(repo, commit) == 5


def test_start_keeps_results_the_worktrees_study_has_written(tmp_path):
    repo, commit = _repo_with_an_older_run_commit(tmp_path)
    _write_runs(repo.parent / f"run-{commit}", 7)
    assert _start(repo, commit) == 7


def test_start_copies_the_checkouts_results_where_the_commit_has_none(tmp_path):
    repo, commit = _repo_with_an_older_run_commit(tmp_path, tracked=False)
    assert _start(repo, commit) == 5


def test_start_keeps_untracked_results_the_worktrees_study_has_written(tmp_path):
    repo, commit = _repo_with_an_older_run_commit(tmp_path, tracked=False)
    _write_runs(repo.parent / f"run-{commit}", 6)
    assert _start(repo, commit) == 6

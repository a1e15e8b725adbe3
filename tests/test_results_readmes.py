"""The results READMEs cannot go stale: a count a README states beside a results file (runs, seeds)
must be the count of that file, and no README states a run's progress ("not run yet", "in progress"),
which only the code that reads the files may say (``python -m stiefel_mini.evidence --files``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from stiefel_mini.evidence.__main__ import holdings

ROOT = Path(__file__).resolve().parents[1]
READMES = sorted((ROOT / "results").rglob("README.md"))
FILE = re.compile(r"`(?:results/)?(?:(cifar|grokking)/)?([\w.-]+\.json)`")
COUNT = re.compile(r"\b(\d[\d,]*) (runs|paired seeds|seeds)\b")
STATE = re.compile(r"not run yet|in progress|has not (?:been )?run|have not (?:been )?run|not been run|\*\*complete\*\*|"
                   r"still running|still lack", re.I)


def stale(readme: Path, held: dict[str, dict]) -> list[str]:
    """The lines of ``readme`` that state a progress, or a count that no file they name holds.

    A line (a table row, or a sentence up to its full stop) that names results files and states "N runs"
    or "N seeds" must agree with one of them: N runs its run count, N seeds the seeds of one of its arms
    or of all of them."""
    folder = readme.parent.name
    bad = [f"states a progress: {m.group(0)!r}" for m in STATE.finditer(readme.read_text())]
    for piece in re.split(r"\n(?=\|)|(?<=\.)\s+", readme.read_text()):
        names = {f"{m.group(1) or folder}/{m.group(2)}" for m in FILE.finditer(piece)}
        files = [held[n] for n in names if n in held]
        for m in COUNT.finditer(piece):
            n, what = int(m.group(1).replace(",", "")), m.group(2)
            if not files:
                bad.append(f"a count with no results file beside it: {m.group(0)!r} in {' '.join(piece.split())[:120]}")
            elif what == "runs" and n not in {f["runs"] for f in files}:
                bad.append(f"{m.group(0)!r}, but {sorted(names)} hold {[f['runs'] for f in files]} runs")
            elif what != "runs" and n not in {len(s) for f in files for s in [*f["arms"].values(),
                                                                             set().union(*f["arms"].values())]}:
                bad.append(f"{m.group(0)!r}, but no arm of {sorted(names)} has {n} seeds")
    return bad


@pytest.mark.parametrize("readme", READMES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_a_committed_results_readme_agrees_with_its_files(readme):
    bad = stale(readme, holdings())
    assert not bad, f"{readme.relative_to(ROOT)}: " + "\n".join(bad)


def test_a_stale_count_or_progress_is_caught(tmp_path):
    data = tmp_path / "results" / "grokking"
    data.mkdir(parents=True)
    runs = [{"arm": a, "seed": s} for a in ("adamw", "stiefel_learned") for s in range(8)]
    (data / "endpoint.json").write_text(json.dumps({"runs": runs}))
    held = holdings(str(tmp_path))
    assert held == {"grokking/endpoint.json": {"runs": 16, "arms": {"adamw": list(range(8)),
                                                                     "stiefel_learned": list(range(8))}}}
    readme = data / "README.md"
    readme.write_text("| `endpoint.json` | the endpoint study, 16 runs on 8 paired seeds | cmd |\n")
    assert stale(readme, held) == []
    readme.write_text("| `endpoint.json` | the endpoint study, 24 runs on 5 paired seeds | cmd |\n")
    assert len(stale(readme, held)) == 2
    readme.write_text("The endpoint study (`endpoint.json`) is in progress. The reference setting has not been run.\n")
    assert len(stale(readme, held)) == 2
    readme.write_text("Confirming seeds: 12 runs.\n")  # a count that names no file cannot be checked: refused
    assert len(stale(readme, held)) == 1

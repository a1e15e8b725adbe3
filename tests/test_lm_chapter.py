"""The language-model question on a complete study: the evidence layer's known answers and the chapter's
every cell, before the real study has paired seeds.

The study is made by the study's own scheduler (:func:`stiefel_mini.experiments.lm.plan.plan`) with
invented outcomes: each sweep is a bowl around a known best inside its grid, and on the paired seeds
every arm sits a fixed offset from AdamW (StiefelAdam 0.02 bits per byte lower on all eight seeds,
Muon 0.03, frozen frames 0.01 above StiefelAdam), so each comparison has one right answer. The
quick tier leaves this file out (``tests/conftest.py``): it executes the chapter.
"""

from __future__ import annotations

import copy
import json
import math
import shutil
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

from stiefel_mini import evidence
from stiefel_mini.evidence import plain
from stiefel_mini.evidence.claims import claim
from stiefel_mini.experiments.lm.config import STUDY
from stiefel_mini.experiments.lm.plan import plan
from stiefel_mini.resources import CHECKOUT_RESULTS
from tests.counterfactual import execute_chapters

ROOT = Path(__file__).resolve().parents[1]
CENTRE = {"adamw": 2e-3, "frozen": 2e-3, "stiefel": 0.03, "muon": 0.01, "muon_stiefel": 0.03}
"""Each sweep's invented best: the bottom of its bowl, inside the declared grid."""
OFFSET = {"adamw": 0.0, "stiefel": -0.02, "muon": -0.03, "frozen": -0.01, "muon_stiefel": -0.025}
"""Each arm's validation bits per byte on a paired seed, minus AdamW's."""


def _bpb(p: dict) -> float:
    if p["phase"] == "sweep":
        swept = STUDY.sweep(p["arm"]).swept
        return 1.7 + 0.05 * math.log2(p[swept] / CENTRE[p["arm"]]) ** 2
    return 1.6 + 0.01 * p["seed"] + OFFSET[p["arm"]]


def complete_runs(template: dict) -> list[dict]:
    """Every run of the study, as the scheduler asks for them, each a copy of ``template`` with the
    invented outcome: final and curve (the template's curve shifted to end there), Q/K step, samples."""
    runs: list[dict] = []
    while (state := plan(STUDY, runs)).ready:
        for p in state.ready:
            r = copy.deepcopy(template)
            r.update(p, val_bpb=_bpb(p), test_bpb=_bpb(p) + 0.01, diverged_at=None,
                     qk_step_mean=0.1 if p["arm"] in ("adamw", "muon") else 0.004 if p["arm"] != "frozen" else 0.0,
                     samples=[{"prompt": "Fellow citizens", "text": f" of {p['arm']}"}])
            shift = r["val_bpb"] - template["history"]["val_bpb"][-1]
            r["history"]["val_bpb"] = [b + shift for b in template["history"]["val_bpb"]]
            runs.append(r)
    return runs


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    """A copy of the committed results whose ``lm/study.json`` holds the complete invented study."""
    from stiefel_mini.experiments.records import load_results

    out = tmp_path_factory.mktemp("lm") / "results"
    shutil.copytree(CHECKOUT_RESULTS, out)
    real = load_results(out / "lm" / "study.json")
    template = next(r for r in real["runs"] if r["arm"] == "adamw")
    real["runs"] = complete_runs(template)
    (out / "lm" / "study.json").write_text(json.dumps(real))
    return out


def test_the_invented_study_is_complete_with_every_best_inside_its_grid(results):
    runs = json.loads((results / "lm" / "study.json").read_text())["runs"]
    state = plan(STUDY, runs)
    assert state.remaining == 0 and set(state.best) == set(CENTRE)
    for arm, best in state.best.items():
        grid = state.grids[arm]
        assert grid[0] < best[STUDY.sweep(arm).swept] < grid[-1], (arm, grid)
    assert sum(r["phase"] == "seeds" for r in runs) == len(CENTRE) * len(STUDY.seeds)


def test_each_comparison_gives_its_known_answer(results):
    v = evidence.evaluate(claim("lm_gain"), root=results.parent)
    rows = {r["label"].replace(", validation bits per byte", ""): r for r in v["primary"] + v["secondary"]}
    primary = rows["stiefel − adamw"]
    assert primary["n"] == 8 and primary["mean"] == pytest.approx(-0.02)
    assert (primary["wins"], primary["losses"]) == (8, 0) and primary["p"] == pytest.approx(2 / 256)
    assert rows["muon − adamw"]["mean"] == pytest.approx(-0.03)
    assert rows["stiefel − muon"]["mean"] == pytest.approx(0.01)
    assert rows["muon_stiefel − muon"]["mean"] == pytest.approx(0.005)
    assert rows["frozen − stiefel (cost of freezing)"]["mean"] == pytest.approx(0.01)
    reach = rows["stiefel − adamw, tokens to reach AdamW's final validation bits per byte"]
    assert reach["n"] == 8 and reach["mean"] < 0  # lower all along: AdamW's final loss is reached sooner
    assert rows["adamw's Q/K step / stiefel's"]["n"] == 8
    assert v["status"] not in ("pending", "not tested") and "StiefelAdam" in v["sentence"]
    tasks = plain.scale([v], root=results.parent)["tasks"]
    assert [(t["task"], t["model"]) for t in tasks] == [
        ("a language model on State of the Union addresses", "a transformer of width 256, 4 blocks of 4 heads")]


def test_the_chapter_runs_on_a_study_with_one_paired_seed(results, tmp_path):
    """The state the real study passes through: sweeps done, one paired seed of some arms."""
    partial = tmp_path / "results"
    shutil.copytree(results, partial)
    payload = json.loads((results / "lm" / "study.json").read_text())
    payload["runs"] = [r for r in payload["runs"] if r["phase"] == "sweep" or
                       (r["seed"] == 0 and r["arm"] in ("adamw", "stiefel", "frozen"))]
    (partial / "lm" / "study.json").write_text(json.dumps(payload))
    v = evidence.evaluate(claim("lm_gain"), root=tmp_path)
    assert v["primary"][0]["n"] == 1 and v["sentence"].lower().startswith("too few seeds to decide")
    nb = execute_chapters({"one": ("language_model", partial)}, ROOT / "book", workers=1)["one"]
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors


def test_the_chapter_shows_the_answer_curves_comparisons_and_samples(results):
    nb = execute_chapters({"complete": ("language_model", results)}, ROOT / "book", workers=1)["complete"]
    text = []
    figures = 0
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            figures += "image/svg+xml" in data or "image/png" in data
            html = BeautifulSoup(data.get("text/html", ""), "html.parser").get_text(" ")
            text.append(data.get("text/markdown", "") + html)
    page = " ".join(" ".join(text).split())
    assert "No answer yet" not in page and "no paired seed" not in page.lower()
    assert figures >= 2  # the sweeps and the curves against tokens
    for arm in CENTRE:  # as literal Markdown: underscores escaped
        assert "of " + arm.replace("_", "\\_") in page, f"no sample of {arm}"
    assert "muon_stiefel − muon" in page and "tokens to reach" in page
    assert "exact sign test, 8/8 wins, p = 0.0078 " in page  # each row its own p, not corrected across the table
    n = len(json.loads((results / "lm" / "study.json").read_text())["runs"])
    assert f"How these numbers were made: results/lm/study.json {n} runs" in page
    assert "all from committed code" in page
    # a secondary states its own result and p, shown, not corrected: never "too few seeds" at 8 of 8
    assert "too few seeds to decide: StiefelAdam behind Muon" not in page
    assert ("Against Muon, the optimizer a 2026 reader compares with: Muon ahead of AdamW on 8 of 8 seeds, by 0.030 "
            "bits per byte on average (p = 0.0078, shown, not corrected); Muon ahead of StiefelAdam on 8 of 8 seeds"
            in page)  # the answer, on the first screen
    first = next(i for i, c in enumerate(nb.cells) for o in c.get("outputs", [])
                 if "The answer." in o.get("data", {}).get("text/markdown", ""))
    assert first <= 2, first  # the answer opens the chapter: after the title and the Colab cell
    # the published GPT-2-small study is set beside its like here: manifold Muon's frames against plain Muon
    assert "found manifold Muon on the frames ahead of plain Muon; here:" in page
    assert "So, for a model like this one: **Muon on the hidden matrices, AdamW on the rest**" in page  # the summary

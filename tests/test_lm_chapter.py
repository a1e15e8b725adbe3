"""The language-model question on a complete study: the evidence layer's known answers and the chapter's
every cell, before the real study has paired seeds.

The study is made by the study's own plan (:func:`stiefel_mini.experiments.lm.plans.plan` of ``ROUND1``) with
invented outcomes: each sweep is a bowl around a known best inside its grid, and on the paired seeds
every arm sits a fixed offset from AdamW (StiefelAdam 0.02 bits per byte lower on all eight seeds,
Muon 0.03, frozen frames 0.01 above StiefelAdam), so each comparison has one right answer. The
quick tier leaves this file out (``tests/conftest.py``): it executes the chapter.
"""

from __future__ import annotations

import copy
import json
import math
import re
import shutil
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

from stiefel_mini import evidence
from stiefel_mini.evidence import plain
from stiefel_mini.evidence.claims import claim
from stiefel_mini.experiments.lm.plans import plan
from stiefel_mini.experiments.lm.studies import ROUND1, ROUND2, ROUND3
from stiefel_mini.resources import CHECKOUT_RESULTS
from tests.counterfactual import execute_chapters

ROOT = Path(__file__).resolve().parents[1]
CENTRE = {"adamw": 2e-3, "frozen": 2e-3, "stiefel": 0.03, "muon": 0.01, "muon_stiefel": 0.03}
"""Each sweep's invented best: the bottom of its bowl, inside the declared grid."""
OFFSET = {"adamw": 0.0, "stiefel": -0.02, "muon": -0.03, "frozen": -0.01, "muon_stiefel": -0.025}
"""Each arm's validation bits per byte on a paired seed, minus AdamW's."""


def _swept(arm: str) -> str:
    """The setting the first study sweeps for ``arm`` (one stage of one axis)."""
    return ROUND1.tuning(arm).stages[0][0][0]


def _bpb(p: dict) -> float:
    if p["phase"] == "sweep":
        swept = _swept(p["arm"])
        return 1.7 + 0.05 * math.log2(p[swept] / CENTRE[p["arm"]]) ** 2
    return 1.6 + 0.01 * p["seed"] + OFFSET[p["arm"]]


def invented(ready, template: dict, outcome) -> list[dict]:
    """Every run a scheduler asks for (``ready(runs)``, the points ready given the finished runs), each
    a copy of ``template`` with the point's fields and ``outcome(point)``'s (a dict of fields)."""
    runs: list[dict] = []
    while points := ready(runs):
        for p in points:
            r = copy.deepcopy(template)
            r.update(p, diverged_at=None, samples=[{"prompt": "Fellow citizens", "text": f" of {p['arm']}"}],
                     **outcome(p, r["history"]))
            runs.append(r)
    return runs


def complete_runs(template: dict) -> list[dict]:
    """Every run of the study, as the scheduler asks for them, each a copy of ``template`` with the
    invented outcome: final and curve (the template's curve shifted to end there), Q/K step, samples."""
    def outcome(p, h):
        return {"val_bpb": _bpb(p), "test_bpb": _bpb(p) + 0.01,
                "qk_step_mean": 0.1 if p["arm"] in ("adamw", "muon") else 0.004 if p["arm"] != "frozen" else 0.0,
                "history": {**h, "val_bpb": [b + _bpb(p) - h["val_bpb"][-1] for b in h["val_bpb"]]}}
    return invented(lambda runs: plan(ROUND1, runs).ready, template, outcome)


def results_with(folder: Path, name: str, complete) -> Path:
    """A copy of the committed results in ``folder`` whose ``lm/<name>.json`` holds ``complete(template)``'s
    runs, the template being the file's first AdamW run."""
    from stiefel_mini.experiments.records import load_results

    out = folder / "results"
    shutil.copytree(CHECKOUT_RESULTS, out)
    real = load_results(out / "lm" / f"{name}.json")
    real["runs"] = complete(next(r for r in real["runs"] if r["arm"] == "adamw"))
    (out / "lm" / f"{name}.json").write_text(json.dumps(real))
    return out


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    """A copy of the committed results whose ``lm/study.json`` holds the complete invented study."""
    return results_with(tmp_path_factory.mktemp("lm"), "study", complete_runs)


def test_the_invented_study_is_complete_with_every_best_inside_its_grid(results):
    runs = json.loads((results / "lm" / "study.json").read_text())["runs"]
    state = plan(ROUND1, runs)
    assert state.remaining == 0 and set(state.best) == set(CENTRE)
    for arm, best in state.best.items():
        grid = sorted({r[_swept(arm)] for r in runs if r["arm"] == arm and r["phase"] == "sweep"})
        assert grid[0] < best[_swept(arm)] < grid[-1], (arm, grid)
    assert sum(r["phase"] == "seeds" for r in runs) == len(CENTRE) * len(ROUND1.paired_seeds)


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
    assert "No answer yet" not in page and "No paired seed has run yet" not in page  # the first study's
    assert "No comparison has a paired seed yet" not in page
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


# ----------------------------------------------------------------------------------------------------
# The second study (round 2), invented the same way
# ----------------------------------------------------------------------------------------------------

CENTRE2 = {"adamw": ("lr", 2e-3), "adamw_qknorm": ("lr", 4e-3), "stiefel": ("frame_lr", 0.1),
           "muon": ("muon_lr", 0.01), "muon_qknorm": ("muon_lr", 0.01), "stiefel_muon": ("frame_lr", 0.01)}
"""Each round-2 grid's invented best (the swept field and its value), inside the declared grid."""
OFFSET2 = {"adamw": 0.0, "adamw_qknorm": -0.01, "stiefel": -0.02, "muon": -0.05, "muon_qknorm": -0.045,
           "stiefel_muon": -0.06}
"""Each arm's bits per byte minus AdamW's, in the sweeps and on the paired seeds; so the better AdamW-family
arm is AdamW with QK-norm, the better Muon-family arm Muon, and in the long phase StiefelAdam is a further
0.01 lower."""
LOGIT2 = {"adamw": 40.0, "adamw_qknorm": 8.0, "stiefel": 12.0, "muon": 30.0, "muon_qknorm": 8.0, "stiefel_muon": 10.0}
"""Each arm's largest attention logit at the end (from 1 at the start, linearly)."""


def _bpb2(p: dict) -> float:
    field, centre = CENTRE2[p["arm"]]
    base = 1.7 + OFFSET2[p["arm"]]
    if p["phase"] in ("sweep", "check"):
        worse = (p.get("warmup_frac") == 0.05) + (p.get("max_step") == 1.0) + (p.get("per_head") is False)
        return base + 0.05 * math.log2(p[field] / centre) ** 2 + 0.01 * worse
    return base - 0.1 + 0.01 * p["seed"] - (0.01 if p["phase"] == "long" and p["arm"] == "stiefel" else 0.0)


def complete_runs2(template: dict) -> list[dict]:
    """Every run of round 2 as its scheduler asks for them, each a copy of ``template`` with the
    invented outcome (validation and test bits per byte, the curves, the largest logit and entropy)."""
    def outcome(p, h):
        n, top = len(h["step"]), LOGIT2[p["arm"]]
        logit = [1.0 + top * i / (n - 1) for i in range(n)]
        entropy = [3.0 - 2.0 * i / (n - 1) * top / 40 for i in range(n)]
        curve = [b + _bpb2(p) - h["val_bpb"][-1] for b in h["val_bpb"]]
        tokens = [t * p["steps"] / ROUND2.steps for t in h["tokens"]]
        return {"val_bpb": _bpb2(p), "test_bpb": _bpb2(p) + 0.01, "max_logit": logit[-1], "min_entropy": entropy[-1],
                "logit_scale": "learned" if p["arm"] in ("stiefel", "stiefel_muon") else None,
                "history": {**h, "tokens": tokens, "val_bpb": curve, "max_logit": logit, "min_entropy": entropy}}
    return invented(lambda runs: plan(ROUND2, runs).ready, template, outcome)


@pytest.fixture(scope="module")
def results2(tmp_path_factory) -> Path:
    """A copy of the committed results whose ``lm/round2.json`` holds the complete invented round 2."""
    return results_with(tmp_path_factory.mktemp("lm2"), "round2", complete_runs2)


def test_round2_gives_each_declared_comparison_its_known_answer(results2):
    runs = json.loads((results2 / "lm" / "round2.json").read_text())["runs"]
    state = plan(ROUND2, runs)
    assert state.remaining == 0 and state.better == {"adamw": "adamw_qknorm", "muon": "muon"}
    got = {k: evidence.evaluate(claim(k), root=results2.parent) for k in ("lm2_stiefel_adam", "lm2_stiefel_muon",
                                                                        "lm2_long")}
    for key, n, mean, family in (("lm2_stiefel_adam", 16, -0.01, "AdamW with QK-norm"),
                                 ("lm2_stiefel_muon", 16, -0.01, "Muon"), ("lm2_long", 8, -0.02, "AdamW with QK-norm")):
        row = got[key]["primary"][0]
        assert (row["n"], row["wins"]) == (n, n) and row["mean"] == pytest.approx(mean), key
        assert f"ahead of {family} on {n} of {n} seeds" in got[key]["sentence"], got[key]["sentence"]
    rows = {r["label"]: r for r in got["lm2_stiefel_adam"]["secondary"]}
    assert rows["stiefel − adamw, max_logit at the last evaluation"]["mean"] == pytest.approx(12.0 - 40.0)
    qs = [v for v in evidence.questions(results2.parent, untested=False) if v["key"].startswith("lm2")]
    line = " ".join(plain.bottom_line(evidence.verdicts(results2.parent), root=results2.parent, questions=qs))
    assert ("In a second study, against stronger baselines: StiefelAdam ahead of AdamW with QK-norm on 16 of 16 "
            "seeds, by 0.010 bits per byte." in line)
    assert "Over three times the steps" not in line and "StiefelMuon" not in line  # those are the table's rows
    assert "Over three times the steps: StiefelAdam ahead of AdamW with QK-norm on 8 of 8 seeds" in plain.language_model(
        got["lm2_long"])
    rows = plain.advice([got["lm2_stiefel_adam"], got["lm2_stiefel_muon"]], root=results2.parent)
    assert [r["try"].split(":")[0].split(" on ")[0] for r in rows] == ["StiefelAdam", "StiefelMuon"]
    assert rows[1]["measured"].startswith("StiefelMuon ahead of Muon on 16 of 16 seeds")
    unresolved = copy.deepcopy(got["lm2_stiefel_adam"])
    unresolved["primary"][0]["resolved"] = False
    assert plain.advice([unresolved])[0]["try"] == "AdamW with QK-norm (StiefelAdam made no clear difference against it)"


def test_the_chapter_shows_the_second_study_answer_curves_logits_and_its_like(results2):
    nb = execute_chapters({"round2": ("language_model", results2)}, ROOT / "book", workers=1)["round2"]
    text, figures = [], 0
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            assert out.get("output_type") != "error", out
            data = out.get("data", {})
            figures += "image/svg+xml" in data or "image/png" in data
            text.append(data.get("text/markdown", "") + BeautifulSoup(data.get("text/html", ""), "html.parser")
                        .get_text(" "))
    page = " ".join(" ".join(text).split())
    assert ("**The second study**, against stronger baselines (test bits per byte): StiefelAdam ahead of AdamW with "
            "QK-norm on 16 of 16 seeds, by 0.010 bits per byte. With manifold Muon on the frames" in page)
    assert "has no paired seed yet" not in page and "No comparison of the second study" not in page
    assert re.search(r"All \d+ of its runs have finished: \d+ sweep runs, \d+ runs on the paired seeds, \d+ "
                     r"learning-rate checks at the longer length, \d+ long runs\.", page)
    assert figures >= 4  # the sweeps, both studies' curves, the logits and entropy
    assert "median and range over seeds 0-15 (the paired seeds)" in page
    # The invented curves: StiefelAdam's logit 1 -> 13 and entropy 3 -> 2.4, QK-norm's 1 -> 9 and 2.6, StiefelMuon's
    # 1 -> 11 and 2.5; uniform attention over 128 positions has 3.909 nats.
    assert ("StiefelAdam's attention sharpened more than AdamW with QK-norm's: at the end its most peaked head was "
            "1.51 nats below *uniform* attention" in page)
    assert "and AdamW with QK-norm's 1.31 nats below (StiefelMuon's 1.41)" in page
    assert re.search(r"at lr 0\.002 over this schedule the scale can grow at most 5\.6-fold, while AdamW with "
                     r"QK-norm's largest logit grew 9\.0-fold\. StiefelAdam's grew 13\.0-fold \(median over its 16 "
                     r"seeds\), StiefelMuon's 11\.0-fold", page)
    assert ("In the second study StiefelAdam's attention ended 1.51 nats below uniform, AdamW with QK-norm's 1.31: its "
            "logit scale, trained at AdamW's lr, could grow at most 5.6-fold in a run; the third study" in page)  # the summary
    assert ("the GPT-2-small study found manifold Muon on the frames ahead of plain Muon; here: StiefelMuon ahead "
            "of Muon on 16 of 16 seeds" in page)
    assert "Secondary comparisons (" in page and "stiefel − better of adamw / adamw_qknorm" in page
    assert "What each arm costs." in page and re.search(r"\| StiefelMuon \| 1\.\d\dx \(", page)  # its step over AdamW's
    assert ("For a small language model, against the better Muon (with or without QK-norm, warm-up and lr tuned): "
            "**StiefelMuon: manifold Muon on the Q/K frames" in page)  # the summary's advice


def test_the_chapter_runs_on_a_second_study_with_one_paired_seed(results2, tmp_path):
    """The state the real round 2 passes through: sweeps done, one paired seed of some arms, no long run."""
    partial = tmp_path / "results"
    shutil.copytree(results2, partial)
    payload = json.loads((results2 / "lm" / "round2.json").read_text())
    payload["runs"] = [r for r in payload["runs"] if r["phase"] == "sweep" or
                       (r["phase"] == "paired" and r["seed"] == 0 and r["arm"] in ("stiefel", "adamw_qknorm"))]
    (partial / "lm" / "round2.json").write_text(json.dumps(payload))
    v = evidence.evaluate(claim("lm2_stiefel_adam"), root=tmp_path)
    assert v["primary"][0]["n"] == 1 and v["sentence"].lower().startswith("too few seeds to decide")
    assert evidence.evaluate(claim("lm2_long"), root=tmp_path)["status"] == "not tested yet"
    nb = execute_chapters({"one": ("language_model", partial)}, ROOT / "book", workers=1)["one"]
    outs = [o for c in nb.cells for o in c.get("outputs", [])]
    assert not [o for o in outs if o.get("output_type") == "error"]
    page = " ".join(o.get("data", {}).get("text/markdown", "") for o in outs)
    assert "(the sweep seeds: the paired seeds have not run for every arm yet)" in page
    # The real study's better AdamW-family arm may be plain AdamW: the sentence still names it.
    assert ("(test bits per byte): Too few seeds to decide: StiefelAdam ahead of AdamW with QK-norm on 1 of 1 seeds "
            "(16 planned)."
            in page)


def test_the_chapter_runs_on_a_second_study_whose_long_phase_has_begun(results2, tmp_path):
    """The state after the paired phase: the long phase's lr checks done, one long seed of each arm."""
    partial = tmp_path / "results"
    shutil.copytree(results2, partial)
    payload = json.loads((results2 / "lm" / "round2.json").read_text())
    payload["runs"] = [r for r in payload["runs"] if r["phase"] != "long" or r["seed"] == 0]
    assert {r["arm"] for r in payload["runs"] if r["phase"] == "long"} == {"stiefel", "adamw_qknorm"}
    (partial / "lm" / "round2.json").write_text(json.dumps(payload))
    v = evidence.evaluate(claim("lm2_long"), root=tmp_path)
    assert v["primary"][0]["n"] == 1 and v["primary"][0]["planned"] == 8
    assert "StiefelAdam ahead of AdamW with QK-norm on 1 of 1 seeds (8 planned)" in plain.language_model(v)
    nb = execute_chapters({"long": ("language_model", partial)}, ROOT / "book", workers=1)["long"]
    outs = [o for c in nb.cells for o in c.get("outputs", [])]
    assert not [o for o in outs if o.get("output_type") == "error"]
    page = " ".join(o.get("data", {}).get("text/markdown", "") for o in outs)
    assert "on 16 of 16 seeds" in page and "on 1 of 1 seeds (8 planned)" in page
    assert re.search(r"Finished so far: [^.]*, 2 long runs, about \d\d% of its training\.", page)


def test_the_second_study_sentence_names_plain_adamw_as_its_baseline():
    """The committed round 2 chose plain AdamW as its AdamW-family arm; a one-line answer still names it."""
    v = evidence.evaluate(claim("lm2_stiefel_adam"))
    assert v["primary"][0]["n"] >= 1
    text = plain.language_model(v)
    assert re.search(r"^In a second study, against stronger baselines: .*StiefelAdam (ahead of|behind) AdamW on \d+ of "
                     r"\d+ seeds", text), text
    assert plain.language_model(v, named=True)[0].isupper()


# ----------------------------------------------------------------------------------------------------
# The third study (round 3), against the invented round 2
# ----------------------------------------------------------------------------------------------------

SCALE3 = {"stiefel_scale": 0.3, "stiefel_muon_scale": 0.1}
"""Each round-3 sweep's invented best scale lr, inside the declared grid."""
OFFSET3 = {"stiefel_scale": -0.03, "stiefel_muon_scale": -0.07}
"""Each round-3 arm's bits per byte minus round 2's AdamW: 0.02 ahead of AdamW with QK-norm, 0.01 of StiefelMuon."""


@pytest.fixture(scope="module")
def results3(results2, tmp_path_factory) -> Path:
    """The invented round 2 and a complete invented round 3 whose runs all started after its declaration."""
    out = tmp_path_factory.mktemp("lm3") / "results"
    shutil.copytree(results2, out)
    r2 = json.loads((out / "lm" / "round2.json").read_text())
    template = next(r for r in r2["runs"] if r["arm"] == "stiefel" and r["phase"] == "paired")

    def outcome(p, h):
        bpb = 1.7 + OFFSET3[p["arm"]] + (0.05 * math.log2(p["scale_lr"] / SCALE3[p["arm"]]) ** 2
                                         if p["phase"] == "sweep" else -0.1 + 0.01 * p["seed"])
        n = len(h["step"])
        return {"val_bpb": bpb, "test_bpb": bpb + 0.01, "started_utc": "2026-12-06T00:00:00+00:00",
                "history": {**h, "max_logit": [1.0 + 20.0 * i / (n - 1) for i in range(n)],
                            "min_entropy": [3.9 - 1.5 * i / (n - 1) for i in range(n)]}}
    runs = invented(lambda runs: plan(ROUND3, runs).ready, template, outcome)
    (out / "lm" / "round3.json").write_text(json.dumps({**r2, "runs": runs}))
    return out


def test_the_chapter_reports_the_third_study_against_the_second_studys_baselines(results3):
    v = evidence.evaluate(claim("lm3_scale"), root=results3.parent)
    row = v["primary"][0]
    assert (row["n"], row["wins"]) == (16, 16) and row["mean"] == pytest.approx(-0.02)
    assert v["confirmation"]["status"] == "confirmed"  # round 2's baseline runs count, though older
    assert ("every StiefelAdam (own scale lr) run started after the comparison was declared, against AdamW with "
            "QK-norm's earlier runs" in v["sentence"])
    nb = execute_chapters({"r3": ("language_model", results3)}, ROOT / "book", workers=1)["r3"]
    outs = [o for c in nb.cells for o in c.get("outputs", [])]
    assert not [o for o in outs if o.get("output_type") == "error"]
    page = " ".join(" ".join(o.get("data", {}).get("text/markdown", "") + BeautifulSoup(
        o.get("data", {}).get("text/html", ""), "html.parser").get_text(" ") for o in outs).split())
    assert "All 48 of its runs have finished: 16 sweep runs, 32 runs on the paired seeds." in page
    assert "With its logit scale at an lr of its own, StiefelAdam beats the better AdamW" in page
    assert "StiefelAdam (own scale lr) ahead of AdamW with QK-norm on 16 of 16 seeds" in page
    assert "| StiefelAdam (own scale lr) | 0.3 | 2 | 1.670 |" in page  # the sweep table's best row
    # the invented round 3: entropy 3.9 -> 2.4, largest logit 1 -> 21; round 2's StiefelAdam 3.0 -> 2.4, 1 -> 13
    assert ("StiefelAdam (own scale lr)'s most peaked head ended 1.51 nats below uniform attention (StiefelAdam's "
            "1.51), its largest logit 21.0 times its start (13.0)." in page)
    assert "How these numbers were made: results/lm/round3.json" in page


def test_the_intros_bottom_line_says_the_third_study_once_it_has_a_paired_seed(results2, results3):
    for root, said in ((results2, False), (results3, True)):
        qs = [v for v in evidence.questions(root.parent, untested=False) if v["key"].startswith(("lm2", "lm3"))]
        line = " ".join(plain.bottom_line(evidence.verdicts(root.parent), root=root.parent, questions=qs))
        assert ("With its logit scale at an lr of its own: StiefelAdam (own scale lr) ahead of AdamW with QK-norm on "
                "16 of 16 seeds, by 0.020 bits per byte." in line) == said, line


def test_the_advice_for_a_language_model_takes_the_third_studys_answer_with_the_seconds_beside_it(results3):
    root = results3.parent
    rows = plain.advice([evidence.evaluate(claim(k), root=root) for k in ("lm2_stiefel_adam", "lm2_stiefel_muon",
                                                                          "lm3_scale")], root=root)
    adam = rows[0]
    assert adam["try"] == "StiefelAdam on the Q/K frames, its logit scale at an lr of its own, AdamW on the rest"
    assert adam["measured"].startswith("StiefelAdam (own scale lr) ahead of AdamW with QK-norm on 16 of 16 seeds")
    assert "; with the scale at AdamW's lr (the second study): StiefelAdam ahead of AdamW with QK-norm" in adam["measured"]
    assert rows[1]["try"].startswith("StiefelMuon")  # the Muon family's row is the second study's

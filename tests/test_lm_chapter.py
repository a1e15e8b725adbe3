"""The language-model questions on complete invented studies: the evidence layer's known answers, the
chapter's and its appendix page's every cell, before the real studies have paired seeds.

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
from stiefel_mini.evidence import cards, plain
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


def _page(nb) -> tuple[str, int]:
    """An executed notebook's visible text (markdown and HTML outputs) and its number of figures (SVG or
    PNG outputs, and images in HTML outputs, the responsive figures), no error allowed."""
    text, figures = [], 0
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            assert out.get("output_type") != "error", out
            data = out.get("data", {})
            html = data.get("text/html", "")
            figures += "image/svg+xml" in data or "image/png" in data or html.count("<img class=\"sm-wide\"")
            text.append(data.get("text/markdown", "") + BeautifulSoup(html, "html.parser").get_text(" "))
    return " ".join(" ".join(text).split()), figures


def test_the_appendix_runs_on_a_study_with_one_paired_seed(partials, executed):
    """The state the real study passed through: sweeps done, one paired seed of some arms."""
    v = evidence.evaluate(claim("lm_gain"), root=partials["first_one_seed"].parent)
    assert v["primary"][0]["n"] == 1 and v["sentence"].lower().startswith("too few seeds to decide")
    _page(executed("first_one_seed"))


def test_the_appendix_shows_the_first_studys_sweeps_curves_comparisons_and_samples(results, executed):
    page, figures = _page(executed("first_complete"))
    assert "No paired seed has run yet" not in page
    assert figures >= 2  # the sweeps and the curves against tokens
    for arm in CENTRE:  # as literal Markdown: underscores escaped
        assert "of " + arm.replace("_", "\\_") in page, f"no sample of {arm}"
    assert "muon_stiefel − muon" in page and "tokens to reach" in page
    assert "exact sign test, 8/8 wins, p = 0.0078 " in page  # each row its own p, not corrected across the table
    n = len(json.loads((results / "lm" / "study.json").read_text())["runs"])
    assert f"How these numbers were made: results/lm/study.json {n} runs" in page
    assert "all from committed code" in page


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
    """A copy of the committed results whose ``lm/round2.json`` holds the complete invented round 2, and no
    third study (the state before it)."""
    out = results_with(tmp_path_factory.mktemp("lm2"), "round2", complete_runs2)
    (out / "lm" / "round3.json").unlink()
    (out / "lm" / "round4.json").unlink(missing_ok=True)
    return out


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
    qs = evidence.questions(results2.parent, untested=False)
    adam = {c["arm"]: c for c in cards.configurations(qs)}["StiefelAdam"]
    assert adam["best"]["arm"] == "stiefel" and not adam["weaker"]  # no third study: one configuration
    line = dict(next(c for c in cards.cards([], qs) if c["key"] == "language_model")["lines"])
    assert line["StiefelAdam"] == ("with the logit scale at AdamW's lr, 0.010 bits per byte ahead of AdamW with "
                                   "QK-norm on 16 of 16 seeds")
    assert line["Three times the steps"].startswith("with the logit scale at AdamW's lr, 0.020 bits per byte ahead")
    rows = plain.advice([got["lm2_stiefel_adam"], got["lm2_stiefel_muon"]], root=results2.parent)
    lead, *rows = rows  # the better Muon against the better AdamW first, then each Stiefel arm
    assert lead["situation"].startswith("a small language model (GPT") and lead["try"].startswith("Muon:")
    assert [r["try"].split(":")[0].split(" on ")[0] for r in rows] == ["StiefelAdam", "StiefelMuon"]
    assert rows[1]["measured"].startswith("StiefelMuon with the logit scale at AdamW's lr, 0.010 bits per byte "
                                          "ahead of Muon on 16 of 16 seeds")
    unresolved = copy.deepcopy(got["lm2_stiefel_adam"])
    unresolved["primary"][0]["resolved"] = False  # its test no longer passes, its interval still excludes zero
    assert plain.advice([unresolved])[0]["try"] == ("AdamW with QK-norm (StiefelAdam, at its best, leaned without "
                                                    "resolving against it)")


def test_the_chapter_and_its_appendix_show_the_second_study(executed):
    page, figures = _page(executed("second_chapter"))
    assert ("No reason to switch" not in page and "Worth a try: with the logit scale at AdamW's lr, StiefelAdam beat "
            "AdamW with QK-norm" in page)
    assert "StiefelAdam : with the logit scale at AdamW's lr, 0.010 bits per byte ahead of AdamW with QK-norm" in page
    assert figures >= 1  # the temperature
    # the table of absolute results: each arm's mean test bits per byte and step time, best first
    assert re.search(r"\| StiefelMuon \| the logit scale at AdamW's lr \| 1\.\d{3} \(1\.\d{3}-1\.\d{3}\) \| 1\.\d\dx \|",
                     page), page
    assert "not yet like for like" in page and "has no results in this copy of the book yet" in page
    appendix, figures = _page(executed("second_appendix"))
    assert re.search(r"All \d+ of its runs have finished: \d+ sweep runs, \d+ runs on the paired seeds, \d+ "
                     r"learning-rate checks at the longer length, \d+ long runs\.", appendix)
    assert figures >= 4  # the first study's sweeps and curves, the second study's curves and logits
    assert "stiefel − better of adamw / adamw_qknorm" in appendix and "arms measured side by side in one run" in appendix
    assert re.search(r"\| StiefelMuon \| [\d, ]+ \| 1\.\d\dx \(", appendix)  # its studies, its step over AdamW's


def test_the_chapter_runs_on_a_second_study_with_one_paired_seed(partials, executed):
    """The state the real round 2 passed through: sweeps done, one paired seed of some arms, no long run."""
    root = partials["second_one_seed"].parent
    v = evidence.evaluate(claim("lm2_stiefel_adam"), root=root)
    assert v["primary"][0]["n"] == 1 and v["sentence"].lower().startswith("too few seeds to decide")
    assert evidence.evaluate(claim("lm2_long"), root=root)["status"] == "not tested yet"
    page, _ = _page(executed("second_one_seed"))
    assert "with the logit scale at AdamW's lr, too few seeds to decide against AdamW with QK-norm" in page


def test_the_appendix_runs_on_a_second_study_whose_long_phase_has_begun(partials, executed):
    """The state after the paired phase: the long phase's lr checks done, one long seed of each arm."""
    partial = partials["second_long_begun"]
    runs = json.loads((partial / "lm" / "round2.json").read_text())["runs"]
    assert {r["arm"] for r in runs if r["phase"] == "long"} == {"stiefel", "adamw_qknorm"}
    v = evidence.evaluate(claim("lm2_long"), root=partial.parent)
    assert v["primary"][0]["n"] == 1 and v["primary"][0]["planned"] == 8
    assert "on 1 of 1 seeds (8 planned)" in v["sentence"]
    page, _ = _page(executed("second_long_begun"))
    assert re.search(r"Finished so far: [^.]*, 2 long runs, about \d\d% of its training\.", page)


def test_the_cards_name_plain_adamw_as_the_committed_baseline():
    """The committed round 2 chose plain AdamW as its AdamW-family arm; the cards name it."""
    qs = evidence.questions(untested=False)
    adam = {c["arm"]: c for c in cards.configurations(qs)}["StiefelAdam"]
    assert adam["best"]["n"] >= 1 and evidence.words.side_names(adam["best"])[1] == "AdamW"
    assert re.search(r"(against|ahead of|behind) AdamW\b", cards.configuration_text(adam))


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


# ----------------------------------------------------------------------------------------------------
# The chapter executions, all at once
# ----------------------------------------------------------------------------------------------------

def _with_runs(src: Path, dst: Path, name: str, keep) -> Path:
    """A copy of the results folder ``src`` at ``dst`` whose ``lm/<name>.json`` keeps the runs ``keep(run)``."""
    shutil.copytree(src, dst)
    payload = json.loads((src / "lm" / f"{name}.json").read_text())
    payload["runs"] = [r for r in payload["runs"] if keep(r)]
    (dst / "lm" / f"{name}.json").write_text(json.dumps(payload))
    return dst


@pytest.fixture(scope="module")
def partials(results, results2, tmp_path_factory) -> dict[str, Path]:
    """The states the real studies passed through, each a results folder: the first study with its sweeps
    and one paired seed of some arms; round 2 with its sweeps and one paired seed of two arms, no long run;
    round 2 with its long phase begun (the lr checks, one long seed of each arm)."""
    base = tmp_path_factory.mktemp("partial")
    return {
        "first_one_seed": _with_runs(results, base / "first" / "results", "study", lambda r: r["phase"] == "sweep" or (
            r["seed"] == 0 and r["arm"] in ("adamw", "stiefel", "frozen"))),
        "second_one_seed": _with_runs(results2, base / "second" / "results", "round2", lambda r: r["phase"] == "sweep"
                                      or (r["phase"] == "paired" and r["seed"] == 0
                                          and r["arm"] in ("stiefel", "adamw_qknorm"))),
        "second_long_begun": _with_runs(results2, base / "long" / "results", "round2",
                                        lambda r: r["phase"] != "long" or r["seed"] == 0),
    }


EXECUTIONS = {"first_one_seed": "appendix_language_model", "first_complete": "appendix_language_model",
              "second_chapter": "language_model", "second_appendix": "appendix_language_model",
              "second_one_seed": "language_model", "second_long_begun": "appendix_language_model",
              "third_chapter": "language_model", "third_appendix": "appendix_language_model"}
"""Each execution the tests read: its chapter (its results folder: :func:`executed`)."""
READS = {"test_the_appendix_runs_on_a_study_with_one_paired_seed": ("first_one_seed",),
         "test_the_appendix_shows_the_first_studys_sweeps_curves_comparisons_and_samples": ("first_complete",),
         "test_the_chapter_and_its_appendix_show_the_second_study": ("second_chapter", "second_appendix"),
         "test_the_chapter_runs_on_a_second_study_with_one_paired_seed": ("second_one_seed",),
         "test_the_appendix_runs_on_a_second_study_whose_long_phase_has_begun": ("second_long_begun",),
         "test_the_chapter_reports_the_third_study_against_the_second_studys_baselines": ("third_chapter",
                                                                                         "third_appendix")}
"""The executions each test reads, so that those of the collected tests run together; one a test reads
that is not listed here runs when the test asks for it."""


@pytest.fixture(scope="module")
def executed(request, results, results2, results3, partials):
    """``executed(key)``: the chapter of :data:`EXECUTIONS` executed on its results folder. The executions
    of the collected tests (:data:`READS`) run before the first test reads one, as many kernels at once as
    there are CPUs (:func:`tests.counterfactual.execute_chapters`); each is executed once for all tests."""
    folders = {"first_complete": results, "second_chapter": results2, "second_appendix": results2,
               "third_chapter": results3, "third_appendix": results3, **partials}
    names = {item.originalname for item in request.session.items if item.module is request.module}
    done = execute_chapters({k: (EXECUTIONS[k], folders[k]) for k in sorted({k for n in names
                                                                             for k in READS.get(n, ())})}, ROOT / "book")

    def of(key: str):
        if key not in done:
            done.update(execute_chapters({key: (EXECUTIONS[key], folders[key])}, ROOT / "book"))
        return done[key]
    return of


def test_the_chapter_reports_the_third_study_against_the_second_studys_baselines(results3, executed):
    v = evidence.evaluate(claim("lm3_scale"), root=results3.parent)
    row = v["primary"][0]
    assert (row["n"], row["wins"]) == (16, 16) and row["mean"] == pytest.approx(-0.02)
    # every StiefelAdam run of round 3 started after its declaration; round 2's baseline runs by design
    assert v["confirmation"]["status"] == "declared before its runs"
    assert "declared before its runs, against AdamW with QK-norm's earlier runs" in v["sentence"]
    page, _ = _page(executed("third_chapter"))
    assert "Worth a try: with the logit scale at an lr of its own, StiefelAdam beat AdamW with QK-norm" in page
    assert ("StiefelAdam : with the logit scale at an lr of its own, 0.020 bits per byte ahead of AdamW with QK-norm "
            "on 16 of 16 seeds; with the logit scale at AdamW's lr, 0.010 bits per byte ahead") in page
    # the invented round 3: largest logit 1 -> 21, entropy 3.9 -> 2.4 (uniform over 128 positions: 3.909 nats)
    assert "StiefelAdam's largest logit then grew 21.0-fold and its most peaked head ended 1.51 nats below uniform" in page
    assert "How these numbers were made: results/lm/round3.json" in page
    appendix, _ = _page(executed("third_appendix"))
    assert "All 48 of its runs have finished: 16 sweep runs, 32 runs on the paired seeds." in appendix
    assert "| StiefelAdam (own scale lr) | 0.3 | 2 | 1.670 |" in appendix  # the sweep table's best row


def test_the_cards_quote_the_third_study_once_it_has_a_paired_seed(results2, results3):
    for root, best in ((results2, "with the logit scale at AdamW's lr, "), (results3, "with the logit scale at an lr "
                                                                                       "of its own, ")):
        qs = evidence.questions(root.parent, untested=False)
        card = next(c for c in cards.cards(evidence.verdicts(root.parent), qs) if c["key"] == "language_model")
        assert dict(card["lines"])["StiefelAdam"].startswith(best), card


def test_the_advice_for_a_language_model_takes_the_best_configuration_with_the_other_beside_it(results3):
    root = results3.parent
    rows = plain.advice([evidence.evaluate(claim(k), root=root) for k in ("lm2_stiefel_adam", "lm2_stiefel_muon",
                                                                          "lm3_scale")], root=root)
    adam = next(r for r in rows if r["measured"].startswith("StiefelAdam"))
    assert adam["try"] == ("StiefelAdam on the Q/K frames, AdamW on the rest, with the logit scale at an lr of its "
                           "own")
    assert adam["measured"].startswith("StiefelAdam with the logit scale at an lr of its own, 0.020 bits per byte "
                                       "ahead of AdamW with QK-norm on 16 of 16 seeds")
    assert "; with the logit scale at AdamW's lr, 0.010 bits per byte ahead of AdamW with QK-norm" in adam["measured"]
    muon = next(r for r in rows if r["measured"].startswith("StiefelMuon"))
    assert muon["try"].startswith("StiefelMuon")

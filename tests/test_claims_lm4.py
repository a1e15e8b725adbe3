"""The fourth language-model study's declared questions on a complete invented study: the plan runs to its
end, the evidence layer gives each primary and secondary its known answer, and the language-model card,
Part IV's advice, the chapter, the intro and "Which tool" report it, before the real runs finish.

The study is made by its own plan (:func:`stiefel_mini.experiments.lm.plans.plan` of ``ROUND4``), each sweep
a landscape whose best is inside every grid, so no grid grows; on the check and long phases every arm sits a
fixed offset from AdamW. The better AdamW-family arm is AdamW with QK-norm, the better Muon-family arm is
Muon; StiefelAdam is 0.02 bits per byte below the first, StiefelMuon 0.01 below Muon, and All-Stiefel 0.01
above Muon, on all eight paired seeds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stiefel_mini import evidence
from stiefel_mini.evidence.claims import claim
from stiefel_mini.evidence.claims_lm4 import LM4_CLAIMS, LM4_SEEDS
from stiefel_mini.experiments.lm.plans import plan
from stiefel_mini.experiments.lm.studies import ROUND4
from tests.test_lm_chapter import invented, results_with

ROOT = Path(__file__).resolve().parents[1]

OFFSET4 = {"adamw": 0.0, "adamw_qknorm": -0.01, "muon": -0.05, "muon_qknorm": -0.045, "stiefel": -0.03,
           "stiefel_muon": -0.06, "all_stiefel": -0.04}
"""Each arm's bits per byte minus AdamW's, in every phase."""
BEST4 = {"lr": 2e-3, "warmup_frac": {"adamw": 0.25, "adamw_qknorm": 0.25, "stiefel": 0.25},
         "scale_lr": {"adamw_qknorm": 0.01, "muon_qknorm": 0.01, "stiefel": 0.1, "stiefel_muon": 0.1},
         "muon_lr": {"muon": 0.01, "muon_qknorm": 0.04, "stiefel_muon": 0.01},
         "frame_lr": {"stiefel": 0.3, "stiefel_muon": 0.02, "all_stiefel": 0.02}}
"""The invented best of each swept setting, the middle of its declared grid; a Muon arm's short warm-up
is best at 0.05."""
LOGIT4 = {"adamw": 40.0, "adamw_qknorm": 8.0, "muon": 30.0, "muon_qknorm": 8.0, "stiefel": 12.0,
          "stiefel_muon": 10.0, "all_stiefel": 5.0}
"""Each arm's largest attention logit at the last evaluation."""


def _best(field: str, arm: str):
    best = BEST4[field] if field in BEST4 else None
    if isinstance(best, dict):
        return best.get(arm, 0.05 if field == "warmup_frac" else None)
    return best


def _bpb4(p: dict) -> float:
    """Validation bits per byte: 0.01 worse for each swept setting off its best, 0.001 per seed on the
    decisive phase (so that the seeds differ and every pair keeps its offset)."""
    base = 1.7 + OFFSET4[p["arm"]]
    if p["phase"] in ("sweep", "check"):
        off = [f for f in ("lr", "warmup_frac", "scale_lr", "muon_lr", "frame_lr")
               if _best(f, p["arm"]) is not None and p.get(f) is not None and p[f] != _best(f, p["arm"])]
        return base + 0.01 * len(off)
    return base - 0.1 + 0.001 * p["seed"]


def complete_runs4(template: dict) -> list[dict]:
    """Every run of the fourth study as its plan asks for them, each a copy of ``template`` with the
    invented outcome: final bits per byte, the validation curve shifted to end there, tokens in
    proportion to the run's steps, the largest logit and the lowest entropy."""
    def outcome(p, h):
        top = LOGIT4[p["arm"]]
        n = len(h["step"])
        return {"val_bpb": _bpb4(p), "test_bpb": _bpb4(p) + 0.01, "max_logit": top, "min_entropy": 3.0 - top / 20,
                "history": {**h, "tokens": [t * p["steps"] / ROUND4.steps for t in h["tokens"]],
                            "val_bpb": [b + _bpb4(p) - h["val_bpb"][-1] for b in h["val_bpb"]],
                            "max_logit": [1.0 + (top - 1.0) * i / (n - 1) for i in range(n)],
                            "min_entropy": [3.0 - top / 20 * i / (n - 1) for i in range(n)]}}
    return invented(lambda runs: plan(ROUND4, runs).ready, template, outcome)


@pytest.fixture(scope="module")
def results4(tmp_path_factory) -> Path:
    """A copy of the committed results whose ``lm/round4.json`` holds the complete invented fourth study."""
    return results_with(tmp_path_factory.mktemp("lm4"), "round4", complete_runs4)


def test_the_invented_fourth_study_runs_its_plan_to_the_end(results4):
    runs = json.loads((results4 / "lm" / "round4.json").read_text())["runs"]
    state = plan(ROUND4, runs)
    assert state.remaining == 0 and not state.ready
    assert state.better == {"adamw": "adamw_qknorm", "muon": "muon"}
    chosen = {k: state.best["stiefel"][k] for k in ("lr", "warmup_frac", "scale_lr", "frame_lr")}
    assert chosen == {"lr": 2e-3, "warmup_frac": 0.25, "scale_lr": 0.1, "frame_lr": 0.3}
    assert state.best["muon"]["warmup_frac"] == 0.05 and state.best["all_stiefel"]["frame_lr"] == 0.02
    long = [r for r in runs if r["phase"] == "long"]
    # five decisive arms (muon is both the better Muon-family arm and All-Stiefel's published pair)
    assert sorted({r["arm"] for r in long}) == ["adamw_qknorm", "all_stiefel", "muon", "stiefel", "stiefel_muon"]
    assert all(r["steps"] == 2400 for r in long) and {r["seed"] for r in long} == set(LM4_SEEDS)
    # each check kept the main lr its sweep chose (factor 1 is best on the landscape)
    assert all(state.long_best[a]["lr"] == 2e-3 for a in ("stiefel", "adamw_qknorm"))


def test_each_fourth_study_question_gives_its_known_answer(results4):
    got = {c.key: evidence.evaluate(c, root=results4.parent) for c in LM4_CLAIMS}
    for key, mean, family, word in (("lm4_stiefel_adam", -0.02, "AdamW with QK-norm", "ahead of"),
                                    ("lm4_stiefel_muon", -0.01, "Muon", "ahead of"),
                                    ("lm4_all_stiefel", 0.01, "Muon", "behind")):
        row = got[key]["primary"][0]
        assert row["n"] == 8 and row["mean"] == pytest.approx(mean), key
        assert row["wins"] == (8 if mean < 0 else 0), key
        assert f"{word} {family} on 8 of 8 seeds" in got[key]["sentence"], got[key]["sentence"]
    rows = {r["label"]: r for r in got["lm4_stiefel_adam"]["secondary"]}
    assert rows["stiefel − adamw_family, max_logit at the last evaluation"]["mean"] == pytest.approx(12.0 - 8.0)
    assert rows["all_stiefel − adamw_family, min_entropy at the last evaluation"]["mean"] == pytest.approx(
        (8.0 - 5.0) / 20)
    pair = {r["label"]: r for r in got["lm4_all_stiefel"]["secondary"]}
    published = pair["all_stiefel − muon (the published pair), 2,400 steps, test bits per byte"]
    assert published["mean"] == pytest.approx(0.01)
    assert pair["all_stiefel − stiefel_muon, 2,400 steps, test bits per byte"]["mean"] == pytest.approx(0.02)


def test_the_questions_are_claims_of_the_evidence_layer():
    assert [c.key for c in LM4_CLAIMS] == ["lm4_stiefel_adam", "lm4_stiefel_muon", "lm4_all_stiefel"]
    assert all(claim(c.key) is c for c in LM4_CLAIMS)


def test_the_language_model_card_answers_from_the_fourth_study_once_it_has_paired_seeds(results4):
    from stiefel_mini.evidence import cards

    qs = evidence.questions(results4.parent, untested=False)
    card = next(c for c in cards.cards([], qs) if c["key"] == "language_model")
    assert card["answer"] == ("Worth a try: trained as the library recommends, StiefelAdam beat AdamW with QK-norm "
                              "(in test bits per byte, lower is better)")
    assert dict(card["lines"]) == {
        "StiefelAdam": "0.020 bits per byte ahead of AdamW with QK-norm on 8 of 8 seeds",
        "StiefelMuon": "0.010 bits per byte ahead of Muon on 8 of 8 seeds",
        "Every hidden matrix on the manifold": "0.010 bits per byte behind Muon on 8 of 8 seeds"}
    assert card["scale"].startswith("GPT-2, 4 layers, width 256") and "2,400 steps" in card["scale"]
    # without the fourth study's paired seeds the card is the earlier studies' (the committed results today)
    before = [v for v in qs if not v["key"].startswith("lm4_")]
    earlier = next(c for c in cards.cards([], before) if c["key"] == "language_model")
    assert "trained as the library recommends" not in earlier["answer"] and "StiefelAdam" in dict(earlier["lines"])


def test_the_advice_takes_the_fourth_study_once_it_has_paired_seeds(results4):
    from stiefel_mini.evidence import plain

    qs = evidence.questions(results4.parent, untested=False)
    every = plain.advice(qs, root=results4.parent)
    rows = [r for r in every if "every arm tuned for itself" in r["situation"]]
    assert [r["try"] for r in rows] == [
        "StiefelAdam on the Q/K frames, AdamW on the rest",
        "StiefelMuon: manifold Muon on the Q/K frames, Muon on the other hidden matrices", "Muon"]
    assert rows[2]["measured"] == ("Manifold Muon on every hidden matrix, trained as the library recommends, 0.010 "
                                   "bits per byte behind Muon on 8 of 8 seeds")
    # the earlier studies' per-arm rows give way to these; the family row (Muon against AdamW) stays
    assert not any(r["measured"].startswith("StiefelAdam with") for r in every)


def test_the_recipes_take_the_fourth_studys_settings_once_it_has_long_runs(results4, monkeypatch):
    from stiefel_mini import recipe
    from stiefel_mini.resources import RESULTS_ENV
    from tests.test_recipe import check_language_model_recipe, compared_runs

    monkeypatch.setenv(RESULTS_ENV, str(results4))
    by = {r.optimizer: r for r in recipe.recipes() if r.task == "language model"}
    for arms, optimizer in ((("stiefel", "stiefel_scale"), "StiefelAdam"),
                            (("stiefel_muon", "stiefel_muon_scale"), "StiefelMuon")):
        file, runs = compared_runs(results4, *arms)
        assert file == "lm/round4.json" and by[optimizer].study == "the language model's fourth study"
        check_language_model_recipe(by[optimizer], file, runs)
    # the invented study's chosen settings, the middle of each grid (the trust cap out of the way: 1.0)
    assert (by["StiefelAdam"].frame_lr, by["StiefelAdam"].scale_lr, by["StiefelAdam"].max_step) == (0.3, 0.1, 1.0)


def test_the_chapter_the_intro_and_which_tool_report_the_fourth_study(results4):
    from tests.counterfactual import execute_chapters
    from tests.test_lm_chapter import _page

    nbs = execute_chapters({c: (c, results4) for c in ("language_model", "intro", "which_tool",
                                                       "appendix_language_model")}, ROOT / "book")
    intro, _ = _page(nbs["intro"])
    assert "Worth a try: trained as the library recommends, StiefelAdam beat AdamW with QK-norm" in intro
    tool, _ = _page(nbs["which_tool"])
    assert ("Manifold Muon on every hidden matrix, trained as the library recommends, 0.010 bits per byte behind "
            "Muon on 8 of 8 seeds") in tool
    page, _ = _page(nbs["language_model"])
    assert "Worth a try: trained as the library recommends, StiefelAdam beat AdamW with QK-norm" in page
    assert "Every hidden matrix on the manifold : 0.010 bits per byte behind Muon on 8 of 8 seeds" in page
    n = len(json.loads((results4 / "lm" / "round4.json").read_text())["runs"])
    assert f"each tuned for itself, answers it above, from {n} runs" in page and "not in this chapter yet" not in page
    assert "In the second and third studies (800 steps), each arm at its best settings" in page  # the older table
    # the set-up is the fourth study's; over training, each primary's curve; each decisive arm's settings
    assert "Every arm trains 2,400 steps" in page and "Every arm trains 800 steps" not in page
    assert "on seed 100 at 0.5x, 1x and 2x the value its grids chose. Then the 5 arms the questions compare" in page
    assert ("On the validation text over training (median of the 8 paired seeds), StiefelAdam was ahead of AdamW "
            "with QK-norm from the first evaluation on; StiefelMuon was ahead of Muon from the first evaluation on; "
            "StiefelMuon on every hidden matrix was behind Muon from the first evaluation on:") in page
    table = page[page.index("Each arm at the settings it chose for itself"):page.index("In the second and third")]
    assert "| StiefelAdam | lr 0.002, warm-up 25%, frame lr 0.3, trust cap 1, scale lr 0.1 | 8 | 1.599 (1.596-1.603) |" in table
    order = ["| StiefelMuon |", "| Muon |", "| StiefelMuon on every hidden matrix |", "| StiefelAdam |",
             "| AdamW with QK-norm |"]  # the decisive arms, best first
    assert sorted(order, key=table.index) == order
    # what the fourth study's All-Stiefel changes from the published runs, its solve measured
    cap = json.loads((results4 / "benchmarks" / "manifold_muon_cap.json").read_text())
    reach = min(b["objective_ratio"]["capped"]["min"] for b in cap["summary"].values())
    assert ("here the 3.7-million-parameter model reads 4.9 million tokens (2,400 steps of 16 windows of 128) in "
            "float32 on a CPU") in page
    assert f"which reaches at least {reach:.1%} of the converged step's objective on a real run's frames" in page
    # the appendix: the fourth study's progress, its checks and each decisive arm's seeds, seed by seed
    appendix, figures = _page(nbs["appendix_language_model"])
    runs = json.loads((results4 / "lm" / "round4.json").read_text())["runs"]
    phases = {p: sum(r["phase"] == p for r in runs) for p in ("sweep", "check", "long")}
    assert (f"All {len(runs)} of its runs have finished: {phases['sweep']} sweep runs, {phases['check']} "
            f"learning-rate checks at the longer length, {phases['long']} long runs.") in appendix
    assert "- the better of the AdamW family: AdamW with QK-norm - the better of the Muon family: Muon" in appendix
    assert "| StiefelAdam | 1.596 1.597 1.598 1.599 1.600 1.601 1.602 1.603 | 1.599 |" in appendix
    assert "| StiefelAdam | lr | 0.001 |" in appendix and "| StiefelAdam | lr | 0.004 |" in appendix  # its checks
    assert figures == 5  # the first study's two, the second's two, the fourth's curves


def test_the_chapter_reads_a_fourth_study_whose_decisive_phase_has_begun(tmp_path_factory):
    """The state the real study passes through: every sweep and check done, and on the long seeds only
    StiefelAdam and the better AdamW-family arm on seed 16, so that one question has one paired seed."""
    from tests.counterfactual import execute_chapters
    from tests.test_lm_chapter import _page

    def partial(template):
        return [r for r in complete_runs4(template) if r["phase"] != "long" or (
            r["seed"] == 16 and r["arm"] in ("stiefel", "adamw_qknorm"))]

    results = results_with(tmp_path_factory.mktemp("lm4_partial"), "round4", partial)
    page, figures = _page(execute_chapters({"language_model": ("language_model", results)}, ROOT / "book")[
        "language_model"])
    assert "Worth a try" not in page and "StiefelAdam" in page
    assert "Then the 5 arms the questions compare run on the same 8 {term}`paired seeds" in page
    assert ("On the validation text over training (one paired seed so far), StiefelAdam was ahead of AdamW with "
            "QK-norm from the first evaluation on:") in page
    table = page[page.index("Each arm at the settings it chose for itself"):page.index("In the second and third")]
    assert "| StiefelAdam | lr 0.002, warm-up 25%, frame lr 0.3, trust cap 1, scale lr 0.1 | 1 | 1.596 (1.596-1.596) |" \
        in table and "| Muon |" not in table

"""The decision cards (:mod:`stiefel_mini.evidence.cards`) on constructed verdicts: each Stiefel arm
quoted in its best configuration with the weaker beside it, whichever order the configurations come
in; each card's answer follows its verdicts; the cards' HTML holds what the cards say."""

from __future__ import annotations

import pytest
from bs4 import BeautifulSoup

from stiefel_mini.evidence import cards, compare, render
from stiefel_mini.evidence.sentences import flip

LM_REGIME = "GPT-2, 4 layers, width 256, 800 steps; the Stiefel arm's logit scale at an lr of its own"


def bpb(arm, baseline, diffs, picked=None, role="primary"):
    """A corrected paired row ``arm − baseline`` in test bits per byte (lower is better)."""
    r = compare.paired({s: 1.6 for s in range(len(diffs))}, {s: 1.6 + d for s, d in enumerate(diffs)}, float,
                       label=f"{arm} − {baseline}, test bits per byte", regime=LM_REGIME, unit="bpb",
                       higher_is_better=False)
    compare.correct([r])
    r.update(arm=arm, baseline=baseline, ratio=False, role=role, picked=picked or {}, files=["lm/x.json"])
    return r


def question(key, primary, secondary=()):
    return {"key": key, "status": "", "primary": [primary], "secondary": list(secondary)}


TIE = [0.004, -0.004, 0.002, -0.005, 0.001, -0.003, 0.003, -0.006]
BEHIND = [0.032, 0.036] * 4
FAM = {"adamw_family": "adamw"}


def questions(tie=TIE, behind=BEHIND, muon=None):
    lead = bpb("muon_qknorm", "adamw", muon if muon is not None else [-0.15] * 8, role="secondary")
    return [question("lm2_stiefel_adam", bpb("stiefel", "adamw_family", behind, FAM), [lead]),
            question("lm2_stiefel_muon", bpb("stiefel_muon", "muon_family", [0.12] * 8, {"muon_family": "muon_qknorm"})),
            question("lm3_scale", bpb("stiefel_scale", "adamw_family", tie, FAM),
                     [bpb("stiefel_muon_scale", "muon_family", [0.04] * 8, {"muon_family": "muon_qknorm"}, "secondary")])]


def test_each_stiefel_arm_is_quoted_in_its_best_configuration_with_the_weaker_beside_it():
    got = {c["arm"]: c for c in cards.configurations(questions())}
    assert got["StiefelAdam"]["best"]["arm"] == "stiefel_scale" and [r["arm"] for r in got["StiefelAdam"]["weaker"]] == [
        "stiefel"]
    assert got["StiefelMuon"]["best"]["arm"] == "stiefel_muon_scale"
    text = cards.configuration_text(got["StiefelAdam"])
    assert text.startswith("with the logit scale at an lr of its own, no clear difference against AdamW (mean gap "
                           "-0.001 bits per byte, 95% interval")
    assert "; with the logit scale at AdamW's lr, 0.034 bits per byte behind AdamW on 8 of 8 seeds" in text
    # the best is the better mean, not the newer study: make the scale's own lr the worse one
    swapped = {c["arm"]: c for c in cards.configurations(questions(tie=[0.05] * 8))}
    assert swapped["StiefelAdam"]["best"]["arm"] == "stiefel"
    assert cards.configuration_text(swapped["StiefelAdam"]).startswith("with the logit scale at AdamW's lr, ")


def test_a_row_found_the_other_way_round_is_exchanged():
    qs = questions()
    lead = cards.row_of(qs, "lm2_stiefel_adam", "adamw", "muon_qknorm")
    assert (lead["arm"], lead["baseline"]) == ("adamw", "muon_qknorm") and lead["mean"] == pytest.approx(0.15)
    assert cards.family_lead(qs)["arm"] == "muon_qknorm"


@pytest.mark.parametrize("tie, want", [(TIE, "No reason to switch from AdamW: even at its best (the logit scale at an "
                                              "lr of its own), StiefelAdam made no clear difference against it"),
                                       ([-0.02] * 8, "Worth a try: with the logit scale at an lr of its own, "
                                                     "StiefelAdam beat AdamW"),
                                       ([0.02] * 8, "Keep AdamW: StiefelAdam, even at its best (the logit scale at an "
                                                    "lr of its own), was behind it")])
def test_the_language_model_card_answers_from_the_best_configuration(tie, want):
    card = next(c for c in cards.cards([], questions(tie=tie)) if c["key"] == "language_model")
    assert card["answer"].startswith(want), card["answer"]
    assert "Muon with QK-norm was the one ahead" in card["answer"]
    assert card["answer"].endswith("(in test bits per byte, lower is better)")
    assert [w for w, _ in card["lines"]] == ["StiefelAdam", "StiefelMuon", "Muon with QK-norm against AdamW"]
    assert "Stiefel arm" not in card["scale"]  # the setting apart is said on each line, not in the regime


def test_no_muon_lead_is_claimed_where_its_row_does_not_resolve():
    card = next(c for c in cards.cards([], questions(muon=[0.01, -0.01] * 4)) if c["key"] == "language_model")
    assert "one ahead" not in card["answer"]


def _verdict(key, status, r, sentence="", short_phrase="", secondary=()):
    return {"key": key, "status": status, "primary": [r], "secondary": list(secondary), "sentence": sentence,
            "short_phrase": short_phrase}


def test_the_vision_card_follows_its_verdict_and_the_html_holds_it():
    gain = compare.paired({s: 60.0 for s in range(8)}, {s: (62.3, 62.5)[s % 2] for s in range(8)}, float,
                          label="A1 − A0", regime="fitted, A1's frame lr 1.0")
    compare.correct([gain])
    gain.update(arm="A1", baseline="A0", ratio=False)
    qk = {**gain, "arm": "qknorm", "role": "secondary"}
    vs = [_verdict("cifar_gain", "smaller effect", gain, "StiefelAdam ahead of AdamW on 8 of 8 seeds.", secondary=[qk])]
    card = cards.cards(vs, [])[0]
    assert card["answer"] == "Worth a try: StiefelAdam beat a tuned AdamW by 2.4 points of test accuracy"
    assert card["scale"] == "fitted, StiefelAdam's frame lr 1.0"
    assert card["lines"][1][1].startswith("QK-norm 2.4 points ahead of AdamW on 8 of 8 seeds")
    vs[0]["status"] = "contradicted"
    assert cards.cards(vs, [])[0]["answer"].startswith("Keep AdamW")
    vs[0]["status"] = "not resolved"
    assert cards.cards(vs, [])[0]["answer"].startswith("No clear answer")
    html = BeautifulSoup(render.cards_html(cards.cards(vs, questions()), prefix="book/"), "html.parser")
    assert [d["data-task"] for d in html.select(".decision-card")] == ["cifar", "language_model"]
    assert html.select_one(".decision-card a")["href"] == "book/cifar.html"
    assert "p = " not in html.get_text()  # a first screen in plain words


def test_the_grokking_card_says_neither_result_when_neither_is_resolved():
    end = compare.paired({s: 99.0 for s in range(8)}, {s: 99.0 + (-1) ** s for s in range(8)}, float,
                         label="stiefel_learned − adamw, final validation accuracy", regime="p = 59, 20,000 steps")
    compare.correct([end])
    end.update(arm="stiefel_learned", baseline="adamw", ratio=False)
    falls = {**flip(flip(end)), "unit": "falls", "role": "secondary"}
    vs = [_verdict("grokking_endpoint", "not resolved", end, short_phrase="no clear difference", secondary=[falls])]
    card = cards.cards(vs, [])[0]
    assert card["answer"].startswith("No reason to switch") and card["scale"] == "modulus 59, 20,000 steps"
    assert [w for w, _ in card["lines"]] == ["At the end", "Falls of 10 points or more after grokking"]

"""The verdict-word rules (:mod:`stiefel_mini.evidence.words`) on constructed rows: the status, the
technical verdict and the plain phrase a reader reads, with every sign said in words, the paper's
number said where it lies outside the interval, and "not confirmed" where fresh seeds did not hold."""

from __future__ import annotations

import pytest

from stiefel_mini.evidence import compare, sentences, verdict as verdicts, words
from stiefel_mini.evidence.claims import Claim


def row(diffs, *, arm="stiefel_learned", baseline="adamw", label="stiefel_learned − adamw, steps to 95% validation",
        unit="steps", higher_is_better=False):
    """A corrected paired row b − a whose per-seed differences are ``diffs`` (a = 0 on every seed)."""
    a = {s: 0.0 for s in range(len(diffs))}
    b = {s: d for s, d in enumerate(diffs)}
    r = compare.paired(a, b, float, label=label, regime="constructed", unit=unit, higher_is_better=higher_is_better)
    compare.correct([r])
    r.update(arm=arm, baseline=baseline, ratio=False, files=["x.json"])
    return r


def claim(kind="size", paper_value=None, **kw):
    return Claim("k", "a claim", "paper", "chapter", kind, paper_value=paper_value, **kw)


def verdict(c, r, confirmation=None):
    status, text = verdicts.family_status(c, [r])
    return {"status": status, "verdict": text, "primary": [r], "confirmation": confirmation}


SLOWER = [500.0] * 12 + [-300.0] * 2  # b slower than a on 12 of 14 seeds


def test_a_resolved_sign_is_said_in_words_and_follows_the_data():
    c = claim()  # a claimed direction: b sooner
    slow = verdict(c, row(SLOWER))
    assert slow["status"] == "contradicted"
    text = sentences.phrase(c, slow)
    assert text.startswith("StiefelAdam slower than AdamW to reach 95% validation on 12 of 14 seeds")
    assert "by 386 steps on average" in text  # (12 * 500 - 2 * 300) / 14, as a magnitude
    fast = verdict(c, row([-d for d in SLOWER]))
    assert fast["status"] == "reproduced"
    assert sentences.phrase(c, fast).startswith("StiefelAdam faster than AdamW to reach 95% validation on 12 of 14")


def test_the_papers_number_outside_the_interval_is_said_even_when_not_resolved():
    c = claim(paper_value=35.9)
    level = [1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 0.25, -0.75]  # 4 wins, 4 losses, an interval about 0
    r = row(level, label="stiefel_learned − adamw, final validation accuracy", unit="pp", higher_is_better=True)
    v = verdict(c, r)
    assert v["status"] == "not resolved"
    assert v["verdict"].endswith("the paper's +35.90 lies outside this interval")
    text = sentences.phrase(c, v)
    assert text.startswith("no gap like the paper's 35.9 points: StiefelAdam ahead of AdamW on 4 and behind on 4")
    assert words.gist(r, 35.9) == "no gap like the paper's 35.9 points"
    inside = verdict(claim(paper_value=0.1), r)  # the paper's number inside the interval: nothing to add
    assert "outside" not in inside["verdict"] and sentences.phrase(claim(paper_value=0.1), inside).startswith(
        "no clear difference")


def test_a_smaller_effect_names_the_papers_number_and_the_short_form_leaves_it_to_the_table():
    c = claim(paper_value=8.98)
    r = row([2.0, 2.5, 2.2, 2.8, 2.1, 2.4, 2.6, 2.3], arm="A1", baseline="A0", label="A1 − A0", unit="pp",
             higher_is_better=True)
    v = verdict(c, r)
    assert v["status"] == "smaller effect"
    assert sentences.phrase(c, v) == ("StiefelAdam ahead of AdamW on 8 of 8 seeds, by 2.4 points of test accuracy "
                                  "on average, not the paper's 9.0")
    assert sentences.phrase(c, v, short=True) == "StiefelAdam ahead on 8 of 8 seeds, by 2.4 points"  # the claim names AdamW


def test_the_change_of_a_gap_reads_wider_or_narrower():
    c = claim()
    r = row([-4.0, -3.5, -4.5, -4.2, -3.9, -4.1], arm="A1", baseline="A0", unit="pp", higher_is_better=True,
            label="(A1 − A0) at 50,000 − at 5,000 images")
    assert sentences.phrase(c, verdict(c, r)).startswith(
        "StiefelAdam's lead over AdamW narrower at 50,000 than at 5,000 images on 6 of 6 seeds")
    r = row([4.0, 3.5, 4.5, 4.2, 3.9, 4.1], arm="A1", baseline="A0", unit="pp", higher_is_better=True,
            label="(A1 − A0) at 50,000 − at 5,000 images")
    assert "lead over AdamW wider at 50,000" in sentences.phrase(c, verdict(c, r))


def test_fresh_seeds_that_do_not_hold_make_the_headline_not_confirmed():
    # the reader's word is the ledger's status (the CLI's and the appendix's), never another
    c = claim()
    v = verdict(c, row(SLOWER))
    fresh = row([100.0, -50.0, 80.0, -20.0, 60.0, 10.0])
    v["confirmation"] = {"status": "not confirmed", "rows": [fresh], "text": "..."}
    assert sentences.confirmed_word(v) == "not confirmed"
    assert sentences.sentence(c, v).endswith("; 6 fresh seeds did not confirm it.")
    v["confirmation"] = {"status": "pending", "rows": [row([100.0, 50.0, 80.0])], "text": "..."}
    assert sentences.confirmed_word(v) == "too few fresh seeds"
    assert sentences.sentence(c, v).endswith("; 3 fresh seeds so far, too few to confirm it.")
    v["confirmation"] = {"status": "pending", "rows": [{**fresh, "n": 0}], "text": "..."}
    assert sentences.confirmed_word(v) == "not re-run"
    v["confirmation"] = {"status": "confirmed", "rows": [fresh], "text": "..."}
    assert sentences.confirmed_word(v) == "confirmed" and sentences.sentence(c, v).endswith("; confirmed on 6 fresh seeds.")
    # A comparison declared before any of its runs: nothing earlier to confirm, whatever its verdict.
    own = row(SLOWER)
    v = verdict(c, own, {"status": "declared before its runs", "rows": [own], "text": "..."})
    assert sentences.confirmed_word(v) == "declared before its runs"
    assert sentences.sentence(c, v).endswith("; declared before its runs.") and "confirmed on" not in sentences.sentence(c, v)
    level = verdict(c, row([1.0, -1.0] * 4), {"status": "declared before its runs", "rows": [], "text": "..."})
    assert level["status"] == "not resolved" and sentences.sentence(c, level).endswith("; declared before its runs.")
    # ... but for a baseline whose runs were made before it (round 3 against round 2's runs).
    fixed = {**own, "baseline_files": ["lm/round2.json"]}
    v = verdict(c, fixed, {"status": "declared before its runs", "rows": [fixed], "text": "..."})
    assert sentences.sentence(c, v).endswith("; declared before its runs, against AdamW's earlier runs.")
    open_ = verdict(c, row([1.0, -1.0, 2.0]))
    open_["confirmation"] = {"status": "pending", "rows": [], "text": ""}
    assert sentences.confirmed_word(open_) == ""  # nothing resolved, nothing to confirm


def test_pairs_made_on_two_machines_are_said_in_the_sentence():
    c = claim()
    r = row(SLOWER)
    r["two_machines"] = [5, 6, 7]
    assert sentences.sentence(c, verdict(c, r)).endswith("; 3 of its 14 pairs ran on two different machines.")


def test_a_row_with_fewer_seeds_than_planned_says_how_many_are_planned():
    # a reading on the way must not read as the declared comparison's final answer
    c = claim()
    r = row(SLOWER[:6])  # 6 seeds of a comparison that plans 16
    r["planned"] = 16
    assert "on 6 of 6 seeds (16 planned), by" in sentences.phrase(c, verdict(c, r))
    assert words.gist(r).endswith("on 6 of 6 seeds (16 planned)")
    assert words.sure_text(r, 1).endswith("; 6 of its 16 planned seeds so far")
    few = row(SLOWER[:3])
    few["planned"] = 16
    assert "on 3 of 3 seeds (16 planned)" in words.row_phrase(few)
    r["planned"] = 6  # every planned seed has run: nothing to add
    assert "planned" not in sentences.phrase(c, verdict(c, r)) + words.gist(r) + words.sure_text(r, 1)


@pytest.mark.parametrize("gmean, want", [(48.0, "48x smaller"), (0.25, "4x larger")])
def test_a_ratio_says_which_steps_are_smaller(gmean, want):
    c = claim("ratio", paper_range=(24.0, 40.0))
    r = {"label": "A0's Q/K step / A1's", "gmean": gmean, "ci": (gmean * 0.9, gmean * 1.1), "n": 6, "ratio": True,
         "arm": "A1", "baseline": "A0"}
    text = sentences.phrase(c, {"status": "mixed", "verdict": "", "primary": [r]})
    assert text == f"StiefelAdam's steps {want} than AdamW's; the paper: 24-40x smaller"


def test_a_regime_names_its_arms():
    assert words.plain_regime("lr 3e-3, A1's frame lr 1.0; A0' against A0, A3 frozen") == (
        "lr 3e-3, StiefelAdam's frame lr 1.0; AdamW without decay on Q/K against AdamW, frozen frames frozen")
    assert words.plain_regime("A10 and BA1 stay") == "A10 and BA1 stay"  # only whole codes


def test_a_row_no_split_of_its_seeds_could_resolve_says_too_few_seeds_not_no_difference():
    r = row([0.01] * 8, arm="stiefel", baseline="muon", label="stiefel − muon, validation bits per byte", unit="bpb",
            higher_is_better=False)
    assert r["resolved"]  # alone, 8 of 8 one way resolves
    others = [row([0.01] * 8) for _ in range(8)]
    compare.correct([r, *others])  # among 9 such tests none can reach 0.05 (Tarone): 2/256 * 7 > 0.05
    assert not r["testable"] and not r["resolved"]
    text = words.row_phrase(r)
    assert text.startswith("too few seeds to decide: StiefelAdam behind Muon on 8 of 8 seeds"), text
    assert words.gist(r) == "too few seeds to decide"
    mixed = row([0.01, -0.01] * 4)
    assert words.row_phrase(mixed).startswith("no clear difference")  # testable, and not resolved


# ----------------------------------------------------------------------------------------------------
# Each phrase from the row's own numbers and its role
# ----------------------------------------------------------------------------------------------------


def raw(diffs, **kw):
    """A paired row as a chapter or a secondary table computes it: never corrected with others."""
    r = row(diffs, **kw)
    for k in ("family", "n_testable"):
        r.pop(k)
    r.update(testable=False, p_holm=None, resolved=False)  # what compare.paired leaves before any correction
    return r


def test_a_row_shown_on_its_own_states_its_own_result_and_p_never_too_few_seeds():
    r = raw([0.146] * 8, arm="stiefel", baseline="muon", label="stiefel − muon, validation bits per byte",
            unit="bpb", higher_is_better=False)
    text = words.row_phrase(r)
    assert "too few seeds" not in text
    assert text == ("StiefelAdam behind Muon on 8 of 8 seeds, by 0.146 bits per byte on average "
                    "(p = 0.0078, shown, not corrected)")
    assert words.gist(r) == "0.146 bits per byte behind on 8 of 8 seeds"
    three = raw([0.1, 0.2, 0.3], arm="stiefel", baseline="muon", unit="bpb", higher_is_better=False,
                label="stiefel − muon, validation bits per byte")
    assert words.row_phrase(three).startswith("too few seeds to decide: StiefelAdam behind Muon on 3 of 3 seeds")
    assert words.row_phrase(three).endswith("(p = 0.25, shown, not corrected)")
    level = raw([0.1, -0.1, 0.2, -0.3, 0.1, -0.2, 0.05, -0.05], unit="bpb", higher_is_better=False,
                arm="stiefel", baseline="adamw", label="stiefel − adamw, validation bits per byte")
    assert words.row_phrase(level).startswith("no clear difference: StiefelAdam ahead of AdamW on 4 and behind on 4")


def test_no_direction_word_on_a_mean_whose_interval_holds_zero():
    r = row([1.0, -0.5, -2.0, 0.5, -1.5, -1.0, 0.25, -0.75], label="stiefel_learned − adamw, final validation accuracy",
            unit="pp", higher_is_better=True)
    assert r["ci"][0] < 0 < r["ci"][1] and not r["resolved"]
    text = words.row_phrase(r)
    assert text == ("no clear difference: StiefelAdam behind AdamW on 5 of 8 seeds, a mean gap of -0.5 points of "
                    "final validation accuracy whose 95% interval holds zero")
    # passed by the sign test, but the t interval of the mean holds zero: not resolved (the decision rule),
    # its p and its interval both said
    slow = row([600.0] * 12 + [-2500.0, -2600.0])
    assert slow["resolved"] and slow["ci"][0] < 0 < slow["ci"][1]
    assert words.row_phrase(slow) == ("not resolved: StiefelAdam slower than AdamW to reach 95% validation on 12 of "
                                      "14 seeds (p = 0.013), a mean gap of +150 steps whose 95% interval holds zero")
    assert words.gist(slow) == "not resolved"


@pytest.mark.parametrize("diffs, unit, label, more, less, want", [
    ([-192.0, 400.0, -900.0, 300.0, -800.0, 250.0, -350.0, 100.0], "steps", "steps to 95%", "later", "sooner",
     "no clear difference in steps to 95%"),
    ([-0.5, 1.0, -1.2, 0.3, 0.2, -0.6, 0.9, -0.8], "falls", "falls", "fell more often", "fell less often",
     "no clear difference in falls"),
    ([300.0, 320.0, 280.0, 310.0, 290.0, 305.0], "steps", "steps to 95%", "later", "sooner", "later"),
])
def test_a_change_gets_its_direction_word_only_when_its_interval_excludes_zero(diffs, unit, label, more, less, want):
    r = row(diffs, unit=unit, label=f"stiefel_learned − frozen_learned, {label}")
    assert words.change_text(r, more, less, what=label).startswith(want + " (")
    assert words.change_text(r, more, less, what=label).endswith(f"{words.effect_text(r)})")


def test_the_intro_counts_every_claim_and_sets_those_true_by_construction_apart():
    from stiefel_mini.evidence import plain

    statuses = ["by construction", "smaller effect", "contradicted", "not resolved", "contradicted",
                "by construction", "mixed", "contradicted", "not resolved"]
    vs = [{"key": f"k{i}", "status": s, "primary": [], "regime_status": ["larger effect", "contradicted"]}
          for i, s in enumerate(statuses)]
    text = plain.tally(vs)
    assert text == ("Of the paper's 9 claims, 2 are true by construction (checked by tests); of the 7 the runs "
                    "test, none held as stated: 1 held with a smaller effect, 1 went different ways in different "
                    "regimes, 3 were contradicted and 2 are undecided")
    vs[6]["regime_status"] = ["reproduced", "contradicted"]
    assert "1 held in one regime only" in plain.tally(vs)


def test_a_family_confirmed_on_different_fresh_seeds_gives_each_its_count():
    c = claim("ratio", paper_range=(24.0, 40.0))
    rows = [{"label": f"A0's Q/K step / A1's, {where}", "gmean": 48.0, "ci": (47.0, 49.0), "n": n, "ratio": True,
             "arm": "A1", "baseline": "A0"} for where, n in (("both at lr 1e-3", 6), ("each at its best lr", 2))]
    v = {"status": "mixed", "verdict": "", "primary": rows,
         "confirmation": {"status": "confirmed", "rows": rows, "text": "..."}}
    assert sentences.fresh_text(v) == "confirmed on fresh seeds (6 for both at lr 1e-3, 2 for each at its best lr)"


@pytest.mark.parametrize("median, low, high, text", [
    (0.97, 0.95, 1.06, "about as long as"),
    (2.54, 2.23, 2.78, "2.5 times as long as"),
    (0.62, 0.55, 0.70, "0.6 times as long as"),
    (1.03, 1.01, 1.05, "1.03 times as long as"),
])
def test_a_timing_ratio_is_about_as_long_only_when_its_rounds_straddle_one(median, low, high, text):
    assert words.time_ratio_text({"median": median, "low": low, "high": high}) == text

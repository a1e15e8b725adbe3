"""The book's one decision rule (:mod:`stiefel_mini.evidence.rule`) on constructed rows: what it says of
each kind of row, that every word a reader reads follows it, and that exchanging the two arms of a
comparison exchanges the words and nothing else.

The rule: a row is resolved when its exact test reaches 0.05 *and* its 95% interval excludes zero (and
both point the same way); an interval that holds zero is never "contradicted" or "confirmed", an interval
that excludes zero is never "no clear difference".
"""

from __future__ import annotations

import pytest

from stiefel_mini.evidence import compare, rule, sentences, verdict, words
from stiefel_mini.evidence.claims import Claim


def row(diffs, *, family=None, label="stiefel_learned − adamw, steps to 95% validation", unit="steps",
        higher_is_better=False, arm="stiefel_learned", baseline="adamw"):
    """A paired row b − a with per-seed differences ``diffs``; corrected alone, or among ``family``
    other rows when given (Holm over them, Tarone's rule)."""
    r = compare.paired({s: 0.0 for s in range(len(diffs))}, dict(enumerate(diffs)), float, label=label,
                       regime="constructed", unit=unit, higher_is_better=higher_is_better)
    compare.correct([r, *(family or [])])
    r.update(arm=arm, baseline=baseline, ratio=False, files=["x.json"], role="primary")
    return r


KINDS = {
    # 12 of 14 seeds slower, the mean's interval well above zero: resolved
    "resolved": ([500.0] * 12 + [-300.0] * 2, rule.RESOLVED),
    # 12 of 14 seeds slower (p = 0.013) but two large opposite seeds: the interval holds zero
    "test only": ([600.0] * 12 + [-2500.0, -2600.0], rule.LEANS),
    # the mean's interval excludes zero but 10 of 14 seeds is not enough for the sign test
    "interval only": ([100.0] * 10 + [-20.0] * 4, rule.LEANS),
    # neither
    "level": ([100.0, -120.0, 80.0, -60.0, 40.0, -90.0, 70.0, 30.0], rule.LEVEL),
    # an even split: both words are said, and the exchange changes the sign of the mean gap
    "even": ([100.0, -120.0, 80.0, -60.0, 40.0, -90.0, 70.0, -30.0], rule.LEVEL),
    # three seeds cannot reach 0.05 at all
    "too few": ([100.0, 120.0, 90.0], rule.UNDECIDABLE),
}


@pytest.mark.parametrize("kind", KINDS)
def test_the_rule_says_what_each_kind_of_row_is(kind):
    diffs, want = KINDS[kind]
    r = row(diffs)
    assert rule.decision(r) == want
    zero = rule.holds_zero(r)
    assert zero == (kind in ("test only", "level", "even"))
    assert rule.judged(r)[1] == (want == rule.RESOLVED)


def test_a_censored_row_has_no_interval_and_is_decided_by_its_test():
    r = compare.paired({s: 100.0 for s in range(8)}, {s: None for s in range(8)}, lambda x: x, censored=True,
                       label="b − a, steps to 95%", unit="steps", higher_is_better=False)
    compare.correct([r])
    assert r["mean"] is None and rule.decision(r) == rule.RESOLVED


def test_a_row_whose_seeds_and_mean_point_different_ways_is_not_resolved():
    # 12 of 14 seeds a little faster, two far slower: the sign test passes one way, the interval the other
    r = row([-10.0] * 12 + [2000.0, 2100.0] + [1900.0] * 0)
    r.update(mean=200.0, ci=(50.0, 350.0))  # as if the interval excluded zero on the slower side
    assert rule.passes_test(r)[1] and not rule.holds_zero(r) and rule.decision(r) == rule.LEANS


@pytest.mark.parametrize("kind", KINDS)
def test_no_reader_word_breaks_the_rule(kind):
    r = row(KINDS[kind][0])
    c = Claim("k", "a claim", "paper", "chapter", "size")  # a claimed direction: b sooner
    status, text = verdict.family_status(c, [r])
    phrase, gist = words.row_phrase(r), words.gist(r)
    if rule.holds_zero(r):
        assert status == "not resolved" and not text.startswith(("contradicted", "reproduced"))
        assert "whose 95% interval holds zero" in phrase
    else:
        assert "no clear difference" not in phrase + gist + text
    if rule.decision(r) != rule.RESOLVED:
        assert phrase.startswith(rule.decision(r) + ":") and gist == rule.decision(r)
        assert status == "not resolved"
        v = {"status": status, "primary": [r], "confirmation": {"status": "confirmed", "rows": [r], "text": ""}}
        assert sentences.confirmed_word(v) == ""  # nothing the rule leaves open is ever "confirmed"
    else:
        assert status in ("reproduced", "contradicted")


OPPOSITE = {"faster": "slower", "slower": "faster", "ahead": "behind", "behind": "ahead", "sooner": "later",
            "later": "sooner"}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("unit, higher", [("steps", False), ("pp", True), ("bpb", False)])
def test_exchanging_the_arms_exchanges_the_words(kind, unit, higher):
    label = {"steps": "stiefel_learned − adamw, steps to 95% validation", "pp": "A1 − A0",
             "bpb": "stiefel − adamw, test bits per byte"}[unit]
    arm, base = label.split(",")[0].split(" − ")
    r = row(KINDS[kind][0], label=label, unit=unit, higher_is_better=higher, arm=arm, baseline=base)
    x = sentences.flip(r)
    assert rule.decision(x) == rule.decision(r)  # the rule does not care which arm is named first
    b, a = words.side_names(r)
    assert words.side_names(x) == (a, b)
    phrase, other = words.row_phrase(r), words.row_phrase(x)
    if kind == "even":  # "b faster than a on 4 and slower on 4": the same words, the mean's sign exchanged
        gap = phrase.split("a mean gap of ")[1][0]
        assert other.split("a mean gap of ")[1][0] == {"+": "-", "-": "+"}[gap]
        return
    said = [w for w in OPPOSITE if f"{b} {w}" in phrase]
    assert len(said) == 1, phrase
    assert f"{a} {OPPOSITE[said[0]]}" in other, (phrase, other)
    if rule.decision(r) == rule.RESOLVED:
        c = Claim("k", "b beats a", "paper", "chapter", "size")
        got = {verdict.family_status(c, [r])[0], verdict.family_status(c, [x])[0]}
        assert got == {"reproduced", "contradicted"}
        g, h = words.gist(r), words.gist(x)
        assert any(w in g and OPPOSITE[w] in h for w in OPPOSITE), (g, h)
    else:
        assert words.gist(x) == words.gist(r) == rule.decision(r)


def test_a_change_in_a_sentence_follows_the_rule_and_the_exchange():
    resolved, lean = row(KINDS["resolved"][0]), row(KINDS["interval only"][0])
    assert words.change_text(resolved, "later", "sooner").startswith("later (")
    assert words.change_text(sentences.flip(resolved), "later", "sooner").startswith("sooner (")
    assert words.change_text(lean, "later", "sooner", what="steps").startswith("not resolved in steps, leaning later (")
    assert words.change_text(row(KINDS["level"][0]), "later", "sooner").startswith("no clear difference (")


def test_a_row_the_correction_cannot_pass_is_too_few_seeds_whatever_its_interval():
    others = [row([1.0] * 8) for _ in range(8)]
    r = row([500.0] * 8, family=others)  # among 9, 8 of 8 cannot pass Holm's correction (Tarone)
    assert not rule.holds_zero(r) and rule.decision(r) == rule.UNDECIDABLE
    assert words.row_phrase(r).startswith("too few seeds to decide: ")

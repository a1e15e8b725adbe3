"""A claim's verdict words: its status and verdict text from its primary family, by the book's one
decision rule (:mod:`stiefel_mini.evidence.rule`).

Verdict words (:func:`family_status`), from the primary:

- ``reproduced``: resolved in the paper's direction, the paper's number inside the 95% t interval;
- ``smaller effect`` / ``larger effect``: resolved in the paper's direction, the paper's number
  above / below the interval ("+2.51 pp [+2.14, +2.89], not +8.98");
- ``contradicted``: resolved against the claim, or a claimed small effect whose interval lies
  above it ("freezing costs +1.87 pp [+0.64, +3.10], not 0.28");
- ``not resolved``: the rule does not resolve the primary: its test cannot reach the level at this n
  ("n = 5 cannot go below p = 0.0625"), or the test and the interval disagree ("p = 0.013, but its
  95% interval holds zero"), or neither excludes "no difference"; the numbers are given, none reads as
  "no effect", and a paper's number outside the interval is said ("the paper's +35.90 lies outside
  this interval");
- ``mixed`` (a ratio family whose regimes disagree), ``partly reproduced`` (a bundle whose
  resolved parts agree with the claim while the rest is not resolved), ``not tested yet`` (the file
  or its paired seeds are missing), and ``by construction`` for claims about the algorithm's
  definition.

A ratio (:func:`stiefel_mini.evidence.compare.ratio`) is judged by its interval against 1 and the
paper's range.
"""

from __future__ import annotations

from stiefel_mini.evidence.claims import Claim
from stiefel_mini.evidence.rule import LEANS, RESOLVED, decision, holds_zero, passes_test
from stiefel_mini.evidence.words import effect_text, n_text, needed_text, regime_of
from stiefel_mini.experiments.stats import smallest_p

__all__ = ["family_status", "regime_statuses"]


def _not_resolved(row: dict, what: str) -> str:
    """A primary the rule does not resolve: why (the test cannot reach the level; the test and the
    interval disagree; neither excludes no difference), with its numbers."""
    if not row["testable"]:
        return (f"not resolved: {n_text(row)} cannot go below p = {row['p_min']:.3g} ({effect_text(row, what)})"
                + needed_text(row))
    head = f"not resolved: {effect_text(row, what)}, p = {row['p_holm']:.2g}"
    if decision(row) == LEANS:
        return head + _disagreement(row)
    return head + needed_text(row)


def _disagreement(row: dict) -> str:
    """Why a row whose test and interval disagree is not resolved, as a clause after its p."""
    if row["mean"] is not None and holds_zero(row):
        return ", but its 95% interval holds zero"
    if not passes_test(row)[1]:
        return ", its 95% interval excluding zero, but its test not reaching 0.05"
    return ", but most seeds and the mean lie on different sides"


def _missing(row: dict) -> str:
    """``"not tested yet: ..."``: which declared file is absent, or that it holds no paired seed."""
    if not row["files"]:
        return f"not tested yet: no run of its study ({row['regime']})"
    return f"not tested yet: its study ({row['regime']}) has no paired seed"


def _size_verdict(c: Claim, row: dict) -> tuple[str, str]:
    if row["n"] == 0:
        return "not tested yet", _missing(row)
    lo, hi = row["ci"] if row["ci"] is not None else (row["mean"], row["mean"])
    pv = c.paper_value
    if decision(row) != RESOLVED:
        # The direction is open, but a paper's number outside the interval is itself an answer.
        outside = pv is not None and lo is not None and not lo <= pv <= hi
        return "not resolved", _not_resolved(row, c.what) + (
            f"; the paper's {f'{pv:+.2f}' if c.kind == 'size' else f'{pv:g}'} lies outside this interval"
            if outside else "")
    up = (row["mean"] if row["mean"] is not None else row["median"]) > 0
    paper = "" if pv is None else f", not {pv:+.2f}" if c.kind == "size" else f", not {pv:g}"
    if c.kind == "size":
        if pv is None:  # a claimed direction: b better than a, in the metric's sense
            return ("reproduced", f"reproduced: {effect_text(row, c.what)}") if row["wins"] > row["losses"] else \
                ("contradicted", f"contradicted: {effect_text(row, c.what)}")
        if up != (pv > 0):
            return "contradicted", f"contradicted: {effect_text(row, c.what)}{paper}"
        if lo <= pv <= hi:
            return "reproduced", f"reproduced: {effect_text(row, c.what)}"
        word = "smaller effect" if abs(hi) < abs(pv) else "larger effect"
        return word, f"{word}: {effect_text(row, c.what)}{paper}"
    # at_most: the claim is an effect no larger than the paper's
    if hi < pv or lo <= pv <= hi:
        return "reproduced", f"reproduced: {effect_text(row, c.what)}"
    return "contradicted", f"contradicted: {effect_text(row, c.what)}{paper}"


def _ratio_verdict(c: Claim, row: dict) -> tuple[str, str]:
    lo_p, hi_p = c.paper_range
    want = f"not {lo_p:g}-{hi_p:g}x"
    if row["n"] < 2:
        return "not tested yet", _missing(row) if row["n"] == 0 else f"not tested yet: {row['n']} paired seed"
    lo, hi = row["ci"]
    if lo >= lo_p and hi <= hi_p:
        return "reproduced", f"reproduced: {effect_text(row, c.what)}"
    if hi < 1.0:  # the claimed larger side is the smaller one
        return "contradicted", f"contradicted: {effect_text(row, c.what)}, {want}"
    if lo > hi_p:
        return "larger effect", f"larger effect: {effect_text(row, c.what)}, {want}"
    if lo > 1.0 and hi < lo_p:
        return "smaller effect", f"smaller effect: {effect_text(row, c.what)}, {want}"
    return "not resolved", f"not resolved: {effect_text(row, c.what)} overlaps {lo_p:g}-{hi_p:g}x"


def _ratio_family_verdict(c: Claim, rows: list[dict]) -> tuple[str, str]:
    """A family of ratio primaries (one regime each): ``mixed`` when their verdicts differ."""
    got = [_ratio_verdict(c, r) for r in rows]
    tested = [(r, g) for r, g in zip(rows, got) if g[0] != "not tested yet"]
    if len(rows) == 1 or not tested:
        return got[0]
    rows, got = [r for r, _ in tested], [g for _, g in tested]
    states = {g[0] for g in got}
    text = "; ".join(f"{regime_of(r)}: {g[1]}" for r, g in zip(rows, got))
    if len(states) == 1:
        return got[0][0], text
    return "mixed", f"mixed: {text}"


def _ingredients_verdict(c: Claim, rows: list[dict]) -> tuple[str, str]:
    have = [r for r in rows if r["n"]]
    if not have:
        return "not tested yet", _missing(rows[0])
    differ = [r for r in have if decision(r) == RESOLVED and r["baseline"] in c.expect_zero]
    step = [r for r in have if r["baseline"] not in c.expect_zero]
    against = [r for r in step if decision(r) == RESOLVED and r["mean"] is not None and r["mean"] < 0]
    if differ or against:
        r = min(differ + against, key=lambda r: r["p_holm"])
        return "contradicted", f"contradicted: {effect_text(r, r['label'].split(' (')[0])}, resolved"
    big = max(have, key=lambda r: abs(r["mean"] if r["mean"] is not None else 0.0))
    largest = f"largest: {effect_text(big, big['label'].split(' (')[0])}"
    if not any(r["testable"] for r in have):
        n = max(r["n"] for r in have)
        return "not resolved", (f"not resolved: n = {n} cannot go below p = {smallest_p(n):.3g} ({largest}"
                                f"{needed_text(big, len(rows))})")
    if step and all(decision(r) == RESOLVED for r in step):
        return "partly reproduced", ("partly reproduced: " + "; ".join(
            effect_text(r, r["label"].split(" (")[0]) for r in step) + " resolved; the variants are not resolved "
            "apart from A1, which does not show that they are equal")
    return "not resolved", (f"not resolved: no comparison of the family resolved after correction ({largest}"
                            f"{needed_text(big, len(rows))})")


def regime_statuses(c: Claim, rows: list[dict]) -> list[str]:
    """The status of each regime of a ratio family on its own (``[]`` for another kind of claim): what
    a ``mixed`` verdict is made of."""
    return [_ratio_verdict(c, r)[0] for r in rows] if c.kind == "ratio" else []


def family_status(c: Claim, rows: list[dict]) -> tuple[str, str]:
    """``(status, verdict text)`` of claim ``c`` judged on its primary family ``rows`` (the rules above)."""
    if c.kind == "ratio":
        return _ratio_family_verdict(c, rows)
    if c.kind == "ingredients":
        return _ingredients_verdict(c, rows)
    return _size_verdict(c, rows[0])

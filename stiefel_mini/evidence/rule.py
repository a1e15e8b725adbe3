"""The book's one decision rule: when a paired comparison may be given a direction.

A paired row ``b − a`` (:func:`stiefel_mini.evidence.compare.paired`) is **resolved** when

1. its exact test reaches the level, ``p <= 0.05`` (Holm-corrected within its family, or alone for a
   row shown on its own, :func:`own_test`), and
2. the 95% t interval of its mean difference excludes zero (a row holding a censored run has no mean:
   the test alone decides it), and
3. both point the same way: most seeds, and the mean, on the same side.

Only a resolved row gets a direction or a verdict that needs one ("ahead", "slower", "contradicted",
"reproduced", "confirmed"). Every other row is said by which part of the rule it fails
(:func:`decision`):

- ``"too few seeds to decide"``: the test cannot reach the level at this number of seeds at all (Tarone);
- ``"not resolved"``: the test and the interval disagree (one of them excludes "no difference", the
  other does not, or they point different ways): the runs lean, and the book says so, not a result;
- ``"no clear difference"``: neither excludes it;
- ``"no paired seed"``: nothing to compare yet.

So an interval that holds zero is never "contradicted" or "confirmed", and an interval that excludes
zero is never "no clear difference". The appendix "How this book tests a claim" states this rule for
readers; :mod:`stiefel_mini.evidence.words` words every verdict and phrase by it.
"""

from __future__ import annotations

from stiefel_mini.evidence import compare

__all__ = ["RESOLVED", "LEANS", "LEVEL", "UNDECIDABLE", "UNTESTED", "DECISIONS", "SHOWN", "own_test", "passes_test",
           "holds_zero", "decision", "judged"]

RESOLVED, LEANS, LEVEL, UNDECIDABLE, UNTESTED = ("resolved", "not resolved", "no clear difference",
                                                 "too few seeds to decide", "no paired seed")
DECISIONS = (RESOLVED, LEANS, LEVEL, UNDECIDABLE, UNTESTED)
"""What :func:`decision` can say of a row, in the words a reader reads."""

SHOWN = "shown, not corrected"
"""What a row judged by its own test alone says after its p: it is no part of a correction."""


def own_test(r: dict) -> bool:
    """Whether row ``r`` stands alone: a secondary (``role``), or a row no correction has seen (no
    ``family``). Such a row is judged by its own test: testable when its test can reach the level at
    its n, passed when its own p does."""
    return r.get("role") == "secondary" or "family" not in r


def passes_test(r: dict) -> tuple[bool, bool]:
    """``(testable, passed)`` of ``r``'s exact test alone (part 1 of the rule): by its own p
    (:func:`own_test`), else by its family's correction (:func:`compare.correct`)."""
    if not r.get("n"):
        return False, False
    if own_test(r):
        return r["p_min"] <= compare.ALPHA, r["p"] <= compare.ALPHA
    return bool(r["testable"]), bool(r["resolved"])


def holds_zero(r: dict) -> bool:
    """Whether the 95% t interval of ``r``'s mean holds zero (or, with one seed, there is none);
    ``False`` for a row without a mean (a censored run): there the test alone decides."""
    if r.get("mean") is None:
        return False
    return r["ci"] is None or r["ci"][0] <= 0.0 <= r["ci"][1]


def _agree(r: dict) -> bool:
    """Whether most seeds and the mean lie on the same side (part 3 of the rule)."""
    if r.get("mean") is None or r["mean"] == 0:
        return True
    return (r["wins"] > r["losses"]) == ((r["mean"] > 0) == r.get("higher_is_better", True))


def decision(r: dict) -> str:
    """What the rule says of paired row ``r``: one of :data:`DECISIONS` (the module's rule)."""
    if not r.get("n"):
        return UNTESTED
    testable, passed = passes_test(r)
    if not testable:
        return UNDECIDABLE
    if r.get("mean") is None:  # a censored pair: no mean, no interval; the test alone
        return RESOLVED if passed else LEVEL
    excludes = not holds_zero(r)
    if passed and excludes and _agree(r):
        return RESOLVED
    return LEANS if passed or excludes else LEVEL


def judged(r: dict) -> tuple[bool, bool]:
    """``(testable, resolved)`` of paired row ``r`` under the rule: its test can reach the level at all,
    and the row is :data:`RESOLVED` (:func:`decision`)."""
    return passes_test(r)[0], decision(r) == RESOLVED

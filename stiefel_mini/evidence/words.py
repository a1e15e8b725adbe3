"""The verdict-word rules, in one place: a claim's status and verdict text from its primary, and the
plain words a reader reads of each row.

Verdict words (:func:`family_status`), from the primary:

- ``reproduced``: resolved in the paper's direction, the paper's number inside the 95% t interval;
- ``smaller effect`` / ``larger effect``: resolved in the paper's direction, the paper's number
  above / below the interval ("+2.51 pp [+2.14, +2.89], not +8.98");
- ``contradicted``: resolved against the claim, or a claimed small effect whose interval lies
  above it ("freezing costs +1.87 pp [+0.64, +3.10], not 0.28");
- ``not resolved``: either the test cannot reach the level at this n ("n = 5 cannot go below
  p = 0.0625") or it can and did not; the numbers are given, neither reads as "no effect", and a
  paper's number outside the interval is said ("the paper's +35.90 lies outside this interval");
- ``mixed`` (a ratio family whose regimes disagree), ``partly reproduced`` (a bundle whose
  resolved parts agree with the claim while the rest is not resolved), ``not tested yet`` (the file
  or its paired seeds are missing), and ``by construction`` for claims about the algorithm's
  definition.

Plain words (:func:`row_phrase`, :func:`gist`): a row for a reader, arms by name (:data:`ARM_NAMES`),
every sign as a word ("slower", "ahead", "narrower") but only where the interval excludes zero
(:func:`holds_zero`), sizes as magnitudes in plain units, the paper's number beside it when it lies
outside the interval ("no gap like the paper's"), and a row judged by its own test "shown, not
corrected" (:func:`judged`). A claim's phrase and sentence: :mod:`stiefel_mini.evidence.sentences`.
"""

from __future__ import annotations

import math
import re

from stiefel_mini.evidence import compare
from stiefel_mini.evidence.claims import Claim
from stiefel_mini.experiments.stats import smallest_p

__all__ = ["number_text", "effect_text", "sure_text", "n_text", "needed_text", "family_status", "regime_of",
           "regime_statuses", "ARM_NAMES", "arm_name", "side_names", "plain_regime", "gist", "row_phrase", "SHOWN", "own_test",
           "judged", "holds_zero", "change_text"]


def number_text(x: float, unit: str) -> str:
    """A signed difference for the tables: whole steps and tokens, bits per byte to three decimals,
    else two; ``+inf`` as ``never``."""
    if math.isinf(x):  # a censored run on the side of the difference's sign
        return "never" if x > 0 else "-never"
    if unit in ("steps", "tokens"):
        return f"{x:+,.0f}"
    return f"{x:+.3f}" if unit == "bpb" else f"{x:+.2f}"


def effect_text(row: dict, what: str = "") -> str:
    """A comparison's size in words: ``"A1 − A0 +2.51 pp [+2.14, +2.89]"`` (or its censoring)."""
    unit = row.get("unit", "")
    head = f"{what} " if what else ""
    if row.get("ratio"):
        if row["gmean"] is None:
            return head + "no paired seed"
        ci = "" if row["ci"] is None else f" [{row['ci'][0]:.3g}, {row['ci'][1]:.3g}]"
        return f"{head}{row['gmean']:.3g}x{ci}"
    if row["n"] == 0:
        return head + "no paired seed"
    if row["mean"] is None:
        med = number_text(row["median"], unit) + ("" if math.isinf(row["median"]) else f" {unit}")
        return (f"{head}median {med}, {row['n_censored']} of {row['n']} pairs censored "
                "(never reached), no mean")
    ci = "" if row["ci"] is None else f" [{number_text(row['ci'][0], unit)}, {number_text(row['ci'][1], unit)}]"
    return f"{head}{number_text(row['mean'], unit)} {unit}{ci}"


def sure_text(row: dict, family: int) -> str:
    """How sure: the test, its n, its p and the corrected p (or why it cannot reach the level)."""
    if row.get("ratio"):
        return (f"95% t interval, {row['n']} seeds" if row["n"] >= 2 else f"{row['n']} seed(s)") + _flags(row)
    if row["n"] == 0:
        return "no paired seed"
    test = "exact sign test" if row["test"] == "sign" else "exact signed-rank test"
    # A row shown on its own (family 1) is testable when its test can reach the level at its n.
    testable = row["p_min"] <= compare.ALPHA if family == 1 else row["testable"]
    if not testable:
        return f"{test}, {row['wins']}/{row['n']} wins, p = {row['p']:.3g}: too few seeds for 0.05" + _flags(row)
    k = row.get("n_testable", family)
    corr = "" if family == 1 else (f", Holm over {family}" if k == family else
                                   f", Holm over the {k} testable of {family} (Tarone)")
    return f"{test}, {row['wins']}/{row['n']} wins, p = {row['p']:.2g}{corr}" + (
        f" → {row['p_holm']:.2g}" if family > 1 else "") + _flags(row)


def _flags(row: dict) -> str:
    """What a row's reader must know of its runs: an lr picked on its own seeds, pairs across machines,
    fewer seeds than its comparison plans."""
    out = "; the best lr picked on these same seeds" if row.get("chosen_here") else ""
    two = row.get("two_machines") or []
    out += f"; {len(two)} of {row['n']} pairs made on two machines" if two else ""
    return out + (f"; {row['n']} of its {row['planned']} planned seeds so far" if _unfinished(row) else "")


def _unfinished(row: dict) -> bool:
    """Whether ``row`` pairs fewer seeds than its comparison declares (``planned``, from
    :func:`stiefel_mini.evidence.measure.compute`): a reading on the way, not the planned one."""
    return 0 < row["n"] < row.get("planned", 0)


def of_seeds(row: dict, k: int, aside: str = "") -> str:
    """``"6 of 6 seeds"``, ``" (16 planned)"`` after it while the row has fewer seeds than planned, and
    ``aside`` in the same brackets: ``"6 of 6 seeds (16 planned; 4 fresh seeds did not confirm it)"``."""
    notes = ([f"{row['planned']} planned"] if _unfinished(row) else []) + ([aside] if aside else [])
    return f"{k} of {row['n']} seeds" + (f" ({'; '.join(notes)})" if notes else "")


def n_text(row: dict) -> str:
    """``"n = 5"``, or ``"n = 5 (2 tied)"`` when the test drops tied pairs."""
    tied = row["n"] - row["n_test"]
    return f"n = {row['n']}" + (f" ({tied} tied)" if tied else "")


def needed_text(row: dict, family: int = 1) -> str:
    """How many paired seeds the row's win rate would need to resolve (:func:`compare.seeds_to_resolve`).

    ``family`` > 1 uses Holm's strictest level, ``alpha / family``.
    """
    if row.get("ratio") or row["n"] == 0:
        return ""
    if row["wins"] == row["losses"]:
        return f"; at a level split ({row['wins']} wins, {row['losses']} losses) no number of seeds would resolve it"
    n = compare.seeds_to_resolve(row["wins"], row["losses"], compare.ALPHA / family)
    # The majority side sets the rate: "4 of 6 losses" beside "2/6 wins" names the same split.
    side = "wins" if row["wins"] > row["losses"] else "losses"
    split = f"{max(row['wins'], row['losses'])} of {row['wins'] + row['losses']} {side}"
    if n is None:
        return f"; at that split ({split}) no feasible number of seeds would resolve it"
    return f"; at that split ({split}) about {n} untied paired seeds would resolve it"


def _not_resolved(row: dict, what: str) -> str:
    if not row["testable"]:
        return (f"not resolved: {n_text(row)} cannot go below p = {row['p_min']:.3g} ({effect_text(row, what)})"
                + needed_text(row))
    return f"not resolved: {effect_text(row, what)}, p = {row['p_holm']:.2g}" + needed_text(row)


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
    if not row["resolved"]:
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
    differ = [r for r in have if r["resolved"] and r["baseline"] in c.expect_zero]
    step = [r for r in have if r["baseline"] not in c.expect_zero]
    against = [r for r in step if r["resolved"] and r["mean"] is not None and r["mean"] < 0]
    if differ or against:
        r = min(differ + against, key=lambda r: r["p_holm"])
        return "contradicted", f"contradicted: {effect_text(r, r['label'].split(' (')[0])}, resolved"
    big = max(have, key=lambda r: abs(r["mean"] if r["mean"] is not None else 0.0))
    largest = f"largest: {effect_text(big, big['label'].split(' (')[0])}"
    if not any(r["testable"] for r in have):
        n = max(r["n"] for r in have)
        return "not resolved", (f"not resolved: n = {n} cannot go below p = {smallest_p(n):.3g} ({largest}"
                                f"{needed_text(big, len(rows))})")
    if step and all(r["resolved"] for r in step):
        return "partly reproduced", ("partly reproduced: " + "; ".join(
            effect_text(r, r["label"].split(" (")[0]) for r in step) + " resolved; the variants are not resolved "
            "apart from A1, which does not show that they are equal")
    return "not resolved", (f"not resolved: no comparison of the family resolved after correction ({largest}"
                            f"{needed_text(big, len(rows))})")


def regime_statuses(c: Claim, rows: list[dict]) -> list[str]:
    """The status of each regime of a ratio family on its own (``[]`` for another kind of claim): what
    a ``mixed`` verdict is made of."""
    return [_ratio_verdict(c, r)[0] for r in rows] if c.kind == "ratio" else []


def regime_of(row: dict) -> str:
    """What sets a family's row apart: a ratio family's regime ("both at lr 1e-3"), else its arms."""
    return row["label"].split(", ", 1)[-1] if row["ratio"] else row["label"].split(" (")[0]


def family_status(c: Claim, rows: list[dict]) -> tuple[str, str]:
    """``(status, verdict text)`` of claim ``c`` judged on its primary family ``rows`` (the rules above)."""
    if c.kind == "ratio":
        return _ratio_family_verdict(c, rows)
    if c.kind == "ingredients":
        return _ingredients_verdict(c, rows)
    return _size_verdict(c, rows[0])


# ----------------------------------------------------------------------------------------------------
# Plain words: the same verdict for a reader
# ----------------------------------------------------------------------------------------------------

ARM_NAMES = {
    "A0": "AdamW", "adamw": "AdamW", "A1": "StiefelAdam", "stiefel_learned": "StiefelAdam", "stiefel": "StiefelAdam",
    "A3": "frozen frames", "frozen_learned": "frozen frames", "frozen": "frozen frames", "qknorm": "QK-norm", "muon": "Muon",
    "muon_stiefel": "StiefelAdam on Q/K with Muon", "adamw_qknorm": "AdamW with QK-norm",
    "muon_qknorm": "Muon with QK-norm", "stiefel_muon": "StiefelMuon",
    "stiefel_scale": "StiefelAdam (own scale lr)", "stiefel_muon_scale": "StiefelMuon (own scale lr)",
    "A0'": "AdamW without decay on Q/K", "A4": "AdamW with StiefelAdam's small step",
    "A5": "AdamW followed by the polar projection", "A7": "StiefelAdam with an element-wise second moment",
    "stiefel_column": "StiefelAdam with a column second moment",
    "stiefel_canonical": "StiefelAdam with the canonical projector",
    "stiefel_noproj": "StiefelAdam without the tangent projection", "stiefel_nocap": "StiefelAdam without the trust cap",
    "adamw_family": "the better AdamW", "muon_family": "the better Muon",
}
"""Each arm's name for a reader (an arm not listed is named by its code)."""

_UNITS = {"pp": ("point", "points"), "steps": ("step", "steps"), "falls": ("fall", "falls"),
          "bpb": ("bit per byte", "bits per byte"), "tokens": ("token", "tokens")}
# (b better than a, b worse than a) by the row's unit; a unit not listed reads "better" / "worse".
_PREP = {"ahead": " of", "faster": " than", "slower": " than"}
_SIDES = {"pp": ("ahead", "behind"), "steps": ("faster", "slower"), "falls": ("fewer falls", "more falls"),
          "bpb": ("ahead", "behind"), "tokens": ("faster", "slower")}


def arm_name(code: str) -> str:
    """An arm's name for a reader (:data:`ARM_NAMES`), else its code."""
    return ARM_NAMES.get(code, code)


def side_names(r: dict) -> tuple[str, str]:
    """``(arm, baseline)`` of a row by name, a family side (``"adamw_family"``) named by the arm it
    stands for once picked (the row's ``picked``): ``("StiefelAdam", "AdamW with QK-norm")``."""
    picked = r.get("picked") or {}
    return arm_name(picked.get(r["arm"], r["arm"])), arm_name(picked.get(r["baseline"], r["baseline"]))


def plain_regime(text: str) -> str:
    """A regime with its CIFAR arm codes named: ``"A1's frame lr 1.0"`` -> ``"StiefelAdam's frame lr 1.0"``."""
    return re.sub(r"\bA\d(?:'(?!s))?(?!\w)", lambda m: arm_name(m.group(0)), text)


def _amount(x: float, unit: str) -> str:
    """A magnitude in plain units: ``"2.4 points"``, ``"457 steps"``."""
    one, many = _UNITS.get(unit, (unit, unit))
    if unit in ("steps", "tokens"):
        return f"{abs(x):,.0f} {one if round(abs(x)) == 1 else many}"
    if unit == "bpb":
        return f"{abs(x):.3f} {many}"
    return f"{abs(x):.1f} {many}".strip()


def _signed(x: float, unit: str) -> str:
    """A difference ``b − a`` with its sign, for a mean no direction word may be given: ``"+0.5 points"``."""
    return f"{'-' if x < 0 else '+'}{_amount(x, unit)}"


def _paper_amount(pv: float, unit: str) -> str:
    return f"{abs(pv):.2g}" if abs(pv) < 1 else f"{abs(pv):.1f}" if unit != "steps" else f"{abs(pv):,.0f}"


def _sides(row: dict) -> tuple[str, str]:
    """The words for b better / worse than a, by the row's unit (a gap's change: wider / narrower)."""
    if row["label"].startswith("("):
        return "wider", "narrower"
    return _SIDES.get(row.get("unit", ""), ("better", "worse"))


_UNDECIDABLE = "too few seeds to decide"
"""An unresolved row whose test could not pass at any split of its seeds: even all of them one way
would not be "resolved", so "no clear difference" would misread it."""

SHOWN = "shown, not corrected"
"""What a row judged by its own test alone says after its p: it is no part of a correction."""


def own_test(r: dict) -> bool:
    """Whether row ``r`` stands alone: a secondary (``role``), or a row no correction has seen (no
    ``family``). Such a row is judged by its own test: testable when its test can reach the level at
    its n, resolved when its own p does."""
    return r.get("role") == "secondary" or "family" not in r


def judged(r: dict) -> tuple[bool, bool]:
    """``(testable, resolved)`` of paired row ``r``: by its own test (:func:`own_test`), else by the
    correction of its family (:func:`compare.correct`)."""
    if not r.get("n"):
        return False, False
    if own_test(r):
        return r["p_min"] <= compare.ALPHA, r["p"] <= compare.ALPHA
    return bool(r["testable"]), bool(r["resolved"])


def _undecidable(r: dict) -> bool:
    """Whether paired row ``r`` has seeds but a test that cannot reach the level (Tarone)."""
    return r.get("n", 0) > 0 and not judged(r)[0]


def holds_zero(r: dict) -> bool:
    """Whether the 95% t interval of ``r``'s mean holds zero (or, with one seed, there is none): then
    no word may give the mean a direction."""
    if r.get("mean") is None:
        return False
    return r["ci"] is None or r["ci"][0] <= 0.0 <= r["ci"][1]


def _shown(r: dict) -> str:
    return f" (p = {r['p']:.2g}, {SHOWN})" if own_test(r) and r.get("n") else ""


def change_text(r: dict, more: str, less: str, what: str = "") -> str:
    """A change in a running sentence, its direction said only when the 95% interval excludes zero:
    ``"sooner (-460 steps [-700, -220])"``, else ``"no clear difference in steps to 95% (-192 steps
    [-817, +432])"``. ``more`` / ``less``: the words for a positive / negative mean."""
    if r.get("mean") is None or holds_zero(r):
        return f"no clear difference{f' in {what}' if what else ''} ({effect_text(r)})"
    return f"{more if r['mean'] > 0 else less} ({effect_text(r)})"


def row_phrase(r: dict, resolved: bool | None = None, pv: float | None = None, short: bool = False,
               baseline: bool | None = None) -> str:
    """A paired row ``b − a`` in plain words: ``"StiefelAdam slower than AdamW to reach 95% validation on
    12 of 14 seeds, by 457 steps on average"``; unresolved: ``"no clear difference: ..."``, ``"too few
    seeds to decide: ..."`` when no split of its seeds could pass the correction, or ``"no gap like the
    paper's ..."`` when the paper's number ``pv`` lies outside the interval. The mean gets a direction
    word only when its 95% interval excludes zero (else its sign, b − a: "a mean gap of -0.5 points whose
    95% interval holds zero"); a row judged by its own test (:func:`own_test`) ends with its p, "shown, not
    corrected". ``resolved`` defaults to :func:`judged`; ``short`` leaves out the metric, "on average"
    and a resolved row's "not the paper's" (for a table that shows the paper's number beside it).
    ``baseline`` names the baseline; by default it is named unless ``short`` and it is AdamW (the
    table's claim names AdamW)."""
    resolved = judged(r)[1] if resolved is None else resolved
    unit = r.get("unit", "")
    b, a = side_names(r)
    good, bad = _sides(r)
    centre = r["mean"] if r["mean"] is not None else r["median"]
    lo, hi = r["ci"] if r["ci"] is not None else (centre, centre)
    # "b ahead of a", or for the change of a gap "(A1 − A0) at 50,000 − at 5,000 images":
    # "b's lead over a narrower at 50,000 than at 5,000 images"
    # short: the table's claim names AdamW as the baseline, and the metric, so they are left out
    bare = not baseline if baseline is not None else short and a == "AdamW"
    vs_a = "" if bare else f" over {a}"
    if r["label"].startswith("("):
        high, low = r["label"].split(") ", 1)[1].split(" − ")
        who = lambda word: f"{b}'s lead{vs_a} {word} {high} than {low}"  # noqa: E731
    else:
        who = lambda word: f"{b} {word}" + ("" if bare else f"{_PREP.get(word, '')} {a}")  # noqa: E731
    word = lambda x: good if (x > 0) == r.get("higher_is_better", True) else bad  # noqa: E731
    what = r["label"].split(", ", 1)[1] if ", " in r["label"] else "test accuracy" if unit == "pp" else ""
    of = f" of {what}" if unit == "pp" and what and not short else ""
    to = f" to reach {what.removeprefix('steps to ')}" if unit == "steps" and what.startswith(
        "steps to ") and not short else ""
    if unit == "tokens" and not short:
        to = f" {what.removeprefix('tokens ')}"  # "to reach adamw's final ..."
    avg = "" if short else " on average"
    gap = "" if r["mean"] is None or r["mean"] == 0 else \
        f", a mean gap of {_signed(r['mean'], unit)}{of} whose 95% interval holds zero"
    size = "" if centre is None or math.isinf(centre) else gap if holds_zero(r) else (
        f", by {_amount(centre, unit)}{of}{avg}" if r["mean"] is not None else f", by a median {_amount(centre, unit)}")
    w, l = r["wins"], r["losses"]
    if not resolved:
        outside = pv is not None and lo is not None and not lo <= pv <= hi
        head = (f"no gap like the paper's {_paper_amount(pv, unit)} {_UNITS.get(unit, ('', unit))[1]}" if outside
                else _UNDECIDABLE if _undecidable(r) else "no clear difference")
        sides = (f"{who(good)}{to} on {w} and {bad} on {of_seeds(r, l)}" if w == l else
                 f"{who(good if w > l else bad)}{to} on {of_seeds(r, max(w, l))}")
        mean = gap if holds_zero(r) else "" if r["mean"] is None or r["mean"] == 0 else \
            f", {_amount(r['mean'], unit)}{of} {word(r['mean'])}{avg}"
        return f"{head}: {sides}{mean}{_shown(r)}"
    text = who(good if w > l else bad) + f"{to} on {of_seeds(r, max(w, l))}{size}"
    if pv is not None and not lo <= pv <= hi and not short:
        text += f", not the paper's {_paper_amount(pv, unit)}"
    return text + _shown(r)


def gist(r: dict, pv: float | None = None, seeds: bool = True) -> str:
    """A row's result in a few words for a running sentence: ``"2.4 points ahead on 14 of 14 seeds"``,
    ``"457 steps slower to reach 95% validation on 12 of 14 seeds"``, or, unresolved, ``"no clear
    difference"`` / ``"too few seeds to decide"`` / ``"no gap like the paper's 35.9 points"``;
    ``seeds=False`` leaves out the seeds."""
    unit = r.get("unit", "")
    centre = r["mean"] if r["mean"] is not None else r["median"]
    lo, hi = r["ci"] if r["ci"] is not None else (centre, centre)
    if not judged(r)[1]:
        if pv is not None and lo is not None and not lo <= pv <= hi:
            return f"no gap like the paper's {_paper_amount(pv, unit)} {_UNITS.get(unit, ('', unit))[1]}"
        return _UNDECIDABLE if _undecidable(r) else "no clear difference"
    good, bad = _sides(r)
    what = r["label"].split(", ", 1)[1] if ", " in r["label"] else ""
    to = f" to reach {what.removeprefix('steps to ')}" if unit == "steps" and what.startswith("steps to ") else ""
    side = good if (r["wins"] > r["losses"]) else bad
    size = "" if centre is None or math.isinf(centre) or holds_zero(r) else f"{_amount(centre, unit)} "
    return f"{size}{side}{to}" + (f" on {of_seeds(r, max(r['wins'], r['losses']))}" if seeds else "")

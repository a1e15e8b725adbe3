"""The plain words a reader reads of a comparison row, and the helpers every verdict is written with.

Plain words (:func:`row_phrase`, :func:`gist`, :func:`change_text`): a row for a reader, arms by name
(:data:`ARM_NAMES`), every sign as a word ("slower", "ahead", "narrower") only where the rule resolves
the row, the others headed by what the rule says of them ("no clear difference", "not resolved", "too
few seeds to decide", :func:`stiefel_mini.evidence.rule.decision`), sizes as magnitudes in plain units,
the paper's number beside it when it lies outside the interval ("no gap like the paper's"), and a row
judged by its own test "shown, not corrected". A claim's verdict words: :mod:`stiefel_mini.evidence.verdict`;
its phrase and sentence: :mod:`stiefel_mini.evidence.sentences`.
"""

from __future__ import annotations

import math
import re

from stiefel_mini.evidence import compare
from stiefel_mini.evidence.rule import LEANS, LEVEL, RESOLVED, SHOWN, UNDECIDABLE, decision, holds_zero, judged, own_test

__all__ = ["number_text", "effect_text", "sure_text", "of_seeds", "n_text", "needed_text", "regime_of", "ARM_NAMES", "arm_name", "side_names", "plain_regime", "gist", "row_phrase", "change_text", "time_ratio_text"]


def number_text(x: float, unit: str) -> str:
    """A signed difference for the tables: whole steps and tokens, bits per byte to three decimals,
    else two; ``+inf`` as ``never``."""
    if math.isinf(x):  # a censored run on the side of the difference's sign
        return "never" if x > 0 else "-never"
    if unit in ("steps", "tokens"):
        return f"{x:+,.0f}"
    return f"{x:+.3f}" if unit == "bpb" else f"{x:+.2f}"


def time_ratio_text(r: dict) -> str:
    """How long one side takes beside the other, for a timing ratio ``r`` of interleaved rounds
    (:func:`stiefel_mini.experiments.stats.paired_ratio`: ``{"median", "low", "high"}``): "about as long
    as" when the rounds' range holds 1, else "``m`` times as long as" (``m`` = the median, 1 decimal; 2
    where 1 decimal would read 1.0)."""
    m = r["median"]
    if r["low"] <= 1.0 <= r["high"]:
        return "about as long as"
    return f"{m:.1f} times as long as" if round(m, 1) != 1.0 else f"{m:.2f} times as long as"


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


def regime_of(row: dict) -> str:
    """What sets a family's row apart: a ratio family's regime ("both at lr 1e-3"), else its arms."""
    return row["label"].split(", ", 1)[-1] if row["ratio"] else row["label"].split(" (")[0]



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
    "all_stiefel": "StiefelMuon on every hidden matrix",
}
"""Each arm's name for a reader (an arm not listed is named by its code)."""

_UNITS = {"pp": ("point", "points"), "steps": ("step", "steps"), "falls": ("fall", "falls"),
          "bpb": ("bit per byte", "bits per byte"), "tokens": ("token", "tokens")}
# (b better than a, b worse than a) by the row's unit; a unit not listed reads "better" / "worse".
_PREP = {"ahead": " of", "faster": " than", "slower": " than", "fewer falls": " than", "more falls": " than"}
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
    """A regime with its CIFAR arm codes named and the grokking modulus said as one: ``"A1's frame lr 1.0"``
    -> ``"StiefelAdam's frame lr 1.0"``, ``"p = 59"`` -> ``"modulus 59"`` (``p`` is a head's width elsewhere)."""
    text = re.sub(r"\bp = (\d+)\b(?!\.)", r"modulus \1", text)
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


def _shown(r: dict) -> str:
    return f" (p = {r['p']:.2g}, {SHOWN})" if own_test(r) and r.get("n") else ""


def _p_said(r: dict) -> str:
    """A row's p in brackets: its own ("shown, not corrected") or its family's corrected p."""
    if own_test(r):
        return _shown(r)
    return f" (p = {r['p_holm'] if r.get('p_holm') is not None else r['p']:.2g})"


def _lean(r: dict) -> int:
    """The side a row the rule leaves open leans to, as the sign of ``b − a``: its mean's where its
    interval excludes zero, else its seeds' majority (which side of the test it passed)."""
    if r.get("mean") is not None and not holds_zero(r):
        return 1 if r["mean"] > 0 else -1
    better = r["wins"] > r["losses"]
    return 1 if better == r.get("higher_is_better", True) else -1


def change_text(r: dict, more: str, less: str, what: str = "") -> str:
    """A change in a running sentence, its direction said as a result only where the rule resolves it
    (:func:`stiefel_mini.evidence.rule.decision`): ``"sooner (-460 steps [-700, -220])"``; else ``"no
    clear difference in steps to 95% (-192 steps [-817, +432])"``, ``"not resolved in steps to 95%,
    leaning later (+300 steps [+100, +500], p = 0.22)"`` or ``"too few seeds to decide ..."``. ``more`` /
    ``less``: the words for a positive / negative mean."""
    said = decision(r)
    where = f" in {what}" if what else ""
    if said == RESOLVED:
        return f"{more if (r['mean'] if r['mean'] is not None else _lean(r)) > 0 else less} ({effect_text(r)})"
    if said == LEANS:
        return (f"not resolved{where}, leaning {more if _lean(r) > 0 else less} ({effect_text(r)}, "
                f"{_p_said(r).strip(' ()')})")
    return f"{said}{where} ({effect_text(r)})"


def row_phrase(r: dict, resolved: bool | None = None, pv: float | None = None, short: bool = False,
               baseline: bool | None = None, with_p: bool = True) -> str:
    """A paired row ``b − a`` in plain words: ``"StiefelAdam slower than AdamW to reach 95% validation on
    12 of 14 seeds, by 457 steps on average"``; a row the rule does not resolve
    (:func:`stiefel_mini.evidence.rule.decision`) is headed by what the rule says of it: ``"no clear
    difference: ..."``, ``"not resolved: ..."`` (the test and the interval disagree: the p and the
    interval are said), ``"too few seeds to decide: ..."``, or ``"no gap like the paper's ..."`` when the
    paper's number ``pv`` lies outside the interval. Where its interval holds zero the mean is given by
    its sign, b − a ("a mean gap of -0.5 points whose 95% interval holds zero"); a row judged by its own
    test ends with its p, "shown, not corrected". ``resolved`` defaults to the rule's; ``short`` leaves
    out the metric, "on average", the p of a row whose test and interval disagree and a resolved row's
    "not the paper's" (for a table that shows the paper's number beside it). ``baseline`` names the baseline; by default it is named unless ``short``
    and it is AdamW (the table's claim names AdamW). ``with_p=False`` leaves out every p (a page's plain
    first screen)."""
    said = decision(r)
    shown = _shown(r) if with_p else ""
    resolved = said == RESOLVED if resolved is None else resolved
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
                else said if said in (UNDECIDABLE, LEVEL) else LEANS)
        sides = (f"{who(good)}{to} on {w} and {bad} on {of_seeds(r, l)}" if w == l else
                 f"{who(good if w > l else bad)}{to} on {of_seeds(r, max(w, l))}")
        mean = gap if holds_zero(r) else "" if r["mean"] is None or r["mean"] == 0 else \
            f", {_amount(r['mean'], unit)}{of} {word(r['mean'])}{avg}"
        if said == LEANS:  # the test and the interval disagree: both are said, the p first
            return (f"{head}: {sides}{'' if short or not with_p else _p_said(r)}{mean}"
                    + ("" if holds_zero(r) else ", its 95% interval excluding zero"))
        return f"{head}: {sides}{mean}{shown}"
    text = who(good if w > l else bad) + f"{to} on {of_seeds(r, max(w, l))}{size}"
    if pv is not None and not lo <= pv <= hi and not short:
        text += f", not the paper's {_paper_amount(pv, unit)}"
    return text + shown


def gist(r: dict, pv: float | None = None, seeds: bool = True) -> str:
    """A row's result in a few words for a running sentence: ``"2.4 points ahead on 14 of 14 seeds"``,
    ``"457 steps slower to reach 95% validation on 12 of 14 seeds"``, or, where the rule does not resolve
    it, what the rule says (``"no clear difference"``, ``"not resolved"``, ``"too few seeds to decide"``)
    or ``"no gap like the paper's 35.9 points"``; ``seeds=False`` leaves out the seeds."""
    unit = r.get("unit", "")
    centre = r["mean"] if r["mean"] is not None else r["median"]
    lo, hi = r["ci"] if r["ci"] is not None else (centre, centre)
    if not judged(r)[1]:
        if pv is not None and lo is not None and not lo <= pv <= hi:
            return f"no gap like the paper's {_paper_amount(pv, unit)} {_UNITS.get(unit, ('', unit))[1]}"
        return decision(r)
    good, bad = _sides(r)
    what = r["label"].split(", ", 1)[1] if ", " in r["label"] else ""
    to = f" to reach {what.removeprefix('steps to ')}" if unit == "steps" and what.startswith("steps to ") else ""
    side = good if (r["wins"] > r["losses"]) else bad
    size = "" if centre is None or math.isinf(centre) else f"{_amount(centre, unit)} "
    return f"{size}{side}{to}" + (f" on {of_seeds(r, max(r['wins'], r['losses']))}" if seeds else "")

"""A claim's verdict as a reader reads it: its phrase and sentence, what fresh seeds said of it, and a
row said with both arms named; the short names of the arms in a figure.

Built on the word rules of :mod:`stiefel_mini.evidence.words` (a row's phrase, its direction only
where its interval excludes zero, a row judged by its own test "shown, not corrected"):

- :func:`phrase` / :func:`sentence`: the verdict in plain words, for the intro's table and a
  chapter's box, with what fresh seeds said (:func:`confirmed_word`, :func:`fresh_text`: the
  ledger's own status) and the pairs made on two machines (:func:`machines_text`);
- :func:`flip` and :func:`versus`: a row with its baseline as the subject, and a row in a few words
  with both arms named;
- :data:`FIGURE_NAMES` and :func:`figure_name`: each arm's short name where a figure has little room.
"""

from __future__ import annotations

import re

from stiefel_mini.evidence.claims import Claim
from stiefel_mini.evidence.confirm import DECLARED_FIRST
from stiefel_mini.evidence.rule import UNDECIDABLE, decision, holds_zero, judged
from stiefel_mini.evidence.words import _PREP, _amount, arm_name, gist, regime_of, row_phrase, side_names

__all__ = ["flip", "versus", "phrase", "confirmed_word", "fresh_text", "machines_text", "sentence", "FIGURE_NAMES",
           "figure_name"]


def flip(r: dict) -> dict:
    """Paired row ``b − a`` as ``a − b``: the arms swapped, every difference negated, wins and losses
    swapped (for a sentence whose subject is the row's baseline)."""
    neg = lambda x: None if x is None else -x  # noqa: E731
    out = {**r, "arm": r["baseline"], "baseline": r["arm"], "mean": neg(r["mean"]), "median": neg(r["median"]),
           "low": neg(r["high"]), "high": neg(r["low"]), "wins": r["losses"], "losses": r["wins"],
           "diffs": [-d for d in r.get("diffs", [])], "ci": None if r["ci"] is None else (-r["ci"][1], -r["ci"][0])}
    a, b = r["label"].split(",", 1)[0].split(" − ") if " − " in r["label"] else (r["arm"], r["baseline"])
    out["label"] = f"{b} − {a}" + (f",{r['label'].split(',', 1)[1]}" if "," in r["label"] else "")
    return out


def versus(r: dict, verb: str = "") -> str:
    """A row in a few words with both arms named: ``"Muon 0.162 bits per byte ahead of AdamW on 8 of 8
    seeds"``; unresolved: ``"StiefelAdam against AdamW: no clear difference"`` (:func:`gist`). ``verb``
    follows the first arm's name ("was") in a resolved row."""
    b, a = side_names(r)
    g = gist(r)
    if not judged(r)[1]:
        return f"{b} against {a}: {g}"
    side, rest = next(((w, g.split(w, 1)) for w in ("ahead", "behind", "faster", "slower", "fewer falls",
                                                      "more falls", "wider", "narrower", "better", "worse")
                       if w in g), ("", (g, "")))
    if not side:
        return f"{b} {g} against {a}"
    prep = _PREP.get(side, "" if side == "behind" else " than")
    return f"{b} {verb + ' ' if verb else ''}{rest[0]}{side}{prep} {a}{rest[1]}"


def _ratio_phrase(c: Claim, rows: list[dict], short: bool = False) -> str:
    parts = []
    for r in rows:
        if r["gmean"] is None:
            continue
        g = r["gmean"]
        # the ratio is a's step over b's: above 1, b's steps are the smaller
        size = f"{g:.2g}x smaller" if g >= 1 else f"{1 / g:.2g}x larger"
        parts.append(f"{size} ({regime_of(r)})" if len(rows) > 1 else size)
    lo, hi = c.paper_range
    b, a = arm_name(rows[0]["arm"]), arm_name(rows[0]["baseline"])
    if short:
        return f"{b}'s steps {', '.join(parts)}"
    return f"{b}'s steps {' but '.join(parts)} than {a}'s; the paper: {lo:g}-{hi:g}x smaller"


def _ingredients_phrase(v: dict, rows: list[dict], short: bool = False) -> str:
    have = [r for r in rows if r["n"] and r["mean"] is not None]
    if not have:
        return "no paired runs yet"
    big = max(have, key=lambda r: abs(r["mean"]))
    few = [r for r in have if decision(r) == UNDECIDABLE]
    if holds_zero(big):
        largest = (f"the largest mean gap, {_amount(big['mean'], big['unit'])} between {arm_name(big['arm'])} and "
                   f"{arm_name(big['baseline'])} on {big['n']} seeds, has a 95% interval that holds zero")
        short_largest = f"largest mean gap {_amount(big['mean'], big['unit'])}, its interval holding zero"
    else:
        side = "ahead of" if big["mean"] > 0 else "behind"
        largest = (f"the largest gap: {arm_name(big['arm'])} {_amount(big['mean'], big['unit'])} {side} "
                   f"{arm_name(big['baseline'])} on average, {side.split()[0]} on {max(big['wins'], big['losses'])} "
                   f"of {big['n']} seeds")
        short_largest = f"largest gap {_amount(big['mean'], big['unit'])}"
    if v["status"] != "not resolved":
        return f"{v['status']}; {short_largest if short else largest}"
    # Unresolved: the variants whose test cannot reach the level at their n say nothing either way.
    n_few = sorted({r["n"] for r in few})
    seeds = " or ".join(map(str, n_few))
    if len(few) == len(have):
        head = f"too few seeds to decide: each of the {len(have)} variants has {seeds} seeds"
    elif few:
        rest = [r for r in have if r not in few]
        head = (f"too few seeds to decide for {len(few)} of the {len(have)} variants ({seeds} seeds each); "
                + ("the other shows" if len(rest) == 1 else f"the other {len(rest)} show")
                + " no clear difference from " + arm_name(big["arm"]))
    else:
        head = f"no variant of the rule clearly differs from {arm_name(big['arm'])}"
    if short:
        return f"{head.split(':')[0].split(';')[0]} ({short_largest})"
    return f"{head}; {largest}"


def phrase(c: Claim, v: dict, short: bool = False) -> str:
    """A claim's verdict ``v`` as one plain phrase: arms by name, the direction in words, the size in
    plain units and, where it lies outside this book's interval, the paper's number.

    ``"StiefelAdam slower than AdamW on 12 of 14 seeds, by 457 steps on average"``;
    ``"no gap like the paper's 35.9 points: StiefelAdam ahead on 4 and behind on 4 of 8 seeds, ..."``.
    """
    rows = [r for r in v["primary"] if r["n"]]
    if v["status"] == "by construction":
        # short: the verdict's first clause ("implemented as described", "true by construction")
        return re.split(r", and |: ", v["verdict"])[0] if short else v["verdict"]
    if not rows:
        return "no paired seed in the results yet"
    if c.kind == "ratio":
        return _ratio_phrase(c, rows, short)
    if c.kind == "ingredients":
        return _ingredients_phrase(v, rows, short)
    return row_phrase(rows[0], v["status"] != "not resolved", c.paper_value, short)


def confirmed_word(v: dict) -> str:
    """What fresh seeds said of a primary, the ledger's own status
    (:func:`stiefel_mini.evidence.confirm.confirmation`) in a reader's words: ``"declared before its
    runs"`` (nothing earlier to confirm, whatever the verdict), or, of a resolved primary declared after
    some of its runs, ``"confirmed"``, ``"not confirmed"`` (fresh seeds that could decide did not give
    the primary's verdict), ``"too few fresh seeds"`` (pending: fresh seeds ran, too few to decide),
    ``"not re-run"`` (pending: none yet); ``""`` where there is nothing to confirm (not resolved, not
    tested, by construction)."""
    conf = v.get("confirmation") or {}
    if conf.get("status") == DECLARED_FIRST and v["status"] != "not tested yet":
        return DECLARED_FIRST
    if v["status"] in ("not resolved", "not tested yet", "by construction") or not conf:
        return ""
    if conf["status"] in ("confirmed", "not confirmed"):
        return conf["status"]
    return "too few fresh seeds" if any(r["n"] for r in conf.get("rows", [])) else "not re-run"


def fresh_text(v: dict) -> str:
    """What fresh seeds said of a verdict, as a clause: ``"6 fresh seeds did not confirm it"``,
    ``"confirmed on 6 fresh seeds"``, ``"not yet re-run on fresh seeds"``, ``"declared before its runs"``
    (``"declared before its runs, against AdamW's earlier runs"`` where its baseline's runs came before
    it by design); ``""`` where nothing is to be confirmed (:func:`confirmed_word`)."""
    conf = confirmed_word(v)
    rows = [r for r in (v.get("confirmation") or {}).get("rows", []) if r["n"]]
    if conf == DECLARED_FIRST:
        fixed = [r for r in v["primary"] if r["n"] and r.get("baseline_files")]
        return DECLARED_FIRST + (f", against {side_names(fixed[0])[1]}'s earlier runs" if fixed else "")
    fresh = max((r["n"] for r in rows), default=0)
    seeds = f"{fresh} fresh seed{'' if fresh == 1 else 's'}"
    if len({r["n"] for r in rows}) > 1:  # a family whose rows have different fresh seeds: each its own count
        seeds = "fresh seeds (" + ", ".join(f"{r['n']} for {regime_of(r)}" for r in rows) + ")"
    return {"confirmed": f"confirmed on {seeds}", "not confirmed": f"{seeds} did not confirm it",
            "too few fresh seeds": f"{seeds} so far, too few to confirm it",
            "not re-run": "not yet re-run on fresh seeds"}.get(conf, "")


def machines_text(v: dict) -> str:
    """``"3 of its 14 pairs ran on two different machines"`` for a verdict whose primary pairs runs of
    two machines (:func:`stiefel_mini.evidence.ledger.run_machine`); ``""`` otherwise."""
    rows = [r for r in v["primary"] if r.get("two_machines")]
    if not rows:
        return ""
    k, n = sum(len(r["two_machines"]) for r in rows), sum(r["n"] for r in rows)
    return f"{k} of its {n} pairs ran on two different machines"


def sentence(c: Claim, v: dict) -> str:
    """One plain sentence for a claim's box: its :func:`phrase`, what fresh seeds said
    (:func:`fresh_text`), and the pairs made on two machines (:func:`machines_text`)."""
    text = phrase(c, v)
    text = text[:1].upper() + text[1:]
    for clause in (fresh_text(v), machines_text(v)):
        if clause:
            text += f"; {clause}"
    return text + "."


FIGURE_NAMES = {
    "A0": "AdamW", "adamw": "AdamW", "A1": "StiefelAdam", "stiefel": "StiefelAdam", "stiefel_learned": "StiefelAdam",
    "A3": "frozen frames", "frozen": "frozen frames", "frozen_learned": "frozen frames", "qknorm": "QK-norm",
    "muon": "Muon", "muon_stiefel": "Muon + StiefelAdam on Q/K", "A5": "AdamW step + polar",
    "A7": "element-wise moment", "stiefel_column": "column moment", "stiefel_canonical": "canonical projector",
    "stiefel_noproj": "no projection", "stiefel_nocap": "no trust cap",
}
"""Each arm's short name in a figure, where a label has little room (the text names them in full)."""


def figure_name(text: str) -> str:
    """``text`` with every arm code in it named (:data:`FIGURE_NAMES`): ``"A1 − A3"`` -> ``"StiefelAdam −
    frozen frames"``."""
    codes = sorted(FIGURE_NAMES, key=len, reverse=True)
    return re.sub(r"(?<!\w)(" + "|".join(map(re.escape, codes)) + r")(?!\w)", lambda m: FIGURE_NAMES[m.group(1)], text)

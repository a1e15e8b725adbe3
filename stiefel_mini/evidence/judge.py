"""A claim's verdict from the results files: its primary family computed, corrected and judged, with its
confirmation, and the correction across claims.

:func:`evaluate` picks the claim's primary family (the first whose first file exists), computes it
(:func:`stiefel_mini.evidence.measure.compute`), corrects it (Holm with Tarone's rule), words its
verdict (:mod:`stiefel_mini.evidence.words`) and adds its confirmation
(:mod:`stiefel_mini.evidence.confirm`); :func:`verdicts` does so for every claim, :func:`across_claims`
corrects the claims' primaries together; :func:`claim_number` is a claim's number as the book lists them.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from stiefel_mini.evidence import compare, runs
from stiefel_mini.evidence.claims import CLAIMS, LM2_CLAIMS, LM_CLAIMS, Claim, Comparison
from stiefel_mini.evidence.claims_lm4 import LM4_CLAIMS
from stiefel_mini.evidence.confirm import confirmation
from stiefel_mini.evidence.measure import compute
from stiefel_mini.evidence.sentences import confirmed_word, phrase, sentence
from stiefel_mini.evidence.verdict import family_status, regime_statuses
from stiefel_mini.evidence.words import regime_of, sure_text
from stiefel_mini.experiments.stats import holm_tarone

__all__ = ["evaluate", "verdicts", "questions", "across_claims", "as_data", "claim_number"]


def evaluate(c: Claim, root: str | Path | None = None) -> dict:
    """The verdict of claim ``c`` from the results under ``root`` (``None``: the committed files).

    Returns ``{"key", "claim", "paper", "chapter", "anchor", "status", "verdict", "sure",
    "primary": [rows], "secondary": [rows], "confirmation": {...}, "declared", "scale_note", "phrase",
    "short_phrase", "sentence", "confirmed", "regime_status"}``; every row is a
    :func:`~stiefel_mini.evidence.measure.compute` row with its ``role``: the primaries corrected as one
    family, each secondary judged by its own test alone (shown, not corrected); ``phrase`` and
    ``sentence`` say the verdict in plain words, ``confirmed`` what fresh seeds said of it
    (:func:`stiefel_mini.evidence.sentences.confirmed_word`) and ``regime_status`` a ratio family's
    status regime by regime.
    """
    root = None if root is None else Path(root)
    out: dict[str, Any] = {"key": c.key, "claim": c.claim, "paper": c.paper, "chapter": c.chapter,
                           "anchor": c.anchor, "scale_note": c.scale_note, "primary": [], "secondary": [],
                           "confirmation": None}
    family: tuple[Comparison, ...] = ()
    for option in c.primaries:
        if runs.load(option[0].files[0], root) is not None:
            family = option
            break
    if not family and c.primaries:
        family = c.primaries[-1]
    declared_first = bool(c.primaries) and family == c.primaries[0]
    prim = [compute(comp, root) for comp in family]
    compare.correct([r for r in prim if not r["ratio"]])
    for r in prim:
        r["role"] = "primary"
    sec = [compute(comp, root) for comp in c.secondary]
    for r in sec:  # shown, not corrected: each judged by its own test alone
        if not r["ratio"]:
            compare.correct([r])
        r["role"] = "secondary"
    shown = {(r["label"], r["regime"]) for r in prim}
    out["primary"] = prim
    out["secondary"] = [r for r in sec if r["n"] and (r["label"], r["regime"]) not in shown]
    out["declared"] = "; ".join(f"{comp.label} ({comp.regime}, {', '.join(comp.files)}, "
                                f"{'ratio' if comp.ratio else comp.test + ' test'})" for comp in family)
    if c.kind == "design":
        out.update(status="by construction", verdict=c.design, sure="by construction",
                   confirmation=confirmation(c, family, "by construction", root))
        return _plain(c, out)
    status, verdict = family_status(c, prim)
    if c.kind == "ingredients":
        n = max((r["n"] for r in prim), default=0)
        k = sum(r["testable"] for r in prim)
        out["sure"] = (f"{len(prim)} comparisons, at most {n} seed{'' if n == 1 else 's'}: " +
                       (f"Holm over the {k} that can reach 0.05" if k else "none can reach 0.05"))
    elif c.kind == "ratio" and len(prim) > 1:
        out["sure"] = "; ".join(f"{regime_of(r)}: {sure_text(r, 1)}" for r in prim)
    else:
        out["sure"] = sure_text(prim[0], 1)
    if not declared_first:
        out["sure"] += f"; the declared primary ({c.primaries[0][0].regime}) has no run yet"
    out.update(status=status, verdict=verdict, regime_status=regime_statuses(c, prim))
    out["confirmation"] = confirmation(c, family, status, root)
    return _plain(c, out)


def _plain(c: Claim, out: dict) -> dict:
    """Add the verdict in plain words: ``phrase``, ``sentence`` and ``confirmed`` (:mod:`~.words`)."""
    out.update(phrase=phrase(c, out), short_phrase=phrase(c, out, short=True), sentence=sentence(c, out),
               confirmed=confirmed_word(out))
    return out


def across_claims(vs: list[dict], alpha: float = compare.ALPHA) -> dict:
    """Holm's correction across the claims: each claim's primary p, over the claims whose primary can
    reach ``alpha`` (Tarone); ratio and design claims have no test.

    A claim's primary p is its family's: the smallest Holm p of the rows that can reach ``alpha``
    (a family of one: its p), or, when none can, its smallest p (then the claim cannot reach it
    either). A claim stays resolved when its corrected p reaches ``alpha`` and its own verdict is
    resolved too (the decision rule, :mod:`stiefel_mini.evidence.rule`: a primary whose interval holds
    zero is not, whatever its p). Returns ``{"claims": [{"key", "p", "p_holm", "resolved"}], "family",
    "n_testable", "text"}``.
    """
    items = []
    for v in vs:
        rows = [r for r in v["primary"] if not r.get("ratio") and r["n"]]
        if not rows or v["status"] == "by construction":
            continue
        testable = [r for r in rows if r.get("testable") and r.get("p_holm") is not None]
        best = min(testable, key=lambda r: r["p_holm"]) if testable else min(rows, key=lambda r: r["p"])
        p = best["p_holm"] if testable else best["p"]
        items.append({"key": v["key"], "claim": v["claim"], "p": p, "p_min": best["p_min"],
                      "open": v["status"] in ("not resolved", "not tested yet")})
    res = holm_tarone([i["p"] for i in items], [i["p_min"] for i in items], alpha)
    for i, t, adj, rej in zip(items, res["testable"], res["adjusted"], res["reject"]):
        i.update(testable=bool(t), p_holm=adj, resolved=bool(rej) and not i.pop("open"))
    k = sum(i["testable"] for i in items)
    held = [i for i in items if i["resolved"]]
    text = (f"Across the {len(items)} claims with a tested primary, Holm's correction over the {k} whose primary "
            f"can reach p = {alpha:g}: " + ("; ".join(f"{i['claim']}: p = {i['p']:.2g} → {i['p_holm']:.2g}"
                                                      + (", resolved" if i["resolved"] else
                                                         ", its interval holding zero" if i["p_holm"] <= alpha
                                                         else "")
                                                      for i in items if i["testable"]) or "none")
            + f". In all, {len(held)} of {k} stay resolved at {alpha:g}.")
    return {"claims": items, "family": len(items), "n_testable": k, "text": text}


def claim_number(key: str) -> int:
    """The number of the paper's claim ``key`` as the book lists them: its place in :data:`CLAIMS`, from 1
    (the order of the paper's abstract). ``ValueError`` for a key that is not one of the paper's claims
    (the reader's questions are not numbered)."""
    keys = [c.key for c in CLAIMS]
    if key not in keys:
        raise ValueError(f"{key!r} is not one of the paper's claims; they are {keys}")
    return keys.index(key) + 1


def verdicts(root: str | Path | None = None) -> list[dict]:
    """Every claim's verdict (:func:`evaluate`), in the order of :data:`CLAIMS`."""
    return [evaluate(c, root) for c in CLAIMS]


def questions(root: str | Path | None = None, untested: bool = True) -> list[dict]:
    """The verdicts of the reader's questions (:data:`LM_CLAIMS`, :data:`LM2_CLAIMS`, then the fourth
    study's :data:`~stiefel_mini.evidence.claims_lm4.LM4_CLAIMS`), which the paper does not claim: the
    intro's table shows them, but they stay out of the paper's family (:func:`across_claims`).
    ``untested=False`` leaves out those with no paired seed yet (the intro's table and bottom line); the
    appendix lists them all."""
    vs = [evaluate(c, root) for c in LM_CLAIMS + LM2_CLAIMS + LM4_CLAIMS]
    return vs if untested else [v for v in vs if v["status"] != "not tested yet"]


def _finite(x: Any) -> Any:
    """``x`` with non-finite floats as strings, for strict JSON."""
    if isinstance(x, float) and not math.isfinite(x):
        return "inf" if x > 0 else "-inf" if x < 0 else "nan"
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def as_data(vs: list[dict]) -> list[dict]:
    """The verdicts as JSON-ready data (non-finite numbers as strings): for ``--json``."""
    return [_finite({k: v for k, v in c.items()}) for c in vs]

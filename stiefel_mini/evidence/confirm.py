"""The confirmation of a primary: the declared comparison judged again on the runs that can confirm it.

A primary declared after its data had been seen is confirmed only by runs that started after the
commit that declared it (its time from the ledger, :mod:`stiefel_mini.evidence.ledger`), on seeds no
choice was made on (:func:`stiefel_mini.evidence.measure.confirming`), tested on those runs alone. A
primary declared before any run of its arms (but for a baseline's runs made before it by design) has
nothing earlier to confirm: its status is :data:`DECLARED_FIRST`, and its own verdict is the test.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stiefel_mini.evidence import compare, ledger
from stiefel_mini.evidence.claims import Claim, Comparison
from stiefel_mini.evidence.measure import compute, pooled, confirming
from stiefel_mini.evidence.verdict import family_status
from stiefel_mini.evidence.words import needed_text, regime_of

__all__ = ["DECLARED_FIRST", "STATUSES", "confirmation"]

DECLARED_FIRST = "declared before its runs"
"""The status of a primary declared before any run of its arms: fresh seeds cannot confirm what no
earlier run suggested."""
STATUSES = ("confirmed", "not confirmed", "pending", DECLARED_FIRST, "by construction")
"""Every status a confirmation can have."""


def confirmation(c: Claim, family: tuple[Comparison, ...], status: str, root: Path | None = None) -> dict:
    """The confirmation of ``c``'s primary ``family`` on the runs that can confirm it, alone.

    Those runs (:func:`confirming`) started after the declaring commit ``c.declared`` (its time from
    the ledger) on seeds no choice was made on. The family is computed on them only and judged like
    the primary; the claim is ``"confirmed"`` only when that gives the primary's verdict ``status``
    and resolves, ``"not confirmed"`` when it resolves otherwise or when fresh seeds enough to reach the
    level do not resolve it, ``"pending"`` when too few fresh seeds to reach the level ran (``text``
    says what n it would need) or no such run exists. Returns ``{"status",
    "text", "commit", "time", "rows", "seeds", "two_machines", "runs"}``, ``runs`` counting
    the runs of the family's arms that started after the declaration on unchosen seeds (``after``),
    that did not (``before``), and that started after it on a seed a choice was made on, runs of both
    arms (a family side counted as the arm it stands for), and ``phases`` the same counts per phase of
    the study (``{"paired": {...}, "sweep": {...}}``; one phase ``""`` for a study without phases). A
    primary none of whose own runs (those outside its ``baseline_files``) started before its declaration
    gets the status :data:`DECLARED_FIRST` whatever the verdict: its fresh seeds are its own.
    """
    rows_all = [compute(comp, root) for comp in family]
    k = sum(len(r.get("two_machines", [])) for r in rows_all)
    n = sum(r["n"] for r in rows_all)
    two = f"{k} of {n} pairs made on two machines" if k else ""
    out: dict[str, Any] = {"commit": c.declared or None, "time": None, "rows": [],
                           "seeds": [], "two_machines": two}
    when = ledger.commit_time(c.declared, ledger.commit_times(root)) if c.declared else None
    if c.kind == "design" or not family:
        out.update(status="by construction", text="")
        return out
    if when is None:
        out.update(status="pending", text="declared after its data had been seen; no run has been made since: "
                                          "confirmation pending")
        return out
    out["time"] = when.isoformat()
    picked = {k: v for r in rows_all for k, v in (r.get("picked") or {}).items()}
    arms = {picked.get(x, x) for comp in family for x in (comp.a, comp.b)}
    files = list(dict.fromkeys(f for comp in family for f in comp.files))
    pool = [r for f in files for r in pooled((f,), root)[0] if r["arm"] in arms]  # each file read once
    chosen = set().union(*(comp.chosen_on for comp in family))
    out["phases"] = {}
    for r in pool:
        n = out["phases"].setdefault(r.get("phase") or "", {"after": 0, "before": 0, "on_chosen_seeds": 0})
        later = r["_start"] is not None and r["_start"] > when
        n["before" if not later else "on_chosen_seeds" if r["seed"] in chosen else "after"] += 1
    out["runs"] = {k: sum(n[k] for n in out["phases"].values()) for k in ("after", "before", "on_chosen_seeds")}
    fixed = {f for comp in family for f in comp.baseline_files}
    own = [r for r in pool if r["_file"] not in fixed]
    first = bool(own) and all(r["_start"] is not None and r["_start"] > when for r in own)
    rows = [compute(comp, root, keep=confirming(comp, when)) for comp in family]
    compare.correct([r for r in rows if not r["ratio"]])
    out["rows"] = rows
    out["seeds"] = sorted({s for r in rows for s in r["seeds"]})
    day = f"declared at {c.declared} ({when:%Y-%m-%d %H:%M} UTC)"
    if not any(r["n"] for r in rows):
        out.update(status="pending", text=f"{day}; no paired seed whose two runs both started since, on a seed "
                                          "never used for a choice: confirmation pending")
        return out
    fresh, words = family_status(c, rows)
    if first:
        besides = (f"; its baseline's runs ({', '.join(sorted(fixed))}) were made before it by design" if fixed else "")
        out.update(status=DECLARED_FIRST, text=f"{day}, before any run of its arms{besides}: nothing earlier to "
                                               f"confirm, its verdict is itself the test ({words})")
        return out
    best = max(rows, key=lambda r: r["n"])
    seed_sets = {tuple(r["seeds"]) for r in rows if r["n"]}
    runs_text = (f"{best['n']} fresh paired seed{'' if best['n'] == 1 else 's'} ({', '.join(map(str, best['seeds']))})"
                 if len(seed_sets) == 1 else "fresh paired seeds " + "; ".join(
                     f"{', '.join(map(str, r['seeds']))} ({regime_of(r)})" for r in rows if r["n"]))
    if fixed := sorted({f for comp in family for f in comp.baseline_files}):
        runs_text += f", against the baseline runs of {', '.join(fixed)} made before it by design"
    untested = [r for r in rows if not r["n"]]
    if untested:
        # A family is confirmed only as a whole: each row with fresh runs is set beside its own
        # primary row (corrected within the primary), the rows without fresh runs wait for theirs.
        compare.correct([r for r in rows_all if not r["ratio"]])
        same = all(family_status(c, [f])[0] == family_status(c, [p])[0] for f, p in zip(rows, rows_all) if f["n"])
        # a ratio family's rows differ by their regime, the other families' by their arms
        waiting = ", ".join(regime_of(r) for r in untested)
        out.update(status="pending" if same else "not confirmed",
                   text=f"{day}; on {runs_text} alone: {words}" +
                        (", as the primary" if same else ", not the primary's verdict") +
                        f"; no fresh run yet for {waiting}: confirmation pending")
        return out
    if fresh == status and fresh not in ("not resolved", "not tested yet"):
        out.update(status="confirmed", text=f"{day}; confirmed on {runs_text} alone: {words}")
    elif (fresh in ("not resolved", "not tested yet") and status not in ("not resolved", "not tested yet")
          and any(r["n"] and not r["ratio"] and r["testable"] for r in rows)):
        # fresh seeds enough to decide, and they did not: the primary is not confirmed (not "pending")
        out.update(status="not confirmed", text=f"{day}; on {runs_text} alone: {words}, not the primary's verdict")
    elif fresh in ("not resolved", "not tested yet"):
        out.update(status="pending", text=f"{day}; on {runs_text} alone: {words}: confirmation pending"
                                          + ("" if "would resolve" in words or best["ratio"] else needed_text(best)))
    else:
        out.update(status="not confirmed", text=f"{day}; on {runs_text} alone: {words}, not the primary's verdict")
    return out

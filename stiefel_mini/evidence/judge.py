"""How a declared comparison is computed from the results files, and the verdict a claim gets.

:func:`compute` pools the declared files, pairs the runs by seed and calls
:func:`stiefel_mini.evidence.compare.paired` (or ``ratio``); :func:`evaluate` corrects a claim's primary family
and words its verdict.

Verdict words (:func:`verdicts`), from the primary:

- ``reproduced``: resolved in the paper's direction, the paper's number inside the 95% t interval;
- ``smaller effect`` / ``larger effect``: resolved in the paper's direction, the paper's number
  above / below the interval ("+2.51 pp [+2.14, +2.89], not +8.98");
- ``contradicted``: resolved against the claim, or a claimed small effect whose interval lies
  above it ("freezing costs +1.87 pp [+0.64, +3.10], not 0.28");
- ``not resolved``: either the test cannot reach the level at this n ("n = 5 cannot go below
  p = 0.0625") or it can and did not; the numbers are given, and neither reads as "no effect";
- ``partly reproduced`` (a bundle whose resolved parts agree with the claim while the rest is not
  resolved), ``not tested yet`` (the file or its paired seeds are missing), and ``by construction``
  for claims about the algorithm's definition. What a regime did not reach (the paper's scale) is
  each claim's ``scale_note``.
"""

from __future__ import annotations

import datetime as _dt
import math
from pathlib import Path
from typing import Any, Callable

from stiefel_mini.evidence import compare, ledger, reach, runs
from stiefel_mini.evidence.claims import PAIRED_SETTINGS, CLAIMS, Claim, Comparison
from stiefel_mini.experiments.stats import holm_tarone, smallest_p

__all__ = ["compute", "confirming", "confirmation", "evaluate", "verdicts", "across_claims", "effect_text", "needed_text", "number_text", "sure_text", "as_data"]


# ----------------------------------------------------------------------------------------------------
# Computing a declared comparison from the files
# ----------------------------------------------------------------------------------------------------


def _pooled(files: tuple[str, ...], root: Path | None, keep: Callable[[dict], bool] | None = None
            ) -> tuple[list[dict], list[str]]:
    """The runs of the files that exist, pooled, and the names of those files.

    Each run gains ``_start`` (a lower bound on its start, :func:`ledger.run_start`) and ``_machine``
    (:func:`ledger.run_machine`), read from its own file; ``keep`` drops the runs it rejects.
    """
    out, present, first = [], [], None
    times = ledger.commit_times(root)
    for name in files:
        res = runs.load(name, root)
        if res is None:
            continue
        for r in res["runs"]:
            r["_start"] = ledger.run_start(r, res, times)[0]
            r["_machine"] = ledger.run_machine(r, res)
        settings = res.get("settings") or res.get("base_config") or {}
        if first is None:
            first = settings
        elif any(settings.get(k) != first.get(k) for k in PAIRED_SETTINGS):
            diff = [k for k in PAIRED_SETTINGS if settings.get(k) != first.get(k)]
            raise ValueError(f"{name} cannot be paired with {present[0]}: settings {diff} differ")
        out += [r for r in res["runs"] if keep is None or keep(r)]
        present.append(name)
    return out, present


def _value(comp: Comparison):
    if comp.metric.startswith("metrics."):
        key = comp.metric.split(".", 1)[1]
        raw = lambda r: r["metrics"].get(key)  # noqa: E731
    else:
        raw = lambda r: r.get(comp.metric)  # noqa: E731
    return lambda r: None if raw(r) is None else comp.scale * raw(r)


def _side(pool: list[dict], comp: Comparison, arm: str, extra: tuple) -> dict[int, dict]:
    chosen = [r for r in pool if all(r.get(k) == v for k, v in comp.select + extra)]
    if arm in comp.at_best:
        return runs.at_best_lr([r for r in chosen if r["arm"] == arm], arm)[1]
    return runs.by_seed(chosen, arm=arm)


def compute(comp: Comparison, root: Path | None = None, seeds: tuple[int, ...] | None = None,
            keep: Callable[[dict], bool] | None = None) -> dict:
    """The row of a declared comparison (:func:`stiefel_mini.evidence.compare.paired` or ``ratio``).

    Adds ``files`` (those present), ``two_machines`` (the paired seeds whose two runs name different
    machines, :func:`ledger.run_machine`) and ``chosen_here`` (an arm's best lr was picked on the
    seeds it is compared on). ``seeds`` restricts the pairing to those seeds; ``keep`` to the runs it
    accepts (the confirmation of a primary: :func:`confirming`).
    """
    pool, present = _pooled(comp.files, root, keep)
    if comp.seeds:
        pool = [r for r in pool if r["seed"] in comp.seeds]
    if comp.of_gap is None:
        a = _side(pool, comp, comp.a, comp.select_a)
        b = _side(pool, comp, comp.b, comp.select_b)
        if comp.reach:  # the speedrun measure: b's tokens to a's final loss against a's budget
            a, b = reach.sides(a, b, comp.metric)
        value = _value(comp)
    else:  # the per-seed gap b - a at the high selection against the low one
        v = _value(comp)
        gaps = []
        for sel in comp.of_gap:
            ra = runs.by_seed([r for r in pool if all(r.get(k) == x for k, x in sel)], arm=comp.a)
            rb = runs.by_seed([r for r in pool if all(r.get(k) == x for k, x in sel)], arm=comp.b)
            gaps.append({s: v(rb[s]) - v(ra[s]) for s in set(ra) & set(rb)})
        a, b = gaps
        value = float
    if seeds is not None:
        a = {s: r for s, r in a.items() if s in seeds}
    if comp.ratio:
        row = compare.ratio(a, b, lambda r: r[comp.metric], label=comp.label, regime=comp.regime)
    else:
        row = compare.paired(a, b, value, label=comp.label, regime=comp.regime, higher_is_better=comp.higher_is_better,
                             censored=comp.censored, test=comp.test, unit=comp.unit)
    two = [] if comp.of_gap is not None else sorted(
        s for s in row["seeds"] if a[s]["_machine"] and b[s]["_machine"] and a[s]["_machine"] != b[s]["_machine"])
    row.update(files=present, declared_files=list(comp.files), ratio=comp.ratio, arm=comp.b, baseline=comp.a,
               two_machines=two, chosen_here=bool(comp.at_best))
    return row


def confirming(comp: Comparison, declared: _dt.datetime) -> Callable[[dict], bool]:
    """The runs that can confirm ``comp``: started after ``declared`` (a lower bound on the start,
    :func:`ledger.run_start`) on a seed no choice was made on (``comp.chosen_on``)."""
    return lambda r: r["_start"] is not None and r["_start"] > declared and r["seed"] not in comp.chosen_on


# ----------------------------------------------------------------------------------------------------
# Verdicts
# ----------------------------------------------------------------------------------------------------


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
    testable = row["testable"] or (family == 1 and row["p_min"] <= compare.ALPHA)
    if not testable:
        return f"{test}, {row['wins']}/{row['n']} wins, p = {row['p']:.3g}: too few seeds for 0.05" + _flags(row)
    k = row.get("n_testable", family)
    corr = "" if family == 1 else (f", Holm over {family}" if k == family else
                                   f", Holm over the {k} testable of {family} (Tarone)")
    return f"{test}, {row['wins']}/{row['n']} wins, p = {row['p']:.2g}{corr}" + (
        f" → {row['p_holm']:.2g}" if family > 1 else "") + _flags(row)


def _flags(row: dict) -> str:
    """What a row's reader must know of its runs: an lr picked on its own seeds, pairs across machines."""
    out = "; the best lr picked on these same seeds" if row.get("chosen_here") else ""
    two = row.get("two_machines") or []
    return out + (f"; {len(two)} of {row['n']} pairs made on two machines" if two else "")


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
    if not row["resolved"]:
        return "not resolved", _not_resolved(row, c.what)
    lo, hi = row["ci"] if row["ci"] is not None else (row["mean"], row["mean"])
    pv = c.paper_value
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
    text = "; ".join(f"{_regime(r)}: {g[1]}" for r, g in zip(rows, got))
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


def evaluate(c: Claim, root: str | Path | None = None) -> dict:
    """The verdict of claim ``c`` from the results under ``root`` (``None``: the committed files).

    Returns ``{"key", "claim", "paper", "chapter", "anchor", "status", "verdict", "sure",
    "primary": [rows], "secondary": [rows], "confirmation": {...}, "declared", "scale_note"}``; every row is a
    :func:`compute` row, the primaries corrected as one family.
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
    sec = [compute(comp, root) for comp in c.secondary]
    shown = {(r["label"], r["regime"]) for r in prim}
    out["primary"] = prim
    out["secondary"] = [r for r in sec if r["n"] and (r["label"], r["regime"]) not in shown]
    out["declared"] = "; ".join(f"{comp.label} ({comp.regime}, {', '.join(comp.files)}, "
                                f"{'ratio' if comp.ratio else comp.test + ' test'})" for comp in family)
    if c.kind == "design":
        out.update(status="by construction", verdict=c.design, sure="by construction",
                   confirmation=confirmation(c, family, "by construction", root))
        return out
    status, verdict = _family_status(c, prim)
    if c.kind == "ingredients":
        n = max((r["n"] for r in prim), default=0)
        k = sum(r["testable"] for r in prim)
        out["sure"] = (f"{len(prim)} comparisons, at most {n} seed{'' if n == 1 else 's'}: " +
                       (f"Holm over the {k} that can reach 0.05" if k else "none can reach 0.05"))
    elif c.kind == "ratio" and len(prim) > 1:
        out["sure"] = "; ".join(f"{_regime(r)}: {sure_text(r, 1)}" for r in prim)
    else:
        out["sure"] = sure_text(prim[0], 1)
    if not declared_first:
        out["sure"] += f"; the declared primary ({c.primaries[0][0].regime}) has no run yet"
    out.update(status=status, verdict=verdict)
    out["confirmation"] = confirmation(c, family, status, root)
    return out


def _regime(row: dict) -> str:
    """What sets a family's row apart: a ratio family's regime ("both at lr 1e-3"), else its arms."""
    return row["label"].split(", ", 1)[-1] if row["ratio"] else row["label"].split(" (")[0]


def _family_status(c: Claim, rows: list[dict]) -> tuple[str, str]:
    if c.kind == "ratio":
        return _ratio_family_verdict(c, rows)
    if c.kind == "ingredients":
        return _ingredients_verdict(c, rows)
    return _size_verdict(c, rows[0])


def confirmation(c: Claim, family: tuple[Comparison, ...], status: str, root: Path | None = None) -> dict:
    """The confirmation of ``c``'s primary ``family`` on the runs that can confirm it, alone.

    Those runs (:func:`confirming`) started after the declaring commit ``c.declared`` (its time from
    the ledger) on seeds no choice was made on. The family is computed on them only and judged like
    the primary; the claim is ``"confirmed"`` only when that gives the primary's verdict ``status``
    and resolves, ``"not confirmed"`` when it resolves otherwise, ``"pending"`` when it does not
    resolve (``text`` says what n it would need) or no such run exists. Returns ``{"status",
    "text", "commit", "time", "rows", "seeds", "two_machines", "runs"}``, ``runs`` counting
    the runs of the family's arms that started after the declaration on unchosen seeds (``after``),
    that did not (``before``), and that started after it on a seed a choice was made on.
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
    arms = {x for comp in family for x in (comp.a, comp.b)}
    pool = {(r["arm"], r["seed"], r.get("lr"), r.get("frame_lr"), r.get("train_fraction"), r.get("weight_decay"),
             r.get("git_commit")): r for comp in family for r in _pooled(comp.files, root)[0]
            if r["arm"] in arms}.values()
    chosen = set().union(*(comp.chosen_on for comp in family))
    out["runs"] = {"after": sum(r["_start"] is not None and r["_start"] > when and r["seed"] not in chosen
                                for r in pool),
                   "before": sum(r["_start"] is None or r["_start"] <= when for r in pool),
                   "on_chosen_seeds": sum(r["_start"] is not None and r["_start"] > when and r["seed"] in chosen
                                          for r in pool)}
    rows = [compute(comp, root, keep=confirming(comp, when)) for comp in family]
    compare.correct([r for r in rows if not r["ratio"]])
    out["rows"] = rows
    out["seeds"] = sorted({s for r in rows for s in r["seeds"]})
    day = f"declared at {c.declared} ({when:%Y-%m-%d %H:%M} UTC)"
    if not any(r["n"] for r in rows):
        out.update(status="pending", text=f"{day}; no paired seed whose two runs both started since, on a seed "
                                          "never used for a choice: confirmation pending")
        return out
    fresh, words = _family_status(c, rows)
    best = max(rows, key=lambda r: r["n"])
    seed_sets = {tuple(r["seeds"]) for r in rows if r["n"]}
    runs_text = (f"{best['n']} fresh paired seed{'' if best['n'] == 1 else 's'} ({', '.join(map(str, best['seeds']))})"
                 if len(seed_sets) == 1 else "fresh paired seeds " + "; ".join(
                     f"{', '.join(map(str, r['seeds']))} ({_regime(r)})" for r in rows if r["n"]))
    untested = [r for r in rows if not r["n"]]
    if untested:
        # A family is confirmed only as a whole: each row with fresh runs is set beside its own
        # primary row (corrected within the primary), the rows without fresh runs wait for theirs.
        compare.correct([r for r in rows_all if not r["ratio"]])
        same = all(_family_status(c, [f])[0] == _family_status(c, [p])[0] for f, p in zip(rows, rows_all) if f["n"])
        # a ratio family's rows differ by their regime, the other families' by their arms
        waiting = ", ".join(_regime(r) for r in untested)
        out.update(status="pending" if same else "not confirmed",
                   text=f"{day}; on {runs_text} alone: {words}" +
                        (", as the primary" if same else ", not the primary's verdict") +
                        f"; no fresh run yet for {waiting}: confirmation pending")
        return out
    if fresh == status and fresh not in ("not resolved", "not tested yet"):
        out.update(status="confirmed", text=f"{day}; confirmed on {runs_text} alone: {words}")
    elif fresh in ("not resolved", "not tested yet"):
        out.update(status="pending", text=f"{day}; on {runs_text} alone: {words}: confirmation pending"
                                          + ("" if "would resolve" in words or best["ratio"] else needed_text(best)))
    else:
        out.update(status="not confirmed", text=f"{day}; on {runs_text} alone: {words}, not the primary's verdict")
    return out


def across_claims(vs: list[dict], alpha: float = compare.ALPHA) -> dict:
    """Holm's correction across the claims: each claim's primary p (a family's smallest Holm p),
    over the claims whose primary can reach ``alpha`` (Tarone); ratio and design claims have no test.

    Returns ``{"claims": [{"key", "p", "p_holm", "resolved"}], "family", "n_testable", "text"}``.
    """
    items = []
    for v in vs:
        rows = [r for r in v["primary"] if not r.get("ratio") and r["n"]]
        if not rows or v["status"] == "by construction":
            continue
        best = min(rows, key=lambda r: r["p_holm"] if r.get("p_holm") is not None else r["p"])
        p = best["p_holm"] if best.get("p_holm") is not None else best["p"]
        items.append({"key": v["key"], "claim": v["claim"], "p": p, "p_min": best["p_min"]})
    res = holm_tarone([i["p"] for i in items], [i["p_min"] for i in items], alpha)
    for i, t, adj, rej in zip(items, res["testable"], res["adjusted"], res["reject"]):
        i.update(testable=bool(t), p_holm=adj, resolved=bool(rej))
    k = sum(i["testable"] for i in items)
    held = [i for i in items if i["resolved"]]
    text = (f"Across the {len(items)} claims with a tested primary, Holm's correction over the {k} whose primary "
            f"can reach p = {alpha:g}: " + ("; ".join(f"{i['claim']}: p = {i['p']:.2g} → {i['p_holm']:.2g}"
                                                      + (", resolved" if i["resolved"] else "")
                                                      for i in items if i["testable"]) or "none")
            + f". In all, {len(held)} of {k} stay resolved at {alpha:g}.")
    return {"claims": items, "family": len(items), "n_testable": k, "text": text}


def verdicts(root: str | Path | None = None) -> list[dict]:
    """Every claim's verdict (:func:`evaluate`), in the order of :data:`CLAIMS`."""
    return [evaluate(c, root) for c in CLAIMS]


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


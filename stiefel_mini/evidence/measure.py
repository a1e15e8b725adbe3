"""A declared comparison computed from the results files: the runs pooled, selected and paired by seed.

:func:`compute` pools the declared files, pairs the runs by seed and calls
:func:`stiefel_mini.evidence.compare.paired` (or ``ratio``); :func:`confirming` selects the runs that
can confirm a primary (started after its declaration, on a seed no choice was made on).
"""

from __future__ import annotations

import datetime as _dt
import math
from pathlib import Path
from typing import Callable

from stiefel_mini.evidence import compare, ledger, reach, runs
from stiefel_mini.evidence.claims import FAMILY_ARMS, PAIRED_SETTINGS, Comparison
from stiefel_mini.experiments.lm import plans, studies

__all__ = ["pooled", "family_arms", "compute", "confirming"]


def pooled(files: tuple[str, ...], root: Path | None, keep: Callable[[dict], bool] | None = None
            ) -> tuple[list[dict], list[str]]:
    """The runs of the files that exist, pooled, and the names of those files.

    Each run gains ``_start`` (a lower bound on its start, :func:`ledger.run_start`), ``_machine``
    (:func:`ledger.run_machine`), read from its own file, and ``_file`` (that file's name); ``keep``
    drops the runs it rejects.
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
            r["_file"] = name
        settings = res.get("settings") or res.get("base_config") or {}
        if first is None:
            first = settings
        elif any(settings.get(k) != first.get(k) for k in PAIRED_SETTINGS):
            diff = [k for k in PAIRED_SETTINGS if settings.get(k) != first.get(k)]
            raise ValueError(f"{name} cannot be paired with {present[0]}: settings {diff} differ")
        out += [r for r in res["runs"] if keep is None or keep(r)]
        present.append(name)
    return out, present


def family_arms(comp: Comparison, root: Path | None = None) -> dict[str, str]:
    """``{family name: arm}`` for each side of ``comp`` named by a family (:data:`claims.FAMILY_ARMS`):
    the arm the plan of the study ``comp.plan`` names (the second study's, ``round2``, when it names
    none) picks (:func:`stiefel_mini.experiments.lm.plans.better_arm`) from every sweep run of the
    files (the declared rule, whatever runs a confirmation keeps); a family not yet decided keeps its
    name, which no run has, so its side is empty."""
    names = {x for x in (comp.a, comp.b) if x in FAMILY_ARMS}
    if not names:
        return {}
    pool = pooled(comp.files, root)[0]
    better = plans.plan(studies.study(comp.plan or "round2"), pool).better
    return {n: better.get(FAMILY_ARMS[n], n) for n in names}


def _value(comp: Comparison):
    if comp.metric.startswith("metrics."):
        key = comp.metric.split(".", 1)[1]
        raw = lambda r: r["metrics"].get(key)  # noqa: E731
    else:
        raw = lambda r: r.get(comp.metric)  # noqa: E731
    return lambda r: None if raw(r) is None else comp.scale * raw(r)


def _round2_best(mine: list[dict]) -> dict[int, dict]:
    """One arm's round-2 runs at their best setting (every field but the seed): the lowest mean
    validation bits per byte over its seeds, a diverged run ``+inf``, as the plan scores its grids."""
    settings: dict[tuple, list[dict]] = {}
    for r in mine:
        key = studies.ROUND2.key(r)
        settings.setdefault(key[:1] + key[2:], []).append(r)
    score = lambda rs: sum(math.inf if r["val_bpb"] is None else r["val_bpb"] for r in rs) / len(rs)  # noqa: E731
    return runs.by_seed(min(settings.values(), key=score)) if settings else {}


def _side(pool: list[dict], comp: Comparison, arm: str, extra: tuple) -> dict[int, dict]:
    chosen = [r for r in pool if all(r.get(k) == v for k, v in comp.select + extra)]
    if arm in comp.at_best:
        mine = [r for r in chosen if r["arm"] == arm]
        if any("per_head" in r for r in mine):  # a round-2 run: its settings are ROUND2.fields
            return _round2_best(mine)
        return runs.at_best_lr(mine, arm)[1]
    return runs.by_seed(chosen, arm=arm)


def compute(comp: Comparison, root: Path | None = None, seeds: tuple[int, ...] | None = None,
            keep: Callable[[dict], bool] | None = None) -> dict:
    """The row of a declared comparison (:func:`stiefel_mini.evidence.compare.paired` or ``ratio``).

    Adds ``files`` (those present), ``two_machines`` (the paired seeds whose two runs name different
    machines, :func:`ledger.run_machine`), ``chosen_here`` (an arm's best lr was picked on the
    seeds it is compared on), ``picked`` (the arm each family side stands for, :func:`family_arms`) and
    ``planned`` (how many seeds the comparison declares, ``comp.seeds``; 0 when it takes every seed).
    ``seeds`` restricts the pairing to those seeds; ``keep`` to the runs it accepts (the confirmation
    of a primary: :func:`confirming`).
    """
    pool, present = pooled(comp.files, root, keep)
    picked = family_arms(comp, root)
    arm_a, arm_b = picked.get(comp.a, comp.a), picked.get(comp.b, comp.b)
    if comp.seeds:
        pool = [r for r in pool if r["seed"] in comp.seeds]
    if comp.of_gap is None:
        a = _side(pool, comp, arm_a, comp.select_a)
        b = _side(pool, comp, arm_b, comp.select_b)
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
    row.update(files=present, declared_files=list(comp.files), baseline_files=list(comp.baseline_files),
               ratio=comp.ratio, arm=comp.b, baseline=comp.a,
               two_machines=two, chosen_here=bool(comp.at_best), picked=picked,
               planned=len(comp.seeds))
    return row


def confirming(comp: Comparison, declared: _dt.datetime) -> Callable[[dict], bool]:
    """The runs that can confirm ``comp``: on a seed no choice was made on (``comp.chosen_on``), and
    started after ``declared`` (a lower bound on the start, :func:`ledger.run_start`) or held by one of
    its ``baseline_files`` (made before it by design)."""
    return lambda r: r["seed"] not in comp.chosen_on and (
        r["_file"] in comp.baseline_files or (r["_start"] is not None and r["_start"] > declared))

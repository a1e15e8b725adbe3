"""The comparison tables of the chapters: rows of :func:`stiefel_mini.evidence.compare.paired` for
lists of arm pairs, with each metric's direction, censoring and unit declared once.

These are the secondary tables (each row with its own p, no correction: they do not vote); the
verdicts come from the primaries of :mod:`stiefel_mini.evidence.claims`.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from stiefel_mini.evidence.compare import paired

__all__ = ["GROKKING_METRICS", "accuracy_rows", "grokking_rows"]

GROKKING_METRICS: dict[str, tuple[str, bool, bool, float, str]] = {
    "steps_to_val95": ("steps to val 95%", False, True, 1.0, "steps"),
    "steps_to_val99": ("steps to val 99%", False, True, 1.0, "steps"),
    "final_val_acc": ("final val acc", True, False, 100.0, "pp"),
    "collapses10": ("falls ≥ 10 points", False, False, 1.0, "falls"),
    "steps_above95": ("steps at val ≥ 95%", True, False, 1.0, "steps"),
}
"""Per grokking metric: (label, higher_is_better, censored, scale, unit)."""


def accuracy_rows(pairs: Sequence[tuple[str, Mapping[int, dict], Mapping[int, dict]]], regime: str = "") -> list[dict]:
    """One row per ``(label, a, b)`` (runs keyed by seed): test accuracy ``b - a`` in points."""
    return [paired(a, b, lambda h: 100.0 * h["test_acc"], label=label, regime=regime) for label, a, b in pairs]


def grokking_rows(runs_of: Any, pairs: Sequence[tuple[str, str]], metrics: Sequence[str], regime: str = "") -> list[dict]:
    """One row per ``(arm, baseline)`` of ``pairs`` and metric (a key of :data:`GROKKING_METRICS`).

    ``runs_of(arm)`` gives an arm's runs keyed by seed (e.g. ``lambda a:
    grokking.seed_runs(results, a)``); a pair without a common seed gives no row. Each row also
    holds ``metric``, ``arm`` and ``baseline``.
    """
    unknown = [m for m in metrics if m not in GROKKING_METRICS]
    if unknown:
        raise ValueError(f"unknown metric(s) {unknown}; choose from {sorted(GROKKING_METRICS)}")
    rows = []
    for arm, baseline in pairs:
        a, b = runs_of(baseline), runs_of(arm)
        if not set(a) & set(b):
            continue
        for key in metrics:
            label, higher, censored, scale, unit = GROKKING_METRICS[key]
            value = (lambda k, sc: lambda r: None if r["metrics"].get(k) is None else sc * r["metrics"][k])(key, scale)
            row = paired(a, b, value, label=f"{arm} − {baseline}, {label}", regime=regime, higher_is_better=higher,
                         censored=censored, unit=unit)
            row.update(metric=key, arm=arm, baseline=baseline)
            rows.append(row)
    return rows

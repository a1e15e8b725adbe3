"""The paired comparison: one function, one row schema, and the correction of a family of them.

Two arms ``a`` and ``b`` trained from the same start on the same seeds are compared by their
per-seed differences ``d_i = value(b_i) - value(a_i)`` over the seeds both finished. One row
(:func:`paired`) holds:

- ``mean`` with its 95% Student-t interval ``ci = mean +- t_{0.975, n-1} s / sqrt(n)``
  (:func:`stiefel_mini.experiments.stats.t_interval`, t quantile from ``scipy.stats``), ``None``
  when a difference is censored or n < 2;
- ``wins`` / ``losses`` / ``ties``: seeds on which ``b`` is better / worse / level, "better" in the
  metric's direction;
- the exact two-sided test named by ``test``: the sign test (``"sign"``, ``p = min(1, 2 P(X <=
  min(k, n - k)))``, ``X ~ Bin(n, 1/2)``, ties dropped; ``scipy.stats.binomtest``) or the Wilcoxon
  signed-rank test (``"wilcoxon"``, exact enumeration), its ``p`` and ``p_min``, the smallest p it
  can give at this n (``2^(1-n)``, n the non-tied pairs);
- secondary columns: the ``median`` of the differences and their ``low`` / ``high`` (the range).

Censoring: a "steps to reach" metric of a run that never reached it counts as ``+inf``; it enters
the wins and both tests by its sign (two censored runs tie), and the mean and interval are then
undefined (``None``, with ``n_censored`` the pairs holding a censored run).

:func:`correct` fills in, for one family of rows, ``testable`` (Tarone's rule: can the test reach
``alpha`` at this n at all), ``p_holm`` (Holm's correction among the testable rows, ``None`` for the
others) and ``resolved`` (``p_holm <= alpha``). :func:`ratio` is the companion for a measured
ratio (geometric mean of per-seed ratios with its t interval on the log scale).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Mapping

import numpy as np
import scipy.stats

from stiefel_mini.experiments.stats import (holm_tarone, median_interval, paired_differences, sign_test,
                                            smallest_p, t_interval, values, wilcoxon_signed_rank)

__all__ = ["paired", "correct", "ratio", "seeds_to_resolve", "TESTS", "ALPHA"]

ALPHA = 0.05
"""Family-wise error rate of every corrected test in the book."""

TESTS: dict[str, Callable[[Iterable[float]], dict]] = {"sign": sign_test, "wilcoxon": wilcoxon_signed_rank}
"""The exact two-sided tests a comparison can declare, by name."""


def paired(a: Mapping[int, Any], b: Mapping[int, Any], value: Callable[[Any], float | None], *,
           label: str = "", regime: str = "", higher_is_better: bool = True, censored: bool = False,
           test: str = "sign", unit: str = "pp") -> dict:
    """The paired comparison ``b - a`` over the seeds both runs dicts hold.

    Args:
        a, b: runs keyed by seed (e.g. :func:`stiefel_mini.evidence.runs.by_seed`).
        value: the measurement of one run (e.g. test accuracy in points). ``None`` means a censored
            run (never reached the threshold) when ``censored``; otherwise it is refused.
        label, regime: what is compared and where, for the tables.
        higher_is_better: the metric's direction, for the wins.
        censored: whether ``None`` values are censored at ``+inf``.
        test: the exact test, a key of :data:`TESTS`.
        unit: the unit of the differences (``"pp"``, ``"steps"``, ...), for the tables.

    Returns:
        ``{"label", "regime", "unit", "higher_is_better", "test", "seeds", "n", "diffs", "mean",
        "ci", "median", "low", "high", "wins", "losses", "ties", "n_censored", "n_test" (the
        pairs the test uses: ties dropped), "p", "p_min", "testable", "p_holm", "resolved"}``; the last three are set by :func:`correct`. With no
        common seed, ``n = 0``, ``p = p_min = 1``.
    """
    if test not in TESTS:
        raise ValueError(f"unknown test {test!r}; choose from {sorted(TESTS)}")
    seeds = sorted(set(a) & set(b))
    row: dict[str, Any] = {"label": label, "regime": regime, "unit": unit, "higher_is_better": higher_is_better,
                           "test": test, "seeds": seeds, "n": len(seeds), "diffs": [], "mean": None, "ci": None,
                           "median": None, "low": None, "high": None, "wins": 0, "losses": 0, "ties": 0,
                           "n_censored": 0, "n_test": 0, "p": 1.0, "p_min": 1.0, "testable": False, "p_holm": None,
                           "resolved": False}
    if not seeds:
        return row
    va = values([value(a[s]) for s in seeds], censored=censored)
    vb = values([value(b[s]) for s in seeds], censored=censored)
    d = paired_differences(va, vb)  # (n,) b - a; both censored: 0
    better = d > 0 if higher_is_better else d < 0
    worse = d < 0 if higher_is_better else d > 0
    n_cens = int((np.isinf(va) | np.isinf(vb)).sum())  # pairs with a censored run: their difference is unknown
    med = median_interval(d)
    res = TESTS[test](d)
    row.update(diffs=[float(x) for x in d], median=med["median"], low=float(d.min()), high=float(d.max()),
               wins=int(better.sum()), losses=int(worse.sum()), ties=int((d == 0).sum()), n_censored=n_cens,
               n_test=int(res["n"]), p=float(res["p"]), p_min=smallest_p(res["n"]))
    if not n_cens:
        row["mean"] = float(d.mean())
        row["ci"] = t_interval(d) if d.size >= 2 else None
    return row


def correct(rows: Iterable[dict], alpha: float = ALPHA) -> list[dict]:
    """Holm-correct one family of :func:`paired` rows, counting only the testable ones (Tarone).

    Sets ``testable``, ``p_holm`` (``None`` where not testable), ``resolved``, ``family`` (the
    family's size) and ``n_testable`` (its rows that can reach ``alpha``, over which Holm corrects) on
    every row, in place, and returns the rows. See :func:`stiefel_mini.experiments.stats.holm_tarone`.
    """
    rows = list(rows)
    res = holm_tarone([r["p"] for r in rows], [r["p_min"] for r in rows], alpha)
    k = int(sum(bool(t) for t in res["testable"]))
    for r, t, p, rej in zip(rows, res["testable"], res["adjusted"], res["reject"]):
        r.update(testable=bool(t), p_holm=p, resolved=bool(rej), family=len(rows), n_testable=k)
    return rows


def ratio(num: Mapping[int, Any], den: Mapping[int, Any], value: Callable[[Any], float], *, label: str = "",
          regime: str = "") -> dict:
    """The ratio ``value(num) / value(den)`` over common seeds: geometric mean and 95% t interval.

    The interval is the t interval of the per-seed ``log`` ratios, exponentiated (``exp(mean log r
    +- t s / sqrt(n))``), so it is a ratio too. Returns ``{"label", "regime", "seeds", "n",
    "ratios", "gmean", "ci", "low", "high"}`` (``ci`` ``None`` below 2 seeds; ``low``/``high`` the
    range of the per-seed ratios).
    """
    seeds = sorted(set(num) & set(den))
    r = np.array([value(num[s]) / value(den[s]) for s in seeds], dtype=float)
    if r.size and not (np.isfinite(r).all() and (r > 0).all()):
        raise ValueError(f"ratios must be positive and finite, got {r.tolist()}")
    out: dict[str, Any] = {"label": label, "regime": regime, "seeds": seeds, "n": len(seeds),
                           "ratios": r.tolist(), "gmean": None, "ci": None, "low": None, "high": None}
    if r.size:
        lr = np.log(r)
        out.update(gmean=float(math.exp(lr.mean())), low=float(r.min()), high=float(r.max()))
        if r.size >= 2:
            lo, hi = t_interval(lr)
            out["ci"] = (math.exp(lo), math.exp(hi))
    return out


def seeds_to_resolve(wins: int, losses: int, alpha: float = ALPHA, max_n: int = 1000) -> int | None:
    """The fewest pairs at which the observed win rate would resolve the exact sign test at ``alpha``.

    With ``q = max(wins, losses) / (wins + losses)`` held fixed, the smallest ``N`` with
    ``binomtest(floor(q N), N, 1/2).pvalue <= alpha``: an extrapolation of the rate, not a power
    calculation, that says how far a "not resolved" row is from resolving. ``None`` when the rate is
    level (``q = 1/2``) or ``N`` would exceed ``max_n``. Ties are not counted.
    """
    n = wins + losses
    if n == 0 or wins == losses:
        return None
    q = max(wins, losses) / n
    for big_n in range(1, max_n + 1):
        k = math.floor(q * big_n + 1e-9)
        if scipy.stats.binomtest(k, big_n, 0.5).pvalue <= alpha:
            return big_n
    return None

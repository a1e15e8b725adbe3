"""Paired-seed statistics for small samples, with censored runs handled explicitly.

The experiments compare an arm ``b`` with a baseline ``a`` run on the same seeds, so every test here
works on the per-seed differences ``d_i = b_i - a_i``. With 3-12 seeds the choice of test matters:

* :func:`t_interval`: Student-t interval of the mean difference. It needs every value: a censored
  run (a "steps to reach 95%" that never reached it, stored as ``None`` or ``inf``) makes it raise.
* :func:`sign_test`: exact two-sided binomial test of ``P(d > 0) = 1/2``; 5 wins of 5 give p = 0.0625.
* :func:`wilcoxon_signed_rank`: exact two-sided Wilcoxon signed-rank test by enumeration.
* :func:`holm`: Holm's step-down correction of the p-values of one family of comparisons;
  :func:`holm_tarone` applies it only to the comparisons whose n lets them reach the level.
* :func:`median_interval`: the median with its distribution-free order-statistic interval, named
  ``"range"`` when it is just the sample's minimum and maximum (n <= 5 at 95%).

Censoring: a censored "steps to" value counts as ``+inf`` (pass ``censored=True`` to
:func:`summarize` / :func:`compare`); it loses to every finite value, two censored runs tie (their
difference is 0), medians and rank tests stay valid, and ``n_censored`` is always reported.
Missing values (``None`` of a metric that is not censored, NaN) are refused.

References: Hollander, Wolfe & Chicken, "Nonparametric Statistical Methods" (3rd ed., 2014), ch. 3
(sign and signed-rank tests, order-statistic interval of the median); Holm (1979), "A simple
sequentially rejective multiple test procedure", Scand. J. Statist. 6:65-70.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np
import scipy.stats

__all__ = ["values", "summarize", "paired_differences", "t_quantile", "t_interval", "sign_test", "smallest_p",
           "wilcoxon_signed_rank", "holm", "holm_tarone", "median_interval", "paired_ratio", "paired_ratio_text", "wins", "compare"]


def values(xs: Iterable[float | None], *, censored: bool = False) -> np.ndarray:
    """``xs`` as a float array; ``None`` becomes ``+inf`` if ``censored`` else a ``ValueError``.

    Raises ``ValueError`` on NaN, and on ``None`` when ``censored`` is false: a missing value that is
    not a censored run has no place in a paired comparison and must be dealt with by the caller.
    """
    out = []
    for x in xs:
        if x is None:
            if not censored:
                raise ValueError("a value is None (missing); pass censored=True if it is a run that "
                                 "never reached a threshold, else drop the seed from every arm")
            out.append(math.inf)
        else:
            out.append(float(x))
    a = np.asarray(out, dtype=float)
    if np.isnan(a).any():
        raise ValueError("NaN among the values: remove the seed from every arm or mark it censored")
    return a


def _quantile(x: np.ndarray, q: float) -> float:
    """Linear-interpolation quantile (numpy's default) that stays exact when entries are infinite.

    Between a finite value and an infinite one the quantile is that infinity; between ``-inf``
    and ``+inf`` (paired differences of runs censored in opposite arms) it is undetermined:
    ``nan``, stated rather than guessed.
    """
    x = np.sort(x)
    pos = q * (x.size - 1)
    lo, hi = int(math.floor(pos)), int(math.ceil(pos))
    if pos == lo or x[lo] == x[hi]:
        return float(x[lo])
    if np.isinf(x[lo]) and np.isinf(x[hi]):
        return math.nan
    if np.isinf(x[lo]) or np.isinf(x[hi]):  # the formula below would give -inf + inf = nan
        return float(x[lo] if np.isinf(x[lo]) else x[hi])
    return float(x[lo] + (pos - lo) * (x[hi] - x[lo]))


def summarize(xs: Iterable[float | None], *, censored: bool = False) -> dict:
    """``n``, ``n_censored``, median, quartiles (``q25``, ``q75``), min, max, and the mean.

    With ``censored=True`` a ``None`` is a run censored at ``+inf``: the median stays right while
    fewer than half the runs are censored (it is ``inf`` otherwise), and the mean is ``None`` whenever
    any run is censored, since it is then unknown.
    """
    a = values(xs, censored=censored)
    if a.size == 0:
        raise ValueError("summarize needs at least one value")
    n_cens = int(np.isinf(a).sum())
    q25, med, q75 = (_quantile(a, q) for q in (0.25, 0.5, 0.75))
    return {"n": int(a.size), "n_censored": n_cens, "median": med, "q25": q25, "q75": q75,
            "min": float(a.min()), "max": float(a.max()), "mean": None if n_cens else float(a.mean())}


def paired_differences(a: Iterable[float | None], b: Iterable[float | None], *,
                       censored: bool = False) -> np.ndarray:
    """Per-seed ``b - a`` (both in seed order); two runs censored at ``+inf`` differ by 0."""
    a, b = values(a, censored=censored), values(b, censored=censored)
    if a.shape != b.shape:
        raise ValueError(f"paired samples differ in length: {a.size} vs {b.size}; pair them by seed")
    both = np.isinf(a) & np.isinf(b)
    d = np.where(both, 0.0, b - np.where(both, 0.0, a))
    return d


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (``scipy.stats.t.ppf``)."""
    if not 0.0 < p < 1.0 or df < 1:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df >= 1; got p={p}, df={df}")
    return float(scipy.stats.t.ppf(p, df))


def t_interval(xs: Iterable[float | None], level: float = 0.95) -> tuple[float, float]:
    """Student-t interval of the mean: ``mean +- t_{(1+level)/2, n-1} * sd / sqrt(n)``.

    Raises ``ValueError`` if a value is censored (``None``/``inf``) or NaN, or if n < 2: the mean of a
    sample with a censored run is unknown, so report the censoring and use :func:`sign_test` or
    :func:`wilcoxon_signed_rank` instead.
    """
    x = values(xs)
    if np.isinf(x).any():
        raise ValueError(f"{int(np.isinf(x).sum())} of {x.size} values are censored (inf): a t interval "
                         "needs every value; use sign_test / wilcoxon_signed_rank and report n_censored")
    if x.size < 2:
        raise ValueError(f"a t interval needs at least 2 values, got {x.size}")
    half = t_quantile((1 + level) / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size)
    return (float(x.mean() - half), float(x.mean() + half))


def sign_test(d: Iterable[float]) -> dict:
    """Exact two-sided sign test of ``P(d > 0) = 1/2`` on paired differences ``d``.

    Zero differences (ties) are dropped, as usual; ``+-inf`` (censored) differences count by their
    sign. ``p = min(1, 2 P(X <= min(k, n - k)))`` for ``X ~ Bin(n, 1/2)``, ``k`` positives of ``n``
    non-zero differences. Returns ``{"n", "n_positive", "n_zero", "p"}`` (``p = 1`` when n = 0).
    """
    d = values(d, censored=True)
    nz = d[d != 0]
    n, k = int(nz.size), int((nz > 0).sum())
    p = 1.0 if n == 0 else float(scipy.stats.binomtest(k, n, 0.5).pvalue)
    return {"n": n, "n_positive": k, "n_zero": int(d.size - n), "p": min(1.0, p)}


def smallest_p(n: int) -> float:
    """The smallest two-sided p-value the exact sign or signed-rank test can give with ``n`` pairs.

    Both reach it when all ``n`` non-zero differences share a sign: ``2 * 2^-n = 2^(1-n)`` (1 at n = 0).
    """
    return 1.0 if n <= 0 else min(1.0, 2.0 ** (1 - n))


def wilcoxon_signed_rank(d: Iterable[float]) -> dict:
    """Exact two-sided Wilcoxon signed-rank test of symmetry about 0 of paired differences ``d``.

    Zero differences are dropped (Wilcoxon's convention); the others are ranked by ``|d|`` with tied
    magnitudes given their mid-rank, and ``W+`` is the sum of the ranks of the positive differences.
    The null distribution is enumerated exactly over all ``2^n`` sign patterns of those (possibly
    tied) ranks, by dynamic programming on doubled ranks, so the p-value is exact also with ties
    (conditional on the tie pattern). Censored ``+-inf`` differences take the largest ranks, which is
    valid when runs are censored at a common horizon. ``p = min(1, 2 min(P(W+ <= w), P(W+ >= w)))``.
    Returns ``{"n", "n_zero", "w_plus", "p"}`` (``p = 1`` when n = 0).
    """
    d = values(d, censored=True)
    nz = d[d != 0]
    n = int(nz.size)
    if n == 0:
        return {"n": 0, "n_zero": int(d.size), "w_plus": 0.0, "p": 1.0}
    mags = np.abs(nz)
    order = np.argsort(mags, kind="stable")
    ranks2 = np.empty(n, dtype=np.int64)  # doubled mid-ranks: integers
    i = 0
    while i < n:
        j = i
        while j + 1 < n and mags[order[j + 1]] == mags[order[i]]:
            j += 1
        ranks2[order[i : j + 1]] = i + j + 2  # 2 * mean of ranks i+1 .. j+1
        i = j + 1
    counts = np.zeros(int(ranks2.sum()) + 1, dtype=object)  # exact integer counts of each 2 W+
    counts[0] = 1
    for r in ranks2:
        shifted = np.zeros_like(counts)
        shifted[r:] = counts[: counts.size - r]
        counts = counts + shifted
    w2 = int(ranks2[nz > 0].sum())
    total = 2**n
    lower, upper = int(counts[: w2 + 1].sum()), int(counts[w2:].sum())
    return {"n": n, "n_zero": int(d.size - n), "w_plus": w2 / 2.0,
            "p": min(1.0, 2.0 * min(lower, upper) / total)}


def holm(pvalues: Sequence[float], alpha: float = 0.05) -> dict:
    """Holm's step-down correction of the ``m`` p-values of one family of comparisons.

    With ``p_(1) <= ... <= p_(m)``, the adjusted value is ``max_{j <= i} min(1, (m - j + 1) p_(j))``;
    comparison i is rejected at family-wise error ``alpha`` when its adjusted value is ``<= alpha``.
    Returns ``{"adjusted": [...], "reject": [...]}`` in the input order.
    """
    p = np.asarray(pvalues, dtype=float)
    if p.size and (np.isnan(p).any() or (p < 0).any() or (p > 1).any()):
        raise ValueError(f"p-values must lie in [0, 1], got {p.tolist()}")
    m = p.size
    order = np.argsort(p, kind="stable")
    adj_sorted = np.maximum.accumulate(np.minimum(1.0, (m - np.arange(m)) * p[order]))
    adjusted = np.empty(m)
    adjusted[order] = adj_sorted
    return {"adjusted": adjusted.tolist(), "reject": [bool(a <= alpha) for a in adjusted]}


def holm_tarone(pvalues: Sequence[float], smallest: Sequence[float], alpha: float = 0.05) -> dict:
    """Holm's correction over the comparisons that can reach ``alpha`` at all (Tarone's rule).

    A discrete test with few pairs has a smallest attainable p-value (:func:`smallest_p`); a
    comparison whose smallest p exceeds the per-comparison level can never be rejected, and counting
    it in the family only weakens the others. Tarone (1990): with ``m(K)`` the number of comparisons
    whose smallest p is ``<= alpha / K``, take the smallest ``K >= 1`` with ``m(K) <= K``; those
    ``m(K)`` comparisons are *testable* and Holm-corrected among themselves (family size ``m(K)``);
    the rest are untestable and get no adjusted p (``None``). Returns ``{"testable": [...],
    "adjusted": [...], "reject": [...]}`` in the input order.

    Reference: Tarone (1990), "A modified Bonferroni method for discrete data", Biometrics 46:515-522.
    """
    p, lo = list(pvalues), list(smallest)
    if len(p) != len(lo):
        raise ValueError(f"{len(p)} p-values but {len(lo)} smallest attainable p-values; give one per comparison")
    m = len(p)
    k = 1
    while k < m and sum(x <= alpha / k for x in lo) > k:
        k += 1
    testable = [x <= alpha / k for x in lo]
    res = holm([q for q, t in zip(p, testable) if t], alpha)
    adjusted: list[float | None] = [None] * m
    reject = [False] * m
    it = iter(zip(res["adjusted"], res["reject"]))
    for i, t in enumerate(testable):
        if t:
            adjusted[i], reject[i] = next(it)
    return {"testable": testable, "adjusted": adjusted, "reject": reject}


def median_interval(xs: Iterable[float | None], level: float = 0.95, *, censored: bool = False) -> dict:
    """The median and its distribution-free order-statistic interval ``[x_(k), x_(n+1-k)]``.

    ``k`` is the largest rank with coverage ``1 - 2 P(Bin(n, 1/2) <= k - 1) >= level``. When even the
    full range (k = 1, coverage ``1 - 2^(1-n)``) falls short of ``level`` -- n <= 5 at 95% -- the range
    is returned with its true coverage. ``name`` says what the interval is: ``"range"`` (the minimum
    and maximum) or ``"order-statistic interval"``; a bootstrap of the median over so few values is
    the same range under a more flattering name. Returns ``{"median", "low", "high", "coverage",
    "name", "n", "n_censored"}``.
    """
    x = np.sort(values(xs, censored=censored))
    n = int(x.size)
    if n == 0:
        raise ValueError("median_interval needs at least one value")
    k = 1
    for cand in range(1, n // 2 + 1):
        cover = 1 - 2 * sum(math.comb(n, i) for i in range(cand)) / 2.0**n
        if cover >= level:
            k = cand
    coverage = 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2.0**n
    return {"median": _quantile(x, 0.5), "low": float(x[k - 1]), "high": float(x[n - k]),
            "coverage": coverage, "name": "range" if k == 1 else "order-statistic interval",
            "n": n, "n_censored": int(np.isinf(x).sum())}


def paired_ratio(num: Iterable[float], den: Iterable[float]) -> dict:
    """The median over rounds of the per-round ratio ``num_r / den_r``, and its range over rounds.

    For timings measured in interleaved rounds: a round slowed by the machine slows both sides, so
    the ratio within a round is steadier than a ratio of two separate summaries. Returns
    ``{"median", "low", "high", "n"}``; ``num`` and ``den`` must have the same positive length.
    """
    num, den = list(num), list(den)
    if not num or len(num) != len(den):
        raise ValueError(f"paired_ratio needs two equally long, non-empty series; got {len(num)} and {len(den)}")
    r = np.array([a / b for a, b in zip(num, den)], dtype=float)
    return {"median": float(np.median(r)), "low": float(r.min()), "high": float(r.max()), "n": int(r.size)}



def paired_ratio_text(num: Iterable[float], den: Iterable[float]) -> str:
    """:func:`paired_ratio` as a benchmark table prints it: ``"1.50x (1.20-2.00)"`` (median, range)."""
    r = paired_ratio(num, den)
    return f"{r['median']:.2f}x ({r['low']:.2f}-{r['high']:.2f})"


def wins(a: Iterable[float | None], b: Iterable[float | None], *, lower_is_better: bool = True,
         censored: bool = False) -> dict:
    """How often ``b`` beats ``a`` on the same seed: ``{"wins", "ties", "losses", "n"}``."""
    d = paired_differences(a, b, censored=censored)
    better = d < 0 if lower_is_better else d > 0
    worse = d > 0 if lower_is_better else d < 0
    return {"wins": int(better.sum()), "ties": int((d == 0).sum()), "losses": int(worse.sum()),
            "n": int(d.size)}


def compare(a: Iterable[float | None], b: Iterable[float | None], *, lower_is_better: bool = True,
            censored: bool = False, level: float = 0.95) -> dict:
    """Paired comparison of arm ``b`` with baseline ``a`` over the same seeds.

    Returns the :func:`summarize` of both; the per-seed ``differences`` ``b - a``; their
    :func:`median_interval` (``median_difference``); ``mean_difference_t_interval`` (``None``, with
    ``n_censored_differences > 0``, when a difference is censored); the :func:`sign_test` and
    :func:`wilcoxon_signed_rank` p-values (``p_sign``, ``p_wilcoxon``; correct them across a table
    with :func:`holm`); and the :func:`wins` of ``b``.
    """
    a, b = list(a), list(b)
    d = paired_differences(a, b, censored=censored)
    n_cens = int(np.isinf(d).sum())
    return {
        "baseline": summarize(a, censored=censored),
        "arm": summarize(b, censored=censored),
        "differences": d.tolist(),
        "n_censored_differences": n_cens,
        "median_difference": median_interval(d, level),
        "mean_difference_t_interval": None if n_cens or d.size < 2 else t_interval(d, level),
        "p_sign": sign_test(d)["p"],
        "p_wilcoxon": wilcoxon_signed_rank(d)["p"],
        "wins": wins(a, b, lower_is_better=lower_is_better, censored=censored),
    }

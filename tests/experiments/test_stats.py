"""Tests of stiefel_mini.experiments.stats against known answers (tables, hand counts, enumeration)."""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
import scipy.stats

from stiefel_mini.experiments import stats


@pytest.mark.parametrize("p, df, expected", [  # Student-t table values
    (0.975, 1, 12.7062), (0.975, 2, 4.3027), (0.975, 4, 2.7764), (0.975, 10, 2.2281),
    (0.975, 30, 2.0423), (0.995, 5, 4.0321), (0.95, 20, 1.7247), (0.025, 4, -2.7764)])
def test_t_quantile_matches_the_table(p, df, expected):
    assert stats.t_quantile(p, df) == pytest.approx(expected, abs=1e-4)


def test_t_interval_known_and_refuses_censored():
    lo, hi = stats.t_interval([1.0, 2.0, 3.0, 4.0, 5.0])
    assert (lo + hi) / 2 == pytest.approx(3.0)
    assert hi - 3 == pytest.approx(2.776445 * np.std([1, 2, 3, 4, 5], ddof=1) / math.sqrt(5), rel=1e-6)
    with pytest.raises(ValueError, match="censored"):
        stats.t_interval([1.0, math.inf, 2.0])
    with pytest.raises(ValueError, match="None"):
        stats.t_interval([1.0, None, 2.0])
    with pytest.raises(ValueError, match="NaN"):
        stats.t_interval([1.0, math.nan, 2.0])
    with pytest.raises(ValueError, match="at least 2"):
        stats.t_interval([1.0])


def test_sign_test_known_values():
    assert stats.sign_test([1, 2, 3, 4, 5])["p"] == 0.0625  # 5/5: 2 / 2^5
    assert stats.sign_test([1, 2, 3])["p"] == 0.25  # 3/3
    assert stats.sign_test([-1, 2, 3, 4, 5, 6])["p"] == pytest.approx(14 / 64)  # 2 (1 + 6) / 2^6
    r = stats.sign_test([0, 0, 1, -1])
    assert r == {"n": 2, "n_positive": 1, "n_zero": 2, "p": 1.0}
    assert stats.sign_test([math.inf, 1, 2, 3, 4])["p"] == 0.0625  # a censored loss counts by its sign


def _brute_wilcoxon(d):
    """Two-sided exact p by listing all sign patterns of the mid-ranks (the definition)."""
    nz = [x for x in d if x != 0]
    mags = sorted(abs(x) for x in nz)
    rank = {m: np.mean([i + 1 for i, v in enumerate(mags) if v == m]) for m in mags}
    w = sum(rank[abs(x)] for x in nz if x > 0)
    dist = [sum(rank[abs(x)] for x, s in zip(nz, signs) if s) for signs in itertools.product([0, 1], repeat=len(nz))]
    lower = sum(v <= w + 1e-9 for v in dist)
    upper = sum(v >= w - 1e-9 for v in dist)
    return min(1.0, 2 * min(lower, upper) / len(dist))


def test_wilcoxon_exact_table_values():
    assert stats.wilcoxon_signed_rank([1, 2, 3, 4, 5]) == {"n": 5, "n_zero": 0, "w_plus": 15.0, "p": 0.0625}
    # n = 8, W+ = 3: P(W+ <= 3) = 5/256 (subsets of 1..8 summing to <= 3), two-sided 10/256; the
    # table's two-sided 5% critical value for n = 8 is 3, and for W+ = 4 the p-value is 14/256 > 0.05.
    d8 = [-1, -2, 3, -4, -5, -6, -7, -8]
    assert stats.wilcoxon_signed_rank(d8)["p"] == pytest.approx(10 / 256)
    assert stats.wilcoxon_signed_rank([-1, -2, -3, 4, -5, -6, -7, -8])["p"] == pytest.approx(14 / 256)
    # scipy.stats.wilcoxon(method="exact") of this untied sample: 0.01611328125 (= 33 / 2048)
    d12 = [0.1, -0.2, 0.3, 0.4, 0.5, 0.6, -0.7, 0.8, 0.9, 1.0, 1.1, 1.2]
    assert stats.wilcoxon_signed_rank(d12)["p"] == pytest.approx(33 / 2048)


@pytest.mark.parametrize("d", [[1, 1, 2, -2, 3, 3, 3, -1, 4, 0], [2, -2, 2, 2, 0, 0, 5], [1.5, -0.3, 2.2, 0.8, -1.1]])
def test_wilcoxon_ties_and_zeros_match_enumeration(d):
    r = stats.wilcoxon_signed_rank(d)
    assert r["n_zero"] == d.count(0) and r["p"] == pytest.approx(_brute_wilcoxon(d))


def test_wilcoxon_censored_and_empty():
    assert stats.wilcoxon_signed_rank([math.inf, 1, 2, 3, 4])["p"] == 0.0625
    assert stats.wilcoxon_signed_rank([0, 0])["p"] == 1.0


def test_holm_known_example():
    # sorted 0.005, 0.01, 0.03, 0.04 -> 4 x 0.005, 3 x 0.01, 2 x 0.03, max(1 x 0.04, 0.06)
    r = stats.holm([0.01, 0.04, 0.03, 0.005])
    assert r["adjusted"] == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert r["reject"] == [True, False, False, True]
    assert stats.holm([0.5, 0.9])["adjusted"] == [1.0, 1.0]
    with pytest.raises(ValueError, match="p-values"):
        stats.holm([0.1, 1.5])


def test_median_interval_names_the_range():
    r = stats.median_interval([3, 1, 2, 5, 4])
    assert (r["median"], r["low"], r["high"], r["name"]) == (3, 1, 5, "range")
    assert r["coverage"] == pytest.approx(1 - 2 / 32)  # 93.75%: below 95%, said so
    r = stats.median_interval(list(range(10)))  # table: n = 10 -> [x_(2), x_(9)], coverage 97.85%
    assert (r["low"], r["high"], r["name"]) == (1, 8, "order-statistic interval")
    assert r["coverage"] == pytest.approx(1 - 2 * 11 / 1024)
    r = stats.median_interval([1, None, 2], censored=True)
    assert r["n_censored"] == 1 and math.isinf(r["high"])


def test_summarize_counts_censoring_and_refuses_missing():
    s = stats.summarize([1, 2, 3, 4, None], censored=True)
    assert s["median"] == 3 and s["n_censored"] == 1 and s["mean"] is None and math.isinf(s["max"])
    assert s["q25"] == 2 and s["q75"] == 4
    assert stats.summarize([1, 2, 3, 4])["median"] == 2.5
    assert math.isinf(stats.summarize([None, None, None, 1], censored=True)["median"])
    with pytest.raises(ValueError, match="censored=True"):
        stats.summarize([1, None])


def test_paired_differences_wins_and_compare():
    a, b = [10, 20, None, 40], [5, 25, None, None]
    d = stats.paired_differences(a, b, censored=True)
    assert d[0] == -5 and d[1] == 5 and d[2] == 0 and math.isinf(d[3])
    assert stats.wins(a, b, censored=True) == {"wins": 1, "ties": 1, "losses": 2, "n": 4}
    assert stats.wins([0.5, 0.7], [0.9, 0.7], lower_is_better=False) == {"wins": 1, "ties": 1, "losses": 0, "n": 2}
    with pytest.raises(ValueError, match="differ in length"):
        stats.paired_differences([1, 2], [1])
    c = stats.compare(a, b, censored=True)
    assert c["n_censored_differences"] == 1 and c["mean_difference_t_interval"] is None
    assert c["median_difference"]["name"] == "range" and c["wins"]["wins"] == 1
    c = stats.compare([1, 2, 3, 4, 5], [2, 3, 4, 5, 7])
    assert c["differences"] == [1, 1, 1, 1, 2] and c["p_sign"] == 0.0625 and c["p_wilcoxon"] == 0.0625
    assert c["mean_difference_t_interval"][0] > 0


def test_quantiles_next_to_infinite_values():
    # censored differences: -inf .. +inf has no quantile, finite .. inf is inf (numpy gives nan)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and no RuntimeWarning from inf - inf
        assert math.isnan(stats.summarize([-math.inf, math.inf, -math.inf, math.inf])["median"])
        s = stats.summarize([-math.inf, math.inf, -1.0, 2.0])
        assert s["median"] == 0.5 and s["q25"] == -math.inf and s["q75"] == math.inf
        assert stats.summarize([-math.inf, math.inf, 3.0])["median"] == 3.0


def test_paired_ratio_is_the_median_of_per_round_ratios():
    # per-round ratios 2.0, 1.5, 1.2: median 1.5, although the best times (1 and 2) give 2.0
    r = stats.paired_ratio([2.0, 3.0, 6.0], [1.0, 2.0, 5.0])
    assert r == {"median": pytest.approx(1.5), "low": pytest.approx(1.2), "high": pytest.approx(2.0), "n": 3}
    assert stats.paired_ratio([1.0, 3.0], [1.0, 1.0])["median"] == pytest.approx(2.0)  # even n: the mean of the two


@pytest.mark.parametrize("num, den", [([], []), ([1.0, 2.0], [1.0])])
def test_paired_ratio_refuses_unpaired_series(num, den):
    with pytest.raises(ValueError, match="equally long"):
        stats.paired_ratio(num, den)


def test_sign_test_and_smallest_p_known_answers():
    assert stats.sign_test([1.0] * 8)["p"] == pytest.approx(2 ** -7)  # 0.0078125
    assert stats.sign_test([1, 1, 1, 1, -1])["p"] == pytest.approx(0.375)  # 2 * 6/32
    assert stats.sign_test([0.0, 0.0])["p"] == 1.0
    assert [stats.smallest_p(n) for n in (0, 1, 3, 5, 8)] == [1.0, 1.0, 0.25, 0.0625, 0.0078125]
    # the enumerated Wilcoxon agrees with scipy's exact test where there are no ties
    d = [0.3, -0.1, 0.7, 1.2, 0.5, -0.25, 0.9]
    assert stats.wilcoxon_signed_rank(d)["p"] == pytest.approx(scipy.stats.wilcoxon(d, method="exact").pvalue)


def test_holm_tarone_known_examples():
    # Two comparisons at n = 3 (p >= 0.25) cannot reach 0.05: K = 2 leaves the two n = 8 ones.
    res = stats.holm_tarone([0.25, 0.5, 0.0078125, 0.01], [0.25, 0.25, 0.0078125, 0.0078125])
    assert res["testable"] == [False, False, True, True]
    assert res["adjusted"][:2] == [None, None]
    assert res["adjusted"][2:] == pytest.approx([0.015625, 0.015625])  # Holm over 2
    assert res["reject"] == [False, False, True, True]
    none = stats.holm_tarone([0.25, 0.0625], [0.25, 0.0625])
    assert none["testable"] == [False, False] and none["reject"] == [False, False]
    # m(1) = 3 > 1, m(2) = 3 > 2, m(3) = 3 <= 3: all three tested, Holm over 3.
    three = stats.holm_tarone([0.001, 0.02, 0.04], [0.001, 0.001, 0.001])
    assert three["testable"] == [True] * 3 and three["adjusted"] == pytest.approx([0.003, 0.04, 0.04])
    with pytest.raises(ValueError, match="one per comparison"):
        stats.holm_tarone([0.1], [0.1, 0.2])

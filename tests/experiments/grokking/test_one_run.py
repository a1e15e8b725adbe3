"""Tests of stiefel_mini.experiments.grokking.one_run: the one-run-per-arm design replayed on stored curves."""

from __future__ import annotations

import pytest

from stiefel_mini.experiments.grokking import one_run as one_run


def hist(*vals, every=10):
    """A history evaluated every ``every`` steps with validation accuracies ``vals`` (fractions)."""
    return {"step": [every * i for i in range(len(vals))], "val_acc": list(vals)}


def test_below_best_is_the_endpoint_minus_the_best_so_far():
    h = hist(0.1, 0.96, 0.99, 0.65, 0.8)
    assert one_run.below_best_pp(h) == pytest.approx(-19.0)
    assert one_run.below_best_pp(h, step=30) == pytest.approx(-34.0)
    assert one_run.below_best_pp(h, step=20) == 0.0  # at its best
    with pytest.raises(ValueError, match="step 25"):
        one_run.below_best_pp(h, step=25)


def test_known_answer_same_and_cross_seed():
    # endpoints (points): baseline 90, 50, 100; arm 100, 100, 40 -> same-seed gaps +10, +50, -60
    base = {0: hist(0.2, 0.9), 1: hist(0.2, 0.5), 2: hist(1.0, 1.0)}
    arm = {0: hist(0.2, 1.0), 1: hist(0.2, 1.0), 2: hist(1.0, 0.4), 9: hist(0.0, 0.0)}  # seed 9 unpaired
    out = one_run.one_run_gaps(base, arm)
    assert out["seeds"] == [0, 1, 2] and out["step"] == 10
    assert out["paired_mean_pp"] == pytest.approx(0.0)  # +10 + 50 - 60
    same = out["same_seed"]
    assert same["gaps_pp"] == pytest.approx([10, 50, -60])
    assert (same["large"], same["large_up"], same["large_down"]) == (2, 1, 1)
    assert same["opposite"] is None  # the paired mean is 0: no sign to disagree with
    cross = out["cross_seed"]
    # arm(i) - base(j), i != j: 100-50, 100-100, 100-90, 100-100, 40-90, 40-50
    assert sorted(cross["gaps_pp"]) == pytest.approx(sorted([50, 0, 10, 0, -50, -10]))
    assert (cross["n"], cross["large"], cross["ties"]) == (6, 2, 2)
    assert out["below_best_pp"] == {"baseline": [0.0, 0.0, 0.0], "arm": [0.0, 0.0, pytest.approx(-60.0)]}


def test_opposite_signs_count_against_the_paired_mean():
    # same-seed gaps +40, +40, -5, 0: mean +18.75 > 0; one opposite, one tie, two large
    base = {s: hist(v) for s, v in enumerate([0.5, 0.5, 0.9, 0.7])}
    arm = {s: hist(v) for s, v in enumerate([0.9, 0.9, 0.85, 0.7])}
    same = one_run.one_run_gaps(base, arm)["same_seed"]
    assert (same["opposite"], same["ties"], same["large"]) == (1, 1, 2)
    assert same["share_opposite"] == pytest.approx(0.25) and same["share_large"] == pytest.approx(0.5)
    # a smaller threshold counts more gaps as large; swapping the arms flips every sign, not the counts
    assert one_run.one_run_gaps(base, arm, gap_pp=5.0)["same_seed"]["large"] == 3
    flipped = one_run.one_run_gaps(arm, base)
    assert flipped["paired_mean_pp"] == pytest.approx(-18.75)
    assert flipped["same_seed"]["opposite"] == 1 and flipped["same_seed"]["large_down"] == 2


def test_the_step_picks_the_evaluation_and_the_default_is_the_last_common_one():
    base = {0: hist(0.1, 0.9, 0.2), 1: hist(0.1, 0.9)}
    arm = {0: hist(0.1, 0.1, 0.9), 1: hist(0.1, 0.1)}
    assert one_run.one_run_gaps(base, arm)["step"] == 10  # seed 1 stopped at step 10
    assert one_run.one_run_gaps(base, arm, step=0)["paired_mean_pp"] == pytest.approx(0.0)
    with pytest.raises(ValueError, match="step 20"):
        one_run.one_run_gaps(base, arm, step=20)


def test_fewer_than_two_paired_seeds_is_an_error_naming_them():
    with pytest.raises(ValueError, match=r"at least 2 paired seeds.*\[0\]"):
        one_run.one_run_gaps({0: hist(0.5), 1: hist(0.5)}, {0: hist(0.5), 2: hist(0.5)})


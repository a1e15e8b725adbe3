"""The speedrun measure of the language-model study: tokens to reach the baseline's final loss."""

from __future__ import annotations

import pytest

from stiefel_mini.evidence.reach import sides, tokens_to_reach

CURVE = {"tokens": [0, 100, 200, 300], "val_bpb": [4.0, 3.0, 2.0, 1.5]}


def test_the_crossing_is_interpolated_between_evaluations():
    assert tokens_to_reach(CURVE, 2.5) == pytest.approx(150.0)
    assert tokens_to_reach(CURVE, 2.0) == pytest.approx(200.0)  # reached exactly at an evaluation
    assert tokens_to_reach(CURVE, 4.5) == 0.0
    assert tokens_to_reach(CURVE, 1.0) is None  # never within the budget: censored


def test_the_baseline_counts_its_budget_and_the_other_arm_its_crossing():
    base = {0: {"history": {"tokens": [0, 100, 200, 300], "val_bpb": [4.0, 3.5, 3.0, 2.5]}}}
    fast = {0: {"history": CURVE}, 1: {"history": CURVE}}
    a, b = sides(base, fast)
    assert list(a) == list(b) == [0]  # only the seeds both hold
    assert a[0]["tokens"] == 300.0 and b[0]["tokens"] == pytest.approx(150.0)
    slow = {0: {"history": {"tokens": [0, 300], "val_bpb": [4.0, 2.6]}}}
    assert sides(base, slow)[1][0]["tokens"] is None

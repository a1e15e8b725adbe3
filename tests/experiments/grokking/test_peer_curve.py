"""Tests of stiefel_mini.experiments.grokking.peer_curve: a run's landmarks against Nanda et al.'s phases."""

from __future__ import annotations

from stiefel_mini.experiments.grokking import peer_curve as peer_curve


def test_landmarks_and_their_placement_against_the_phases():
    steps = [0, 1000, 2000, 10000, 15000]
    h = {"step": steps, "train_acc": [0.0, 0.995, 1.0, 1.0, 1.0], "val_acc": [0.0, 0.0, 0.1, 0.97, 1.0],
         "val_loss": [4.0, 9.0, 9.0, 1.0, None]}
    assert peer_curve.landmarks(h) == {"train99": 1000, "test_loss_peak": 1000, "test95": 10000}
    late = {**h, "val_acc": [0.0, 0.0, 0.1, 0.5, 0.96], "val_loss": [4.0, 5.0, 9.0, 1.0, 0.5]}
    never = {**h, "val_acc": [0.0] * 5}
    rows = peer_curve.agreement_rows({"a": {0: {"history": h}, 1: {"history": late}, 2: {"history": never}},
                                      "b": {}})
    by = {r["landmark"]: r for r in rows}
    assert {r["arm"] for r in rows} == {"a"} and len(rows) == len(peer_curve.LANDMARKS)
    assert by["test95"]["placement"] == ["within", "later", "never"] and by["test95"]["within"] == 1
    assert by["test95"]["median"] == 12500.0 and by["test95"]["window"] == (9400, 13300)
    assert by["test_loss_peak"]["placement"] == ["within", "later", "within"]
    assert by["train99"]["steps"] == [1000, 1000, 1000] and by["train99"]["within"] == 3

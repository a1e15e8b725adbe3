"""Tests of the grokking metrics and run selection: thresholds, collapses, paired seeds."""
from __future__ import annotations


import pytest

from stiefel_mini import evidence
from stiefel_mini.experiments.grokking import config as grokking_config
from stiefel_mini.experiments.grokking import metrics as grokking_metrics

def test_metrics_on_a_synthetic_history():
    steps = list(range(0, 100, 10))
    val = [0.0, 0.1, 0.2, 0.96, 0.99, 0.4, 0.97, 1.0, 1.0, 1.0]
    train = [0.0, 0.5, 0.99, 1, 1, 1, 1, 1, 1, 1]
    hist = {"step": steps, "val_acc": val, "train_acc": train, "dist_q": [0] * 10, "dist_k": [0] * 10,
            "orth_q": [0] * 10, "step_q": [0] * 10, "step_k": [0] * 10, "entropy": [[1.0, 0.5]] * 10}
    cfg = grokking_config.GrokkingConfig(steps=90, late_frac=0.25)
    m = grokking_metrics.metrics(hist, cfg)
    assert m["steps_to_val95"] == 30 and m["steps_to_val99"] == 40 and m["steps_to_train99"] == 20
    assert m["grok_delay"] == 20
    assert m["collapses"] == 1
    assert m["post_grok_share95"] == pytest.approx(6 / 7)
    assert m["late_share95"] == 1.0  # evaluations at steps >= 67.5: 70, 80, 90
    assert m["entropy_final"] == 0.75
    assert grokking_metrics.collapses([0.96, 0.3, 0.2, 0.96, 0.1]) == 2
    assert m["collapses10"] == 1 and m["first_collapse_step"] == 50
    assert m["steps_above95"] == 6 * cfg.eval_every and m["share_above95"] == pytest.approx(0.6)


def test_drops_count_ten_point_falls_after_first_reaching_95():
    assert grokking_metrics.drops([0.5, 0.9, 0.84]) == []  # never reached 95%
    assert grokking_metrics.drops([0.96, 0.87, 0.86]) == [2]  # 0.86 <= 0.96 - 0.10; counted once
    assert grokking_metrics.drops([0.95, 1.0, 0.91, 0.89, 0.99, 0.5, 0.6]) == [3, 5]  # the peak rises to 1.0 first
    assert grokking_metrics.drops([0.99, 0.9, 0.95, 0.85]) == [3]  # 0.9 is 9 points below 0.99: no collapse
    assert grokking_metrics.first_step([0, 1], [0.1, 0.2], 0.5) is None


def test_subsample_keeps_first_and_last():
    hist = {"step": list(range(101)), "val_acc": list(range(101))}
    sub = grokking_metrics.subsample(hist, 10)
    assert sub["step"][0] == 0 and sub["step"][-1] == 100 and len(sub["step"]) <= 12


def test_evidence_pairs_grokking_runs_on_their_common_seeds_with_censoring():
    def run(arm, seed, s95, acc):
        return {"arm": arm, "seed": seed, "weight_decay": None, "metrics": {"steps_to_val95": s95, "final_val_acc": acc}}

    # adamw and stiefel_learned on 5 seeds, uniform on 3 (a sweep still filling its file).
    runs = [run("adamw", s, v, 0.9) for s, v in enumerate((400, 500, None, 600, 700))]
    runs += [run("stiefel_learned", s, v, 0.95) for s, v in enumerate((200, 300, None, 500, 600))]
    runs += [run("uniform", s, None, 0.5) for s in range(3)]
    results = {"sweep": {"arms": ["adamw", "stiefel_learned", "uniform"]}, "runs": runs}
    steps = lambda r: r["metrics"]["steps_to_val95"]  # noqa: E731
    base = grokking_metrics.seed_runs(results, "adamw")
    s95 = evidence.paired(base, grokking_metrics.seed_runs(results, "stiefel_learned"), steps, higher_is_better=False,
                          censored=True, unit="steps")
    assert s95["seeds"] == [0, 1, 2, 3, 4] and s95["ties"] == 1 and s95["n_test"] == 4
    assert s95["wins"] == 4 and s95["losses"] == 0 and s95["p"] == 0.125 and s95["high"] == 0
    assert s95["mean"] is None and s95["n_censored"] == 1  # both censored: a tie for the test, no mean
    u95 = evidence.paired(base, grokking_metrics.seed_runs(results, "uniform"), steps, higher_is_better=False,
                          censored=True)
    assert u95["seeds"] == [0, 1, 2] and u95["n_censored"] == 3 and u95["mean"] is None
    assert (u95["wins"], u95["losses"], u95["ties"]) == (0, 2, 1)
    acc = evidence.paired(base, grokking_metrics.seed_runs(results, "stiefel_learned"),
                          lambda r: 100 * r["metrics"]["final_val_acc"])
    assert acc["mean"] == pytest.approx(5.0) and acc["wins"] == 5 and acc["p"] == 0.0625


def test_seed_runs_keeps_every_seed_of_an_arm_and_picks_the_decay():
    runs = [{"arm": "adamw", "seed": s, "weight_decay": wd, "metrics": {}} for s in (2, 0) for wd in (0.1, 1.0)]
    results = {"sweep": {"arms": ["adamw"], "weight_decays": [0.1, 1.0]}, "runs": runs}
    picked = grokking_metrics.seed_runs(results, "adamw", weight_decay=0.1)
    assert list(picked) == [0, 2] and all(r["weight_decay"] == 0.1 for r in picked.values())
    with pytest.raises(ValueError, match="weight_decay"):
        grokking_metrics.seed_runs(results, "adamw")
    assert grokking_metrics.seed_runs(results, "qknorm", weight_decay=1.0) == {}

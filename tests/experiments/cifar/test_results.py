"""Tests of reading CIFAR-10 runs for the chapter and the evidence layer, on hand-made run records.

No training here: each record holds only the keys the functions read, with accuracies chosen so
that the right answer is known (which lr is best, which seeds pair, what Holm makes of the table).
"""

from __future__ import annotations

import json

import pytest

from stiefel_mini import evidence
from stiefel_mini.evidence import runs as runs_mod
from stiefel_mini.evidence.runs import by_seed, fitted_check, held_out_best
from stiefel_mini.experiments.cifar import config as cifar_config
from stiefel_mini.experiments.cifar import results as cifar_results


def rec(arm, seed, acc, lr=1e-3, frame_lr=None, frac=0.3, train_acc=None):
    h = {"arm": arm, "arm_name": arm, "seed": seed, "train_fraction": frac, "n_train": 15000,
         "steps_total": 1170, "lr": lr, "frame_lr": frame_lr, "test_acc": acc, "qk_drift": 0.1,
         "orth_error": 0.0, "qk_step_mean": 1.0}
    if train_acc is not None:
        h["train_acc"] = train_acc
    return h


def test_by_seed_selects_one_setting_and_refuses_an_ambiguous_one():
    runs = [rec("A0", 0, 0.5, lr=1e-3), rec("A0", 0, 0.4, lr=3e-3), rec("A0", 1, 0.6, lr=1e-3)]
    assert {s: h["test_acc"] for s, h in by_seed(runs, arm="A0", lr=1e-3).items()} == {0: 0.5, 1: 0.6}
    assert by_seed(runs, arm="A1") == {}
    with pytest.raises(ValueError, match="share seed 0"):
        by_seed(runs, arm="A0")


def test_evidence_pairs_common_seeds_and_corrects_the_testable_rows():
    a = {s: rec("A0", s, 0.50) for s in range(6)}
    b = {s: rec("A1", s, 0.50 + 0.01 * (s + 1)) for s in range(6)}  # wins on all 6 seeds
    c = {s: rec("A3", s, 0.50 + (0.01 if s % 2 else -0.01)) for s in range(4)}  # 2 wins, 2 losses
    acc = lambda h: 100 * h["test_acc"]  # noqa: E731
    rows = evidence.correct([evidence.paired(a, b, acc, label="A1 - A0"), evidence.paired(a, c, acc),
                             evidence.paired(a, {}, acc)])
    r1, r3, r0 = rows
    assert r1["seeds"] == list(range(6)) and r1["wins"] == 6 and r1["mean"] == pytest.approx(3.5)
    lo, hi = r1["ci"]
    assert 0 < lo < 3.5 < hi
    assert r1["p"] == pytest.approx(2 * 0.5**6) and r1["p_min"] == pytest.approx(2 * 0.5**6)
    # Tarone: at n = 4 (p >= 0.125) and n = 0 no test can reach 0.05, so the family is r1 alone
    # and Holm leaves its p as it is (Holm over all three rows would give 0.094).
    assert r1["testable"] and r1["p_holm"] == pytest.approx(2 * 0.5**6) and r1["resolved"]
    assert not r3["testable"] and r3["p_holm"] is None and r3["wins"] == 2 and r3["losses"] == 2
    assert r3["low"] == pytest.approx(-1.0) and r3["high"] == pytest.approx(1.0)
    assert r0["n"] == 0 and r0["mean"] is None and not r0["testable"] and not r0["resolved"]
    one = evidence.paired({0: a[0]}, {0: b[0]}, acc)
    assert one["ci"] is None and one["n"] == 1


def test_at_best_lr_picks_each_arms_best_value():
    runs = [rec("A0", s, acc, lr=lr) for s in (0, 1) for lr, acc in ((1e-3, 0.5), (3e-3, 0.6), (1e-2, 0.4))]
    runs += [rec("A1", s, 0.55 + 0.1 * (v == 0.3), frame_lr=v) for s in (0, 1) for v in (0.1, 0.3)]
    best, at = runs_mod.at_best_lr(runs, "A0")
    assert best == 3e-3 and sorted(at) == [0, 1] and all(h["lr"] == 3e-3 for h in at.values())
    assert runs_mod.at_best_lr(runs, "A1")[0] == 0.3 and runs_mod.at_best_lr(runs, "A7") == (None, {})
    with pytest.raises(ValueError, match="several train fractions"):
        runs_mod.at_best_lr(runs + [rec("A0", 0, 0.5, frac=1.0)], "A0")


def test_fitted_check_reads_train_minus_test_per_seed():
    runs = [rec("A0", 0, 0.60, train_acc=0.70), rec("A0", 1, 0.62, train_acc=0.65),
            rec("A1", 0, 0.60, frame_lr=0.1, train_acc=0.58), rec("A1", 1, 0.61, frame_lr=0.1, train_acc=0.70),
            rec("A3", 0, 0.5)]  # no train accuracy recorded: no row
    rows = {r["arm"]: r for r in fitted_check(runs)}
    assert set(rows) == {"A0", "A1"}
    assert rows["A0"]["gaps_pp"] == pytest.approx([10.0, 3.0]) and rows["A0"]["fitted"]
    assert rows["A0"]["min_gap_pp"] == pytest.approx(3.0) and rows["A0"]["train_acc"] == pytest.approx(0.675)
    assert not rows["A1"]["fitted"] and rows["A1"]["min_gap_pp"] == pytest.approx(-2.0)


def lr_runs(a0, a1):
    """A0 at lrs and A1 at frame lrs; ``a0[lr] = [acc per seed]``."""
    return ([rec("A0", s, acc, lr=lr) for lr, accs in a0.items() for s, acc in enumerate(accs)]
            + [rec("A1", s, acc, frame_lr=f) for f, accs in a1.items() for s, acc in enumerate(accs)])


def test_held_out_best_picks_each_seeds_lr_on_the_other_seeds():
    # Seed 0 favours A1's frame lr 0.1, seed 1 favours 1.0: in-sample the best mean is 1.0 (0.575),
    # held out each seed gets the other seed's favourite.
    runs = lr_runs({1e-3: [0.50, 0.50], 1e-2: [0.45, 0.45]}, {0.1: [0.60, 0.40], 1.0: [0.45, 0.70]})
    value, a1 = runs_mod.at_best_lr(runs, "A1")
    best = evidence.paired(runs_mod.at_best_lr(runs, "A0")[1], a1, lambda h: 100 * h["test_acc"])
    assert value == 1.0 and best["mean"] == pytest.approx(7.5)
    held = held_out_best(runs)
    assert len(held) == 1 and held[0]["arm"] == "A1" and held[0]["seeds"] == [0, 1]
    assert held[0]["chosen"] == [(1.0, 1e-3), (0.1, 1e-3)]
    assert held[0]["diffs_pp"] == pytest.approx([-5.0, -10.0]) and held[0]["diff_pp"] == pytest.approx(-7.5)
    # a single complete seed: nothing to hold out
    assert held_out_best(lr_runs({1e-3: [0.5]}, {0.1: [0.6]})) == []


def test_study_status_counts_the_planned_grid(tmp_path):
    cfg = cifar_config.PLANS["r2_lr"]
    runs = [rec("A0", 0, 0.5, lr=lr) for lr in cfg.lrs] + [rec("A1", 0, 0.5, lr=cfg.run.optimizer.lr, frame_lr=0.01)]
    status = {r["preset"]: r for r in cifar_results.study_status({"r2_lr": {"runs": runs}, "r2_fitted": None})}
    lr = status["r2_lr"]
    n_planned = len(cfg.seeds) * (2 * len(cfg.lrs) + len(cfg.frame_lrs))  # A0 and qknorm on lrs, A1 on frame lrs
    assert lr["planned"] == n_planned and lr["done"] == len(cfg.lrs) + 1
    assert lr["missing"] == {"A0": len(cfg.lrs), "A1": 2 * len(cfg.frame_lrs) - 1, "qknorm": 2 * len(cfg.lrs)}
    fitted = status["r2_fitted"]
    assert fitted["done"] == 0 and fitted["planned"] == 4 * 5
    # the fitted study's A1 runs at a frame lr picked on the command line: arm, seed and fraction match
    done = cifar_results.study_status({"r2_fitted": {"runs": [rec("A1", 0, 0.6, frame_lr=0.3, frac=1.0)]}})[0]
    assert done["done"] == 1 and done["missing"]["A1"] == 4 and done["extra"] == {}
    # runs outside the plan (more seeds of two arms) are counted apart, not as done
    more = [rec(a, s, 0.6, frame_lr=0.3, frac=1.0) for a in ("A0", "A1") for s in (0, 5, 6)]
    more_status = cifar_results.study_status({"r2_fitted": {"runs": more}})[0]
    assert more_status["done"] == 2 and more_status["extra"] == {"A0": 2, "A1": 2}
    assert lr["extra"] == {}


def test_load_studies_gives_none_for_absent_files(monkeypatch, tmp_path):
    (tmp_path / "cifar").mkdir()
    (tmp_path / "cifar" / "r2_lr.json").write_text(json.dumps({"runs": []}))
    monkeypatch.setattr("stiefel_mini.resources.CHECKOUT_RESULTS", tmp_path)
    monkeypatch.setattr("stiefel_mini.resources.PACKAGED_RESULTS", tmp_path / "none")
    files = cifar_results.load_studies(("r2_lr", "r2_fitted"))
    assert files == {"r2_lr": {"runs": []}, "r2_fitted": None}
    with pytest.raises(ValueError, match="unknown study"):
        cifar_results.load_studies(("r3",))


def test_study_names_cover_every_study_file():
    assert set(cifar_config.STUDIES) <= set(cifar_results.STUDY_NAMES)
    assert all(not any(w in n for w in ("r2_", "r3_", ".json")) for n in cifar_results.STUDY_NAMES.values())


def test_study_plan_reads_the_runs_not_the_top_level_provenance():
    runs = [rec("A0", s, 0.5, lr=3e-3, frac=1.0) for s in (0, 1, 2)]
    runs += [rec("A1", s, 0.6, lr=3e-3, frame_lr=1.0, frac=1.0) for s in (2, 0)]
    for h in runs:
        h.update(n_train=50_000, steps_total=3900)
    stale = {"seeds": [7], "config": {"arms": ["A1"], "seeds": [7]}}  # one resumed run's record
    plan = cifar_results.study_plan({"provenance": stale, "settings": {"batch_size": 128}, "runs": runs})
    assert plan["runs"] == 5 and list(plan["arms"]) == ["A0", "A1"]
    assert plan["arms"]["A0"] == {"seeds": [0, 1, 2], "lrs": [3e-3], "frame_lrs": []}
    assert plan["arms"]["A1"] == {"seeds": [0, 2], "lrs": [3e-3], "frame_lrs": [1.0]}
    assert plan["n_train"] == [50_000] and plan["steps"] == [3900] and plan["epochs"] == [10.0]  # 390 a pass
    # First files: no lr in the runs, the file's settings hold it.
    old = cifar_results.study_plan({"settings": {"batch_size": 128, "lr": 1e-3}, "runs": [
        {"arm": "A1", "seed": 0, "n_train": 5000, "steps_total": 234}]})
    assert old["arms"]["A1"]["lrs"] == [1e-3] and old["epochs"] == [6.0]


def test_chosen_settings_read_one_arms_setting_and_refuse_a_sweep():
    settings = {"batch_size": 128, "max_step": 0.1, "warmup_epochs": 1.0, "epochs": 10, "betas": [0.9, 0.999],
                "weight_decay": 0.05, "logit_scale": "fixed", "lr": 1e-3, "frame_lr": None}
    runs = [rec("A1", s, 0.6, lr=3e-3, frame_lr=1.0, frac=1.0) for s in (0, 1)]
    runs += [rec("A0", s, 0.5, lr=3e-3, frac=1.0) for s in (0, 1)]
    for h in runs:
        h.update(n_train=50_000, steps_total=3900)
    got = cifar_results.chosen_settings({"settings": settings, "runs": runs})
    assert got == {"lr": 3e-3, "frame_lr": 1.0, "max_step": 0.1, "warmup_share": 0.1, "epochs": 10,
                   "batch_size": 128, "betas": (0.9, 0.999), "weight_decay": 0.05, "logit_scale": "fixed"}
    assert cifar_results.chosen_settings({"settings": settings, "runs": runs}, "A0")["frame_lr"] is None
    with pytest.raises(ValueError, match="A3 has no run"):
        cifar_results.chosen_settings({"settings": settings, "runs": runs}, "A3")
    runs.append({**runs[0], "seed": 2, "frame_lr": 0.3})
    with pytest.raises(ValueError, match="not one setting"):
        cifar_results.chosen_settings({"settings": settings, "runs": runs})


def test_direction_and_lead_text_take_their_words_from_the_sign():
    assert [cifar_results.direction(x, "higher", "lower", "level") for x in (0.3, -0.3, 0.0)] == \
        ["higher", "lower", "level"]
    with pytest.raises(ValueError, match="needs a number"):
        cifar_results.direction(None, "up", "down")
    a = {s: rec("A0", s, 0.50) for s in range(4)}
    b = {s: rec("A1", s, 0.50 + (0.02 if s else 0.005)) for s in range(4)}  # 4 wins, an interval above zero
    acc = lambda h: 100 * h["test_acc"]  # noqa: E731
    ahead = evidence.paired(a, b, acc)
    behind = evidence.paired(b, a, acc)
    assert cifar_results.lead_text(ahead, "A1", "A0").startswith("A1 is ahead of A0 by 1.62 pp (95% interval ")
    assert cifar_results.lead_text(ahead, "A1", "A0").endswith("ahead on 4 of 4 paired seeds")
    assert cifar_results.lead_text(behind, "A0", "A1").startswith("A0 is behind A1 by 1.62 pp")
    assert cifar_results.lead_text(behind, "A0", "A1").endswith("behind on 4 of 4 paired seeds")
    # A metric where lower is better (steps): a positive difference is a loss on each seed.
    slow = evidence.paired({0: 1, 1: 1}, {0: 3, 1: 5}, float, higher_is_better=False, unit="steps")
    # its interval holds zero: no direction word, only the seeds on each side
    assert cifar_results.lead_text(slow, "b", "a", "later than", "sooner than") == \
        "b and a not told apart: a mean gap of 3.00 steps (95% interval -9.71 to +15.71), b later on 2 of 2 paired seeds"
    sure = evidence.paired({0: 1, 1: 1, 2: 1}, {0: 3, 1: 3.2, 2: 2.9}, float, higher_is_better=False, unit="steps")
    assert cifar_results.lead_text(sure, "b", "a", "later than", "sooner than").startswith(
        "b is later than a by 2.03 steps")
    with pytest.raises(ValueError, match="no paired seed"):
        cifar_results.lead_text(evidence.paired({}, {}, float), "b", "a")

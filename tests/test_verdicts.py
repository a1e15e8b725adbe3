"""The verdict table is computed from results files: its numbers and words follow the runs."""

from __future__ import annotations

import json

import pytest

from stiefel_mini import verdicts


def test_paired_uses_only_common_seeds_and_direction():
    runs = [{"arm": "a", "seed": s, "v": 1.0} for s in range(4)] + [
        {"arm": "b", "seed": s, "v": 1.0 + d} for s, d in [(0, 0.5), (1, 0.4), (2, -0.1)]]
    c = verdicts.paired(runs, "a", "b", lambda r: r["v"])
    assert c["n"] == 3 and c["wins"] == 2 and c["losses"] == 1
    assert c["mean"] == pytest.approx(0.8 / 3)
    lower = verdicts.paired(runs, "a", "b", lambda r: r["v"], higher_is_better=False)
    assert lower["wins"] == 1 and lower["losses"] == 2
    assert verdicts.paired(runs, "a", "missing", lambda r: r["v"]) is None


def _cifar_file(path, n_train, deltas, patch=8):
    runs = []
    for seed, d in enumerate(deltas):
        for arm, acc in (("A0", 0.40), ("A1", 0.40 + d), ("A3", 0.40 + d), ("A4", 0.40 + d),
                         ("A5", 0.40), ("A7", 0.40 + d), ("A0'", 0.40)):
            runs.append({"arm": arm, "seed": seed, "train_fraction": 0.1, "n_train": n_train,
                         "test_acc": acc + 0.001 * seed * (arm == "A5"), "qk_step_mean": 1.0 if arm != "A1" else 0.02,
                         "qk_drift": 0.01})
    settings = {"patch_size": patch, "d_model": 96, "depth": 3, "epochs": 6, "lr": 1e-3}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"settings": settings, "runs": runs}))


def _verdict(rows, start):
    return next(r for r in rows if r["claim"].startswith(start))


def test_verdicts_follow_the_results(tmp_path):
    _cifar_file(tmp_path / "results/cifar/cpu.json", 5000, [-0.010, -0.012, -0.011])
    rows = verdicts.claim_verdicts(tmp_path)
    acc = _verdict(rows, "+8.98")
    # 3/3 losses: the t interval excludes 0, but an exact sign test at n = 3 cannot go below p = 0.25
    assert acc["verdict"].startswith("Not reproduced: no difference resolved in 1 regimes")
    assert "smallest possible p is 0.25" in acc["verdict"]
    assert "A1 − A0: -1.10 pp" in acc["evidence"][0][1] and "resolved)" not in acc["evidence"][0][1]
    assert "patch 4" in acc["not_tested"] and "12 paired seeds (here 3)" in acc["not_tested"]
    assert "50x" in _verdict(rows, "The Q/K steps")["verdict"]
    assert _verdict(rows, "Grokking")["verdict"] == "not measured"
    assert "20,000 epochs" in _verdict(rows, "Grokking")["not_tested"]

    # new results at the paper's scale, where StiefelAdam wins: the words change with the numbers
    _cifar_file(tmp_path / "results/cifar/cpu.json", 50_000, [0.09, 0.08, 0.10] * 4, patch=4)
    rows = verdicts.claim_verdicts(tmp_path)
    acc = _verdict(rows, "+8.98")
    assert acc["verdict"].startswith("Partly supported: StiefelAdam above AdamW in 1 of 1")
    assert acc["not_tested"] == ""


def test_grokking_verdict_and_html(tmp_path):
    runs = []
    for seed in range(5):
        for arm, s95 in (("adamw", 1000), ("stiefel", 700), ("frozen", 650)):
            runs.append({"arm": arm, "seed": seed, "metrics": {"steps_to_val95": s95 + seed, "final_val_acc": 1.0}})
    cfg = {"p": 59, "train_frac": 0.3, "steps": 1800, "lr": 0.01, "weight_decay": 1.0}
    (tmp_path / "results/grokking").mkdir(parents=True)
    (tmp_path / "results/grokking/cpu.json").write_text(json.dumps({"base_config": cfg, "runs": runs}))
    rows = verdicts.claim_verdicts(tmp_path)
    g = _verdict(rows, "Grokking")
    assert g["verdict"] == ("Endpoint (fixed logit scale, 1,800 steps): final validation accuracy stiefel − adamw "
                            "+0.0 pp, higher on 0, lower on 0 of 5 seeds (not resolved). "
                            "Groks sooner than AdamW on 5/5 seeds (not resolved), but so do frozen random frames")
    assert "wins 5/5 (sign p = 0.062, Holm p = " in g["evidence"][0][1]
    table = verdicts.verdict_table_html(rows)
    assert table.count("<tr>") == len(rows) + 1 and "href='grokking.html#verdict'" in table
    box = verdicts.verdict_box_html(rows, "grokking")
    assert "Groks sooner" in box and "Not tested: 20,000 epochs" in box
    with pytest.raises(ValueError, match="no verdict links to chapter"):
        verdicts.verdict_box_html(rows, "intro")


def test_committed_results_give_every_claim_a_verdict():
    rows = verdicts.claim_verdicts()  # the book's call: the committed results files
    assert len(rows) == 7 and all(r["verdict"] and r["verdict"] != "not measured" for r in rows)


def test_holm_across_the_table_and_censored_pairs(tmp_path):
    """Twelve seeds resolve a difference only while the family is small enough for Holm to pass it;
    a run that never groks counts by its sign and leaves the mean undefined."""
    runs = []
    for seed in range(12):
        for arm, s95 in (("adamw", None if seed == 0 else 1000), ("stiefel", 700), ("frozen", 700 + seed)):
            runs.append({"arm": arm, "seed": seed, "metrics": {"steps_to_val95": s95, "final_val_acc": 1.0}})
    cfg = {"p": 59, "train_frac": 0.3, "steps": 1800, "lr": 0.01, "weight_decay": 1.0}
    (tmp_path / "results/grokking").mkdir(parents=True)
    (tmp_path / "results/grokking/cpu.json").write_text(json.dumps({"base_config": cfg, "runs": runs}))
    g = _verdict(verdicts.claim_verdicts(tmp_path), "Grokking")
    assert g["verdict"].endswith(". Groks sooner than AdamW on 12/12 seeds")  # resolved: no "(not resolved)"
    assert "1 of 12 pairs censored (never reached), no mean" in g["evidence"][0][1]
    assert "resolved)" in g["evidence"][0][1]

    c = [verdicts.paired(runs, "adamw", "stiefel", lambda r: r["metrics"]["steps_to_val95"] or float("inf"),
                         higher_is_better=False) for _ in range(2)]
    verdicts.correct(c + [{"p_sign": 0.5}])
    assert c[0]["p_holm"] == pytest.approx(3 * 2.0 ** -11) and c[0]["resolved"]
    verdicts.correct(c * 200)  # a family of 400 equal p-values: none survives
    assert not c[0]["resolved"]


def test_round2_cifar_files_enter_with_their_frame_lr_and_drift(tmp_path):
    """Round-2 files (one setting per arm) add regimes; the words follow how far the frames moved."""
    _cifar_file(tmp_path / "results/cifar/cpu.json", 5000, [-0.010, -0.012, -0.011])
    runs = []
    for seed in range(5):
        for arm, acc, drift in (("A0", 0.60, 0.1), ("A1", 0.61, 0.3), ("A3", 0.55, 0.0),
                                ("stiefel_canonical", 0.61, 0.3)):
            runs.append({"arm": arm, "seed": seed, "train_fraction": 1.0, "n_train": 50_000, "test_acc": acc,
                         "qk_step_mean": 1.0 if arm == "A0" else 0.5, "qk_drift": drift})
    settings = {"patch_size": 8, "d_model": 96, "depth": 3, "epochs": 6, "steps": 2000, "lr": 1e-3,
                "frame_lr": 0.1}
    (tmp_path / "results/cifar/r2_scaling.json").write_text(json.dumps({"settings": settings, "runs": runs}))
    rows = verdicts.claim_verdicts(tmp_path)
    acc = _verdict(rows, "+8.98")
    assert any("50,000 train images, 2,000 steps, lr 0.001, frame lr 0.1, 5 seeds" in reg for reg, _ in acc["evidence"])
    assert "all 50,000 training images" not in acc["not_tested"]
    freeze = _verdict(rows, "Freezing")["verdict"]
    assert freeze.startswith("StiefelAdam's frames drift up to 30% from their start") and "barely" not in freeze
    cause = _verdict(rows, "The gain comes")
    assert any("A1 − canonical projector: +0.00 pp" in t for _, t in cause["evidence"])
    assert "not tested with power (fewer than 6 seeds)" in cause["verdict"]
    assert _verdict(rows, "The Q/K steps")["verdict"].startswith("Measured 2-50x")


def test_grokking_verdict_reads_round_two_files(tmp_path):
    """Round 2's files pair stiefel_learned with adamw, each file's setting named in the verdict;
    a pair in which both runs never reached 95% ties and leaves the mean undefined."""
    cfg = {"p": 59, "train_frac": 0.3, "steps": 1800, "lr": 0.01, "weight_decay": 1.0}
    (tmp_path / "results/grokking").mkdir(parents=True)
    r1 = [{"arm": arm, "seed": s, "metrics": {"steps_to_val95": v + s, "final_val_acc": 1.0}}
          for s in range(5) for arm, v in (("adamw", 1000), ("stiefel", 700), ("frozen", 650))]
    r2 = [{"arm": arm, "seed": s, "metrics": {"steps_to_val95": v, "final_val_acc": 0.5}}
          for s in range(5) for arm, v in (("adamw", 1000 + s), ("stiefel_learned", None), ("frozen_learned", None))]
    (tmp_path / "results/grokking/cpu.json").write_text(json.dumps({"base_config": cfg, "runs": r1}))
    (tmp_path / "results/grokking/r2_short.json").write_text(
        json.dumps({"base_config": {**cfg, "logit_rms_init": 1.0}, "runs": r2}))
    g = _verdict(verdicts.claim_verdicts(tmp_path), "Grokking")
    # the endpoint of the longest run leads (a tie on length: the first file); 0.5 vs 1.0 on 5/5 seeds
    assert g["verdict"] == ("Endpoint (fixed logit scale, 1,800 steps): final validation accuracy stiefel − adamw "
                            "+0.0 pp, higher on 0, lower on 0 of 5 seeds (not resolved). "
                            "Groks sooner than AdamW on 5/5 seeds (not resolved), but so do frozen random frames "
                            "(fixed logit scale, 1,800 steps); later than AdamW on 5/5 seeds (not resolved) "
                            "(learned temperature, 1,800 steps)")
    long_cfg = {**cfg, "logit_rms_init": 1.0, "steps": 8000}
    (tmp_path / "results/grokking/r2_long.json").write_text(json.dumps({"base_config": long_cfg, "runs": [
        {**r, "metrics": {**r["metrics"], "final_val_acc": 0.5 if r["arm"] == "adamw" else 0.9 + 0.01 * r["seed"]}}
        for r in r2]}))
    g = _verdict(verdicts.claim_verdicts(tmp_path), "Grokking")
    assert g["verdict"].startswith("Endpoint (learned temperature, 8,000 steps): final validation accuracy "
                                   "stiefel_learned − adamw +42.0 pp, higher on 5, lower on 0 of 5 seeds (not resolved). ")
    r2_ev = [t for reg, t in g["evidence"] if "logit RMS 1" in reg]
    assert r2_ev[0].startswith("steps to 95% validation, stiefel_learned − adamw: 5 of 5 pairs censored")
    assert r2_ev[2].startswith("steps to 95%, stiefel_learned − never-trained frozen frames: 5 of 5 pairs censored")


def test_an_lr_sweep_counts_at_each_arms_best_lr(tmp_path):
    runs = []
    for seed in range(2):
        for lr, acc in ((1e-3, 0.40), (3e-3, 0.45), (1e-2, 0.30)):  # A0 best at 3e-3
            runs.append({"arm": "A0", "seed": seed, "lr": lr, "frame_lr": None, "test_acc": acc,
                         "qk_step_mean": 0.5, "qk_drift": 0.5})
        for flr, acc in ((0.01, 0.41), (1.0, 0.47 + 0.01 * seed)):  # A1 best at frame lr 1
            runs.append({"arm": "A1", "seed": seed, "lr": 1e-3, "frame_lr": flr, "test_acc": acc,
                         "qk_step_mean": 0.01 if flr < 0.1 else 1.0, "qk_drift": 0.1})
    for r in runs:
        r.update(train_fraction=0.3, n_train=15_000, max_logit_final=None, attn_entropy_final=None)
    settings = {"patch_size": 8, "d_model": 96, "depth": 3, "epochs": 10, "lr": 1e-3}
    (tmp_path / "results/cifar").mkdir(parents=True)
    (tmp_path / "results/cifar/r2_lr.json").write_text(json.dumps({"settings": settings, "runs": runs}))
    rows = verdicts.claim_verdicts(tmp_path)
    (regime, text), = _verdict(rows, "+8.98")["evidence"]
    # best against best: A1 at frame lr 1 (0.47, 0.48) against A0 at lr 3e-3 (0.45, 0.45)
    assert "lr 0.003, frame lr 1, 2 seeds, each arm at its own best lr" in regime
    assert text.startswith("A1 − A0: +2.50 pp") and "wins 2/2" in text
    (_, step), = _verdict(rows, "The Q/K steps")["evidence"]
    assert step.startswith("A0's step 0.5x A1's")

"""Tests of the grokking experiment: data, paired init, the last-position model, metrics, reproduction."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch

from stiefel_mini import evidence
from stiefel_mini.experiments import grokking as G
from stiefel_mini.experiments.config import ConfigError, parse_config
from stiefel_mini.experiments.records import config_from_dict, load_results, save_results
from stiefel_mini.geometry import orthogonality_error

RESULTS = Path(__file__).resolve().parents[2] / "results" / "grokking" / "cpu.json"

PROFILE = Path(__file__).resolve().parents[2] / "results" / "repro_profile.json"

# Reproduction tolerances, from the measured divergence profile (results/repro_profile.json, written
# by scripts/repro_profile.py; results/README.md has its table). With other CPU kernels forced here
# (ATEN_CPU_CAPABILITY=default / avx2 / avx512, MKL_ENABLE_INSTRUCTIONS=AVX2, MKL_CBWR=COMPATIBLE)
# the reproduction run's first 3 updates move by at most 9.1e-6 (relative; training loss and frame
# distance), while each real change (lr x 1.1, seed 1, the AdamW arm, frozen frames, the normal part
# kept in the frame rule's second moment, its bias correction dropped) moves one of them by at least
# 0.067: EARLY_RTOL sits a factor 10 above the first. Dropping the momentum's transport moves them by
# only 1.6e-5 here (the polar retraction removes the same normal part to first order); the CIFAR
# reproduction run catches it. Later the dynamics amplify rounding (the loss
# spreads by 3e-3 after 20 updates, 3e-2 after 100, where lr x 1.1 moves it by 0.18 and 0.07), so the
# stored 100-step runs are compared before any update (START_RTOL), after 20 updates (STEP20_RTOL,
# 10x the kernels' spread) and in accuracy at the start and at the profile's horizon (the kernels:
# <= 0.0045). Accuracies in between are not compared: while the training accuracy climbs (steps
# 20-40), a shift of the curve by a step moves it by several points (0.034 under
# ATEN_CPU_CAPABILITY=avx2 for r2_wd.json's decay-3 run).
EARLY_UPDATES, EARLY_RTOL = 3, 1e-4
START_RTOL = 1e-5
STEP20_RTOL = 3e-2
ACC_ATOL = 0.02
PROFILED_STEPS = 100


def _config(stored: dict) -> G.GrokkingConfig:
    return config_from_dict(G.GrokkingConfig, stored)


def _assert_reproduces(again: dict, stored: dict, label: str) -> None:
    """A stored history against a re-run, at every stored step up to the profile's horizon."""
    steps = [s for s in stored["step"] if s <= PROFILED_STEPS]
    assert steps, f"{label}: no stored evaluation within the first {PROFILED_STEPS} steps"
    for s in steps:
        i, j = stored["step"].index(s), again["step"].index(s)
        rtol = START_RTOL if s == 0 else STEP20_RTOL if s <= 20 else None
        for key in ("train_loss", "val_loss", "max_logit") if rtol is not None else ():
            assert math.isclose(again[key][j], stored[key][i], rel_tol=rtol), (label, key, s, again[key][j],
                                                                               stored[key][i])
        for key in ("train_acc", "val_acc") if s in (0, steps[-1]) else ():
            assert abs(again[key][j] - stored[key][i]) <= ACC_ATOL, (label, key, s)


@pytest.mark.parametrize("op", ["add", "sub", "div"])
def test_modular_table(op):
    p = 7
    x, y = G.modular_table(p, op)
    assert x.shape == ((p * p, 3) if op != "div" else (p * (p - 1), 3))
    assert (x[:, 2] == p).all()
    for (a, b, _), c in zip(x.tolist(), y.tolist()):
        if op == "add":
            assert c == (a + b) % p
        elif op == "sub":
            assert c == (a - b) % p
        else:
            assert (c * b) % p == a


def test_split_is_a_partition_fixed_by_seed():
    d0 = G.make_dataset(11, "add", 0.3, seed=0)
    d0b = G.make_dataset(11, "add", 0.3, seed=0)
    d1 = G.make_dataset(11, "add", 0.3, seed=1)
    assert len(d0["y_train"]) == round(0.3 * 121) and len(d0["y_val"]) == 121 - len(d0["y_train"])
    assert torch.equal(d0["x_train"], d0b["x_train"])
    assert not torch.equal(d0["x_train"], d1["x_train"])
    pairs = {tuple(r) for r in torch.cat([d0["x_train"], d0["x_val"]])[:, :2].tolist()}
    assert len(pairs) == 121  # train and val are disjoint and cover every equation


def _small(arm: str, seed: int = 0, **kw) -> G.GrokkingConfig:
    return G.GrokkingConfig(p=11, d_model=16, n_heads=2, d_mlp=32, arm=arm, seed=seed, progress=False,
                            **kw)


def test_paired_initialisation_across_arms():
    models = {arm: G.build_model(_small(arm)) for arm in G.ARM_NAMES}
    ref = dict(models["adamw"].named_parameters())
    for arm, model in models.items():
        for name, p in model.named_parameters():
            assert torch.equal(p, ref[name]), (arm, name)
    other = dict(G.build_model(_small("adamw", seed=1)).named_parameters())
    assert not torch.equal(other["embed.weight"], ref["embed.weight"])
    assert orthogonality_error(ref["attn.w_q"].detach()).max() < 1e-5


@pytest.mark.parametrize("arm", ["adamw", "stiefel"])
@pytest.mark.parametrize("logit_scale", ["fixed", "learned"])
def test_last_position_equals_full_model(arm, logit_scale):
    cfg = _small(arm, logit_scale=logit_scale)
    model = G.build_model(cfg)
    x = G.make_dataset(cfg.p, "add", 0.5, 0)["x_train"]
    torch.testing.assert_close(model(x), model.forward_full(x), rtol=1e-5, atol=1e-5)


def test_uniform_control_attends_uniformly():
    model = G.build_model(_small("uniform"))
    x = G.make_dataset(11, "add", 0.5, 0)["x_train"][:5]
    w = model.last_attention(x)
    torch.testing.assert_close(w, torch.full_like(w, 1 / 3))
    # The output does not depend on the Q/K frames at all.
    before = model(x)
    with torch.no_grad():
        model.attn.w_q.mul_(-3.0)
    torch.testing.assert_close(model(x), before)


def test_metrics_on_a_synthetic_history():
    steps = list(range(0, 100, 10))
    val = [0.0, 0.1, 0.2, 0.96, 0.99, 0.4, 0.97, 1.0, 1.0, 1.0]
    train = [0.0, 0.5, 0.99, 1, 1, 1, 1, 1, 1, 1]
    hist = {"step": steps, "val_acc": val, "train_acc": train, "dist_q": [0] * 10, "dist_k": [0] * 10,
            "orth_q": [0] * 10, "step_q": [0] * 10, "step_k": [0] * 10, "entropy": [[1.0, 0.5]] * 10}
    cfg = G.GrokkingConfig(steps=90, late_frac=0.25)
    m = G.metrics(hist, cfg)
    assert m["steps_to_val95"] == 30 and m["steps_to_val99"] == 40 and m["steps_to_train99"] == 20
    assert m["grok_delay"] == 20
    assert m["collapses"] == 1
    assert m["post_grok_share95"] == pytest.approx(6 / 7)
    assert m["late_share95"] == 1.0  # evaluations at steps >= 67.5: 70, 80, 90
    assert m["entropy_final"] == 0.75
    assert G.collapses([0.96, 0.3, 0.2, 0.96, 0.1]) == 2
    assert m["collapses10"] == 1 and m["first_collapse_step"] == 50
    assert m["steps_above95"] == 6 * cfg.eval_every and m["share_above95"] == pytest.approx(0.6)


def test_drops_count_ten_point_falls_after_first_reaching_95():
    assert G.drops([0.5, 0.9, 0.84]) == []  # never reached 95%
    assert G.drops([0.96, 0.87, 0.86]) == [2]  # 0.86 <= 0.96 - 0.10; counted once
    assert G.drops([0.95, 1.0, 0.91, 0.89, 0.99, 0.5, 0.6]) == [3, 5]  # the peak rises to 1.0 first
    assert G.drops([0.99, 0.9, 0.95, 0.85]) == [3]  # 0.9 is 9 points below 0.99: no collapse
    assert G.first_step([0, 1], [0.1, 0.2], 0.5) is None


def test_study_arms_share_initialisation_and_matched_temperature():
    cfg = G.PLANS["tiny"]
    models = {arm: G.build_model(dataclasses.replace(cfg, arm=arm)) for arm in G.STUDY_ARMS}
    ref = dict(models["adamw"].named_parameters())
    for arm, model in models.items():
        for name, p in model.named_parameters():
            if name != "attn.log_scale":
                assert torch.equal(p, ref[name]), (arm, name)
    x = G.make_dataset(cfg.p, cfg.op, cfg.train_frac, cfg.seed)["x_train"]
    for arm in ("stiefel_learned", "frozen_learned"):
        rms = G.last_logits(models[arm], x).pow(2).mean(dim=(0, 2)).sqrt()  # (H,)
        torch.testing.assert_close(rms, torch.full_like(rms, cfg.logit_rms_init))
    torch.testing.assert_close(models["stiefel_learned"].attn.log_scale, models["frozen_learned"].attn.log_scale)
    # QK-norm keeps its own gain; the fixed-scale AdamW arm's logits are far smaller.
    assert models["qknorm"].attn.scale()[0].item() == pytest.approx(math.sqrt(cfg.d_model // cfg.n_heads))
    assert G.last_logits(models["adamw"], x).pow(2).mean().sqrt() < 0.5 * cfg.logit_rms_init
    with pytest.raises(ValueError, match="learned"):
        G.match_logit_scale(models["adamw"], x, 1.0)


def test_run_logs_logits_norms_and_scale():
    h = G.run(dataclasses.replace(G.PLANS["tiny"], arm="stiefel_learned", steps=10))["history"]
    assert len(h["max_logit"]) == len(h["step"]) == len(h["weight_norm"]) == len(h["scale"])
    assert all(m >= r > 0 for m, r in zip(h["max_logit"], h["logit_rms"]))
    assert h["weight_norm"][0]["attn.w_q"] == pytest.approx(math.sqrt(G.PLANS["tiny"].d_model), rel=1e-5)
    assert h["scale"][-1] != h["scale"][0]  # the temperature is learned
    u = G.run(dataclasses.replace(G.PLANS["tiny"], arm="uniform", steps=5))["history"]
    assert u["max_logit"][0] is None


def test_subsample_keeps_first_and_last():
    hist = {"step": list(range(101)), "val_acc": list(range(101))}
    sub = G.subsample(hist, 10)
    assert sub["step"][0] == 0 and sub["step"][-1] == 100 and len(sub["step"]) <= 12


def test_run_records_history_and_frames_stay_on_manifold():
    out = G.run(_small("stiefel", steps=20, eval_every=5, lr=1e-2))
    h = out["history"]
    assert h["step"] == [0, 5, 10, 15, 20]
    assert max(h["orth_q"]) < 1e-4 and h["dist_q"][0] == 0 and h["dist_q"][-1] > 0
    assert all(len(e) == 2 for e in h["entropy"])
    frozen = G.run(_small("frozen", steps=10, eval_every=5))["history"]
    assert frozen["dist_q"] == [0.0, 0.0, 0.0] and frozen["step_k"] == [0.0, 0.0, 0.0]


def test_cli_overrides_are_type_checked():
    with pytest.raises(ConfigError, match="steps"):
        parse_config(G.GrokkingConfig, ["--steps", "many"])
    with pytest.raises(ConfigError, match="op"):
        parse_config(G.GrokkingConfig, ["--op", "mul"])
    with pytest.raises(ConfigError, match="unknown arm 'foo'"):
        G.main(["--arm", "foo"])
    with pytest.raises(ConfigError, match="seeds"):
        G.main(["sweep", "--seeds", "one"])


def test_cli_writes_results_with_provenance(tmp_path, capsys):
    out = tmp_path / "one.json"
    G.main(["--p", "7", "--d_model", "8", "--n_heads", "2", "--d_mlp", "8", "--steps", "4", "--eval_every", "2",
            "--arm", "stiefel", "--progress", "false", "--out", str(out)])
    assert "stiefel seed 0" in capsys.readouterr().out
    stored = load_results(out)
    assert stored["config"]["p"] == 7 and stored["history"]["step"] == [0, 2, 4]
    assert stored["provenance"]["versions"]["torch"] == torch.__version__


def test_sweep_writes_incrementally_and_resumes(tmp_path):
    torch.set_num_threads(2)  # the sweep's own setting, not the caller's, is what it records
    base = dataclasses.replace(_small("adamw", steps=6, eval_every=3), threads=1)
    scfg = G.SweepConfig(seeds=(0, 1), arms=("adamw", "uniform"), out=str(tmp_path / "r.json"),
                         repro_arm="adamw", repro_steps=3)
    payload = G.sweep(scfg, base, command="test")
    assert [(r["seed"], r["arm"]) for r in payload["runs"]] == [(0, "adamw"), (0, "uniform"),
                                                                 (1, "adamw"), (1, "uniform")]
    stored = load_results(scfg.out)
    assert stored["provenance"]["command"] == "test" and stored["repro"]["history"]["step"] == [0, 3]
    assert stored["provenance"]["torch_threads"] == 1
    again = G.sweep(dataclasses.replace(scfg, seeds=(0, 1, 2)), base, command="again")
    assert len(again["runs"]) == 6 and again["runs"][0] == stored["runs"][0]
    assert [p["command"] for p in again["provenance_previous"]] == ["test"]
    redo = G.sweep(dataclasses.replace(scfg, seeds=(0, 1, 2), redo_arms=("adamw",)), base, command="redo")
    assert [(r["seed"], r["arm"]) for r in redo["runs"][:3]] == [(0, "uniform"), (1, "uniform"),
                                                                  (2, "uniform")]
    assert len(redo["runs"]) == 6 and redo["repro"] is not None
    assert [p["command"] for p in redo["provenance_previous"]] == ["test", "again"]
    stored = load_results(scfg.out)
    assert (stored["runs"][1]["seed"], stored["runs"][1]["arm"]) == (1, "uniform")
    for r in stored["runs"]:  # whatever state this checkout is in
        r["git_dirty"] = False
    stored["runs"][1].update(git_dirty=True, marker="from an edited tree")
    save_results(scfg.out, stored)
    kept = G.sweep(dataclasses.replace(scfg, seeds=(0, 1, 2)), base, command="kept")
    assert [r.get("marker") for r in kept["runs"]].count("from an edited tree") == 1
    clean = G.sweep(dataclasses.replace(scfg, seeds=(0, 1, 2), redo_dirty=True), base, command="clean")
    assert len(clean["runs"]) == 6 and not any("marker" in r for r in clean["runs"])
    assert [(r["seed"], r["arm"]) for r in clean["runs"]][-1] == (1, "uniform")  # run again, in its turn


def test_weight_decay_plan_sweeps_decay_and_refuses_another_config(tmp_path):
    base = G.PLANS["tiny"]
    scfg = dataclasses.replace(G.SWEEPS["tiny"], seeds=(0,), arms=("adamw",), weight_decays=(0.1, 1.0),
                               out=str(tmp_path / "wd.json"))
    payload = G.sweep(scfg, dataclasses.replace(base, steps=6), command="wd")
    assert [(r["weight_decay"], r["arm"]) for r in payload["runs"]] == [(0.1, "adamw"), (1.0, "adamw")]
    assert payload["runs"][0]["metrics"] != payload["runs"][1]["metrics"]
    assert all("git_commit" in r and "git_dirty" in r for r in payload["runs"])
    assert set(G.runs_by_arm(payload, weight_decay=0.1)) == {"adamw"}
    with pytest.raises(ValueError, match="weight_decay"):
        G.runs_by_arm(payload)
    again = G.sweep(scfg, dataclasses.replace(base, steps=6), command="again")  # nothing left to run
    assert again["runs"] == load_results(scfg.out)["runs"]
    with pytest.raises(ValueError, match="other settings"):
        G.sweep(scfg, dataclasses.replace(base, steps=7))


def test_weight_decay_sweep_copies_runs_it_can_reuse(tmp_path):
    base = dataclasses.replace(G.PLANS["tiny"], steps=6)
    plan = dataclasses.replace(G.SWEEPS["tiny"], arms=("adamw", "stiefel_learned"), seeds=(0,))
    src = G.sweep(dataclasses.replace(plan, arms=("adamw", "frozen_learned"), seeds=(0, 1),
                                      out=str(tmp_path / "long.json")), base, command="long")
    wd_plan = dataclasses.replace(plan, weight_decays=(0.1, base.weight_decay), out=str(tmp_path / "wd.json"),
                                  reuse=str(tmp_path / "long.json"))
    got = G.sweep(wd_plan, base, command="wd")
    keys = [(r["arm"], r["seed"], r["weight_decay"], r.get("copied_from")) for r in got["runs"]]
    # seed 1 and frozen_learned are not this sweep's; stiefel_learned at the base decay is not in the file
    assert keys == [("adamw", 0, 0.1, None), ("stiefel_learned", 0, 0.1, None),
                    ("adamw", 0, base.weight_decay, wd_plan.reuse), ("stiefel_learned", 0, base.weight_decay, None)]
    copied, ran = got["runs"][2], got["runs"][3]
    assert copied["metrics"] == src["runs"][0]["metrics"] and copied["history"] == src["runs"][0]["history"]
    # the copy is the run this sweep would have made
    fresh = G.run(dataclasses.replace(base, arm="adamw", seed=0, weight_decay=base.weight_decay))
    assert fresh["metrics"] == copied["metrics"]
    assert ran["metrics"] != got["runs"][1]["metrics"]  # the decay reached the run
    with pytest.raises(ValueError, match=r"another base config \(fields \['steps'\]\)"):
        G.reusable_runs(wd_plan, dataclasses.replace(base, steps=7))


def test_merge_results_of_parallel_sweeps(tmp_path):
    base = dataclasses.replace(G.PLANS["tiny"], steps=6)
    plan = dataclasses.replace(G.SWEEPS["tiny"], arms=("adamw", "stiefel_learned"))
    a = G.sweep(dataclasses.replace(plan, seeds=(0,), out=str(tmp_path / "a.json")), base, command="a")
    b = G.sweep(dataclasses.replace(plan, seeds=(1,), out=str(tmp_path / "b.json")), base, command="b")
    merged = G.merge_results([a, b])
    assert [(r["seed"], r["arm"]) for r in merged["runs"]] == [(0, "adamw"), (0, "stiefel_learned"),
                                                               (1, "adamw"), (1, "stiefel_learned")]
    assert merged["sweep"]["seeds"] == [0, 1] and [p["command"] for p in merged["provenance_merged"]] == ["a", "b"]
    rows = evidence.grokking_rows(lambda a: G.seed_runs(merged, a), [("stiefel_learned", "adamw")], ["final_val_acc"])
    assert rows[0]["n"] == 2 and rows[0]["seeds"] == [0, 1]
    with pytest.raises(ValueError, match="more than one file"):
        G.merge_results([a, a])
    other = G.sweep(dataclasses.replace(plan, seeds=(1,), out=str(tmp_path / "c.json")),
                    dataclasses.replace(base, steps=5))
    with pytest.raises(ValueError, match="different base configs"):
        G.merge_results([a, other])


def test_cli_plan(tmp_path, capsys):
    out = tmp_path / "plan.json"
    G.main(["sweep", "--plan", "tiny", "--seeds", "0", "--arms", "adamw", "--steps", "4", "--out", str(out)])
    stored = load_results(out)
    assert stored["sweep"]["repro_arm"] == "stiefel_learned" and stored["base_config"]["logit_rms_init"] == 1.0
    with pytest.raises(ConfigError, match="--plan"):
        G.main(["sweep", "--plan", "nope"])


def test_first_updates_reproduce_the_profiled_run():
    """The profile's reference run (this repository's reproduction setting), update by update."""
    prof = next(p for p in load_results(PROFILE)["profiles"] if p["task"] == "grokking")
    ref = prof["runs"]["kernel:native"]
    cfg = dataclasses.replace(_config(ref["config"]), steps=EARLY_UPDATES)
    again = G.run(cfg)["history"]
    assert again["step"] == ref["step"][:EARLY_UPDATES + 1]
    for key in ("train_loss", "dist_q"):
        torch.testing.assert_close(torch.tensor(again[key]), torch.tensor(ref[key][:EARLY_UPDATES + 1]),
                                   rtol=EARLY_RTOL, atol=0.0, msg=key)


def test_reproduces_the_studies_results():
    """Re-run the short repro run each committed study file stores first (so partial files have it)."""
    for path in sorted(RESULTS.parent.glob("r2_*.json")):
        repro = load_results(path)["repro"]
        cfg = dataclasses.replace(_config(repro["config"]), progress=False)
        _assert_reproduces(G.run(cfg)["history"], repro["history"], path.name)


@pytest.mark.skipif(not RESULTS.exists(), reason="no committed grokking results")
def test_reproduces_committed_results():
    """Re-run the stored repro run of the cpu sweep (its first PROFILED_STEPS steps: the lr is
    constant, so they are those of the stored run); it must match the stored record and the committed
    full-length run of the same arm and seed wherever they share an evaluation."""
    results = load_results(RESULTS)
    repro = results["repro"]
    cfg = dataclasses.replace(_config(repro["config"]), progress=False, steps=PROFILED_STEPS)
    again = G.run(cfg)["history"]
    _assert_reproduces(again, repro["history"], "repro")
    full = next(r for r in results["runs"] if r["arm"] == cfg.arm and r["seed"] == cfg.seed)
    _assert_reproduces(again, full["history"], "committed run")


def test_evidence_pairs_grokking_runs_on_their_common_seeds_with_censoring():
    def run(arm, seed, s95, acc):
        return {"arm": arm, "seed": seed, "weight_decay": None, "metrics": {"steps_to_val95": s95, "final_val_acc": acc}}

    # adamw and stiefel_learned on 5 seeds, uniform on 3 (a sweep still filling its file).
    runs = [run("adamw", s, v, 0.9) for s, v in enumerate((400, 500, None, 600, 700))]
    runs += [run("stiefel_learned", s, v, 0.95) for s, v in enumerate((200, 300, None, 500, 600))]
    runs += [run("uniform", s, None, 0.5) for s in range(3)]
    results = {"sweep": {"arms": ["adamw", "stiefel_learned", "uniform"]}, "runs": runs}
    steps = lambda r: r["metrics"]["steps_to_val95"]  # noqa: E731
    base = G.seed_runs(results, "adamw")
    s95 = evidence.paired(base, G.seed_runs(results, "stiefel_learned"), steps, higher_is_better=False,
                          censored=True, unit="steps")
    assert s95["seeds"] == [0, 1, 2, 3, 4] and s95["ties"] == 1 and s95["n_test"] == 4
    assert s95["wins"] == 4 and s95["losses"] == 0 and s95["p"] == 0.125 and s95["high"] == 0
    assert s95["mean"] is None and s95["n_censored"] == 1  # both censored: a tie for the test, no mean
    u95 = evidence.paired(base, G.seed_runs(results, "uniform"), steps, higher_is_better=False, censored=True)
    assert u95["seeds"] == [0, 1, 2] and u95["n_censored"] == 3 and u95["mean"] is None
    assert (u95["wins"], u95["losses"], u95["ties"]) == (0, 2, 1)
    acc = evidence.paired(base, G.seed_runs(results, "stiefel_learned"), lambda r: 100 * r["metrics"]["final_val_acc"])
    assert acc["mean"] == pytest.approx(5.0) and acc["wins"] == 5 and acc["p"] == 0.0625


def test_seed_runs_keeps_every_seed_of_an_arm_and_picks_the_decay():
    runs = [{"arm": "adamw", "seed": s, "weight_decay": wd, "metrics": {}} for s in (2, 0) for wd in (0.1, 1.0)]
    results = {"sweep": {"arms": ["adamw"], "weight_decays": [0.1, 1.0]}, "runs": runs}
    picked = G.seed_runs(results, "adamw", weight_decay=0.1)
    assert list(picked) == [0, 2] and all(r["weight_decay"] == 0.1 for r in picked.values())
    with pytest.raises(ValueError, match="weight_decay"):
        G.seed_runs(results, "adamw")
    assert G.seed_runs(results, "qknorm", weight_decay=1.0) == {}

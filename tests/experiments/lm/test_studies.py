"""The declared language-model studies: the first three as their own code planned them, the fourth as stored.

The first three studies were planned by modules of their own until commit af0ff4e;
``scripts/lm_plan_check.py record`` ran that code on every prefix of each committed results file
(``tests/data/lm_schedules_af0ff4e.json.gz``), and the plans here must give the same schedule at
each. Their stored plans, and the fourth study's (its results file is written from another
worktree while this code changes), must equal their declarations, since a resumed study refuses a
file whose stored plan differs.
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

from stiefel_mini.evidence.claims import FAMILY_ARMS, LM2_CLAIMS
from stiefel_mini.experiments.lm import results as lm_results
from stiefel_mini.experiments.lm.plans import RECIPES, declared, plan
from stiefel_mini.experiments.lm.studies import ROUND1, ROUND2, ROUND3, ROUND4, STUDIES, study

ROOT = Path(__file__).resolve().parents[3]
RESULTS = ROOT / "results" / "lm"
ROUND4_PLAN = ROOT / "tests" / "data" / "lm_round4_plan.json"
"""The fourth study's plan as its results file stored it when its first runs started (at a2f5f71)."""


def _check_script():
    spec = importlib.util.spec_from_file_location("lm_plan_check", ROOT / "scripts" / "lm_plan_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _drive(s, bpb, phases=("sweep", "paired", "seeds", "check", "long"), limit=2000):
    """Run the plan ``s`` to its end (or ``limit`` runs), one ready run of ``phases`` at a time, each
    run's validation bits per byte ``bpb(point)``."""
    runs = []
    for _ in range(limit):
        ready = [p for p in plan(s, runs).ready if p["phase"] in phases]
        if not ready:
            return runs
        runs.append({**ready[0], "val_bpb": bpb(ready[0])})
    raise AssertionError("the plan did not end")


def _score(p):
    """An invented landscape of the second study: each arm's best inside its grid; adamw_qknorm and
    muon the better arms of their families."""
    arm = p["arm"]
    base = {"adamw": 1.70, "adamw_qknorm": 1.66, "stiefel": 1.64, "muon": 1.50, "muon_qknorm": 1.52,
            "stiefel_muon": 1.49}[arm]
    lr = {"adamw": ("lr", 2e-3), "adamw_qknorm": ("lr", 4e-3), "stiefel": ("frame_lr", 0.1),
          "muon": ("muon_lr", 0.01), "muon_qknorm": ("muon_lr", 0.01), "stiefel_muon": ("frame_lr", 0.01)}[arm]
    penalty = abs(math.log(p[lr[0]] / lr[1])) * 0.01
    penalty += 0.002 * (p.get("warmup_frac") == 0.25) + 0.001 * (p.get("max_step") == 1.0)
    penalty += 0.003 * bool(p.get("per_head"))
    return base + penalty + 1e-4 * (p["seed"] % 3) - 0.01 * (p["steps"] > 800)


# ---------------------------------------------------------------------------------------------------
# Unchanged: the stored plans and every schedule of the committed runs
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["round1", "round2", "round3", "round4"])
def test_each_declaration_is_the_plan_its_results_file_stores(name):
    s = study(name)
    path = ROOT / s.out
    if path.exists():
        assert declared(s) == json.loads(path.read_text())["plan"]
    if name == "round4":
        assert declared(s) == json.loads(ROUND4_PLAN.read_text())


@pytest.mark.parametrize("name", ["round1", "round2", "round3"])
def test_every_prefix_of_the_committed_runs_is_scheduled_as_the_old_planner_did(name):
    check = _check_script()
    runs = json.loads((ROOT / study(name).out).read_text())["runs"]
    old = check.load_schedules()[name]
    assert len(old) == len(runs) + 1, "the recorded schedules are of another copy of the results file"
    new = [check._state(plan(study(name), runs[:k])) for k in range(len(runs) + 1)]
    assert check.schedule_differences(old, new) == []


def test_the_schedule_check_can_fail():
    check = _check_script()
    old = check.load_schedules()["round2"]
    runs = json.loads((ROOT / ROUND2.out).read_text())["runs"]
    moved = [dict(s) for s in old[:60]]
    moved[59] = {**moved[59], "ready": moved[59]["ready"][::-1]}  # the same points in another order
    new = [check._state(plan(ROUND2, runs[:k])) for k in range(60)]
    assert check.schedule_differences(moved, new) == ["59: ready"]


# ---------------------------------------------------------------------------------------------------
# The first study
# ---------------------------------------------------------------------------------------------------


def test_the_first_study_starts_with_the_arms_that_take_nothing_and_records_no_steps():
    state = plan(ROUND1, [])
    assert sorted({p["arm"] for p in state.ready}) == ["adamw", "frozen"] and len(state.ready) == 8
    assert state.remaining == 5 * (4 + 8) and not state.best  # 5 arms x (4 values x 1 sweep seed + 8 seeds)
    assert set(state.ready[0]) == {"arm", "seed", "phase", "lr", "frame_lr", "muon_lr"}


def test_the_first_study_settles_with_every_arm_at_its_best_on_its_seeds():
    runs = _drive(ROUND1, lambda p: abs(math.log((p["frame_lr"] or p["muon_lr"] or p["lr"]) / 0.01)))
    state = plan(ROUND1, runs)
    assert state.remaining == 0 and set(state.best) == {a for a, _ in ROUND1.arms}
    seeds = [r for r in runs if r["phase"] == "seeds"]
    assert len(seeds) == 5 * 8 and {r["seed"] for r in seeds} == set(range(8))
    assert state.best["muon_stiefel"]["muon_lr"] == state.best["muon"]["muon_lr"] == 0.01
    # adamw's best 0.01 sits above its grid (1e-3 ... 8e-3): the grid grows once, to 0.016
    assert sorted({r["lr"] for r in runs if r["arm"] == "adamw"}) == [1e-3, 2e-3, 4e-3, 8e-3, 0.016]


# ---------------------------------------------------------------------------------------------------
# The second study
# ---------------------------------------------------------------------------------------------------


def test_the_second_study_makes_each_choice_and_ends():
    state = plan(ROUND2, [])
    assert {p["arm"] for p in state.ready} == {"adamw"} and len(state.ready) == 12  # 3 lr x 2 warmups x 2 seeds
    assert state.remaining == 60 + 96 + 2 * (3 + 8) * 3  # sweeps, paired runs, two long arms' checks and runs
    runs = _drive(ROUND2, _score)
    state = plan(ROUND2, runs)
    assert not state.ready and state.remaining == 0
    assert state.best["adamw"] == {"lr": 2e-3, "warmup_frac": 0.05}
    assert state.best["stiefel"] == {"lr": 2e-3, "warmup_frac": 0.05, "frame_lr": 0.1, "max_step": 0.3}
    assert state.best["muon"]["per_head"] is False and state.best["muon_qknorm"]["per_head"] is False
    assert state.better == {"adamw": "adamw_qknorm", "muon": "muon"}
    longs = [r for r in runs if r["phase"] == "long"]
    assert {r["arm"] for r in longs} == {"stiefel", "adamw_qknorm"} and len(longs) == 16
    assert sorted(r["lr"] for r in runs if r["phase"] == "check" and r["arm"] == "adamw_qknorm") == [2e-3, 4e-3, 8e-3]
    assert len([r for r in runs if r["phase"] == "paired"]) == 16 * len(ROUND2.arms)
    assert len({ROUND2.key(r) for r in runs}) == len(runs)  # no run twice


def test_the_second_study_puts_the_primaries_first_and_each_long_arm_whole():
    runs = _drive(ROUND2, _score, phases=("sweep",))
    ready = plan(ROUND2, runs).ready
    assert [p["arm"] for p in ready[:4]] == ["stiefel", "adamw_qknorm", "stiefel_muon", "muon"]
    assert {p["seed"] for p in ready[:6]} == {0}
    runs = _drive(ROUND2, _score, phases=("sweep", "paired", "check"))
    tail = [(p["arm"], p["phase"]) for p in plan(ROUND2, runs).ready]
    assert tail == [("stiefel", "long")] * 8 + [("adamw_qknorm", "long")] * 8  # arm by arm, not seed by seed


def test_the_second_studys_primaries_name_its_family_choice():
    primaries = [c for cl in LM2_CLAIMS for fam in cl.primaries for c in fam]
    assert [(c.a, c.b, dict(c.select)["phase"], len(c.seeds)) for c in primaries] == [
        ("adamw_family", "stiefel", "paired", 16), ("muon_family", "stiefel_muon", "paired", 16),
        ("adamw_family", "stiefel", "long", 8), ("adamw_family", "stiefel_scale", "paired", 16)]
    assert primaries[-1].files == ("lm/round2.json", "lm/round3.json")  # round 3's runs pair with round 2's
    assert all(c.metric == "test_bpb" and not c.higher_is_better and c.chosen_on == ROUND2.sweep_seeds
               for c in primaries)
    assert set(FAMILY_ARMS.values()) == {name for name, _ in ROUND2.families}
    assert set(ROUND2.paired_seeds) == set(range(16)) and set(ROUND2.long_seeds) == set(range(8))


def test_the_long_runs_read_the_training_addresses_fewer_than_twice():
    pytest.importorskip("transformers")
    from stiefel_mini.experiments.config import replace
    from stiefel_mini.experiments.lm.config import PRESETS

    short = lm_results.setup_facts(PRESETS[ROUND2.preset])
    long = lm_results.setup_facts(replace(PRESETS[ROUND2.preset], steps=ROUND2.long_steps))
    assert short["steps"] == ROUND2.steps
    assert long["passes"] == pytest.approx(3 * short["passes"]) and 1.0 < long["passes"] < 2.0


# ---------------------------------------------------------------------------------------------------
# The third study
# ---------------------------------------------------------------------------------------------------


def _scale(best):
    return lambda p: 1.6 + 0.01 * abs(math.log(p["scale_lr"] / best[p["arm"]])) + 1e-4 * p["seed"]


def test_the_third_study_runs_each_arms_sweep_then_its_paired_seeds_arm_by_arm():
    empty = plan(ROUND3, [])
    assert [p["arm"] for p in empty.ready] == ["stiefel_scale"] * 8 + ["stiefel_muon_scale"] * 8
    assert empty.remaining == 2 * (8 + 16)
    runs = _drive(ROUND3, _scale({"stiefel_scale": 0.1, "stiefel_muon_scale": 0.3}), phases=("sweep",))
    ready = plan(ROUND3, runs).ready
    assert [(p["arm"], p["phase"]) for p in ready] == [("stiefel_scale", "paired")] * 16 + \
        [("stiefel_muon_scale", "paired")] * 16
    runs = _drive(ROUND3, _scale({"stiefel_scale": 0.1, "stiefel_muon_scale": 0.3}))
    state = plan(ROUND3, runs)
    assert not state.ready and state.remaining == 0
    assert state.best["stiefel_scale"]["scale_lr"] == 0.1 and state.best["stiefel_muon_scale"]["scale_lr"] == 0.3
    assert all(r["frame_lr"] == 0.3 and r["max_step"] == 0.3 and r["muon_lr"] is None
               for r in runs if r["arm"] == "stiefel_scale")


def test_a_best_at_the_top_of_the_third_studys_grid_grows_it():
    runs = _drive(ROUND3, _scale({"stiefel_scale": 5.0, "stiefel_muon_scale": 0.1}))
    swept = sorted({r["scale_lr"] for r in runs if r["arm"] == "stiefel_scale" and r["phase"] == "sweep"})
    assert swept == [0.03, 0.1, 0.3, 1.0, 3.33333, 11.1111]  # grown twice past 1.0, the best 3.33 inside
    assert plan(ROUND3, runs).best["stiefel_scale"]["scale_lr"] == 3.33333


def test_the_third_studys_fixed_settings_are_the_second_studys_bests_on_its_committed_runs():
    best = plan(ROUND2, lm_results.load_round2()["runs"]).best
    for t, base in zip(ROUND3.tunings, ("stiefel", "stiefel_muon")):
        assert dict(t.start) == best[base], t.arm
        assert set(ROUND3.uses(t.arm)) == set(ROUND2.uses(base)) | {"scale_lr"}


# ---------------------------------------------------------------------------------------------------
# The fourth study
# ---------------------------------------------------------------------------------------------------


def test_the_fourth_study_tunes_every_arm_and_runs_its_decisive_arms_on_unused_seeds():
    assert {a for a, _ in ROUND4.arms} == {r for r in RECIPES if r[:3] not in ("r1_", "r2_", "r3_")}
    used = set()
    for name in ("study.json", "round2.json", "round3.json"):
        used |= {int(r["seed"]) for r in json.loads((RESULTS / name).read_text())["runs"]}
    assert not used & set(ROUND4.long_seeds) and len(ROUND4.long_seeds) == 8
    assert ROUND4.long_steps == 3 * ROUND4.steps and ROUND4.check_seed in ROUND4.sweep_seeds
    assert set(ROUND4.long_arms) == {"stiefel", "stiefel_muon", "all_stiefel", "family:adamw", "family:muon", "muon"}
    # every arm tunes what it was never tuned for: the Stiefel arms their scale's lr, AdamW its warm-up to 0.5
    swept = {t.arm: {f for stage in t.stages for f, _ in stage} for t in ROUND4.tunings}
    assert {"scale_lr", "lr", "warmup_frac", "frame_lr"} <= swept["stiefel"]
    assert {"scale_lr", "muon_lr", "frame_lr"} <= swept["stiefel_muon"]
    assert max(v for f, vs in ROUND4.tuning("adamw").stages[0] for v in vs) >= 0.5
    assert all(0.0 in vs for t in ROUND4.tunings if t.arm.startswith("muon") for stage in t.stages
               for f, vs in stage if f == "warmup_frac")


def test_its_first_runs_are_the_sweeps_of_the_arms_that_take_nothing():
    ready = plan(ROUND4, []).ready
    assert {p["arm"] for p in ready} == {"adamw", "stiefel"} and all(p["phase"] == "sweep" for p in ready)
    assert all(p["seed"] in ROUND4.sweep_seeds and p["steps"] == 800 for p in ready)


def test_a_study_is_found_by_name():
    assert study("round4") is ROUND4 and STUDIES["round4"] is ROUND4
    assert [s.name for s in STUDIES.values()] == ["round1", "round2", "round3", "round4"]
    with pytest.raises(ValueError, match="declared: "):
        study("round9")

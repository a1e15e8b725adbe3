"""The second language-model study's plan: the order of its phases, each choice it makes, its growth."""

from __future__ import annotations

import math

import pytest

from stiefel_mini.evidence.claims import FAMILY_ARMS, LM2_CLAIMS
from stiefel_mini.experiments.lm.round2 import (ARMS2, FAMILIES, ROUND2, ArmGrid, Round2, better_arm, budget, plan2,
                                                point_key)

pytestmark = pytest.mark.quick


def _finish(points, bpb):
    return [{**p, "val_bpb": bpb(p)} for p in points]


def _drive(study, bpb, phases=("sweep", "paired", "check", "long"), limit=2000):
    """Run the plan to its end (or ``limit`` runs), finishing every ready run of ``phases``."""
    runs = []
    for _ in range(limit):
        ready = [p for p in plan2(study, runs).ready if p["phase"] in phases]
        if not ready:
            return runs
        runs += _finish(ready[:1], bpb)
    raise AssertionError("the plan did not end")


def _score(p):
    """An invented landscape: each arm's best inside its grid; adamw_qknorm and muon the better ones."""
    arm = p["arm"]
    base = {"adamw": 1.70, "adamw_qknorm": 1.66, "stiefel": 1.64, "muon": 1.50, "muon_qknorm": 1.52,
            "stiefel_muon": 1.49}[arm]
    lr = {"adamw": ("lr", 2e-3), "adamw_qknorm": ("lr", 4e-3), "stiefel": ("frame_lr", 0.1),
          "muon": ("muon_lr", 0.01), "muon_qknorm": ("muon_lr", 0.01), "stiefel_muon": ("frame_lr", 0.01)}[arm]
    penalty = abs(math.log(p[lr[0]] / lr[1])) * 0.01
    penalty += 0.002 * (p.get("warmup_frac") == 0.25) + 0.001 * (p.get("max_step") == 1.0)
    penalty += 0.003 * bool(p.get("per_head"))
    return base + penalty + 1e-4 * (p["seed"] % 3) - 0.01 * (p["steps"] > 800)


def test_first_only_adamw_is_ready_and_the_budget_is_counted():
    state = plan2(ROUND2, [])
    assert {p["arm"] for p in state.ready} == {"adamw"} and len(state.ready) == 12  # 3 lr x 2 warmups x 2 seeds
    b = budget(ROUND2, 7.5)
    assert (b["sweep"], b["paired"], b["long_equivalents"]) == (60, 96, 66.0)
    assert state.remaining == b["equivalents"]


def test_the_whole_plan_makes_each_choice_and_ends():
    runs = _drive(ROUND2, _score)
    state = plan2(ROUND2, runs)
    assert not state.ready and state.remaining == 0
    assert state.best["adamw"] == {"lr": 2e-3, "warmup_frac": 0.05}
    assert state.best["stiefel"] == {"lr": 2e-3, "warmup_frac": 0.05, "frame_lr": 0.1, "max_step": 0.3}
    assert state.best["muon"]["per_head"] is False and state.best["muon_qknorm"]["per_head"] is False
    assert state.better == {"adamw": "adamw_qknorm", "muon": "muon"}
    # The long phase: stiefel and the better AdamW-family arm, their lr checked at 3 points, 8 seeds each.
    longs = [r for r in runs if r["phase"] == "long"]
    assert {r["arm"] for r in longs} == {"stiefel", "adamw_qknorm"} and len(longs) == 16
    assert all(r["steps"] == 2400 for r in longs)
    checks = sorted(r["lr"] for r in runs if r["phase"] == "check" and r["arm"] == "adamw_qknorm")
    assert checks == [2e-3, 4e-3, 8e-3]
    paired = [r for r in runs if r["phase"] == "paired"]
    assert len(paired) == 16 * len(ARMS2)
    assert len({point_key(r) for r in runs}) == len(runs)  # no run twice
    assert not {r["seed"] for r in runs if r["phase"] != "sweep" and r["phase"] != "check"} & set(ROUND2.sweep_seeds)


def test_paired_runs_put_the_primaries_first():
    runs = _drive(ROUND2, _score, phases=("sweep",))
    ready = plan2(ROUND2, runs).ready
    assert [p["arm"] for p in ready[:4]] == ["stiefel", "adamw_qknorm", "stiefel_muon", "muon"]
    assert {p["seed"] for p in ready[:6]} == {0}


def test_a_best_at_an_end_grows_only_its_numeric_axis():
    g = ArmGrid("adamw", (("lr", (1e-3, 2e-3, 4e-3)), ("warmup_frac", (0.05, 0.25))))
    study = Round2(grids=(g, *ROUND2.grids[1:]))
    runs = _drive(study, lambda p: 2.0 - p["lr"] if p["arm"] == "adamw" else 2.0, phases=("sweep",), limit=200)
    lrs = sorted({r["lr"] for r in runs if r["arm"] == "adamw"})
    assert lrs == [1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2]  # grown twice (extend=2), then stopped
    assert sorted({r["warmup_frac"] for r in runs if r["arm"] == "adamw"}) == [0.05, 0.25]


def test_a_diverged_run_counts_as_the_worst():
    runs = _finish(plan2(ROUND2, []).ready, lambda p: None if p["lr"] == 4e-3 else 1.7 - p["lr"])
    assert plan2(ROUND2, runs).best["adamw"]["lr"] == 2e-3


def test_better_arm_waits_for_both_and_breaks_ties_by_order():
    assert better_arm("adamw", {"adamw": {}}, [], (100,), 800) is None
    runs = [{"arm": a, "phase": "sweep", "steps": 800, "seed": 100, "val_bpb": 1.5} for a in FAMILIES["muon"]]
    assert better_arm("muon", {"muon": {}, "muon_qknorm": {}}, runs, (100,), 800) == "muon"


def test_the_plan_refuses_what_would_break_a_comparison():
    with pytest.raises(ValueError, match="comparisons' seeds"):
        Round2(grids=ROUND2.grids, seeds=(100, 1))
    with pytest.raises(ValueError, match="sweep adamw first"):
        Round2(grids=(ROUND2.grids[1], ROUND2.grids[0], *ROUND2.grids[2:]))
    with pytest.raises(ValueError, match="four settings"):
        ArmGrid("adamw", (("lr", (1e-3, 2e-3, 4e-3)),))
    with pytest.raises(ValueError, match="fields it uses"):
        ArmGrid("adamw", (("frame_lr", (0.1, 0.2, 0.3, 0.4)),))


def test_the_declared_primaries_name_the_family_choice():
    primaries = [c for cl in LM2_CLAIMS for fam in cl.primaries for c in fam]
    assert [(c.a, c.b, dict(c.select)["phase"], len(c.seeds)) for c in primaries] == [
        ("adamw_family", "stiefel", "paired", 16), ("muon_family", "stiefel_muon", "paired", 16),
        ("adamw_family", "stiefel", "long", 8), ("adamw_family", "stiefel_scale", "paired", 16)]
    assert primaries[-1].files == ("lm/round2.json", "lm/round3.json")  # round 3's runs pair with round 2's
    assert all(c.metric == "test_bpb" and not c.higher_is_better and c.chosen_on == ROUND2.sweep_seeds
               for c in primaries)
    assert set(FAMILY_ARMS.values()) == set(FAMILIES)
    assert set(ROUND2.seeds) == set(range(16)) and set(ROUND2.long_seeds) == set(range(8))


def test_the_long_runs_read_the_training_addresses_fewer_than_twice():
    from stiefel_mini.experiments.config import replace
    from stiefel_mini.experiments.lm.config import PRESETS
    from stiefel_mini.experiments.lm.results import setup_facts

    short = setup_facts(PRESETS[ROUND2.preset])
    long = setup_facts(replace(PRESETS[ROUND2.preset], steps=ROUND2.long_steps))
    assert short["steps"] == ROUND2.steps
    assert long["passes"] == pytest.approx(3 * short["passes"]) and 1.0 < long["passes"] < 2.0

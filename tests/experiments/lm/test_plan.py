"""The language-model study's plan: what is ready, each arm's best, a grid that grows past its ends."""

from __future__ import annotations

import pytest

from stiefel_mini.experiments.lm.config import STUDY, ArmSweep, LMStudy
from stiefel_mini.experiments.lm.plan import plan, sweep_grid


def _finish(points, bpb):
    """Runs of ``points`` with validation bits per byte ``bpb(point)``."""
    return [{**p, "val_bpb": bpb(p)} for p in points]


def _arms(points, phase="sweep"):
    return sorted({p["arm"] for p in points if p["phase"] == phase})


def test_first_only_the_arms_that_take_nothing_are_ready():
    state = plan(STUDY, [])
    assert _arms(state.ready) == ["adamw", "frozen"]
    assert len(state.ready) == 8 and not state.best
    # 5 arms x (4 values x 1 sweep seed + 8 seeds)
    assert state.remaining == 5 * (4 + 8)


def test_a_finished_sweep_frees_its_seeds_and_the_arms_that_take_its_best():
    runs = _finish(plan(STUDY, []).ready, lambda p: abs(p["lr"] - 2e-3))  # best 2e-3, inside the grid
    state = plan(STUDY, runs)
    assert state.best["adamw"] == {"lr": 2e-3} and state.best["frozen"] == {"lr": 2e-3}
    assert _arms(state.ready) == ["muon", "stiefel"]
    assert all(p["lr"] == 2e-3 for p in state.ready if p["arm"] in ("muon", "stiefel"))
    seeds = [p for p in state.ready if p["phase"] == "seeds"]
    assert [(p["seed"], p["arm"]) for p in seeds[:2]] == [(0, "adamw"), (0, "frozen")]  # seed-major
    assert all(p["frame_lr"] is None and p["muon_lr"] is None for p in seeds)
    assert "muon_stiefel" not in {p["arm"] for p in state.ready}  # waits for muon's best


def test_a_best_at_the_end_grows_the_grid():
    s = ArmSweep("adamw", "lr", (1.0, 2.0, 4.0, 8.0), extend=2)
    assert sweep_grid(s, {}) == ([1.0, 2.0, 4.0, 8.0], None)
    falling = {v: [-v] for v in (1.0, 2.0, 4.0, 8.0)}
    assert sweep_grid(s, falling) == ([1.0, 2.0, 4.0, 8.0, 16.0], None)
    falling[16.0] = [-15.0]
    falling[32.0] = [-1.0]  # the grown value is worse: 16 is inside
    assert sweep_grid(s, falling) == ([1.0, 2.0, 4.0, 8.0, 16.0, 32.0], 16.0)
    rising = {v: [v] for v in (1.0, 2.0, 4.0, 8.0)}
    assert sweep_grid(s, rising)[0][0] == 0.5


def test_every_run_settles_the_study():
    runs: list[dict] = []
    for _ in range(20):
        state = plan(STUDY, runs)
        if not state.ready:
            break
        runs += _finish(state.ready, lambda p: abs((p["frame_lr"] or p["muon_lr"] or p["lr"]) - 0.01))
    state = plan(STUDY, runs)
    assert state.remaining == 0 and set(state.best) == {s.arm for s in STUDY.sweeps}
    assert sum(r["phase"] == "seeds" for r in runs) == 5 * 8
    assert state.best["muon_stiefel"]["muon_lr"] == state.best["muon"]["muon_lr"]


def test_a_plan_that_cannot_be_ordered_is_refused():
    with pytest.raises(ValueError, match="sweep adamw first"):
        LMStudy(sweeps=(ArmSweep("stiefel", "frame_lr", (1, 2, 3, 4), takes=(("lr", "adamw"),)),
                        ArmSweep("adamw", "lr", (1, 2, 3, 4))))
    with pytest.raises(ValueError, match="not be the comparison's seeds"):
        LMStudy(sweeps=STUDY.sweeps, sweep_seeds=(0,))
    with pytest.raises(ValueError, match="at least four"):
        ArmSweep("adamw", "lr", (1, 2, 3))


def test_a_diverged_value_is_the_worst():
    s = ArmSweep("adamw", "lr", (1.0, 2.0, 4.0, 8.0), extend=0)
    assert sweep_grid(s, {1.0: [3.0], 2.0: [2.0], 4.0: [None], 8.0: [None]}) == ([1.0, 2.0, 4.0, 8.0], 2.0)

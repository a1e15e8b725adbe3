"""The third language-model study: its plan (sweep, growth, paired seeds), its fixed settings, one run, its CLI."""

from __future__ import annotations

import json
import math

import pytest

from stiefel_mini.experiments.config import replace
from stiefel_mini.experiments.lm import results as lm_results
from stiefel_mini.experiments.lm import rounds
from stiefel_mini.experiments.lm.config import PRESETS
from stiefel_mini.experiments.lm.round2 import ROUND2, plan2
from stiefel_mini.experiments.lm.round3 import (ARMS3, BASE3, ROUND3, Round3, ScaleGrid, plan3, point_key3,
                                                run_point)


def _drive(study, best, limit=500):
    """Finish ready runs one at a time until the plan ends; ``best[arm]`` is the scale lr it likes."""
    runs = []
    for _ in range(limit):
        ready = plan3(study, runs).ready
        if not ready:
            return runs
        p = ready[0]
        runs.append({**p, "val_bpb": 1.6 + 0.01 * abs(math.log(p["scale_lr"] / best[p["arm"]])) + 1e-4 * p["seed"]})
    raise AssertionError("the plan did not end")


@pytest.mark.quick
def test_the_sweeps_come_first_then_each_arm_runs_the_paired_seeds_at_its_best():
    empty = plan3(ROUND3, [])
    assert [p["arm"] for p in empty.ready] == ["stiefel_scale"] * 8 + ["stiefel_muon_scale"] * 8
    assert empty.remaining == 2 * (8 + 16)
    runs = _drive(ROUND3, {"stiefel_scale": 0.1, "stiefel_muon_scale": 0.3})
    state = plan3(ROUND3, runs)
    assert not state.ready and state.remaining == 0
    assert state.best["stiefel_scale"]["scale_lr"] == 0.1 and state.best["stiefel_muon_scale"]["scale_lr"] == 0.3
    paired = [r for r in runs if r["phase"] == "paired"]
    assert len(paired) == 32 and {r["seed"] for r in paired} == set(range(16))
    assert all(r["frame_lr"] == 0.3 and r["max_step"] == 0.3 and r["muon_lr"] is None
               for r in paired if r["arm"] == "stiefel_scale")
    assert len({point_key3(r) for r in runs}) == len(runs)


@pytest.mark.quick
def test_a_best_at_the_top_of_the_grid_grows_it():
    runs = _drive(ROUND3, {"stiefel_scale": 5.0, "stiefel_muon_scale": 0.1})
    swept = sorted({r["scale_lr"] for r in runs if r["arm"] == "stiefel_scale" and r["phase"] == "sweep"})
    assert swept == [0.03, 0.1, 0.3, 1.0, 3.33333, 11.1111]  # grown twice past 1.0, the best 3.33 inside
    assert plan3(ROUND3, runs).best["stiefel_scale"]["scale_lr"] == 3.33333


@pytest.mark.quick
def test_a_grid_names_only_round3_arms_and_fixes_every_field_of_its_round2_arm():
    with pytest.raises(ValueError, match="unknown arm"):
        ScaleGrid("stiefel", (("lr", 2e-3),))
    with pytest.raises(ValueError, match="fix every field"):
        ScaleGrid("stiefel_scale", (("lr", 2e-3), ("frame_lr", 0.3)))
    with pytest.raises(ValueError, match="at least four"):
        ScaleGrid("stiefel_scale", ROUND3.grids[0].fixed, values=(0.1, 0.3, 1.0))
    assert set(ARMS3) == set(BASE3) and Round3(grids=()).seeds == ROUND2.seeds


def test_the_fixed_settings_are_round2s_bests_on_its_committed_runs():
    best = plan2(ROUND2, lm_results.load_round2()["runs"]).best
    for g in ROUND3.grids:
        assert dict(g.fixed) == best[BASE3[g.arm]], g.arm


def test_a_run_is_its_round2_arms_run_with_the_scale_lr_recorded_under_its_own_arm():
    pytest.importorskip("transformers")
    point = plan3(ROUND3, []).ready[0]
    r = run_point(replace(PRESETS["tiny"], eval_every=2, samples=0), {**point, "steps": 4},
                  {"git_commit": "abc", "git_dirty": False})
    assert r["arm"] == "stiefel_scale" and r["scale_lr"] == 0.03 and r["logit_scale"] == "learned"
    assert r["frame_lr"] == 0.3 and r["val_bpb"] > 0


@pytest.mark.quick
def test_the_command_line_reads_its_own_results_file_and_refuses_another_command(tmp_path, capsys):
    kind, args, _ = rounds.parse_args(["round3"])
    assert kind == "round3" and args.out == "results/lm/round3.json" and not args.dry_run
    assert rounds.parse_args(["round2"])[1].out == "results/lm/round2.json"
    with pytest.raises(ValueError, match="expected one of"):
        rounds.parse_args(["study"])
    out = tmp_path / "round3.json"
    done = [{**p, "val_bpb": 1.6} for p in plan3(ROUND3, []).ready[:2]]
    out.write_text(json.dumps({"runs": done}))
    rounds.main(["round3", "--dry_run", "true", "--out", str(out)])
    assert f"{out}: 2 runs finished; left: 46 800-step equivalents" in capsys.readouterr().out
    timed = [{**done[0], "wall_time_s": 600.0}, {**done[1], "wall_time_s": 900.0}]  # 10 and 15 min
    assert [r["steps"] for r in timed] == [800, 800]
    out.write_text(json.dumps({"runs": timed}))
    rounds.main(["round3", "--dry_run", "true", "--out", str(out)])
    # 46 equivalents: 46 * 7.5 / 60 = 5.75 and 46 * 12.5 / 60 = 9.58 hours
    assert ("about 5.8 CPU hours at 7.5 min per run, 9.6 at the 12.5 min per 800 steps its 2 finished runs "
            "took (median)") in capsys.readouterr().out


@pytest.mark.quick
def test_the_measured_pace_is_the_median_minutes_per_800_steps_of_the_timed_runs():
    runs = [{"steps": 800, "wall_time_s": 600.0}, {"steps": 2400, "wall_time_s": 3600.0},
            {"steps": 800, "wall_time_s": 900.0}, {"steps": 800}]
    assert rounds.measured_minutes_per_run(runs) == (15.0, 3)  # paces 10, 20, 15 min per 800 steps
    assert rounds.measured_minutes_per_run([{"steps": 800}]) is None

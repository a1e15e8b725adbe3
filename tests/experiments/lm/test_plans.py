"""The plan type of the language-model studies: stages around the last best, grown grids, families, the long phase."""

from __future__ import annotations

import pytest

from stiefel_mini.experiments.lm.plans import Study, Tuning, declared, grid_best, plan, point_key

FIELDS = ("lr", "warmup_frac", "muon_lr", "scale_lr")


def _study(**kw) -> Study:
    base = dict(name="t", out="x.json", arms=(("a", "adamw"), ("b", "adamw_qknorm"), ("m", "muon")),
                tunings=(Tuning("a", stages=((("warmup_frac", (0.05, 0.25, 0.5)),), (("lr", (1e-3, 2e-3, 4e-3)),))),
                         Tuning("b", stages=((("scale_lr", (0.01, 0.1)),),), takes=(("warmup_frac", "a"),)),
                         Tuning("m", stages=((("muon_lr", (0.01, 0.02, 0.04)),),), takes=(("lr", "a"),))),
                sweep_seeds=(100, 101), fields=FIELDS, families=(("adamw", ("a", "b")),),
                long_arms=("family:adamw", "m", "a"), long_seeds=(16, 17), check_seed=100,
                main_lr=(("a", "lr"), ("b", "lr"), ("m", "muon_lr")))
    return Study(**{**base, **kw})


def _finish(study: Study, score, limit: int = 1000) -> tuple[list[dict], object]:
    """Run the plan to its end, each run's validation bpb ``score(point)``."""
    runs: list[dict] = []
    for _ in range(limit):
        state = plan(study, runs)
        if not state.ready:
            return runs, state
        runs.append({**state.ready[0], "val_bpb": score(state.ready[0])})
    raise AssertionError("the plan did not finish")


def test_each_stage_starts_at_the_last_best_and_runs_its_centre_once():
    # a's best warm-up is 0.25 (inside), its best lr 2e-3 (inside): 5 settings, each on 2 seeds.
    score = lambda p: abs((p["warmup_frac"] or 0) - 0.25) + abs(p["lr"] - 2e-3) * 10 + (p.get("scale_lr") or 0)  # noqa: E731
    runs, state = _finish(_study(), score)
    a = [r for r in runs if r["arm"] == "a" and r["phase"] == "sweep"]
    assert len(a) == 10 and len({point_key(r, FIELDS) for r in runs}) == len(runs)
    assert state.best["a"] == {"lr": 2e-3, "warmup_frac": 0.25}
    assert state.best["b"]["warmup_frac"] == 0.25 and state.best["m"]["lr"] == 2e-3


def test_a_best_at_an_end_grows_the_axis_inside_its_bounds():
    # The larger warm-up always better: 0.5 grows to 1.0 (its bound) and stops there.
    runs, state = _finish(_study(), lambda p: -(p["warmup_frac"] or 0) + abs(p["lr"] - 2e-3))
    warmups = sorted({r["warmup_frac"] for r in runs if r["arm"] == "a" and r["phase"] == "sweep"})
    assert warmups == [0.05, 0.25, 0.5, 1.0] and state.best["a"]["warmup_frac"] == 1.0
    # A smaller lr always better: 1e-3 grows to 5e-4, then 2.5e-4 (extend=2), and stops.
    runs, state = _finish(_study(), lambda p: p["lr"])
    assert sorted({r["lr"] for r in runs if r["arm"] == "a" and r["phase"] == "sweep"}) == [2.5e-4, 5e-4, 1e-3, 2e-3, 4e-3]
    # An axis from 0 has no smaller value to try.
    s = Tuning("m", stages=((("warmup_frac", (0.0, 0.05, 0.25)),),))
    done = [{"arm": "m", "phase": "sweep", "steps": 800, "seed": 100, "warmup_frac": w, "val_bpb": w} for w in
            (0.0, 0.05, 0.25)]
    settings, best = grid_best(s.stages[0], {}, "m", done, (100,), 800, 2, 3)
    assert best == {"warmup_frac": 0.0} and len(settings) == 3


def test_family_long_phase_checks_then_runs_the_best_check_once_per_arm():
    score = lambda p: (1.0 if p["arm"] == "b" else 0.0) + abs(p["lr"] - 2e-3) + abs((p.get("muon_lr") or 0.01) - 0.01)  # noqa: E731
    runs, state = _finish(_study(), score)
    assert state.better == {"adamw": "a"}
    checks = [r for r in runs if r["phase"] == "check"]
    assert sorted((r["arm"], r["lr"] if r["arm"] == "a" else r["muon_lr"]) for r in checks) == [
        ("a", 1e-3), ("a", 2e-3), ("a", 4e-3), ("m", 0.005), ("m", 0.01), ("m", 0.02)]
    longs = [r for r in runs if r["phase"] == "long"]
    # "a" is named twice (as itself and as the family's better arm) and runs once per seed.
    assert sorted((r["arm"], r["seed"]) for r in longs) == [("a", 16), ("a", 17), ("m", 16), ("m", 17)]
    assert all(r["steps"] == 2400 and r["lr"] == 2e-3 for r in longs if r["arm"] == "a")
    assert state.remaining == 0


def test_a_declaration_that_cannot_run_is_refused():
    with pytest.raises(ValueError, match="tuned exactly once"):
        _study(tunings=_study().tunings[:2])
    with pytest.raises(ValueError, match="tune a first"):
        _study(tunings=tuple(reversed(_study().tunings)))
    with pytest.raises(ValueError, match="reads only"):
        _study(tunings=(Tuning("a", stages=((("frame_lr", (0.1, 0.3, 1.0)),),)),) + _study().tunings[1:])
    with pytest.raises(ValueError, match="must not be the comparisons' seeds"):
        _study(long_seeds=(100, 17))


def test_the_stored_plan_is_plain_json():
    d = declared(_study())
    assert d["long_seeds"] == [16, 17] and d["tunings"][0]["stages"][0][0] == ["warmup_frac", [0.05, 0.25, 0.5]]


def test_a_diverged_setting_is_the_worst_and_a_tie_goes_to_the_earlier_setting():
    axis = (("lr", (1.0, 2.0, 4.0, 8.0)),)
    done = [{"arm": "a", "phase": "sweep", "steps": 800, "seed": 100, "lr": lr, "val_bpb": b}
            for lr, b in ((1.0, 3.0), (2.0, 2.0), (4.0, None), (8.0, None))]
    assert grid_best(axis, {}, "a", done, (100,), 800, 0, 3)[1] == {"lr": 2.0}
    tie = [{**r, "val_bpb": 1.0} for r in done]
    assert grid_best(axis, {}, "a", tie, (100,), 800, 0, 3)[1] == {"lr": 1.0}


def test_a_grid_grows_past_either_end_and_stops_where_the_best_is_inside():
    axis = (("lr", (1.0, 2.0, 4.0, 8.0)),)

    def runs(score):
        return [{"arm": "a", "phase": "sweep", "steps": 800, "seed": 100, "lr": lr, "val_bpb": score(lr)}
                for lr in (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)]
    assert grid_best(axis, {}, "a", [], (100,), 800, 2, 3) == ([{"lr": v} for v in (1.0, 2.0, 4.0, 8.0)], None)
    settings, best = grid_best(axis, {}, "a", runs(lambda lr: abs(lr - 16.0)), (100,), 800, 2, 3)
    assert [s["lr"] for s in settings] == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0] and best == {"lr": 16.0}
    settings, best = grid_best(axis, {}, "a", runs(lambda lr: lr), (100,), 800, 2, 3)
    assert [s["lr"] for s in settings] == [0.25, 0.5, 1.0, 2.0, 4.0, 8.0] and best == {"lr": 0.25}  # extend=2


def test_runs_without_steps_are_told_apart_and_scored_without_them():
    s = _study(records_steps=False, paired_phase="seeds", paired_seeds=(0, 1), long_arms=(), check_seed=None,
               families=())
    first = plan(s, []).ready[0]
    assert "steps" not in first and s.key(first) == ("a", 100, "sweep", 2e-3, 0.05, None, None)
    runs, state = _finish(s, lambda p: abs((p["warmup_frac"] or 0) - 0.25) + p["lr"])
    assert state.best["a"]["warmup_frac"] == 0.25 and {r["phase"] for r in runs} == {"sweep", "seeds"}
    assert all("steps" not in r for r in runs) and state.remaining == 0


def test_the_order_of_ready_is_the_studys():
    base = dict(paired_seeds=(0, 1), long_arms=(), check_seed=None, families=())
    score = lambda p: abs((p["warmup_frac"] or 0) - 0.25) + p["lr"] + (p.get("muon_lr") or 0) + (p.get("scale_lr") or 0)  # noqa: E731
    sweeps_done = [r for r in _finish(_study(**base), score)[0] if r["phase"] == "sweep"]
    arms_then_seeds = [(p["seed"], p["arm"]) for p in plan(_study(**base), sweeps_done).ready]
    assert arms_then_seeds == [(0, "a"), (0, "b"), (0, "m"), (1, "a"), (1, "b"), (1, "m")]
    first = _study(**base, paired_first=("m",))
    assert [p["arm"] for p in plan(first, sweeps_done).ready][:3] == ["m", "a", "b"]
    by_arm = _study(**base, order="arm_by_arm")
    assert [(p["arm"], p["seed"]) for p in plan(by_arm, sweeps_done).ready] == [
        ("a", 0), ("a", 1), ("b", 0), ("b", 1), ("m", 0), ("m", 1)]
    with pytest.raises(ValueError, match="order must be one of"):
        _study(order="random")
    with pytest.raises(ValueError, match="neither an arm"):
        _study(paired_first=("z",))


def test_the_long_phase_by_arm_runs_each_arms_checks_then_its_seeds():
    score = lambda p: (1.0 if p["arm"] == "b" else 0.0) + abs(p["lr"] - 2e-3) + abs((p.get("muon_lr") or 0.01) - 0.01)  # noqa: E731
    runs, _ = _finish(_study(order="long_by_arm"), score)
    longs = [(r["arm"], r["phase"]) for r in runs if r["phase"] in ("check", "long")]
    assert longs == [("a", "check")] * 3 + [("a", "long")] * 2 + [("m", "check")] * 3 + [("m", "long")] * 2
    runs, _ = _finish(_study(), score)
    longs = [(r["arm"], r["phase"]) for r in runs if r["phase"] in ("check", "long")]
    assert longs == [("a", "check")] * 3 + [("m", "check")] * 3 + [("a", "long"), ("m", "long")] * 2


def test_fields_added_since_the_fourth_study_are_stored_only_where_they_are_set():
    d = declared(_study())
    assert not {"records_steps", "paired_phase", "paired_first", "order", "layout"} & set(d)
    assert declared(_study(order="long_by_arm"))["order"] == "long_by_arm"


def test_an_older_layout_stores_one_stage_per_arm():
    one = _study(tunings=(Tuning("a", stages=((("lr", (1e-3, 2e-3, 4e-3)),),)),
                          Tuning("b", stages=((("scale_lr", (0.01, 0.1)),),)),
                          Tuning("m", stages=((("muon_lr", (0.01, 0.02, 0.04)),),), takes=(("lr", "a"),))),
                 layout="round1", long_arms=(), check_seed=None, families=())
    assert declared(one)["sweeps"][2] == {"arm": "m", "swept": "muon_lr", "values": [0.01, 0.02, 0.04],
                                          "takes": [["lr", "a"]], "extend": 2}
    with pytest.raises(ValueError, match="one stage per arm"):
        declared(_study(layout="round2"))

"""The declared language-model studies: the fourth study's arms, seeds and phases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stiefel_mini.experiments.lm.plans import RECIPES, plan
from stiefel_mini.experiments.lm.studies import ROUND4, STUDIES, study

pytestmark = pytest.mark.quick
RESULTS = Path(__file__).resolve().parents[3] / "results" / "lm"


def test_the_fourth_study_tunes_every_arm_and_runs_its_decisive_arms_on_unused_seeds():
    assert {a for a, _ in ROUND4.arms} == set(RECIPES)
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
    with pytest.raises(ValueError, match="declared: "):
        study("round9")

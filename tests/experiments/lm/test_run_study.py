"""The one runner: a declared study run end to end at a tiny size, resumed, and its dry run."""

from __future__ import annotations

import dataclasses
import json

import pytest

from stiefel_mini.experiments.config import replace
from stiefel_mini.experiments.lm import run_study, studies
from stiefel_mini.experiments.lm.config import PRESETS
from stiefel_mini.experiments.lm.experiment import study
from stiefel_mini.experiments.lm.plans import Study, Tuning

pytest.importorskip("transformers")

TINY = Study(name="tiny_test", out="unused.json", arms=(("adamw", "adamw"), ("all_stiefel", "all_stiefel")),
             tunings=(Tuning("adamw", stages=((("lr", (2e-3, 4e-3)),),)),
                      Tuning("all_stiefel", stages=((("frame_lr", (0.02, 0.04)),),), takes=(("lr", "adamw"),),
                             start=(("max_iter", 1),))),
             sweep_seeds=(100,), fields=("lr", "warmup_frac", "frame_lr", "max_iter"), steps=4,
             long_arms=("all_stiefel",), long_steps=6, long_seeds=(16,), check_seed=100, check_factors=(1.0,),
             main_lr=(("adamw", "lr"), ("all_stiefel", "frame_lr")))


def test_a_study_runs_to_its_end_and_resumes(tmp_path, monkeypatch):
    monkeypatch.setitem(studies.STUDIES, TINY.name, TINY)
    base = replace(PRESETS["tiny"], eval_every=2, samples=0, progress=False)
    out = tmp_path / "tiny.json"
    payload = study(base, out, workers=1, schedule=run_study.schedule(TINY))
    kinds = sorted((r["arm"], r["phase"]) for r in payload["runs"])
    assert kinds == [("adamw", "sweep")] * 2 + [("all_stiefel", "check"), ("all_stiefel", "long")] + \
        [("all_stiefel", "sweep")] * 2
    long = next(r for r in payload["runs"] if r["phase"] == "long")
    assert long["recipe"] == "all_stiefel" and long["steps"] == 6 and long["orth_error"] < 1e-4
    assert len(long["history"]["max_logit"]) == len(long["history"]["step"])
    again = study(base, out, workers=1, schedule=run_study.schedule(TINY))  # nothing left: no run repeats
    assert len(again["runs"]) == len(payload["runs"])
    other = dataclasses.replace(TINY, long_seeds=(17,))
    with pytest.raises(ValueError, match="another plan"):
        study(base, out, workers=1, schedule=run_study.schedule(other))
    run_study.main(["study", TINY.name, "--out", str(out), "--dry_run", "true"])
    assert json.loads(out.read_text())["plan"]["name"] == "tiny_test"


@pytest.mark.quick
def test_the_command_line_names_the_study_and_refuses_an_unknown_one():
    s, args, base = run_study.parse_args(["study", "round4", "--workers", "1", "--steps", "10"])
    assert s is studies.ROUND4 and args.out == "results/lm/round4.json" and args.workers == 1 and base.steps == 10
    with pytest.raises(ValueError, match="declared: "):
        run_study.parse_args(["study", "round9"])

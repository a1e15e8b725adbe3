"""The one runner: a declared study run end to end at a tiny size, resumed; every study's runs and commands, old spellings too."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from stiefel_mini.experiments.config import replace
from stiefel_mini.experiments.lm import data as lm_data
from stiefel_mini.experiments.lm import run_study, studies
from stiefel_mini.experiments.lm.config import PRESETS
from stiefel_mini.experiments.lm.experiment import study
from stiefel_mini.experiments.lm.plans import Study, Tuning, plan

pytest.importorskip("transformers")

TINY = Study(name="tiny_test", out="unused.json", arms=(("adamw", "adamw"), ("all_stiefel", "all_stiefel")),
             tunings=(Tuning("adamw", stages=((("lr", (2e-3, 4e-3)),),)),
                      Tuning("all_stiefel", stages=((("frame_lr", (0.02, 0.04)),),), takes=(("lr", "adamw"),),
                             start=(("max_iter", 1),))),
             sweep_seeds=(100,), fields=("lr", "warmup_frac", "frame_lr", "max_iter"), steps=4,
             long_arms=("all_stiefel",), long_steps=6, long_seeds=(16,), check_seed=100, check_factors=(1.0,),
             main_lr=(("adamw", "lr"), ("all_stiefel", "frame_lr")))


@pytest.fixture
def on_the_slice(corpus_slice, monkeypatch):
    """The training runs of a test read :func:`corpus_slice`."""
    monkeypatch.setenv(lm_data.CORPUS_ENV, str(corpus_slice))


@pytest.mark.usefixtures("on_the_slice")
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


def test_the_command_line_names_the_study_and_refuses_an_unknown_one():
    s, args, base = run_study.parse_args(["study", "round4", "--workers", "1", "--steps", "10"])
    assert s is studies.ROUND4 and args.out == "results/lm/round4.json" and args.workers == 1 and base.steps == 10
    with pytest.raises(ValueError, match="declared: "):
        run_study.parse_args(["study", "round9"])


COMMIT = {"git_commit": "abc", "git_dirty": False}


@pytest.mark.parametrize("name", ["round1", "round2", "round3"])
def test_every_command_a_results_file_stores_still_names_its_study(name):
    s = studies.study(name)
    payload = json.loads((Path(__file__).resolve().parents[3] / s.out).read_text())
    commands = [p["command"] for p in [payload["provenance"], *payload.get("provenance_previous", [])]]
    for command in commands:
        argv = command.split(" -m stiefel_mini.experiments.lm ", 1)[1].split()
        got, args, _ = run_study.parse_args(argv)
        assert got is s and args.out == s.out, command


def test_the_old_spellings_name_the_first_three_studies():
    assert run_study.parse_args(["study"])[0] is studies.ROUND1
    assert run_study.parse_args(["study", "--workers", "1"])[1].workers == 1
    assert run_study.parse_args(["round2", "--dry_run", "true"])[0] is studies.ROUND2
    s, args, _ = run_study.parse_args(["round3"])
    assert s is studies.ROUND3 and args.out == "results/lm/round3.json" and not args.dry_run
    with pytest.raises(ValueError, match="expected 'study NAME ...'"):
        run_study.parse_args(["round5"])


def test_a_dry_run_reads_the_results_file_and_says_what_is_left(tmp_path, capsys):
    out = tmp_path / "round2.json"
    run_study.main(["round2", "--dry_run", "true", "--out", str(out)])
    assert f"{out}: 0 runs finished; left: 222 800-step equivalents" in capsys.readouterr().out
    done = [{**p, "val_bpb": 1.6, "wall_time_s": w} for p, w in zip(plan(studies.ROUND2, []).ready[:2], (600.0, 900.0))]
    out.write_text(json.dumps({"runs": done}))
    run_study.main(["round2", "--dry_run", "true", "--out", str(out), "--minutes_per_run", "7.5"])
    left = plan(studies.ROUND2, done).remaining
    # 220 equivalents: 220 * 7.5 / 60 = 27.5 and 220 * 12.5 / 60 = 45.8 hours
    assert (f"{out}: 2 runs finished; left: {left:g} 800-step equivalents, about 27.5 CPU hours at 7.5 min per run, "
            "45.8 at the 12.5 min per 800 steps its 2 finished runs took (median)") in capsys.readouterr().out
    assert len(json.loads(out.read_text())["runs"]) == 2  # nothing run


def test_the_measured_pace_is_the_median_minutes_per_800_steps_of_the_timed_runs():
    runs = [{"steps": 800, "wall_time_s": 600.0}, {"steps": 2400, "wall_time_s": 3600.0},
            {"steps": 800, "wall_time_s": 900.0}, {"steps": 800}]
    assert run_study.minutes_per_run(runs) == (15.0, 3)  # paces 10, 20, 15 min per 800 steps
    assert run_study.minutes_per_run([{"steps": 800}]) is None


def _round2_point(arm: str, steps: int) -> dict:
    """The second study's first ready point made into one of ``arm``'s, ``steps`` long, with the settings
    only the arms that use them keep."""
    point = {**plan(studies.ROUND2, []).ready[0], "arm": arm, "steps": steps, "frame_lr": 0.1, "max_step": 0.3,
             "muon_lr": 0.01, "per_head": True}
    return {k: (v if k not in studies.ROUND2.fields or k in studies.ROUND2.uses(arm) else None)
            for k, v in point.items()}


@pytest.mark.usefixtures("on_the_slice")
@pytest.mark.parametrize("arm", [a for a, _ in studies.ROUND2.arms])
def test_each_arm_of_the_second_study_runs_and_records_its_settings(arm):
    point = _round2_point(arm, steps=4)
    r = run_study.run_point("round2", replace(PRESETS["tiny"], eval_every=2, samples=0), point, COMMIT)
    assert r["val_bpb"] > 0 and r["steps"] == 4 and r["qk_norm"] == arm.endswith("_qknorm")
    assert r["recipe"] == f"r2_{arm}" and r["logit_scale"] == ("learned" if arm in ("stiefel", "stiefel_muon") else None)
    assert len(r["history"]["max_logit"]) == len(r["history"]["step"]) == 3
    assert r["max_logit"] == r["history"]["max_logit"][-1] and r["min_entropy"] > 0 and r["device"] == "cpu"


@pytest.mark.usefixtures("on_the_slice")
def test_a_run_of_the_first_study_takes_the_base_configs_steps_and_the_third_its_scale_lr():
    base = replace(PRESETS["tiny"], steps=4, eval_every=2, samples=0)
    first = run_study.run_point("round1", base, plan(studies.ROUND1, []).ready[0], COMMIT)
    assert "steps" not in first and first["history"]["step"][-1] == 4 and first["recipe"] == "r1_adamw"
    third = run_study.run_point("round3", base, {**plan(studies.ROUND3, []).ready[0], "steps": 4}, COMMIT)
    assert third["arm"] == "stiefel_scale" and third["scale_lr"] == 0.03 and third["logit_scale"] == "learned"
    assert third["frame_lr"] == 0.3 and third["val_bpb"] > 0


@pytest.mark.usefixtures("on_the_slice")
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("arm", [a for a, _ in studies.ROUND2.arms])
def test_each_arm_of_the_second_study_runs_on_cuda_and_says_so(arm):
    point = _round2_point(arm, steps=20)
    cpu, gpu = (run_study.run_point("round2", replace(PRESETS["tiny"], eval_every=10, samples=1, device=d), point, COMMIT)
                for d in ("cpu", "cuda"))
    assert gpu["device"].startswith("cuda: ") and cpu["device"] == "cpu"
    assert gpu["history"]["val_bpb"][0] == pytest.approx(cpu["history"]["val_bpb"][0], abs=1e-4)
    assert gpu["val_bpb"] == pytest.approx(cpu["val_bpb"], abs=0.05)


@pytest.mark.usefixtures("on_the_slice")
def test_the_package_command_line_hands_single_runs_to_the_experiment(tmp_path, capsys):
    run_study.main(["--preset", "tiny", "--arm", "muon", "--steps", "4", "--eval_every", "2", "--progress", "false"])
    assert "muon seed 0: validation" in capsys.readouterr().out

"""The language-model run and study: a short run learns, a study resumes where it stopped."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from stiefel_mini.experiments.config import replace
from stiefel_mini.experiments.lm import data as lm_data
from stiefel_mini.experiments.lm import experiment as lm_experiment
from stiefel_mini.experiments.lm import run_study, studies
from stiefel_mini.experiments.lm.config import LM_ARMS, PRESETS
from stiefel_mini.experiments.lm.model import FRAME_ARMS
from stiefel_mini.experiments.lm.plans import Study, Tuning, plan
from stiefel_mini.experiments.records import load_results

TINY = replace(PRESETS["tiny"], progress=False)


@pytest.fixture(autouse=True)
def on_the_slice(corpus_slice, monkeypatch):
    monkeypatch.setenv(lm_data.CORPUS_ENV, str(corpus_slice))


@pytest.mark.parametrize("arm", sorted(LM_ARMS))
def test_a_short_run_lowers_the_validation_loss(arm):
    out = lm_experiment.run(replace(TINY, arm=arm))
    curve = out["history"]["val_bpb"]
    assert curve[-1] < curve[0] - 0.1
    assert out["val_bpb"] < curve[0] and out["test_bpb"] < curve[0]
    assert len(out["samples"]) == TINY.samples and isinstance(out["samples"][0]["text"], str)
    if arm in FRAME_ARMS:
        assert out["orth_error"] < 1e-5
    assert (out["qk_step_mean"] == 0.0) == (arm == "frozen")


def test_a_run_is_a_function_of_its_seed():
    a, b = (lm_experiment.run(replace(TINY, arm="stiefel", seed=3, steps=10)) for _ in range(2))
    assert a["history"]["val_bpb"] == b["history"]["val_bpb"] and a["samples"] == b["samples"]


def test_a_tokenizer_of_another_size_is_refused():
    with pytest.raises(ValueError, match="vocab_size=512"):
        lm_experiment.run(replace(TINY, vocab_size=512))


def test_a_device_it_cannot_use_is_refused_naming_the_fix():
    with pytest.raises(ValueError, match="pass cpu or cuda"):
        lm_experiment.device_for("gpu0")
    with pytest.raises(ValueError, match="runs on cpu or cuda"):
        lm_experiment.device_for("meta")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="--device cpu"):
            lm_experiment.run(replace(TINY, device="cuda"))
    assert lm_experiment.device_name("cpu") == "cpu"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("arm", ["adamw", "stiefel"])
def test_a_cuda_run_starts_where_the_cpu_run_starts_and_learns(arm):
    cpu, gpu = (lm_experiment.run(replace(TINY, arm=arm, device=d)) for d in ("cpu", "cuda"))
    assert gpu["history"]["val_bpb"][0] == pytest.approx(cpu["history"]["val_bpb"][0], abs=1e-4)
    assert gpu["val_bpb"] == pytest.approx(cpu["val_bpb"], abs=0.05)
    assert gpu["history"]["val_bpb"][-1] < gpu["history"]["val_bpb"][0] - 0.1


SMALL = Study(name="small_test", out="unused.json", arms=(("adamw", "r1_adamw"), ("stiefel", "r1_stiefel")),
              tunings=(Tuning("adamw", stages=((("lr", (1e-3, 3e-3, 1e-2, 3e-2)),),), extend=0),
                       Tuning("stiefel", stages=((("frame_lr", (0.01, 0.03, 0.1, 0.3)),),), takes=(("lr", "adamw"),),
                              extend=0)),
              sweep_seeds=(100,), fields=("lr", "frame_lr", "muon_lr"), paired_seeds=(0, 1), records_steps=False,
              paired_phase="seeds", preset="tiny")
"""A first-study-like plan: two arms' lr sweeps on one seed, then two paired seeds."""
ONE = dataclasses.replace(SMALL, name="one_test", arms=SMALL.arms[:1], tunings=SMALL.tunings[:1], paired_seeds=())


@pytest.fixture(autouse=True)
def declared(monkeypatch):
    for s in (SMALL, ONE):
        monkeypatch.setitem(studies.STUDIES, s.name, s)


def test_an_interrupted_study_resumes_without_repeating_a_run(tmp_path):
    out = tmp_path / "study.json"
    base = replace(TINY, steps=4, eval_every=2, samples=0)
    schedule, calls = run_study.schedule(SMALL), []

    def stop_after_three(*args):
        if len(calls) == 3:
            raise KeyboardInterrupt
        calls.append(args[1])
        return schedule.run_point(*args)

    with pytest.raises(KeyboardInterrupt):
        lm_experiment.study(base, out, dataclasses.replace(schedule, run_point=stop_after_three), workers=1)
    assert len(load_results(out)["runs"]) == 3
    payload = lm_experiment.study(base, out, schedule, workers=1)
    keys = [SMALL.key(r) for r in payload["runs"]]
    assert len(keys) == len(set(keys)) == 2 * 4 + 2 * 2
    assert plan(SMALL, payload["runs"]).remaining == 0
    assert [SMALL.key(r) for r in payload["runs"][:3]] == [SMALL.key(p) for p in calls]
    assert all(r["started_utc"] and r["git_commit"] for r in payload["runs"])
    assert len(payload["provenance_previous"]) == 1


def test_a_study_file_of_other_settings_is_refused(tmp_path):
    out = tmp_path / "study.json"
    lm_experiment.study(replace(TINY, steps=2, eval_every=1, samples=0), out, run_study.schedule(ONE), 1)
    with pytest.raises(ValueError, match="steps"):
        lm_experiment.study(replace(TINY, steps=3, eval_every=1, samples=0), out, run_study.schedule(SMALL), 1)
    with pytest.raises(ValueError, match="another plan"):
        lm_experiment.study(replace(TINY, steps=2, eval_every=1, samples=0), out, run_study.schedule(SMALL), 1)
    with pytest.raises(ValueError, match="workers must be >= 1"):
        lm_experiment.study(TINY, out, run_study.schedule(ONE), 0)


def test_a_study_file_records_the_device_per_run_and_resumes_on_another(tmp_path):
    out = tmp_path / "study.json"
    base = replace(TINY, steps=2, eval_every=1, samples=0)
    payload = lm_experiment.study(base, out, run_study.schedule(ONE), 1)
    assert "device" not in payload["base_config"] and {r["device"] for r in payload["runs"]} == {"cpu"}
    with pytest.raises(ValueError, match="pass cpu or cuda"):
        lm_experiment.study(replace(base, device="tpu"), out, run_study.schedule(ONE), 1)


def test_the_command_line_runs_one_tiny_run(tmp_path, capsys):
    lm_experiment.main(["--preset", "tiny", "--arm", "muon", "--steps", "4", "--eval_every", "2", "--progress", "false",
             "--out", str(tmp_path / "one.json")])
    assert "muon seed 0: validation" in capsys.readouterr().out
    assert load_results(tmp_path / "one.json")["config"]["arm"] == "muon"


def test_a_diverging_run_ends_with_its_step_and_no_loss():
    out = lm_experiment.run(replace(TINY, arm="adamw", lr=1e30, steps=10, eval_every=5))
    assert out["diverged_at"] is not None and out["val_bpb"] is None and out["samples"] == []
    assert lm_experiment.run(replace(TINY, arm="adamw", steps=2, eval_every=1))["diverged_at"] is None

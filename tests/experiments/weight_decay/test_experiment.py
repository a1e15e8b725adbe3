"""stiefel_mini.experiments.weight_decay: the sweep, its widget, and the other libraries' decay."""

from __future__ import annotations

import json

import pytest
import torch

from stiefel_mini.experiments.config import ConfigError, parse_config, replace
from stiefel_mini.experiments.weight_decay import config as wd_config
from stiefel_mini.experiments.weight_decay import experiment as wd_experiment
from stiefel_mini.experiments.weight_decay import readouts as wd_readouts

TINY = replace(wd_config.WeightDecaySweep(), steps=30, weight_decays=(0.0, 1.0, 10.0), snapshot_steps=(0, 10, 30),
               log_every=5, eval_size=64, batch_size=32)


@pytest.fixture(scope="module")
def history():
    return wd_experiment.sweep(TINY)


def test_stiefel_frames_bitwise_identical_across_decays(history):
    assert wd_readouts.frames_identical(history, "stiefel")
    assert not wd_readouts.frames_identical(history, "adamw")
    runs = history["runs"]["stiefel"]
    for r in runs[1:]:
        for key in ("norm_q", "entropy", "logit_absmax", "loss"):
            assert r[key] == runs[0][key]
    # And the frames did train, and stay on the manifold.
    assert wd_readouts.max_change(history, "stiefel", 2) == 0.0
    assert runs[0]["orth_q"][-1] < 1e-5
    first, last = runs[0]["snapshots"]["w_q"][0], runs[0]["snapshots"]["w_q"][-1]
    assert not torch.equal(first, last)


def test_adamw_decay_shrinks_qk_and_flattens_attention(history):
    runs = history["runs"]["adamw"]
    norms = [r["norm_q"][-1] for r in runs]
    assert norms[0] > norms[1] > norms[2]
    assert runs[2]["logit_absmax"][-1] < runs[0]["logit_absmax"][-1]
    assert runs[2]["entropy"][-1] > runs[0]["entropy"][-1]
    assert wd_readouts.max_change(history, "adamw", 2) > 0.1


def test_same_start_and_batches_for_every_arm(history):
    # Before any step the Q/K weights of all arms and decays are the same tensors.
    w0 = history["runs"]["adamw"][0]["snapshots"]["w_q"][0]
    for recs in history["runs"].values():
        for r in recs:
            assert torch.equal(r["snapshots"]["w_q"][0], w0)


def test_decay_scope_all_moves_the_frames_through_the_rest_of_the_model():
    cfg = replace(TINY, arms=("stiefel",), weight_decays=(0.0, 3.0), decay_scope="all")
    h = wd_experiment.sweep(cfg)
    assert not wd_readouts.frames_identical(h, "stiefel")
    assert h["runs"]["stiefel"][1]["orth_q"][-1] < 1e-5


def test_angular_update_matches_definition():
    W = torch.randn(2, 8, 3, dtype=torch.float64)
    V = torch.randn(2, 8, 3, dtype=torch.float64)
    a = wd_experiment.angular_update(W, W + 1e-3 * V)
    cos = (W * (W + 1e-3 * V)).sum((1, 2)) / (W.norm(dim=(1, 2)) * (W + 1e-3 * V).norm(dim=(1, 2)))
    torch.testing.assert_close(a, torch.acos(cos.clamp(max=1)), rtol=1e-5, atol=1e-9)
    assert wd_experiment.angular_update(W, 3.0 * W).abs().max() < 1e-15


def test_config_cli_parsing():
    cfg = parse_config(wd_config.WeightDecaySweep, ["--weight_decays", "0,0.5", "--decay_scope", "all"])
    assert cfg.weight_decays == (0.0, 0.5) and cfg.run.optimizer.decay_scope == "all"
    with pytest.raises(ConfigError):
        parse_config(wd_config.WeightDecaySweep, ["--decay_scope", "everything"])
    with pytest.raises(ValueError, match="unknown arm"):
        wd_experiment.run(replace(TINY.run, arm="sgd"))
    with pytest.raises(ValueError, match=">= 0"):
        wd_experiment.run(replace(TINY.run, weight_decay=-1.0))


def test_cli_writes_results(tmp_path, capsys):
    out = tmp_path / "wd.json"
    wd_experiment.main(["--steps", "6", "--weight_decays", "0,1", "--snapshot_steps", "0,6", "--log_every", "3",
              "--eval_size", "16", "--batch_size", "8", "--arms", "adamw,stiefel", "--out", str(out)])
    text = capsys.readouterr().out
    assert "stiefel: final W_Q, W_K bitwise identical across decays: True" in text
    data = json.loads(out.read_text())
    assert data["experiment"] == "weight_decay"
    assert data["frames_identical"] == {"adamw": False, "stiefel": True}
    assert data["provenance"]["config"]["steps"] == 6
    assert len(data["summary"]) == 4


def test_run_is_one_run_of_the_sweep(history):
    cfg = replace(TINY.run, arm="adamw", weight_decay=10.0)
    one = wd_experiment.run(cfg)
    assert one["norm_q"] == history["runs"]["adamw"][2]["norm_q"]
    assert torch.equal(one["final"]["w_q"], history["runs"]["adamw"][2]["final"]["w_q"])
    with pytest.raises(ValueError, match="removes the attention"):
        wd_experiment.build_model(TINY.run, "uniform")
    with pytest.raises(ValueError, match="unknown arm"):
        wd_experiment.sweep(replace(TINY, arms=("nope",)))


def test_summary_table_rows(history):
    rows = wd_readouts.summary_table(history)
    assert len(rows) == 3 * 3 and {r["arm"] for r in rows} == {"adamw", "stiefel", "qknorm"}
    stiefel = [r for r in rows if r["arm"] == "stiefel"]
    assert len({r["fingerprint"] for r in stiefel}) == 1 and all(r["max_change"] == 0.0 for r in stiefel)

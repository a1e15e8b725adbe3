"""Tests of the grokking task and model: the equations, the split, paired init, the last-position model."""
from __future__ import annotations

import math

import pytest
import torch

from stiefel_mini.experiments.config import replace
from stiefel_mini.experiments.grokking import config as grokking_config
from stiefel_mini.experiments.grokking import model as grokking_model
from stiefel_mini.geometry import orthogonality_error

def _small(arm: str, seed: int = 0, **kw) -> grokking_config.GrokkingConfig:
    return replace(grokking_config.GrokkingConfig(), p=11, d_model=16, n_heads=2, d_mlp=32, arm=arm, seed=seed,
                   progress=False, **kw)

@pytest.mark.parametrize("op", ["add", "sub", "div"])
def test_modular_table(op):
    p = 7
    x, y = grokking_model.modular_table(p, op)
    assert x.shape == ((p * p, 3) if op != "div" else (p * (p - 1), 3))
    assert (x[:, 2] == p).all()
    for (a, b, _), c in zip(x.tolist(), y.tolist()):
        if op == "add":
            assert c == (a + b) % p
        elif op == "sub":
            assert c == (a - b) % p
        else:
            assert (c * b) % p == a


def test_split_is_a_partition_fixed_by_seed():
    d0 = grokking_model.make_dataset(11, "add", 0.3, seed=0)
    d0b = grokking_model.make_dataset(11, "add", 0.3, seed=0)
    d1 = grokking_model.make_dataset(11, "add", 0.3, seed=1)
    assert len(d0["y_train"]) == round(0.3 * 121) and len(d0["y_val"]) == 121 - len(d0["y_train"])
    assert torch.equal(d0["x_train"], d0b["x_train"])
    assert not torch.equal(d0["x_train"], d1["x_train"])
    pairs = {tuple(r) for r in torch.cat([d0["x_train"], d0["x_val"]])[:, :2].tolist()}
    assert len(pairs) == 121  # train and val are disjoint and cover every equation


def test_paired_initialisation_across_arms():
    models = {arm: grokking_model.build_model(_small(arm)) for arm in grokking_config.ARM_NAMES}
    ref = dict(models["adamw"].named_parameters())
    for arm, model in models.items():
        for name, p in model.named_parameters():
            assert torch.equal(p, ref[name]), (arm, name)
    other = dict(grokking_model.build_model(_small("adamw", seed=1)).named_parameters())
    assert not torch.equal(other["embed.weight"], ref["embed.weight"])
    assert orthogonality_error(ref["attn.w_q"].detach()).max() < 1e-5


@pytest.mark.parametrize("arm", ["adamw", "stiefel"])
@pytest.mark.parametrize("logit_scale", ["fixed", "learned"])
def test_last_position_equals_full_model(arm, logit_scale):
    cfg = _small(arm, logit_scale=logit_scale)
    model = grokking_model.build_model(cfg)
    x = grokking_model.make_dataset(cfg.task.p, "add", 0.5, 0)["x_train"]
    torch.testing.assert_close(model(x), model.forward_full(x), rtol=1e-5, atol=1e-5)


def test_uniform_control_attends_uniformly():
    model = grokking_model.build_model(_small("uniform"))
    x = grokking_model.make_dataset(11, "add", 0.5, 0)["x_train"][:5]
    w = model.last_attention(x)
    torch.testing.assert_close(w, torch.full_like(w, 1 / 3))
    # The output does not depend on the Q/K frames at all.
    before = model(x)
    with torch.no_grad():
        model.attn.w_q.mul_(-3.0)
    torch.testing.assert_close(model(x), before)


def test_study_arms_share_initialisation_and_matched_temperature():
    cfg = grokking_config.PLANS["tiny"]
    models = {arm: grokking_model.build_model(replace(cfg, arm=arm)) for arm in grokking_config.STUDY_ARMS}
    ref = dict(models["adamw"].named_parameters())
    for arm, model in models.items():
        for name, p in model.named_parameters():
            if name != "attn.log_scale":
                assert torch.equal(p, ref[name]), (arm, name)
    x = grokking_model.make_dataset(cfg.task.p, cfg.task.op, cfg.task.train_frac, cfg.seed)["x_train"]
    for arm in ("stiefel_learned", "frozen_learned"):
        rms = grokking_model.last_logits(models[arm], x).pow(2).mean(dim=(0, 2)).sqrt()  # (H,)
        torch.testing.assert_close(rms, torch.full_like(rms, cfg.model.logit_rms_init))
    torch.testing.assert_close(models["stiefel_learned"].attn.log_scale, models["frozen_learned"].attn.log_scale)
    # QK-norm keeps its own gain; the fixed-scale AdamW arm's logits are far smaller.
    assert models["qknorm"].attn.scale()[0].item() == pytest.approx(math.sqrt(cfg.model.d_model // cfg.model.n_heads))
    assert grokking_model.last_logits(models["adamw"], x).pow(2).mean().sqrt() < 0.5 * cfg.model.logit_rms_init
    with pytest.raises(ValueError, match="learned"):
        grokking_model.match_logit_scale(models["adamw"], x, 1.0)

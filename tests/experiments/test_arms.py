"""Tests of stiefel_mini.experiments.arms: the arm vocabulary and the one optimizer factory."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from stiefel_mini.attention import QKNormSelfAttention, make_attention
from stiefel_mini.experiments import arms
from stiefel_mini.geometry import orthogonality_error
from stiefel_mini.optim import StiefelAdam


def test_arm_spec_by_name_and_code():
    assert arms.arm_spec("A1").name == "stiefel" and arms.arm_spec("stiefel").label == "A1"
    assert arms.arm_spec("qknorm").label == "qknorm"
    codes = [a.code for a in arms.ARMS.values() if a.code]
    assert len(codes) == len(set(codes)), "an arm code is used twice"
    with pytest.raises(ValueError, match="choose a name"):
        arms.arm_spec("nope")
    with pytest.raises(ValueError, match="unknown Q/K rule"):
        arms.Arm("x", "sgd")


def _model(arm: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(make_attention(16, 2, 4, **arms.arm_spec(arm).module_flags()),
                               torch.nn.Linear(16, 16))


@dataclass
class OptCfg:
    lr: float = 1e-2
    betas: tuple[float, float] = (0.9, 0.98)
    weight_decay: float = 1.0
    unrelated: int = 3


def test_optimizer_options_reads_only_optimizer_fields():
    assert arms.optimizer_options(OptCfg()) == {"lr": 1e-2, "betas": (0.9, 0.98), "weight_decay": 1.0}


@pytest.mark.parametrize("arm", sorted(arms.ARMS))
def test_make_optimizer_arms(arm):
    spec = arms.arm_spec(arm)
    model = _model(arm)
    attn = model[0]
    assert isinstance(attn, QKNormSelfAttention) == spec.qk_norm
    assert attn.w_q.requires_grad == (spec.qk not in ("frozen", "none"))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = arms.make_optimizer(model, arm, **arms.optimizer_options(OptCfg()))
    assert isinstance(opt, StiefelAdam) == (spec.qk == "stiefel")
    x = torch.randn(3, 5, 16)
    for _ in range(3):
        opt.zero_grad()
        model(x).pow(2).sum().backward()
        opt.step()
    # The factory changes no parameter itself: only the steps do, and never frozen Q/K.
    assert torch.equal(attn.w_q, before["0.w_q"]) == (spec.qk in ("frozen", "none"))
    if spec.stiefel:
        assert orthogonality_error(attn.w_q.detach()).max() < 1e-4
    groups = {g["name"]: g for g in opt.param_groups}
    assert groups["decay"]["weight_decay"] == 1.0 and groups["no_decay"]["weight_decay"] == 0.0
    qk = groups.get("frames") or groups.get("qk")
    if spec.qk in ("frozen", "none"):
        assert qk is None
    elif spec.qk in ("adamw_nodecay", "adamw_polar", "stiefel"):
        assert qk["weight_decay"] == 0.0
    else:
        assert qk["weight_decay"] == 1.0
    if spec.qk == "adamw_scaled":
        assert qk["lr"] == pytest.approx(1e-2 / (16 * 4) ** 0.5)
    if spec.qk == "stiefel":
        assert qk["second_moment"] == spec.options.get("second_moment", "frame") and qk["stiefel"]


def test_make_optimizer_frame_options_and_qk_decay():
    model = _model("stiefel")
    opt = arms.make_optimizer(model, "stiefel", lr=1e-3, frame_lr=0.05, max_step=None, qk_weight_decay=3.0)
    frames = next(g for g in opt.param_groups if g["name"] == "frames")
    assert frames["lr"] == 0.05 and frames["max_step"] is None and frames["weight_decay"] == 3.0
    model = _model("adamw")
    opt = arms.make_optimizer(model, "adamw", lr=1e-3, weight_decay=0.1, qk_weight_decay=2.0)
    groups = {g["name"]: g["weight_decay"] for g in opt.param_groups}
    assert groups == {"qk": 2.0, "decay": 0.1, "no_decay": 0.0}


def test_uncapped_arm_drops_only_the_trust_cap():
    capped = arms.make_optimizer(_model("stiefel"), "stiefel", lr=1e-3, frame_lr=1.0, max_step=0.1)
    uncapped = arms.make_optimizer(_model("stiefel_nocap"), "stiefel_nocap", lr=1e-3, frame_lr=1.0, max_step=0.1)
    a, b = ([g for g in o.param_groups if g.get("stiefel")][0] for o in (capped, uncapped))
    assert a["max_step"] == 0.1 and b["max_step"] is None
    assert {k: v for k, v in a.items() if k not in ("params", "max_step")} == \
        {k: v for k, v in b.items() if k not in ("params", "max_step")}


def test_frozen_arm_needs_a_frozen_model():
    model = _model("stiefel")  # Q/K trainable
    with pytest.raises(ValueError, match="train_qk=False"):
        arms.make_optimizer(model, "frozen", lr=1e-3)


@pytest.mark.parametrize("arm", sorted(arms.ARMS))
def test_lr_and_frame_lr_reach_their_groups_through_the_tables(arm):
    spec = arms.arm_spec(arm)
    opt = arms.make_optimizer(_model(arm), arm, lr=0.002, frame_lr=0.3)
    assert type(opt) is spec.rule.optimizer and opt.defaults["lr"] == 0.002
    groups = {g["name"]: g for g in opt.param_groups}
    assert groups["decay"]["lr"] == 0.002
    expected = {"frames": 0.3, "qk": 0.002 / 8 if spec.qk == "adamw_scaled" else 0.002, None: None}[spec.rule.group]
    if expected is not None:
        assert groups[spec.rule.group]["lr"] == pytest.approx(expected, rel=1e-15)
    for key, value in spec.options.items():
        assert groups[spec.rule.group][key] == value

"""The language model's arms: one start per seed, every parameter trained by exactly one optimizer."""

from __future__ import annotations

import math

import pytest
import torch

from stiefel_mini import StiefelAdam
from stiefel_mini.experiments.config import replace
from stiefel_mini.experiments.lm.config import LM_ARMS, PRESETS
from stiefel_mini.experiments.lm.model import (FRAME_ARMS, build_model, gpt2, gpt2_parameter_count, lr_factor,
                                               make_optimizers, parameter_roles, scale_growth_bound)
from stiefel_mini.experiments.reference_optimizers import Muon
from stiefel_mini.geometry import orthogonality_error, project

CFG = replace(PRESETS["tiny"], vocab_size=64, d_model=32, n_head=2, n_layer=2, context=16)


def _groups(arm: str):
    model = build_model(replace(CFG, arm=arm))
    opts = make_optimizers(model, replace(CFG, arm=arm))
    names = {id(p): n for n, p in model.named_parameters()}
    return model, [(type(o), g, names[id(p)]) for o in opts for g in o.param_groups for p in g["params"]]


@pytest.mark.parametrize("arm", sorted(LM_ARMS))
def test_every_trainable_parameter_is_in_exactly_one_group(arm):
    model, placed = _groups(arm)
    trainable = sorted(n for n, p in model.named_parameters() if p.requires_grad)
    assert sorted(n for _, _, n in placed) == trainable


@pytest.mark.parametrize("arm", ["muon", "muon_stiefel"])
def test_muon_trains_only_the_hidden_matrices(arm):
    _, placed = _groups(arm)
    muon = sorted(n for cls, _, n in placed if cls is Muon)
    hidden = ("attn.c_attn.rest_weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
    qk = ("attn.c_attn.q_weight", "attn.c_attn.k_weight") if arm == "muon" else ()
    assert muon == sorted(f"transformer.h.{i}.{n}" for i in range(CFG.model.n_layer) for n in hidden + qk)
    others = [n for cls, _, n in placed if cls is not Muon]
    assert all("wte" in n or "wpe" in n or "ln" in n or "bias" in n or "_weight" in n for n in others)


@pytest.mark.parametrize("arm", ["stiefel", "muon_stiefel"])
def test_the_frames_go_to_stiefel_adam_undecayed(arm):
    _, placed = _groups(arm)
    frames = [(cls, g) for cls, g, n in placed if n.endswith(("q_weight", "k_weight"))]
    assert frames and all(cls is StiefelAdam and g["stiefel"] and g["weight_decay"] == 0.0 for cls, g in frames)
    assert all(g["lr"] == CFG.optimizer.frame_lr for _, g in frames)


def test_the_frozen_arm_trains_no_frame():
    model, placed = _groups("frozen")
    assert not any(n.endswith(("q_weight", "k_weight")) for _, _, n in placed)
    assert all(not p.requires_grad for n, p in model.named_parameters() if n.endswith(("q_weight", "k_weight")))


def test_every_arm_of_a_seed_starts_from_the_same_weights():
    plain = dict(build_model(replace(CFG, arm="adamw")).named_parameters())
    for arm in sorted(LM_ARMS):
        model = dict(build_model(replace(CFG, arm=arm)).named_parameters())
        for name, p in model.items():
            if arm in FRAME_ARMS and name.endswith(("q_weight", "k_weight")):
                torch.testing.assert_close(p, project(plain[name]))  # each head's polar factor
                assert orthogonality_error(p).max() < 1e-5
            else:
                assert torch.equal(p, plain[name]), (arm, name)
    other = dict(build_model(replace(CFG, arm="adamw", seed=1)).named_parameters())
    assert not torch.equal(other["transformer.wte.weight"], plain["transformer.wte.weight"])


def test_roles_split_embeddings_matrices_and_vectors():
    roles = parameter_roles(build_model(replace(CFG, arm="adamw")))
    assert [p.ndim for p in roles["vector"]] == [1] * len(roles["vector"])
    assert len(roles["embedding"]) == 2  # token (tied with the output layer) and position
    assert len(roles["qk"]) == 2 * CFG.model.n_layer and not roles["frames"]


def test_the_schedule_warms_up_then_falls_to_its_floor():
    steps, w = 100, 5
    assert [lr_factor(s, steps, 0.05, 0.1) for s in range(w)] == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0])
    assert lr_factor(w, steps, 0.05, 0.1) == pytest.approx(1.0)
    assert lr_factor(w + (steps - w) // 2, steps, 0.05, 0.1) == pytest.approx(0.55, abs=0.01)
    assert lr_factor(steps, steps, 0.05, 0.1) == pytest.approx(0.1)


def test_a_bad_arm_or_width_is_refused():
    with pytest.raises(ValueError, match="unknown arm"):
        build_model(replace(CFG, arm="sgd"))
    with pytest.raises(ValueError, match="multiple of n_head"):
        build_model(replace(CFG, n_head=3))


def _adam_scales(steps, lr, grad):
    """Two log-scales trained by Adam under the study's schedule; ``grad(t)`` gives their gradient."""
    a = torch.zeros(2, requires_grad=True)
    opt = torch.optim.Adam([a], lr=lr, betas=(0.9, 0.95))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, steps, 0.25, 0.1))
    for t in range(steps):
        a.grad = grad(t)
        opt.step()
        sched.step()
    return a.detach().sum().exp().item()


def test_two_adam_scales_grow_by_the_bound_when_every_gradient_agrees_and_less_otherwise():
    steps, lr = 200, 0.01
    bound = scale_growth_bound(steps, lr, 0.25, 0.1)
    # 50 warm-up factors (s + 1) / 50 sum to 25.5; the cosine's 150, 0.1 + 0.45 (1 + cos(pi j / 150)), to
    # 0.55 * 150 + 0.45, since cos(pi j / 150) over j < 150 sums to 1 (the terms pair off, j = 0 is left).
    assert math.log(bound) == pytest.approx(2 * lr * (25.5 + 0.55 * 150 + 0.45), rel=1e-9)
    assert _adam_scales(steps, lr, lambda t: -torch.ones(2)) == pytest.approx(bound, rel=1e-5)
    g = torch.Generator().manual_seed(0)
    noisy = _adam_scales(steps, lr, lambda t: -0.5 + torch.randn(2, generator=g))
    assert 1.0 < noisy < 0.8 * bound
    assert scale_growth_bound(steps, lr, 0.25, 0.1, n_scales=1) == pytest.approx(math.sqrt(bound))
    with pytest.raises(ValueError, match="steps >= 1"):
        scale_growth_bound(0, lr, 0.25, 0.1)


@pytest.mark.parametrize("arm", ["adamw", "stiefel"])
@pytest.mark.parametrize("shape", [dict(), dict(n_layer=2, d_model=96, n_head=3, context=40, vocab_size=300)])
def test_the_parameter_count_is_the_built_models_unconverted_and_converted(arm, shape):
    cfg = replace(PRESETS["cpu"], arm=arm, **shape)
    count = gpt2_parameter_count(cfg.model)
    assert count == sum(p.numel() for p in gpt2(cfg).parameters())
    assert count == sum(p.numel() for p in build_model(cfg).parameters())

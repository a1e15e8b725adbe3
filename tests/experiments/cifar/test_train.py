"""Tests of one CIFAR-10 run: seeding, the model, paired starts, each arm, the measurements.

Everything runs on the tiny CIFAR-shaped ImageFolder set of `conftest.py` (never the real data).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from stiefel_mini.experiments import runtime
from stiefel_mini.experiments.cifar import config as cifar_config
from stiefel_mini.experiments.cifar import train as cifar_train
from stiefel_mini.experiments.cifar.config import PLANS, CifarConfig
from stiefel_mini.experiments.config import replace
from stiefel_mini.geometry import orthogonality_error


def r2_cfg(root: Path, **kw) -> CifarConfig:
    return replace(PLANS["r2_tiny"].run, data_dir=str(root), **kw)


def test_seeding_v0_is_the_committed_scheme_and_streams_the_package_rule():
    # The package rule is the default; the plans made with v0 name it, and so do stored configs by
    # leaving the field out.
    assert CifarConfig().seeding == "streams" and cifar_config.stored_config({"seed": 1}).run.seeding == "v0"
    assert {name for name, c in PLANS.items() if c.run.seeding == "v0"} == {"cpu", "gpu", "repro", "live"}
    cfg = replace(PLANS["repro"].run, seed=2)
    draw = lambda g: torch.rand(3, generator=g)  # noqa: E731
    assert torch.equal(draw(cifar_train.stream(cfg, "subset")), draw(torch.Generator().manual_seed(10_002)))
    assert torch.equal(draw(cifar_train.stream(cfg, "batches")), draw(torch.Generator().manual_seed(2)))
    assert torch.equal(draw(cifar_train.stream(cfg, "fixed")), draw(torch.Generator().manual_seed(12_345)))
    new = replace(cfg, seeding="streams")
    assert torch.equal(draw(cifar_train.stream(new, "subset")), draw(runtime.generator(2, "subset")))
    assert torch.equal(draw(cifar_train.stream(new, "fixed")), draw(cifar_train.stream(replace(new, seed=5), "fixed")))


def test_vit_shapes_and_patches():
    cfg = replace(PLANS["repro"].run, patch_size=8)
    model = cifar_train.build_model(cfg, "A1")
    x = torch.randn(5, 3, 32, 32)
    assert model.patches(x).shape == (5, 16, 192)
    # Patch t = (row, col) holds pixels [8 row : 8 row + 8, 8 col : 8 col + 8] of every channel.
    assert torch.equal(model.patches(x)[:, 6].reshape(5, 3, 8, 8), x[:, :, 8:16, 16:24])
    assert model(x).shape == (5, 10)
    wide = replace(cfg, patch_size=4)
    assert cifar_train.build_model(wide, "A0").patches(x).shape == (5, 64, 48)


def test_paired_starts_share_every_weight():
    cfg = PLANS["repro"].run
    plain = cifar_train.build_model(cfg, "A0").state_dict()
    framed = cifar_train.build_model(cfg, "A1").state_dict()
    assert plain.keys() == framed.keys()
    for name in plain:
        assert torch.equal(plain[name], framed[name]), name
    for p in cifar_train.build_model(cfg, "A1").qk_parameters():  # the shared start is a frame
        assert orthogonality_error(p.detach()).max() < 1e-5
    other_seed = cifar_train.build_model(replace(cfg, seed=1), "A1").state_dict()
    assert not torch.equal(other_seed["embed.weight"], framed["embed.weight"])


@pytest.mark.parametrize("arm", cifar_config.ALL_ARMS)
def test_each_arm_trains_and_keeps_its_invariant(tiny_cfg, tiny_root, arm):
    h = cifar_train.run(tiny_cfg(tiny_root, arm=arm, epochs=1))
    assert h["arm"] == arm and math.isfinite(h["test_loss"])
    assert h["train_loss"][-1] < h["train_loss"][0] or arm == "A3"
    if arm == "A3":
        assert h["qk_step_mean"] == 0.0 and h["qk_drift"] == 0.0
    else:
        assert h["qk_step_mean"] > 0.0
    if arm in ("A1", "A3", "A5", "A7"):  # Q/K stay frames
        assert h["orth_error"] < 1e-4


def test_stiefel_steps_are_smaller_than_adamw_steps(tiny_cfg, tiny_root):
    a0 = cifar_train.run(tiny_cfg(tiny_root, arm="A0", epochs=1))
    a1 = cifar_train.run(tiny_cfg(tiny_root, arm="A1", epochs=1))
    a4 = cifar_train.run(tiny_cfg(tiny_root, arm="A4", epochs=1))
    # AdamW moves each of the n*p entries by about lr; StiefelAdam moves each frame by about lr.
    assert a1["qk_step_mean"] < a0["qk_step_mean"] / 5
    assert a4["qk_step_mean"] < a0["qk_step_mean"] / 5


def test_fixed_steps_do_not_depend_on_the_subset_size(tiny_root):
    small = cifar_train.run(r2_cfg(tiny_root, arm="A0", train_fraction=0.5, steps=9))
    full = cifar_train.run(r2_cfg(tiny_root, arm="A0", train_fraction=1.0, steps=9))
    assert small["steps_total"] == full["steps_total"] == 9 and small["n_train"] == full["n_train"] // 2
    assert small["step"] == full["step"] == [2, 4, 6, 8, 9]
    assert len(small["max_logit"]) == len(small["step"]) and len(small["attn_entropy"]) == len(small["step"])
    assert len(full["max_logit_final"]) == 1 and 0 < full["attn_entropy_final"][0] <= math.log(16) + 1e-6


def test_attention_stats_match_the_block_logits():
    cfg = replace(PLANS["r2_tiny"].run, depth=2)
    model = cifar_train.build_model(cfg, "A0")
    x = torch.randn(4, 3, 32, 32)
    stats = cifar_train.attention_stats(model, x)
    h = model.embed(model.patches(x)) + model.pos
    for i, block in enumerate(model.blocks):
        logits = block.attn.logits(block.norm1(h))  # (B, H, T, T)
        assert stats["max_logit"][i] == pytest.approx(logits.abs().max().item(), rel=1e-5)
        ent = -(logits.softmax(-1) * logits.log_softmax(-1)).sum(-1).mean().item()
        assert stats["entropy"][i] == pytest.approx(ent, rel=1e-5)
        h = block(h)


def test_swept_lrs_per_arm():
    cfg = PLANS["r2_tiny"]
    assert cifar_config.swept_lrs(cfg, "A0") == [(1e-3, None), (3e-3, None)]
    lr = cfg.run.optimizer.lr
    assert cifar_config.swept_lrs(cfg, "A1") == [(lr, 1e-2), (lr, 0.3)]
    plain = replace(cfg, lrs=(), frame_lrs=(), frame_lr=0.05)
    assert cifar_config.swept_lrs(plain, "qknorm") == [(lr, None)]
    assert cifar_config.swept_lrs(plain, "A5") == [(lr, 0.05)]


def test_trust_cap_binds_at_large_frame_lr(tiny_root):
    h = cifar_train.run(r2_cfg(tiny_root, arm="A1", frame_lr=100.0, steps=4))
    heads = cifar_train.build_model(PLANS["r2_tiny"].run, "A1").attention_modules()[0].n_heads
    n_frames = 2 * heads  # Q and K per head
    # Each frame moves at most max_step, so all of them together by at most max_step * sqrt(n_frames).
    assert h["qk_step_mean"] <= PLANS["r2_tiny"].run.optimizer.max_step * math.sqrt(n_frames) * (1 + 1e-4)
    assert h["orth_error"] < 1e-4

"""The fourth study's recipes: who trains what, at which lr, the unit start, and the whole-matrix frames."""

from __future__ import annotations

import pytest
import torch

from stiefel_mini import StiefelAdam, StiefelMuon
from stiefel_mini.experiments.config import replace
from stiefel_mini.experiments.lm.arms import WHOLE_MATRICES, build, optimizers
from stiefel_mini.experiments.lm.config import PRESETS
from stiefel_mini.experiments.lm.experiment import train_step
from stiefel_mini.experiments.lm.plans import RECIPES
from stiefel_mini.geometry import orthogonality_error
from stiefel_mini.groups import is_frame

pytest.importorskip("transformers")
CFG = replace(PRESETS["tiny"], seed=3)
POINT = {"lr": 2e-3, "warmup_frac": 0.05, "frame_lr": 0.05, "max_step": 1.0, "muon_lr": 0.02, "scale_lr": 0.07,
         "max_iter": 1}


def _lr_of(opt, p):
    return next(g.get("adamw_lr", g["lr"]) if g.get("role") == "adamw" else g["lr"]
                for g in opt.param_groups if any(q is p for q in g["params"]))


@pytest.mark.quick
def test_the_stiefel_recipes_start_at_unit_temperature_and_train_the_scale_at_its_own_lr():
    for recipe in ("stiefel", "stiefel_muon"):
        model = build(recipe, CFG)
        opt = optimizers(recipe, model, CFG, POINT)[0]
        scales = [p for n, p in model.named_parameters() if n.endswith("log_scale")]
        assert scales and all(torch.equal(p, torch.zeros_like(p)) for p in scales)
        assert all(_lr_of(opt, p) == 0.07 for p in scales)
        assert isinstance(opt, StiefelAdam if recipe == "stiefel" else StiefelMuon)


@pytest.mark.quick
def test_qk_norm_gains_take_their_own_lr_and_no_decay():
    for recipe in ("adamw_qknorm", "muon_qknorm"):
        model = build(recipe, CFG)
        opt = optimizers(recipe, model, CFG, POINT)[0]
        gains = [p for n, p in model.named_parameters() if n.endswith(("q_gain", "k_gain"))]
        assert len(gains) == 2 * CFG.model.n_layer
        for p in gains:
            g = next(g for g in opt.param_groups if any(q is p for q in g["params"]))
            assert _lr_of(opt, p) == 0.07 and g.get("adamw_weight_decay", g.get("weight_decay")) == 0.0


@pytest.mark.quick
def test_all_stiefel_holds_every_hidden_matrix_whole_on_the_manifold():
    model = build("all_stiefel", CFG)
    frames = [n for n, p in model.named_parameters() if is_frame(p)]
    assert len(frames) == 4 * CFG.model.n_layer and all(n.endswith(WHOLE_MATRICES) for n in frames)
    assert not any(n.endswith("log_scale") or "gain" in n for n, _ in model.named_parameters())
    opt = optimizers("all_stiefel", model, CFG, POINT)[0]
    assert {g["role"] for g in opt.param_groups} == {"frame", "adamw"}
    assert all(g["max_iter"] == 1 and g["lr"] == 0.05 for g in opt.param_groups if g["role"] == "frame")
    params = [p for p in model.parameters() if p.requires_grad]
    g = torch.Generator().manual_seed(0)
    before = [p.detach().clone() for p in model.parameters() if is_frame(p)]
    for _ in range(3):
        x = torch.randint(0, CFG.model.vocab_size, (2, 16), generator=g)
        train_step(model, [opt], x, x, params, 1.0)
    after = [p.detach() for p in model.parameters() if is_frame(p)]
    assert max(float(orthogonality_error(w).max()) for w in after) < 1e-4
    assert all(not torch.equal(a, b) for a, b in zip(after, before))


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_each_recipe_trains(recipe):
    model = build(recipe, CFG)
    opts = optimizers(recipe, model, CFG, POINT)
    params = [p for p in model.parameters() if p.requires_grad]
    x = torch.randint(0, CFG.model.vocab_size, (4, 16), generator=torch.Generator().manual_seed(1))
    losses = [train_step(model, opts, x, x.roll(1, 1), params, 1.0).item() for _ in range(8)]
    assert losses[-1] < losses[0]
    with pytest.raises(ValueError, match="unknown recipe"):
        build("adam", CFG)

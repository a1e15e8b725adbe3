"""Round 2's arms: the same initial function, who trains what, and one tiny run of each arm."""

from __future__ import annotations

import pytest
import torch

from stiefel_mini import StiefelMuon, StiefelAdam
from stiefel_mini.experiments.config import replace
from stiefel_mini.experiments.lm.config import PRESETS
from stiefel_mini.experiments.lm.round2 import ARMS2, DEFAULTS, USES2
from stiefel_mini.experiments.lm.round2_run import _muon_groups, build, run_point, setup_for

pytest.importorskip("transformers")
CFG = replace(PRESETS["tiny"], seed=3)


def _point(arm, **kw):
    return {"arm": arm, "seed": 3, "phase": "sweep", "steps": 4,
            **{k: (DEFAULTS[k] if k in USES2[arm] else None) for k in DEFAULTS}, **kw}


@pytest.mark.quick
def test_every_arm_without_qk_norm_starts_from_the_same_function():
    x = torch.randint(0, CFG.model.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
    ref = build("adamw", CFG).eval()(input_ids=x).logits
    for arm in ("muon", "stiefel", "stiefel_muon"):
        out = build(arm, CFG).eval()(input_ids=x).logits
        # The Stiefel arms' frames are the polar factors of the same weights, their scale learned from them.
        torch.testing.assert_close(out, ref, rtol=0, atol=0 if arm == "muon" else 5e-2)


@pytest.mark.quick
def test_who_trains_what():
    for arm, per_head in (("muon", True), ("muon", False), ("stiefel_muon", True)):
        model = build(arm, CFG)
        groups = _muon_groups(model, CFG, per_head)
        opt = StiefelMuon(groups, in_out=True)
        roles = {id(p): (g["role"], g["heads"], g["fused"]) for g in opt.param_groups for p in g["params"]}
        for name, p in model.named_parameters():
            role = roles[id(p)]
            if name.endswith("c_attn.weight"):
                assert role == ("muon", CFG.model.n_head if per_head else 1, 3)
            elif name.endswith("rest_weight"):
                assert role == ("muon", CFG.model.n_head if per_head else None, 1)
            elif name.endswith(("q_weight", "k_weight")):
                assert role[0] == "frame"
            elif "wte" in name or "wpe" in name or p.dim() == 1:
                assert role[0] == "adamw"
            else:
                assert role[0] == "muon"
    _, opts = setup_for(_point("stiefel"))(CFG, 0)
    assert isinstance(opts[0], StiefelAdam)


@pytest.mark.parametrize("arm", sorted(ARMS2))
def test_each_arm_runs_and_records_its_settings(arm):
    r = run_point(replace(CFG, eval_every=2, samples=0), _point(arm, per_head=True if "muon" in arm else None),
                  {"git_commit": "abc", "git_dirty": False})
    assert r["val_bpb"] > 0 and r["steps"] == 4 and r["qk_norm"] == arm.endswith("_qknorm")
    assert r["logit_scale"] == ("learned" if arm in ("stiefel", "stiefel_muon") else None)
    assert len(r["history"]["max_logit"]) == len(r["history"]["step"]) == 3
    assert r["max_logit"] == r["history"]["max_logit"][-1] and r["min_entropy"] > 0
    assert r["device"] == "cpu"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("arm", sorted(ARMS2))
def test_each_arm_runs_on_cuda_and_says_so(arm):
    point = _point(arm, per_head=True if "muon" in arm else None, steps=20)
    cpu, gpu = (run_point(replace(CFG, eval_every=10, samples=1, device=d), point, {"git_commit": "abc", "git_dirty": False})
                for d in ("cpu", "cuda"))
    assert gpu["device"].startswith("cuda: ") and cpu["device"] == "cpu"
    assert gpu["history"]["val_bpb"][0] == pytest.approx(cpu["history"]["val_bpb"][0], abs=1e-4)
    assert gpu["val_bpb"] == pytest.approx(cpu["val_bpb"], abs=0.05)


@pytest.mark.parametrize("arm", ["stiefel", "stiefel_muon"])
def test_a_scale_lr_gives_the_learned_scales_a_group_of_their_own(arm):
    kw = {"per_head": True} if arm == "stiefel_muon" else {}
    model, (opt,) = setup_for(_point(arm, scale_lr=0.5, **kw))(CFG, 0)
    scales = {id(p) for n, p in model.named_parameters() if n.endswith("log_scale")}
    assert len(scales) == 2 * CFG.model.n_layer  # a query and a key scale per block
    (group,) = [g for g in opt.param_groups if {id(p) for p in g["params"]} & scales]
    assert {id(p) for p in group["params"]} == scales and group["lr"] == 0.5
    assert (group["adamw_weight_decay"] if arm == "stiefel_muon" else group["weight_decay"]) == 0.0
    with pytest.raises(ValueError, match="no learned logit scale"):
        setup_for(_point("muon", per_head=False, scale_lr=0.5))(CFG, 0)


@pytest.mark.parametrize("arm", ["stiefel", "stiefel_muon"])
def test_a_scale_lr_equal_to_lr_changes_nothing_and_a_larger_one_moves_the_scales(arm):
    kw = {"per_head": True} if arm == "stiefel_muon" else {}
    cfg, commit = replace(CFG, eval_every=2, samples=0), {"git_commit": "abc", "git_dirty": False}
    base, same, fast = (run_point(cfg, _point(arm, **kw, **extra), commit)
                        for extra in ({}, {"scale_lr": DEFAULTS["lr"]}, {"scale_lr": 0.5}))
    assert same["history"]["val_bpb"] == base["history"]["val_bpb"]  # a regrouping at the same lr
    assert same["scale_lr"] == DEFAULTS["lr"] and "scale_lr" not in base
    assert fast["history"]["max_logit"][-1] != base["history"]["max_logit"][-1]

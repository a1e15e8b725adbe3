"""Tests of stiefel_mini.groups: which parameters go to which param group, the frame mark (kept
through deepcopy, ``.to()``, state dicts, pickling and FSDP2 sharding), and where the helpers live."""

from __future__ import annotations

import copy
import io

import pytest
import torch
from torch import nn

from stiefel_mini import StiefelAdam, StiefelSelfAttention, frame_parameters, param_groups, qk_parameters
from stiefel_mini.attention import QKNormSelfAttention, make_attention
from stiefel_mini.geometry import orthogonality_error
from stiefel_mini.groups import is_frame, mark_frame
from stiefel_mini.mha import StiefelMultiheadAttention
from stiefel_mini.projection import FrameProjection

pytestmark = pytest.mark.usefixtures("one_thread")


def _ids(ps):
    return sorted(id(p) for p in ps)


class _Tiny(nn.Module):
    def __init__(self, stiefel=True):
        super().__init__()
        torch.manual_seed(9)
        self.emb = nn.Embedding(11, 8)
        self.attn = StiefelSelfAttention(8, 2, stiefel=stiefel, logit_scale="learned", bias=True)
        self.attn2 = StiefelSelfAttention(8, 4, stiefel=False)
        self.norm = nn.LayerNorm(8)
        self.head = nn.Linear(8, 11)


def test_param_groups_names_and_contents():
    m = _Tiny()
    groups = param_groups(
        m, weight_decay=0.1, frame_options={"lr": 0.02, "max_step": 0.05}, qk_options={"weight_decay": 0.0}
    )
    by_name = {g["name"]: g for g in groups}
    assert [g["name"] for g in groups] == ["frames", "qk", "scale", "decay", "no_decay"]
    a, a2 = m.attn, m.attn2
    assert _ids(by_name["scale"]["params"]) == _ids([a.log_scale])
    assert _ids(by_name["frames"]["params"]) == _ids([a.w_q, a.w_k])
    assert _ids(by_name["qk"]["params"]) == _ids([a2.w_q, a2.w_k])
    assert _ids(by_name["decay"]["params"]) == _ids(
        [m.emb.weight, a.v_proj.weight, a.out_proj.weight, a2.v_proj.weight, a2.out_proj.weight, m.head.weight]
    )
    assert _ids(by_name["no_decay"]["params"]) == _ids(
        [a.v_proj.bias, a.out_proj.bias, m.norm.weight, m.norm.bias, m.head.bias]
    )
    f = by_name["frames"]
    assert f["stiefel"] is True and f["weight_decay"] == 0.0 and f["lr"] == 0.02 and f["max_step"] == 0.05
    assert by_name["qk"]["weight_decay"] == 0.0
    assert by_name["decay"]["weight_decay"] == 0.1 and by_name["no_decay"]["weight_decay"] == 0.0
    # every trainable parameter exactly once
    listed = [p for g in groups for p in g["params"]]
    assert len(listed) == len({id(p) for p in listed}) == len(list(m.parameters()))
    assert _ids(frame_parameters(m)) == _ids([a.w_q, a.w_k])
    assert _ids(qk_parameters(m)) == _ids([a.w_q, a.w_k, a2.w_q, a2.w_k])
    # and StiefelAdam takes the groups as they are
    opt = StiefelAdam(groups, lr=1e-3)
    x = m.emb(torch.tensor([[1, 2, 3, 4]]))
    m.head(m.norm(m.attn2(m.attn(x)))).sum().backward()
    opt.step()


def test_frozen_parameters_are_left_out():
    m = _Tiny()
    m.attn.w_q.requires_grad_(False)
    m.attn.w_k.requires_grad_(False)
    m.head.bias.requires_grad_(False)
    groups = {g["name"]: g for g in param_groups(m)}
    assert "frames" not in groups  # an empty group is left out
    listed = {id(p) for g in groups.values() for p in g["params"]}
    for p in (m.attn.w_q, m.attn.w_k, m.head.bias):
        assert id(p) not in listed
    assert listed == {id(p) for p in m.parameters() if p.requires_grad}


def test_frozen_qk_are_left_out_of_the_param_groups():
    m = make_attention(16, 2, 4, train_qk=False)
    assert not m.w_q.requires_grad and not m.w_k.requires_grad
    names = {g["name"]: g["params"] for g in param_groups(m)}
    assert "frames" not in names and all(p.requires_grad for ps in names.values() for p in ps)


def test_the_helpers_live_in_groups_and_the_package_only():
    import stiefel_mini
    from stiefel_mini import attention, groups, optim

    for name in ("param_groups", "frame_parameters", "qk_parameters", "is_frame", "mark_frame"):
        assert getattr(groups, name) is getattr(stiefel_mini, name)
        assert name not in attention.__all__ and name not in optim.__all__
    for name in ("param_groups", "frame_parameters", "qk_parameters"):  # the old import paths are gone
        assert not hasattr(attention, name)
    assert not hasattr(optim, "param_groups")


# --------------------------------------------------------------------------------------------------
# defaults compose: a group that does not set an option takes the optimizer's


def test_groups_without_weight_decay_take_the_optimizers():
    m = _Tiny()
    opt = StiefelAdam(param_groups(m, frame_options={"lr": 0.02}), lr=1e-3, weight_decay=0.1)
    got = {g["name"]: g["weight_decay"] for g in opt.param_groups}
    assert got == {"frames": 0.0, "qk": 0.1, "scale": 0.0, "decay": 0.1, "no_decay": 0.0}
    # and the decay acts: one step on the decayed weights is torch.optim.AdamW's with weight_decay=0.1
    ref = copy.deepcopy(m)
    decayed = {g["name"]: g for g in param_groups(ref)}["decay"]["params"]
    adamw = torch.optim.AdamW(decayed, lr=1e-3, weight_decay=0.1)
    for model in (m, ref):
        for p in model.parameters():
            p.grad = torch.ones_like(p)
    opt.step()
    adamw.step()
    mine = {g["name"]: g for g in opt.param_groups}["decay"]["params"]
    for a, b in zip(mine, decayed):
        assert torch.equal(a, b)


def test_weight_decay_given_to_param_groups_is_set_and_other_options_are_left_to_the_optimizer():
    groups = {g["name"]: g for g in param_groups(_Tiny(), weight_decay=0.05)}
    assert groups["decay"]["weight_decay"] == groups["qk"]["weight_decay"] == 0.05
    for g in groups.values():
        # the scale's lr is its own by design (test below); every other option is the optimizer's
        assert not ({"betas", "eps", "max_step"} | ({"lr"} if g["name"] != "scale" else set())) & set(g), g.keys()


def test_the_docstrings_say_what_a_frame_lr_above_the_cap_does():
    from stiefel_mini import groups, optim

    for doc in (groups.param_groups.__doc__, optim.StiefelAdam.__doc__):
        text = " ".join(doc.split())
        assert "above ``max_step``" in text and "trust cap" in text


# --------------------------------------------------------------------------------------------------
# the frame mark


def _marked(model):
    return sorted(name for name, p in model.named_parameters() if is_frame(p))


def _holders(stiefel=True):
    torch.manual_seed(3)
    return nn.Sequential(StiefelSelfAttention(8, 2, stiefel=stiefel),
                         StiefelMultiheadAttention(8, 2, batch_first=True, stiefel=stiefel),
                         FrameProjection.from_weight(torch.randn(24, 8), torch.zeros(24), {"q": 2, "k": 2}, 4,
                                                     stiefel=stiefel)[0])


FRAMES = ["0.w_k", "0.w_q", "1.k_weight", "1.q_weight", "2.k_weight", "2.q_weight"]


def test_frames_are_marked_and_nothing_else():
    assert _marked(_holders()) == FRAMES
    assert _marked(_holders(stiefel=False)) == []
    assert _marked(QKNormSelfAttention(8, 2)) == []
    assert _ids(p for p in _holders().parameters() if is_frame(p)) != []
    m = _holders()
    assert _ids(p for p in m.parameters() if is_frame(p)) == _ids(frame_parameters(m))


def test_the_mark_survives_deepcopy_to_state_dict_and_assignment():
    m = _holders()
    assert _marked(copy.deepcopy(m)) == FRAMES
    assert _marked(m.to(torch.float64)) == FRAMES
    fresh = _holders()
    fresh.load_state_dict(m.state_dict())
    assert _marked(fresh) == FRAMES
    fresh.load_state_dict(m.state_dict(), assign=True)  # new parameter objects
    assert _marked(fresh) == FRAMES and fresh[0].w_q is not m[0].w_q
    with torch.device("meta"):
        empty = nn.Sequential(StiefelSelfAttention(8, 2), StiefelMultiheadAttention(8, 2, batch_first=True))
    assert _marked(empty.to_empty(device="cpu")) == FRAMES[:4]  # new parameter objects, marked again
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        assert _marked(_holders().to(torch.float64)) == FRAMES  # swapped parameter objects
    finally:
        torch.__future__.set_swap_module_params_on_conversion(False)
    buf = io.BytesIO()
    torch.save(m, buf)
    buf.seek(0)
    assert _marked(torch.load(buf, weights_only=False)) == FRAMES


def test_mark_frame_marks_any_matrix_and_refuses_a_vector():
    w = nn.Parameter(torch.eye(3))
    assert not is_frame(w) and mark_frame(w) is w and is_frame(w)
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        mark_frame(nn.Parameter(torch.ones(3)))


def _sharded_marks(rank: int, init: str, out: str) -> None:
    from datetime import timedelta

    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2, timeout=timedelta(seconds=60))
    try:
        m = _holders()
        for module in m:
            fully_shard(module)
        fully_shard(m)
        marked = _marked(m)
        opt = StiefelAdam(m.parameters(), lr=0.05)
        x = torch.randn(2, 3, 8, generator=torch.Generator().manual_seed(rank))
        for _ in range(3):
            opt.zero_grad()
            y = m[0](x)
            y = m[1](y, y, y, need_weights=False)[0]
            m[2](y).square().mean().backward()  # marked frames unsharded and resharded
            opt.step()
        errors = [orthogonality_error(p.full_tensor()).max().item() for p in frame_parameters(m)]
        if rank == 0:
            torch.save({"marked": marked, "after": _marked(m), "errors": errors}, out)
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                    reason="torch.distributed with gloo is not available")
def test_the_mark_survives_fsdp2_sharding_and_keeps_frames_on_the_manifold(tmp_path):
    import torch.multiprocessing as mp

    from tests.rendezvous import rendezvous

    out = str(tmp_path / "marks.pt")
    mp.spawn(_sharded_marks, args=(rendezvous(tmp_path), out), nprocs=2, join=True)
    got = torch.load(out)
    assert got["marked"] == got["after"] == FRAMES
    assert max(got["errors"]) < 1e-5


def _drift(opt_class, steps: int, monkeypatch, every: int = 5, **kwargs) -> tuple[list, float]:
    """``steps`` training steps of ``opt_class`` on a model holding frames in three kinds of module;
    returns the warnings raised and the largest distance from the manifold at the end."""
    import warnings

    from stiefel_mini import groups

    monkeypatch.setattr(groups, "CHECK_EVERY", every)
    torch.manual_seed(0)
    proj, _ = FrameProjection.from_weight(torch.randn(24, 8), None, {"q": 2, "k": 2}, 4)
    model = nn.ModuleDict({"attn": StiefelSelfAttention(8, 2), "mha": StiefelMultiheadAttention(8, 2), "proj": proj})
    opt = opt_class(model.parameters(), **kwargs)
    x = torch.randn(3, 5, 8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(steps):
            opt.zero_grad()
            loss = model["attn"](x).pow(2).mean() + model["mha"](x, x, x)[0].pow(2).mean() + model["proj"](x).pow(2).mean()
            loss.backward()
            opt.step()
    return caught, max(float(orthogonality_error(p.detach()).max()) for p in frame_parameters(model))


def test_frames_trained_by_adamw_warn_once_per_module_naming_the_stiefel_optimizers(monkeypatch):
    caught, error = _drift(torch.optim.AdamW, 30, monkeypatch, lr=1e-2)
    assert error > 0.1  # AdamW moved them off the manifold
    messages = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    first_step = [m for m in messages if m.startswith("AdamW holds 6 Stiefel frame(s)")]
    assert len(first_step) == 1  # the optimizer's own warning, at its first step
    messages = [m for m in messages if m not in first_step]
    assert len(messages) == 3, messages  # once per module, not once per check
    assert {m.split(".")[0] for m in messages} == {"StiefelSelfAttention", "StiefelMultiheadAttention",
                                                   "FrameProjection"}
    assert all("left the Stiefel manifold" in m and "StiefelAdam" in m and "StiefelMuon" in m for m in messages)


def test_frames_trained_by_a_stiefel_rule_never_warn(monkeypatch):
    caught, error = _drift(StiefelAdam, 30, monkeypatch, every=1, lr=1e-2)
    assert error < 1e-5 and not [w for w in caught if "manifold" in str(w.message)]


def test_the_check_is_skipped_in_eval_mode_and_when_turned_off(monkeypatch):
    from stiefel_mini import groups

    attn = StiefelSelfAttention(8, 2)
    with torch.no_grad():
        attn.w_q.mul_(2.0)  # off the manifold
    monkeypatch.setattr(groups, "CHECK_EVERY", 0)
    attn(torch.randn(1, 3, 8))  # no warning: turned off (pytest turns warnings into errors below)
    monkeypatch.setattr(groups, "CHECK_EVERY", 1)
    attn.eval()(torch.randn(1, 3, 8))
    with pytest.warns(UserWarning, match=r"StiefelSelfAttention\.w_q: a frame has left"):
        attn.train()(torch.randn(1, 3, 8))


def test_learned_logit_scales_get_a_group_of_their_own_lr_without_decay():
    from stiefel_mini.groups import DEFAULT_SCALE_LR

    model = nn.Sequential(StiefelSelfAttention(16, 2, logit_scale="learned"), QKNormSelfAttention(16, 2),
                          nn.LayerNorm(16))
    groups = {g["name"]: g for g in param_groups(model, weight_decay=0.1)}
    scales = [model[0].log_scale, model[1].log_scale]
    assert [id(p) for p in groups["scale"]["params"]] == [id(p) for p in scales]
    assert groups["scale"]["lr"] == DEFAULT_SCALE_LR != 1e-3 and groups["scale"]["weight_decay"] == 0.0
    assert all(id(p) not in {id(s) for s in scales} for p in groups["no_decay"]["params"])
    mine = {g["name"]: g for g in param_groups(model, scale_options={"lr": 0.05, "betas": (0.8, 0.9)})}
    assert mine["scale"]["lr"] == 0.05 and mine["scale"]["betas"] == (0.8, 0.9)
    # A multiplicative scheduler keeps the scale's lr in proportion to the others'.
    opt = StiefelAdam(param_groups(model), lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 ** s)
    opt.step()
    sched.step()
    lrs = {g["name"]: g["lr"] for g in opt.param_groups}
    assert lrs["scale"] == pytest.approx(0.5 * DEFAULT_SCALE_LR) and lrs["no_decay"] == pytest.approx(0.5e-3)


def test_scale_options_without_a_learned_scale_is_refused():
    with pytest.raises(ValueError, match="logit_scale='learned'"):
        param_groups(StiefelSelfAttention(16, 2), scale_options={"lr": 0.1})


@pytest.mark.parametrize("build", [
    lambda: StiefelSelfAttention(32, 4, logit_scale="learned"),
    lambda: make_attention(32, 4, logit_scale="learned"),
    lambda: StiefelMultiheadAttention(32, 4, logit_scale="learned"),
])
def test_a_module_built_from_scratch_starts_at_unit_temperature(build):
    """Unit temperature: the fixed ``1 / sqrt(d_head)`` of unit frames, whatever the seed."""
    module = build()
    scale = module.scale() if hasattr(module, "scale") else module.log_scale.exp()
    torch.testing.assert_close(scale, torch.full((4,), 8 ** -0.5))


def test_the_default_scale_lr_is_the_measured_best_and_its_neighbours_train():
    """DEFAULT_SCALE_LR against its measurement (the third language-model study's sweep, stored):
    within 0.005 bits per byte of the best scale lr for each Stiefel arm, and the values about 3x
    below and above it trained without diverging."""
    import json
    import statistics
    from pathlib import Path

    from stiefel_mini.groups import DEFAULT_SCALE_LR

    runs = json.loads((Path(__file__).resolve().parents[1] / "results/lm/round3.json").read_text())["runs"]
    for arm in ("stiefel_scale", "stiefel_muon_scale"):
        sweep = [r for r in runs if r["arm"] == arm and r["phase"] == "sweep"]
        means = {v: statistics.mean(r["val_bpb"] for r in sweep if r["scale_lr"] == v)
                 for v in {r["scale_lr"] for r in sweep}}
        assert means[DEFAULT_SCALE_LR] - min(means.values()) <= 0.005, (arm, means)
        near = [v for v in means if 2.5 <= max(v, DEFAULT_SCALE_LR) / min(v, DEFAULT_SCALE_LR) <= 3.5]
        assert len(near) == 2 and all(r["diverged_at"] is None for r in sweep if r["scale_lr"] in near)

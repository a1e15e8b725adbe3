"""Tests of stiefel_mini.groups: which parameters go to which param group, and the import paths
that reach the helpers."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from stiefel_mini import StiefelAdam, StiefelSelfAttention, frame_parameters, param_groups, qk_parameters
from stiefel_mini.attention import make_attention

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
    assert [g["name"] for g in groups] == ["frames", "qk", "decay", "no_decay"]
    a, a2 = m.attn, m.attn2
    assert _ids(by_name["frames"]["params"]) == _ids([a.w_q, a.w_k])
    assert _ids(by_name["qk"]["params"]) == _ids([a2.w_q, a2.w_k])
    assert _ids(by_name["decay"]["params"]) == _ids(
        [m.emb.weight, a.v_proj.weight, a.out_proj.weight, a2.v_proj.weight, a2.out_proj.weight, m.head.weight]
    )
    assert _ids(by_name["no_decay"]["params"]) == _ids(
        [a.log_scale, a.v_proj.bias, a.out_proj.bias, m.norm.weight, m.norm.bias, m.head.bias]
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


def test_the_helpers_are_one_object_on_every_import_path():
    import stiefel_mini
    from stiefel_mini import attention, groups, optim

    for name in ("param_groups", "frame_parameters", "qk_parameters"):
        assert getattr(attention, name) is getattr(groups, name) is getattr(stiefel_mini, name)
    assert optim.param_groups is groups.param_groups

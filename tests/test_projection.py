"""FrameProjection: the Q/K projection with per-head frames that replaces a Linear or a Conv1D."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from stiefel_mini.geometry import orthogonality_error, project
from stiefel_mini.groups import param_groups
from stiefel_mini.projection import FrameProjection

D, H, HD, REST = 12, 3, 4, 12  # fused Q|K|V: 3 heads of 4 for Q and K, 12 columns of V


def _weights(transposed: bool, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(D, 2 * H * HD + REST, generator=g)  # (in, out)
    b = torch.randn(2 * H * HD + REST, generator=g)
    return (w if transposed else w.T.contiguous()), b


@pytest.mark.parametrize("transposed", [False, True])
def test_unconstrained_copy_computes_exactly_what_the_replaced_projection_computed(transposed):
    w, b = _weights(transposed)
    proj, info = FrameProjection.from_weight(w, b, {"q": H, "k": H}, HD, transposed=transposed, stiefel=False)
    x = torch.randn(2, 5, D)
    expected = torch.addmm(b, x.view(-1, D), w).view(2, 5, -1) if transposed else F.linear(x, w, b)
    assert torch.equal(proj(x), expected)
    assert torch.equal(proj.weight, w)
    assert proj.frames() == [] and len(proj.qk_weights()) == 2
    assert info["q"].polar_distance == 0.0 == info["k"].polar_distance


@pytest.mark.parametrize("transposed", [False, True])
def test_each_head_becomes_the_polar_factor_of_its_own_block(transposed):
    w, b = _weights(transposed)
    proj, info = FrameProjection.from_weight(w, b, {"q": H, "k": H}, HD, transposed=transposed)
    w_io = w if transposed else w.T  # (in, out)
    for seg, offset in (("q", 0), ("k", H * HD)):
        frames = getattr(proj, f"{seg}_weight")
        assert frames.shape == (H, D, HD) and float(orthogonality_error(frames.detach()).max()) < 1e-5
        for h in range(H):
            block = w_io[:, offset + h * HD: offset + (h + 1) * HD]  # (in, hd): head h's columns
            torch.testing.assert_close(frames[h], project(block), atol=1e-6, rtol=0)
        whole = w_io[:, offset: offset + H * HD].reshape(D, H, HD).permute(1, 0, 2)
        dist = float(torch.linalg.norm(whole - project(whole)) / torch.linalg.norm(whole))
        assert info[seg].polar_distance == pytest.approx(dist, rel=1e-5)
    # V and the bias are copied as they are.
    assert torch.equal(proj.weight[..., 2 * H * HD:] if transposed else proj.weight[2 * H * HD:],
                       w[:, 2 * H * HD:] if transposed else w[2 * H * HD:])
    assert torch.equal(proj.bias, b)
    groups = {g["name"]: g for g in param_groups(proj)}
    assert [p.shape for p in groups["frames"]["params"]] == [(H, D, HD), (H, D, HD)]


def test_learned_scale_starts_at_the_mean_singular_value_and_brings_the_weight_closer():
    w, b = _weights(False)
    fixed, _ = FrameProjection.from_weight(w, b, {"q": H, "k": H}, HD)
    learned, info = FrameProjection.from_weight(w, b, {"q": H, "k": H}, HD, logit_scale="learned")
    blocks = w[: H * HD].reshape(H, HD, D)  # head h's rows of Q
    torch.testing.assert_close(learned.q_log_scale.exp(), torch.linalg.svdvals(blocks).mean(-1))
    torch.testing.assert_close(info["q"].gain, learned.q_log_scale.exp())
    assert torch.linalg.norm(learned.weight - w) < torch.linalg.norm(fixed.weight - w)
    assert {g["name"] for g in param_groups(learned)} == {"frames", "decay", "no_decay"}


def test_a_single_key_segment_replaces_a_k_proj():
    k = torch.nn.Linear(D, 2 * HD, bias=False)
    proj, _ = FrameProjection.from_weight(k.weight, None, {"k": 2}, HD, stiefel=False)
    x = torch.randn(3, D)
    assert proj.bias is None and proj.rest_weight is None and torch.equal(proj(x), k(x))


@pytest.mark.parametrize("kwargs, match", [
    ({"heads": {"v": 2}}, "heads must map"),
    ({"heads": {"q": 0}}, "heads must map"),
    ({"head_dim": D + 1}, "at most in_features"),
    ({"logit_scale": "free"}, "logit_scale"),
])
def test_bad_arguments_are_refused(kwargs, match):
    args = {"in_features": D, "heads": {"q": 2}, "head_dim": HD, **kwargs}
    with pytest.raises(ValueError, match=match):
        FrameProjection(**args)

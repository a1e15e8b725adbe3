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
    assert {g["name"] for g in param_groups(learned)} == {"frames", "scale", "decay", "no_decay"}


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


def _stiefel(transposed: bool, stiefel: bool = True):
    w, b = _weights(transposed)
    return FrameProjection.from_weight(w, b, {"q": H, "k": H}, HD, transposed=transposed, stiefel=stiefel)[0], b


@pytest.mark.parametrize("transposed", [False, True])
def test_a_weight_written_into_weight_lands_in_the_frames_reprojected_with_a_warning(transposed):
    proj, b = _stiefel(transposed)
    target, _ = _weights(transposed, seed=5)  # far from frames
    with pytest.warns(UserWarning, match=r"q/k heads of the weight written into it were off the Stiefel manifold"):
        with torch.no_grad():
            proj.weight.copy_(target)
    expected, _ = FrameProjection.from_weight(target, b, {"q": H, "k": H}, HD, transposed=transposed)
    assert torch.equal(proj.weight, expected.weight) and torch.equal(proj.bias, b)
    assert float(orthogonality_error(proj.q_weight.detach()).max()) < 1e-5
    before = proj.q_weight.detach().clone()
    with pytest.warns(UserWarning, match="off the Stiefel manifold"):
        torch.nn.init.normal_(proj.weight)  # nn.init, as model code re-initialises a layer
    assert not torch.equal(before, proj.q_weight) and float(orthogonality_error(proj.q_weight.detach()).max()) < 1e-5


@pytest.mark.parametrize("transposed", [False, True])
def test_writes_into_views_and_the_setter_land_too(transposed, recwarn):
    proj, _ = _stiefel(transposed)
    frames = proj.q_weight.detach().clone()
    rest = (slice(None), slice(2 * H * HD, None)) if transposed else (slice(2 * H * HD, None),)
    with torch.no_grad():
        proj.weight.data[rest].zero_()  # weight surgery on V only: the frames stay frames, no warning
    assert float(proj.rest_weight.detach().abs().max()) == 0.0
    torch.testing.assert_close(proj.q_weight.detach(), frames, atol=1e-6, rtol=0)
    with torch.no_grad():
        proj.weight[rest] = 1.0
    assert bool((proj.rest_weight == 1.0).all())
    other, _ = FrameProjection.from_weight(*_weights(transposed, seed=3), {"q": H, "k": H}, HD, transposed=transposed)
    proj.weight = other.weight  # frames already: they land as they are, no warning
    torch.testing.assert_close(proj.weight, other.weight, atol=1e-6, rtol=0)
    assert not [w for w in recwarn if "manifold" in str(w.message)]


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("views", ["chunk", "split", "unbind"])
def test_writes_into_the_pieces_of_chunk_split_and_unbind_land_too(transposed, views):
    proj, _ = _stiefel(transposed)
    dim = 1 if transposed else 0
    cut = {"chunk": lambda w: w.chunk(3, dim=dim), "split": lambda w: w.split(H * HD, dim=dim),
           "unbind": lambda w: w.unbind(dim=dim)}[views]
    with torch.no_grad():
        pieces = cut(proj.weight)
        pieces[-1].zero_()  # the last piece (V's last block, or its last row / column)
    last = proj.rest_weight.detach().select(dim, -1)
    assert float(last.abs().max()) == 0.0, f"a write into {views}()'s last piece did not land"
    with pytest.warns(UserWarning, match="off the Stiefel manifold"), torch.no_grad():
        torch.nn.init.normal_(cut(proj.weight)[0])  # Q's rows / columns: re-projected, with the warning
    assert float(orthogonality_error(proj.q_weight.detach()).max()) < 1e-5


def test_unconstrained_weights_take_writes_exactly_and_rank_deficient_frames_are_refused():
    proj, _ = _stiefel(False, stiefel=False)
    target, _ = _weights(False, seed=5)
    with torch.no_grad():
        proj.weight.copy_(target)
    assert torch.equal(proj.weight, target)
    frames, _ = _stiefel(False)
    before = frames.q_weight.detach().clone()
    with pytest.raises(ValueError, match="no closest frame"), torch.no_grad():
        frames.weight.zero_()
    assert torch.equal(frames.q_weight, before)
    with pytest.raises(ValueError, match=r"has shape \(36, 12\)"):
        frames.weight = torch.zeros(12, 36)


@pytest.mark.parametrize("transposed", [False, True])
def test_state_dict_holds_the_weight_in_the_replaced_layout_beside_the_frames(transposed):
    proj, b = _stiefel(transposed)
    state = proj.state_dict()
    assert torch.equal(state["weight"], proj.weight)
    x = torch.randn(2, 5, D)
    if not transposed:
        plain = torch.nn.Linear(D, proj.out_features)
        assert sorted(plain.load_state_dict(state, strict=False).unexpected_keys) == ["k_weight", "q_weight",
                                                                                      "rest_weight"]
        assert torch.equal(plain(x), proj(x))
    fresh, _ = FrameProjection.from_weight(*_weights(transposed, seed=4), {"q": H, "k": H}, HD, transposed=transposed)
    fresh.load_state_dict(state)  # strict: the weight entry is read, not unexpected
    assert torch.equal(fresh(x), proj(x))
    state["weight"] = 2 * state["weight"]  # edited after saving: it disagrees with the frames
    with pytest.raises(RuntimeError, match="disagrees with the frames"):
        fresh.load_state_dict(state)

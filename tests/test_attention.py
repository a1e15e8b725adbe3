"""Tests of stiefel_mini.attention: StiefelSelfAttention against a from-scratch reference, and the
spectral facts the constraint buys (the param groups: test_groups.py)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from stiefel_mini import StiefelAdam, StiefelSelfAttention, param_groups

F64 = torch.float64


pytestmark = pytest.mark.usefixtures("one_thread")


def make(seed=0, dtype=F64, **kw) -> StiefelSelfAttention:
    torch.manual_seed(seed)
    kw.setdefault("d_model", 12)
    kw.setdefault("n_heads", 3)
    return StiefelSelfAttention(**kw).to(dtype)


def reference(m: StiefelSelfAttention, x: torch.Tensor, mask=None) -> torch.Tensor:
    """Attention written out head by head: softmax(s_h (x W_Q^h)(x W_K^h)^T + mask) (x W_V^h), then W_O."""
    B, T, _ = x.shape
    dh = m.d_head
    if m.logit_scale == "learned":
        scales = m.log_scale.exp()
    else:
        scales = torch.full((m.n_heads,), dh**-0.5, dtype=x.dtype)
    heads = []
    for h in range(m.n_heads):
        q = x @ m.w_q[h]  # (B, T, dh)
        k = x @ m.w_k[h]
        v = x @ m.v_proj.weight[h * dh : (h + 1) * dh].T
        if m.v_proj.bias is not None:
            v = v + m.v_proj.bias[h * dh : (h + 1) * dh]
        logits = scales[h] * q @ k.transpose(-2, -1)  # (B, T, T)
        if m.causal:
            logits = logits.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        if mask is not None:
            mh = mask if mask.dim() < 4 else mask[:, h if mask.shape[1] > 1 else 0]
            if mask.dtype == torch.bool:
                logits = logits.masked_fill(~mh, float("-inf"))
            else:
                logits = logits + mh
        heads.append(torch.softmax(logits, dim=-1) @ v)
    y = torch.cat(heads, dim=-1)
    return m.out_proj(y)


def _masks(B, T, H, g):
    bool_mask = torch.rand(B, H, T, T, generator=g) > 0.4
    bool_mask |= torch.eye(T, dtype=torch.bool)  # every query sees at least itself
    return {
        "none": None,
        "bool-2d": bool_mask[0, 0],
        "bool-per-batch": bool_mask[:, :1],
        "bool-per-head": bool_mask,
        "float-2d": torch.randn(T, T, generator=g, dtype=F64),
        "float-per-head": torch.randn(B, H, T, T, generator=g, dtype=F64),
    }


@pytest.mark.parametrize("logit_scale", ["fixed", "learned"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d_head", [None, 5], ids=["d_head=d/h", "d_head=5"])
def test_forward_matches_the_reference(logit_scale, causal, d_head):
    m = make(logit_scale=logit_scale, causal=causal, d_head=d_head, bias=True)
    if logit_scale == "learned":
        with torch.no_grad():
            m.log_scale.copy_(torch.tensor([-1.5, 0.3, 0.9], dtype=F64))  # distinct per head
    g = torch.Generator().manual_seed(1)
    B, T = 2, 6
    x = torch.randn(B, T, 12, generator=g, dtype=F64)
    masks = {"none": None} if causal else _masks(B, T, 3, g)
    for name, mask in masks.items():
        out = m(x, mask)
        assert out.shape == (B, T, 12)
        torch.testing.assert_close(out, reference(m, x, mask), rtol=0, atol=1e-12, msg=name)
        last = m(x, mask, last_only=True)
        assert last.shape == (B, 1, 12)
        torch.testing.assert_close(last, out[:, -1:], rtol=0, atol=1e-12, msg=f"last_only {name}")


def test_attention_weights_and_logits_match_the_reference():
    m = make(causal=True)
    x = torch.randn(2, 5, 12, generator=torch.Generator().manual_seed(2), dtype=F64)
    logits = m.logits(x)
    s = 4**-0.5
    for h in range(3):
        ref = s * (x @ m.w_q[h]) @ (x @ m.w_k[h]).transpose(-2, -1)
        ref = ref.masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1), float("-inf"))
        torch.testing.assert_close(logits[:, h], ref, rtol=0, atol=1e-12)
    w = m.attention_weights(x)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 3, 5, dtype=F64), rtol=0, atol=1e-12)
    assert (w.triu(1) == 0).all()


def test_float32_module_matches_the_float64_reference():
    m32 = make(dtype=torch.float32, logit_scale="learned")
    m64 = make(dtype=torch.float32, logit_scale="learned").double()
    x = torch.randn(3, 7, 12, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(m32(x).double(), reference(m64, x.double()), rtol=0, atol=1e-5)


def _train(m: nn.Module, steps=20, lr=0.05, **frame_options):
    opt = StiefelAdam(param_groups(m, weight_decay=0.1, frame_options=frame_options), lr=lr)
    g = torch.Generator().manual_seed(4)
    x_eval = torch.randn(16, 6, m.d_model, generator=torch.Generator().manual_seed(40), dtype=m.w_q.dtype)
    loss_before = _train_loss(m, x_eval)
    for _ in range(steps):
        x = torch.randn(4, 6, m.d_model, generator=g, dtype=m.w_q.dtype)
        opt.zero_grad()
        _train_loss(m, x, grad=True).backward()
        opt.step()
    # every test that trains also checks that training did something
    assert _train_loss(m, x_eval).item() < LOSS_FALL * loss_before.item()
    return m


LOSS_FALL = 0.95  # measured: held-out loss 1.04 -> 0.954, 1.14 -> 0.942, 1.06 -> 0.941


def _train_loss(m: nn.Module, x: torch.Tensor, grad: bool = False) -> torch.Tensor:
    with torch.set_grad_enabled(grad):
        return (m(x) - x.flip(1)).pow(2).mean()


def _qk_singular_values(m: StiefelSelfAttention) -> torch.Tensor:
    with torch.no_grad():
        return torch.linalg.svdvals(m.w_q @ m.w_k.mT)  # (n_heads, d_model), descending


@pytest.mark.parametrize("retraction", ["polar", "cayley"])
def test_qk_singular_values_are_one(retraction):
    m = make(d_model=10, n_heads=2, d_head=4)
    m.reset_parameters()  # float64 frames from the start (make() casts a float32 module)
    for stage in ("init", "trained"):
        if stage == "trained":
            w_q0 = m.w_q.detach().clone()
            _train(m, retraction=retraction)
            assert not torch.equal(m.w_q, w_q0)
        tol = 1e-12
        sv = _qk_singular_values(m)
        torch.testing.assert_close(sv[:, :4], torch.ones(2, 4, dtype=F64), rtol=0, atol=tol, msg=stage)
        assert sv[:, 4:].abs().max() < tol, stage  # rank d_head: exactly d_head of them
        eye = torch.eye(4, dtype=F64).expand(2, 4, 4)
        torch.testing.assert_close(m.w_q.mT @ m.w_q, eye, rtol=0, atol=tol)
        torch.testing.assert_close(m.w_k.mT @ m.w_k, eye, rtol=0, atol=tol)
    # without the constraint the same training moves the singular values away from 1
    b = _train(make(d_model=10, n_heads=2, d_head=4, stiefel=False))
    assert (_qk_singular_values(b)[:, :4] - 1).abs().max() > 1e-3


def test_logits_are_bounded_by_the_token_norms():
    m = make(logit_scale="learned")
    g = torch.Generator().manual_seed(5)
    for stage in ("init", "trained"):
        if stage == "trained":
            w_q0 = m.w_q.detach().clone()
            _train(m)
            assert not torch.equal(m.w_q, w_q0)
        x = torch.randn(2, 8, 12, generator=g, dtype=F64) * torch.linspace(0.1, 10, 8, dtype=F64).view(1, 8, 1)
        with torch.no_grad():
            logits = m.logits(x)  # (B, H, T, T)
            norms = x.norm(dim=-1)  # (B, T)
            bound = m.scale().view(1, -1, 1, 1) * norms[:, None, :, None] * norms[:, None, None, :]
        assert (logits.abs() <= bound * (1 + 1e-6)).all(), stage
        # and the bound is attained: a token against itself with W_Q^h = W_K^h on the token's span
    x = torch.zeros(1, 2, 12, dtype=F64)
    with torch.no_grad():
        m.w_k.copy_(m.w_q)
        x[0, 0] = m.w_q[0, :, 0] * 3.0
    logit = m.logits(x)[0, 0, 0, 0]
    assert logit.item() == pytest.approx(m.scale()[0].item() * 9.0, rel=1e-12)


def test_unconstrained_module_has_the_same_init_and_puts_qk_in_its_own_group():
    a = make(seed=7, stiefel=True, logit_scale="learned", bias=True)
    b = make(seed=7, stiefel=False, logit_scale="learned", bias=True)
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k
    assert a.frames() == [a.w_q, a.w_k] and b.frames() == []
    ga = {g["name"]: g for g in param_groups(a)}
    gb = {g["name"]: g for g in param_groups(b)}
    assert set(ga) == {"frames", "scale", "decay", "no_decay"}
    assert set(gb) == {"qk", "scale", "decay", "no_decay"}
    assert _ids(ga["frames"]["params"]) == _ids([a.w_q, a.w_k]) and ga["frames"]["stiefel"] is True
    assert _ids(gb["qk"]["params"]) == _ids([b.w_q, b.w_k]) and not gb["qk"].get("stiefel", False)
    # and a different seed gives a different init
    assert not torch.equal(make(seed=8).w_q, a.w_q)


def _ids(ps):
    return sorted(id(p) for p in ps)


@pytest.mark.parametrize(
    "kw",
    [
        dict(d_model=0, n_heads=1),
        dict(d_model=8, n_heads=0),
        dict(d_model=8, n_heads=-2),
        dict(d_model=10, n_heads=3),  # not divisible, no d_head
        dict(d_model=8, n_heads=2, d_head=0),
        dict(d_model=8, n_heads=2, d_head=9),  # more orthonormal columns than dimensions
        dict(d_model=8, n_heads=2, logit_scale="cosine"),
        dict(d_model=8, n_heads=2, dropout=1.0),
        dict(d_model=8, n_heads=2, dropout=-0.1),
    ],
)
def test_bad_constructor_arguments_raise(kw):
    with pytest.raises(ValueError):
        StiefelSelfAttention(**kw)


def test_bad_forward_arguments_raise():
    m = make(causal=True)
    with pytest.raises(ValueError):
        m(torch.zeros(2, 5, 11, dtype=F64))  # wrong width
    with pytest.raises(ValueError):
        m(torch.zeros(5, 12, dtype=F64))  # no batch dimension
    with pytest.raises(ValueError):
        m(torch.zeros(2, 5, 12, dtype=F64), torch.ones(5, 5, dtype=torch.bool))  # causal and a mask


# ---------------------------------------------------------------------------------------------------
# Variants and flags: QK-norm, frozen Q/K, seeded initialisation, entropy
# ---------------------------------------------------------------------------------------------------


def test_qknorm_logits_are_bounded_by_the_gain():
    from stiefel_mini.attention import QKNormSelfAttention

    attn = QKNormSelfAttention(16, 2, 4)
    with torch.no_grad():
        attn.w_q.mul_(50.0)
    x = 10 * torch.randn(3, 5, 16)
    logits = attn.logits(x)
    assert logits.abs().max() <= attn.scale().max() * (1 + 1e-5)
    # Scale invariance in W_Q: multiplying it changes nothing.
    with torch.no_grad():
        before = attn(x)
        attn.w_q.mul_(0.01)
        torch.testing.assert_close(attn(x), before, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="stiefel=False"):
        QKNormSelfAttention(16, 2, 4, stiefel=True)


def test_reset_parameters_with_a_generator_gives_one_start_for_every_variant():
    from stiefel_mini.attention import make_attention

    def start(**flags):
        m = make_attention(16, 2, 4, **flags)
        m.reset_parameters(torch.Generator().manual_seed(7))
        return {k: v for k, v in m.state_dict().items() if k != "log_scale"}

    ref = start()
    for flags in ({"stiefel": False}, {"qk_norm": True}, {"train_qk": False}, {"logit_scale": "learned"}):
        other = start(**flags)
        assert other.keys() == ref.keys()
        for k in ref:
            assert torch.equal(ref[k], other[k]), (flags, k)
    assert not torch.equal(ref["w_q"], ref["w_k"])
    # nn.Linear's initialisation bound, drawn from the generator: |W| <= 1 / sqrt(fan_in)
    assert ref["v_proj.weight"].abs().max() <= 16**-0.5
    m = make_attention(16, 2, 4)
    m.reset_parameters(torch.Generator().manual_seed(8))
    assert not torch.equal(m.w_q, ref["w_q"])


def test_make_attention_refuses_options_qk_norm_would_drop():
    from stiefel_mini.attention import QKNormSelfAttention, make_attention
    from stiefel_mini.vit import PatchViT

    for flags in ({"stiefel": True}, {"logit_scale": "fixed"}):
        with pytest.raises(ValueError, match=f"qk_norm=True, {next(iter(flags))}="):
            make_attention(16, 2, 4, qk_norm=True, **flags)
    with pytest.raises(ValueError, match="qk_norm=True, stiefel=True"):
        PatchViT(d_model=16, depth=1, n_heads=2, stiefel=True, qk_norm=True)
    # the options QK-norm has are accepted, and the defaults give it
    for flags in ({}, {"stiefel": False}, {"logit_scale": "learned"}):
        assert type(make_attention(16, 2, 4, qk_norm=True, **flags)) is QKNormSelfAttention
    vit = PatchViT(d_model=16, depth=1, n_heads=2, qk_norm=True)
    assert type(vit.blocks[0].attn) is QKNormSelfAttention
    plain = make_attention(16, 2, 4)
    assert plain.stiefel and plain.logit_scale == "fixed" and len(plain.frames()) == 2
    assert len(PatchViT(d_model=16, depth=2, n_heads=2, stiefel=True).qk_parameters()) == 4


def test_entropy_in_nats_with_zero_probabilities():
    from stiefel_mini.attention import entropy

    p = torch.tensor([[0.25, 0.25, 0.25, 0.25], [1.0, 0.0, 0.0, 0.0], [0.5, 0.5, 0.0, 0.0]])
    torch.testing.assert_close(entropy(p), torch.tensor([1.3862944, 0.0, 0.6931472]))

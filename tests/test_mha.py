"""StiefelMultiheadAttention as a drop-in for nn.MultiheadAttention, and convert_attention."""

from __future__ import annotations

import io
import math

import pytest
import torch
from torch import nn

from stiefel_mini.groups import frame_parameters, param_groups
from stiefel_mini.geometry import orthogonality_error, project
from stiefel_mini.convert import convert_attention
from stiefel_mini.mha import StiefelMultiheadAttention
from stiefel_mini.optim import StiefelAdam

E, H, N, L, S = 16, 4, 3, 5, 6


def _inputs(batch_first: bool, kdim: int = E, vdim: int = E, batched: bool = True):
    g = torch.Generator().manual_seed(1)
    q, k, v = torch.randn(N, L, E, generator=g), torch.randn(N, S, kdim, generator=g), torch.randn(N, S, vdim, generator=g)
    if not batched:
        return q[0], k[0], v[0]
    if not batch_first:
        q, k, v = (t.transpose(0, 1) for t in (q, k, v))  # (L|S, N, .)
    return q, k, v


def _pair(**kwargs) -> tuple[nn.MultiheadAttention, StiefelMultiheadAttention]:
    torch.manual_seed(0)
    ref = nn.MultiheadAttention(E, H, **kwargs).eval()
    return ref, StiefelMultiheadAttention.from_torch(ref, stiefel=False)


def _masks():
    g = torch.Generator().manual_seed(2)
    kpm = torch.zeros(N, S, dtype=torch.bool)
    kpm[0, -2:] = True  # the first sequence is padded by two keys
    causal = nn.Transformer.generate_square_subsequent_mask(L)  # (L, L) float, -inf above diagonal
    return {
        "none": {},
        "key_padding_bool": {"key_padding_mask": kpm},
        "key_padding_float": {"key_padding_mask": torch.randn(N, S, generator=g)},
        "attn_mask_bool": {"attn_mask": torch.rand(L, S, generator=g) > 0.7},
        "attn_mask_float_per_head": {"attn_mask": torch.randn(N * H, L, S, generator=g)},
        "both": {"attn_mask": torch.rand(L, S, generator=g) > 0.8, "key_padding_mask": kpm},
        "causal": {"attn_mask": causal, "is_causal": True, "self": True},
    }


MASKS = _masks()


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("mask", list(MASKS))
@pytest.mark.parametrize("need_weights,average", [(True, True), (True, False), (False, True)])
def test_equals_torch_mha_when_unconstrained(batch_first, mask, need_weights, average):
    ref, ours = _pair(batch_first=batch_first)
    kwargs = dict(MASKS[mask])
    q, k, v = _inputs(batch_first)
    if kwargs.pop("self", False):
        k = v = q
    out_ref, w_ref = ref(q, k, v, need_weights=need_weights, average_attn_weights=average, **kwargs)
    out, w = ours(q, k, v, need_weights=need_weights, average_attn_weights=average, **kwargs)
    torch.testing.assert_close(out, out_ref, rtol=1e-5, atol=1e-6)
    if need_weights:
        torch.testing.assert_close(w, w_ref, rtol=1e-5, atol=1e-6)
    else:
        assert w is None and w_ref is None


@pytest.mark.parametrize(
    "options",
    [
        {"add_bias_kv": True},
        {"add_zero_attn": True},
        {"kdim": 5, "vdim": 7},
        {"bias": False},
        {"add_bias_kv": True, "add_zero_attn": True, "kdim": 5, "vdim": 7},
    ],
    ids=lambda o: ",".join(o),
)
@pytest.mark.parametrize("need_weights", [True, False])
def test_equals_torch_mha_options(options, need_weights):
    ref, ours = _pair(batch_first=True, **options)
    q, k, v = _inputs(True, options.get("kdim", E), options.get("vdim", E))
    kwargs = {"key_padding_mask": MASKS["key_padding_bool"]["key_padding_mask"], "attn_mask": MASKS["both"]["attn_mask"]}
    out_ref, w_ref = ref(q, k, v, need_weights=need_weights, **kwargs)
    out, w = ours(q, k, v, need_weights=need_weights, **kwargs)
    torch.testing.assert_close(out, out_ref, rtol=1e-5, atol=1e-6)
    if need_weights:
        torch.testing.assert_close(w, w_ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("average", [True, False])
def test_unbatched_input_and_gradients_match(average):
    ref, ours = _pair()
    q, k, v = _inputs(False, batched=False)
    q_ref, q_ours = q.clone().requires_grad_(), q.clone().requires_grad_()
    out_ref, w_ref = ref(q_ref, k, v, key_padding_mask=torch.tensor([False] * (S - 1) + [True]), average_attn_weights=average)
    out, w = ours(q_ours, k, v, key_padding_mask=torch.tensor([False] * (S - 1) + [True]), average_attn_weights=average)
    torch.testing.assert_close(out, out_ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(w, w_ref, rtol=1e-5, atol=1e-6)
    (out_ref.square().sum() + w_ref.sum()).backward()
    (out.square().sum() + w.sum()).backward()
    torch.testing.assert_close(q_ours.grad, q_ref.grad, rtol=1e-5, atol=1e-6)


def test_frames_are_found_by_param_groups():
    m = StiefelMultiheadAttention(E, H, batch_first=True)
    assert m.q_weight.shape == (H, E // H, E)  # wide per head: orthonormal rows
    assert orthogonality_error(m.q_weight).max() < 1e-5
    assert [id(p) for p in frame_parameters(m)] == [id(m.q_weight), id(m.k_weight)]
    groups = {g["name"]: g for g in param_groups(m, weight_decay=0.1)}
    assert groups["frames"]["stiefel"] and len(groups["frames"]["params"]) == 2
    assert list(frame_parameters(StiefelMultiheadAttention(E, H, stiefel=False))) == []


def test_errors_are_clear():
    with pytest.raises(ValueError, match="divisible"):
        StiefelMultiheadAttention(10, 3)
    m = StiefelMultiheadAttention(E, H, batch_first=True)
    q, _, _ = _inputs(True)
    with pytest.raises(RuntimeError, match="needs attn_mask"):
        m(q, q, q, is_causal=True)
    with pytest.raises(TypeError, match="from_torch"):
        convert_attention(nn.MultiheadAttention(E, H))


def _vit():
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=64, mlp_dim=128, num_classes=10
    )
    nn.init.normal_(model.heads.head.weight)  # torchvision zero-initialises the head; outputs would all be 0
    return model.eval()


def test_convert_torchvision_vit():
    pytest.importorskip("torchvision")
    model = _vit()
    reference = _vit()
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(3))
    old = [blk.self_attention for blk in model.encoder.layers]
    # The only change conversion makes to the function: Q/K in-projections -> their polar factors.
    with torch.no_grad():
        for blk in reference.encoder.layers:
            w = blk.self_attention.in_proj_weight  # (3E, E) = [Q; K; V]
            for i in range(2):
                rows = w[i * 64 : (i + 1) * 64]
                rows.copy_(project(rows.view(4, 16, 64)).view(64, 64))  # per head (hd, E)
        expected = reference(x)

    report = convert_attention(model)

    assert len(report.layers) == 2 and report.num_frames == 16
    assert "encoder.layers.encoder_layer_0.self_attention" in str(report)
    for blk, mha in zip(model.encoder.layers, old):
        attn = blk.self_attention
        assert isinstance(attn, StiefelMultiheadAttention) and attn.batch_first and not attn.training
        for frame in attn.frames():
            assert orthogonality_error(frame).max() < 1e-5
        torch.testing.assert_close(attn.v_proj.weight, mha.in_proj_weight[128:], rtol=0, atol=0)
        torch.testing.assert_close(attn.v_proj.bias, mha.in_proj_bias[128:], rtol=0, atol=0)
        torch.testing.assert_close(attn.out_proj.weight, mha.out_proj.weight, rtol=0, atol=0)
    with torch.no_grad():
        torch.testing.assert_close(model(x), expected, rtol=1e-5, atol=1e-5)
    assert {g["name"] for g in param_groups(model)} >= {"frames", "decay", "no_decay"}


def test_convert_unconstrained_is_exact():
    pytest.importorskip("torchvision")
    model, reference = _vit(), _vit()
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(3))
    report = convert_attention(model, stiefel=False)
    assert report.num_frames == 0 and list(frame_parameters(model)) == []
    with torch.no_grad():
        # Equal up to float32 rounding: torch's eval path runs one fused (3E, E) GEMM.
        torch.testing.assert_close(model(x), reference(x), rtol=1e-5, atol=1e-5)


def test_convert_transformer_encoder_with_shared_layer_and_learned_scale():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(E, H, dim_feedforward=32, dropout=0.0, batch_first=True)
    encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=True).eval()
    encoder.layers[1].self_attn = encoder.layers[0].self_attn  # a tied attention module
    x, _, _ = _inputs(True)
    kpm = MASKS["key_padding_bool"]["key_padding_mask"][:, :L]
    report = convert_attention(encoder, logit_scale="learned")
    assert len(report.layers) == 1 and any("same module" in n for n in report.notes)
    assert encoder.layers[0].self_attn is encoder.layers[1].self_attn
    assert not encoder.use_nested_tensor
    # The learned temperature starts at the logit scale the polar map removed, not at 1/sqrt(hd).
    log_scale = encoder.layers[0].self_attn.log_scale
    assert log_scale.shape == (H,) and not torch.allclose(log_scale, torch.full((H,), -0.5 * math.log(E // H)))
    with torch.no_grad():
        out = encoder(x, src_key_padding_mask=kpm)  # eval + padding mask: the fast path is declined
    assert out.shape == x.shape and torch.isfinite(out).all()


def _train_steps(model, opt, x, steps):
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        out, _ = model(x, x, x, need_weights=False)
        out.square().mean().backward()
        opt.step()


def test_checkpoint_roundtrip_continues_identically():
    torch.manual_seed(0)
    x, _, _ = _inputs(True)

    def make():
        m = StiefelMultiheadAttention(E, H, batch_first=True)
        return m, StiefelAdam(param_groups(m, weight_decay=0.1, frame_options={"lr": 0.05}), lr=1e-2)

    model, opt = make()
    q0 = model.q_weight.detach().clone()
    _train_steps(model, opt, x, 3)
    assert (model.q_weight - q0).abs().max() > 0.01  # three steps of frame lr 0.05 moved the frames
    buffer = io.BytesIO()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, buffer)
    _train_steps(model, opt, x, 3)

    buffer.seek(0)
    ckpt = torch.load(buffer, weights_only=True)
    restored, restored_opt = make()
    restored.load_state_dict(ckpt["model"])
    restored_opt.load_state_dict(ckpt["opt"])
    _train_steps(restored, restored_opt, x, 3)
    for (name, a), b in zip(model.state_dict().items(), restored.state_dict().values()):
        assert torch.equal(a, b), name


def test_bf16_autocast_forward_backward_and_step():
    torch.manual_seed(0)
    m = StiefelMultiheadAttention(E, H, batch_first=True)
    opt = StiefelAdam(param_groups(m, frame_options={"lr": 0.05}), lr=1e-2)
    q, k, v = _inputs(True)
    kpm = MASKS["key_padding_bool"]["key_padding_mask"]
    before = m.q_weight.detach().clone()
    loss0 = _bf16_loss(m, q, k, v, kpm)
    for need_weights in (True, False):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out, _ = m(q, k, v, key_padding_mask=kpm, need_weights=need_weights)
        assert out.dtype == torch.bfloat16
        out.float().square().mean().backward()
        assert m.q_weight.grad.dtype == torch.float32 and torch.isfinite(m.q_weight.grad).all()
        opt.step()
        opt.zero_grad()
    assert not torch.equal(before, m.q_weight)
    assert orthogonality_error(m.q_weight).max() < 1e-5
    # two steps of frame lr 0.05 move each head by about 0.1 and the loss falls (measured: 0.0973-0.0983
    # per head, loss 0.166 -> 0.057)
    moved = torch.linalg.matrix_norm(m.q_weight.detach() - before)  # (H,)
    assert ((moved > 0.08) & (moved < 0.1 + 1e-4)).all(), moved
    assert _bf16_loss(m, q, k, v, kpm) < 0.5 * loss0


def _bf16_loss(m, q, k, v, kpm=None) -> float:
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        return m(q, k, v, key_padding_mask=kpm, need_weights=False)[0].float().square().mean().item()


def test_bf16_weights_step_stays_near_manifold():
    torch.manual_seed(0)
    m = StiefelMultiheadAttention(E, H, batch_first=True, dtype=torch.bfloat16)
    opt = StiefelAdam(param_groups(m, frame_options={"lr": 0.05}), lr=1e-2)
    x = _inputs(True)[0].bfloat16()
    before, loss0 = m.q_weight.detach().float(), _bf16_loss(m, x, x, x)
    _train_steps(m, opt, x, 2)
    # The update runs in float32; only the final cast to bf16 (8 bits of mantissa) is off the manifold.
    assert orthogonality_error(m.q_weight.float()).max() < 0.05
    # and the frames moved far beyond bf16 rounding while the loss fell (measured: 0.164 -> 0.060)
    assert (torch.linalg.matrix_norm(m.q_weight.float() - before) > 0.08).all()
    assert _bf16_loss(m, x, x, x) < 0.5 * loss0


def test_torch_compile_smoke():
    if not torch._dynamo.is_dynamo_supported():
        pytest.skip("torch.compile (dynamo) is not supported on this Python / platform")
    torch._dynamo.reset()
    torch.manual_seed(0)
    m = StiefelMultiheadAttention(E, H, batch_first=True)
    x, _, _ = _inputs(True)
    # aot_eager traces forward and backward through dynamo and AOTAutograd (graph breaks fail with
    # fullgraph=True) without inductor's C++ code generation, which takes ~40 s on a 2-core CPU.
    compiled = torch.compile(m, backend="aot_eager", fullgraph=True)
    kpm = MASKS["key_padding_bool"]["key_padding_mask"][:, :L]
    for need_weights in (False, True):
        out, _ = compiled(x, x, x, need_weights=need_weights, key_padding_mask=kpm)
        expected, _ = m(x, x, x, need_weights=need_weights, key_padding_mask=kpm)
        torch.testing.assert_close(out, expected)
        out.sum().backward()
    assert m.q_weight.grad is not None


@pytest.mark.slow
def test_torch_compile_inductor():
    if not torch._dynamo.is_dynamo_supported():
        pytest.skip("torch.compile (dynamo) is not supported on this Python / platform")
    torch._dynamo.reset()
    m = StiefelMultiheadAttention(E, H, batch_first=True)
    x, _, _ = _inputs(True)
    out, _ = torch.compile(m)(x, x, x, need_weights=False)
    torch.testing.assert_close(out, m(x, x, x, need_weights=False)[0], rtol=1e-5, atol=1e-5)


def test_reset_parameters_draws_from_a_generator():
    """A seeded generator fixes the start whatever torch's global generator did; without one the
    global generator is used, so two resets differ."""
    m = StiefelMultiheadAttention(32, 4, add_bias_kv=True)
    starts = []
    for global_seed in (0, 1):
        torch.manual_seed(global_seed)
        m.reset_parameters(generator=torch.Generator().manual_seed(7))
        starts.append({k: v.clone() for k, v in m.state_dict().items()})
    for k in starts[0]:
        assert torch.equal(starts[0][k], starts[1][k]), k
    m.reset_parameters()
    assert not torch.equal(m.q_weight, starts[0]["q_weight"])
    assert orthogonality_error(m.q_weight).max() < 1e-5


@pytest.mark.parametrize("kv", [{}, {"kdim": 96, "vdim": 160}], ids=["fused", "separate"])
def test_non_frame_parameters_start_as_nn_multihead_attention_does(kv):
    """V, the output projection and the biases have the laws ``nn.MultiheadAttention`` gives them:
    V uniform with Xavier's bound over the fused (3E, E) in-projection (sqrt(6 / 4E), std 0.0442 at
    E = 256, where the bound of an (E, E) block would give 0.0625) or over (E, vdim) alone."""
    E, H = 256, 8
    torch.manual_seed(0)
    ours, theirs = StiefelMultiheadAttention(E, H, **kv), nn.MultiheadAttention(E, H, **kv)
    v_theirs = theirs.in_proj_weight[2 * E:] if not kv else theirs.v_proj_weight
    bound = math.sqrt(6 / (4 * E)) if not kv else math.sqrt(6 / (E + kv["vdim"]))
    for w in (ours.v_proj.weight, v_theirs):
        assert w.shape == (E, kv.get("vdim", E))
        assert bound * 0.999 < w.abs().max().item() <= bound  # uniform on [-bound, bound]
    torch.testing.assert_close(ours.v_proj.weight.std(), v_theirs.std(), rtol=0.02, atol=0)
    torch.testing.assert_close(ours.out_proj.weight.std(), theirs.out_proj.weight.std(), rtol=0.02, atol=0)
    for b in (ours.q_bias, ours.k_bias, ours.v_proj.bias, ours.out_proj.bias):
        assert torch.equal(b, torch.zeros(E))

"""StiefelMuon: roles, the Muon matrix rule (scale, per-head split, precision), the frame rule, torch conventions."""

import copy

import pytest
import torch
from torch import nn

from stiefel_mini import StiefelMuon, convert_attention, frame_parameters, mark_muon_roles, muon_update
from stiefel_mini.geometry import orthogonality_error, random_stiefel
from stiefel_mini.groups import mark_frame
from stiefel_mini.muon import newton_schulz_dtype, zeropower_via_newtonschulz


def _gpt2(stiefel=True):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=50, n_positions=16, n_embd=32, n_layer=2, n_head=4,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(cfg)
    convert_attention(model, stiefel=stiefel)
    return model


def _loss(model, seed=0):
    x = torch.randint(0, 50, (2, 16), generator=torch.Generator().manual_seed(seed))
    return model(input_ids=x, labels=x).loss


def test_newton_schulz_orthogonalises():
    G = torch.randn(3, 40, 12)
    O = zeropower_via_newtonschulz(G)
    s = torch.linalg.svdvals(O)
    assert s.min() > 0.6 and s.max() < 1.25  # Muon's quintic: roughly [0.7, 1.2]
    U, _, Vh = torch.linalg.svd(G, full_matrices=False)
    assert ((O * (U @ Vh)).sum((-2, -1)) / 12 > 0.85).all()  # it points at U V^T


def test_scale_factors_follow_torch_muon():
    G = torch.randn(48, 12)  # (fan_out, fan_in)
    O = zeropower_via_newtonschulz(G)
    torch.testing.assert_close(muon_update(G, 0.1), -0.1 * 2.0 * O)  # sqrt(48 / 12)
    torch.testing.assert_close(muon_update(G.T, 0.1), -0.1 * O.T)  # fan_out 12 < fan_in 48: factor 1
    torch.testing.assert_close(muon_update(G.T, 0.1, in_out=True), -0.1 * 2.0 * O.T)  # stored (in, out)
    torch.testing.assert_close(muon_update(G, 0.1, adjust_lr_fn="match_rms_adamw"), -0.1 * 0.2 * 48**0.5 * O)
    torch.testing.assert_close(muon_update(G.T, 0.1, adjust_lr_fn="spectral_unclamped"), -0.1 * 0.5 * O.T)


def test_per_head_split_of_a_fused_projection():
    d, h, hd = 16, 4, 4
    G = torch.randn(3 * h * hd, d)  # nn.Linear Q|K|V, rows [projection][head][head_dim]
    step = muon_update(G, 0.1, heads=h, projections=3)
    for b in range(3 * h):
        rows = slice(b * hd, (b + 1) * hd)
        torch.testing.assert_close(step[rows], -0.1 * zeropower_via_newtonschulz(G[rows]))
    whole = muon_update(G, 0.1, heads=1, projections=3)
    torch.testing.assert_close(whole[: h * hd], -0.1 * zeropower_via_newtonschulz(G[: h * hd]))
    assert not torch.allclose(step, whole)
    conv = muon_update(G.T, 0.1, heads=h, projections=3, in_out=True)  # GPT-2's Conv1D: (in, out)
    torch.testing.assert_close(conv, step.T)
    with pytest.raises(ValueError, match="equal blocks"):
        muon_update(torch.randn(10, 4), 0.1, heads=3)


def test_roles_of_a_converted_gpt2():
    model = _gpt2()
    opt = StiefelMuon(model.parameters(), lr=0.02, frame_lr=0.05, adamw_lr=1e-3)
    assert len(opt.param_groups) == 1  # one param group per group given, as torch's optimizers
    rows = {r["name"]: r for r in opt.roles()}
    frames = {id(p) for p in frame_parameters(model)}
    named = dict(model.named_parameters())
    assert {n for n, r in rows.items() if r["role"] == "frame"} == {n for n, p in named.items() if id(p) in frames}
    assert rows["transformer.wte.weight"]["role"] == rows["transformer.wpe.weight"]["role"] == "adamw"
    assert rows["transformer.h.0.mlp.c_fc.weight"]["rule"] == "Muon (in, out)"  # GPT-2's Conv1D, found alone
    assert all(named[n].dim() >= 2 for n, r in rows.items() if r["role"] == "muon")
    assert {(r["role"], r["lr"]) for r in rows.values()} == {("frame", 0.05), ("muon", 0.02), ("adamw", 1e-3)}


def test_training_keeps_frames_on_the_manifold_and_moves_them_by_frame_lr():
    model = _gpt2()
    opt = StiefelMuon(model.parameters(), lr=0.01, frame_lr=0.03, adamw_lr=1e-3, weight_decay=0.1)
    frame = next(iter(frame_parameters(model)))
    before = frame.detach().clone()
    losses = []
    for step in range(6):
        opt.zero_grad()
        loss = _loss(model)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if step == 0:  # the first step is the solve of the gradient itself: spectral length frame_lr
            length = torch.linalg.matrix_norm(frame.detach() - before, ord=2)
            torch.testing.assert_close(length, torch.full_like(length, 0.03), rtol=2e-3, atol=0)
    assert losses[-1] < losses[0]
    for f in frame_parameters(model):
        assert orthogonality_error(f.detach()).max() < 1e-5
    assert "multiplier" in opt.state[frame] and opt.state[frame]["multiplier"].dtype == torch.float64


def test_muon_matrix_step_is_nesterov_muon():
    W = nn.Parameter(torch.randn(8, 6))
    # float32 Newton-Schulz, as the reference: "auto" is bfloat16 on a CPU with AVX512-BF16
    opt = StiefelMuon([W], lr=0.1, momentum=0.9, weight_decay=0.5, ns_dtype="float32")
    G1, G2 = torch.randn(8, 6), torch.randn(8, 6)
    w, buf = W.detach().clone(), torch.zeros(8, 6)
    for G in (G1, G2):
        W.grad = G.clone()
        opt.step()
        buf = buf.lerp(G, 0.1)
        w = w * (1 - 0.1 * 0.5) + muon_update(G.lerp(buf, 0.9), 0.1)
        torch.testing.assert_close(W.detach(), w)


def test_adamw_role_is_torch_adamw():
    p1 = nn.Parameter(torch.randn(5))
    p2 = nn.Parameter(p1.detach().clone())
    # a vector is decayed only where its group asks for it
    ours = StiefelMuon([{"params": [p1], "weight_decay": 0.1}], adamw_lr=0.01, betas=(0.9, 0.99))
    ref = torch.optim.AdamW([p2], lr=0.01, betas=(0.9, 0.99), weight_decay=0.1, eps=1e-8)
    for s in range(3):
        g = torch.randn(5, generator=torch.Generator().manual_seed(s))
        p1.grad, p2.grad = g.clone(), g.clone()
        ours.step()
        ref.step()
    torch.testing.assert_close(p1, p2)


def test_frames_are_not_decayed():
    W = nn.Parameter(random_stiefel(2, 10, 3))
    mark_frame(W)
    opt = StiefelMuon([W], frame_lr=0.0, weight_decay=10.0)
    W.grad = torch.randn_like(W)
    before = W.detach().clone()
    opt.step()
    torch.testing.assert_close(W.detach(), before, atol=1e-6, rtol=0)


def test_nonfinite_gradient_raises_and_changes_nothing():
    model = _gpt2()
    opt = StiefelMuon(model.parameters())
    _loss(model).backward()
    model.transformer.wpe.weight.grad[0, 0] = float("nan")
    before = copy.deepcopy(model.state_dict())
    with pytest.raises(ValueError, match="not finite"):
        opt.step()
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, before[k])
    assert not opt.state


def test_state_dict_round_trip_and_scheduler():
    model = _gpt2()
    opt = StiefelMuon(model.parameters(), lr=0.01, frame_lr=0.02, adamw_lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5)
    _loss(model).backward()
    opt.step()
    sched.step()
    assert {(r["role"], r["lr"]) for r in opt.roles()} == {("frame", 1e-2), ("muon", 5e-3), ("adamw", 5e-4)}
    twin = _gpt2()  # built and converted as model was (the marks come with the conversion)
    twin.load_state_dict(model.state_dict())
    opt2 = StiefelMuon(twin.parameters(), lr=0.01, frame_lr=0.02, adamw_lr=1e-3)
    opt2.load_state_dict(copy.deepcopy(opt.state_dict()))  # as saved to disk: no shared tensors
    for m, o in ((model, opt), (twin, opt2)):
        o.zero_grad()
        _loss(m, seed=1).backward()
        o.step()
    for (k, a), b in zip(model.state_dict().items(), twin.state_dict().values()):
        torch.testing.assert_close(a, b, msg=k)


def test_group_options_override_and_bad_options_raise():
    a, b = nn.Parameter(torch.randn(6, 4)), nn.Parameter(torch.randn(6, 4))
    opt = StiefelMuon([{"params": [a]}, {"params": [b], "role": "adamw", "adamw_lr": 0.5}], lr=0.01)
    assert [(r["role"], r["lr"]) for r in opt.roles()] == [("muon", 0.01), ("adamw", 0.5)]
    for bad in (dict(lr=-1.0), dict(momentum=1.0), dict(adjust_lr_fn="nope"), dict(heads=0), dict(role="sgd"),
                dict(projections=0), dict(ns_steps=0), dict(ns_dtype="float16")):
        with pytest.raises(ValueError, match="StiefelMuon"):
            StiefelMuon([a], **bad)
    with pytest.raises(ValueError, match="unknown param group key"):
        StiefelMuon([{"params": [a], "max_stpe": 0.1}])


def test_mark_muon_roles_on_a_home_built_model():
    model = nn.Sequential(nn.Embedding(10, 8), nn.Linear(8, 8), nn.Linear(8, 10))
    roles = mark_muon_roles(model)
    assert roles["0.weight"].kind == "embedding" and roles["1.weight"].role == "muon"
    assert roles["2.weight"].kind == "head" and roles["2.weight"].guessed  # its output is the vocabulary, 10
    with pytest.warns(UserWarning, match=r"is a guess: 2\.weight \(10, 8\): AdamW \(output head \(guessed"):
        opt = StiefelMuon(model.parameters())
    assert [r["role"] for r in opt.roles()] == ["adamw", "muon", "adamw", "adamw", "adamw"]


def test_a_compiled_model_and_bf16_autocast_train_with_stiefel_muon():
    if not torch._dynamo.is_dynamo_supported():
        pytest.skip("torch.compile (dynamo) is not supported on this Python / platform")
    model = _gpt2()
    compiled = torch.compile(model, backend="aot_eager")
    opt = StiefelMuon(model.parameters(), lr=0.01, frame_lr=0.02, adamw_lr=1e-3)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=[g["lr"] for g in opt.param_groups], total_steps=4)
    x = torch.randint(0, 50, (2, 16), generator=torch.Generator().manual_seed(0))
    for step in range(3):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=step > 0):
            loss = compiled(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        sched.step()
    for f in frame_parameters(model):
        assert f.dtype == torch.float32 and orthogonality_error(f.detach()).max() < 1e-5
    assert all(g["lr"] != g["initial_lr"] for g in opt.param_groups)  # the schedule reaches every role


def test_add_param_group_after_construction_adds_one_group():
    W = nn.Parameter(random_stiefel(2, 10, 3))
    mark_frame(W)
    opt = StiefelMuon([nn.Parameter(torch.randn(4, 4))], lr=0.01)
    opt.add_param_group({"params": [W, nn.Parameter(torch.randn(3))], "frame_lr": 0.2})
    assert len(opt.param_groups) == 2
    assert [(r["group"], r["role"], r["lr"]) for r in opt.roles()] == [(0, "muon", 0.01), (1, "frame", 0.2),
                                                                      (1, "adamw", 3e-4)]


def test_a_non_finite_gradient_is_named_by_its_name_and_a_sparse_one_is_refused_clearly():
    model = _gpt2()
    opt = StiefelMuon(model.named_parameters())
    _loss(model).backward()
    model.transformer.h[1].mlp.c_fc.weight.grad[0, 0] = float("inf")
    with pytest.raises(ValueError, match=r"gradient of 'transformer\.h\.1\.mlp\.c_fc\.weight', parameter \d+ of param "
                       r"group 0, of shape \(32, 128\), role 'muon' is not finite"):
        opt.step()
    emb = nn.Embedding(10, 4, sparse=True)
    opt = StiefelMuon(emb.named_parameters())
    emb(torch.tensor([1, 2])).sum().backward()
    with pytest.raises(ValueError, match=r"gradient of 'weight'.* is sparse .*sparse=False.*SparseAdam"):
        opt.step()


def test_newton_schulz_runs_in_bfloat16_where_the_device_computes_it_natively(monkeypatch):
    for flag in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        monkeypatch.setattr(torch.cpu, flag, lambda: False)
    assert newton_schulz_dtype("cpu") == torch.float32  # emulated bfloat16 products are far slower
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)
    assert newton_schulz_dtype("cpu") == torch.bfloat16
    assert newton_schulz_dtype("meta") == torch.float32
    G = torch.randn(24, 40, generator=torch.Generator().manual_seed(0))
    fast, exact = zeropower_via_newtonschulz(G, dtype=torch.bfloat16), zeropower_via_newtonschulz(G)
    s = torch.linalg.svdvals(fast)
    assert s.min() > 0.6 and s.max() < 1.25  # the same band as in float32
    assert ((fast * exact).sum() / exact.norm() ** 2) > 0.98  # and the same direction
    steps = {}
    for ns_dtype in ("auto", "float32", "bfloat16"):
        W = nn.Parameter(G.clone())
        opt = StiefelMuon([W], lr=0.1, momentum=0.0, ns_dtype=ns_dtype)
        W.grad = G.clone()
        opt.step()
        steps[ns_dtype] = W.detach() - G
    torch.testing.assert_close(steps["auto"], muon_update(G, 0.1, ns_dtype=torch.bfloat16))  # AMX: auto is bf16
    torch.testing.assert_close(steps["bfloat16"], steps["auto"])
    torch.testing.assert_close(steps["float32"], muon_update(G, 0.1))
    assert not torch.equal(steps["float32"], steps["bfloat16"])

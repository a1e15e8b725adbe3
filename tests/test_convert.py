"""convert_attention on timm and Hugging Face models: tiny, randomly initialised models built from
configs (no weights are downloaded). Each family: the unconstrained conversion computes exactly
what the model computed; the Stiefel one trains with StiefelAdam on frames that stay frames; the KV
cache, torch.compile and the unsupported layouts."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from stiefel_mini.geometry import orthogonality_error
from stiefel_mini.groups import frame_parameters, param_groups
from stiefel_mini.convert import convert_attention
from stiefel_mini.optim import StiefelAdam
from stiefel_mini.projection import FrameProjection

timm = pytest.importorskip("timm")
transformers = pytest.importorskip("transformers")

WIDTH, HEADS, KV_HEADS, VOCAB, T = 32, 4, 2, 40, 8


def _timm_vit(qk_norm: bool = False) -> nn.Module:
    from timm.models.vision_transformer import VisionTransformer

    return VisionTransformer(img_size=16, patch_size=8, embed_dim=WIDTH, depth=2, num_heads=HEADS,
                             num_classes=5, qkv_bias=True, qk_norm=qk_norm)


def _gpt2() -> nn.Module:
    cfg = transformers.GPT2Config(n_embd=WIDTH, n_layer=2, n_head=HEADS, vocab_size=VOCAB, n_positions=32,
                                  bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(cfg)


def _llama() -> nn.Module:
    cfg = transformers.LlamaConfig(hidden_size=WIDTH, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, vocab_size=VOCAB,
                                   max_position_embeddings=32, bos_token_id=0, eos_token_id=0, pad_token_id=0)
    return transformers.LlamaForCausalLM(cfg)


def _bert() -> nn.Module:
    cfg = transformers.BertConfig(hidden_size=WIDTH, intermediate_size=64, num_hidden_layers=2,
                                  num_attention_heads=HEADS, vocab_size=VOCAB, max_position_embeddings=32)
    return transformers.BertModel(cfg, add_pooling_layer=False)


def _hf_vit() -> nn.Module:
    cfg = transformers.ViTConfig(hidden_size=WIDTH, intermediate_size=64, num_hidden_layers=2,
                                 num_attention_heads=HEADS, image_size=16, patch_size=8, num_labels=5)
    return transformers.ViTForImageClassification(cfg)


# name -> (builder, the model's output as one tensor, key heads per layer)
MODELS = {
    "timm_vit": (_timm_vit, lambda m, x: m(x), HEADS),
    "timm_vit_qk_norm": (lambda: _timm_vit(qk_norm=True), lambda m, x: m(x), HEADS),
    "gpt2": (_gpt2, lambda m, x: m(x).logits, HEADS),
    "llama_gqa": (_llama, lambda m, x: m(x).logits, KV_HEADS),
    "bert": (_bert, lambda m, x: m(x).last_hidden_state, HEADS),
    "hf_vit": (_hf_vit, lambda m, x: m(x).logits, HEADS),
}
IMAGES = ("timm_vit", "timm_vit_qk_norm", "hf_vit")


def _build(name: str, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return MODELS[name][0]()


def _inputs(name: str, batch: int = 4) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    if name in IMAGES:
        return torch.randn(batch, 3, 16, 16, generator=g)
    return torch.randint(1, VOCAB, (batch, T), generator=g)


def _out(name: str, model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return MODELS[name][1](model, x)


def _loss(name: str, model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A small synthetic task: next-token prediction on a fixed batch (language models), fixed random
    labels (image classifiers), fixed random targets for the mean hidden state (BERT)."""
    out = _out(name, model, x)
    g = torch.Generator().manual_seed(2)
    if name in ("gpt2", "llama_gqa"):
        return nn.functional.cross_entropy(out[:, :-1].reshape(-1, VOCAB), x[:, 1:].reshape(-1))
    if name == "bert":
        return (out.mean(dim=1) - torch.randn(out.shape[0], WIDTH, generator=g)).pow(2).mean()
    return nn.functional.cross_entropy(out, torch.randint(0, 5, (out.shape[0],), generator=g))


def _max_orthogonality_error(model: nn.Module) -> float:
    return max(float(orthogonality_error(p.detach()).max()) for p in frame_parameters(model))


@pytest.mark.parametrize("name", MODELS)
def test_unconstrained_conversion_computes_what_the_model_computed(name):
    model = _build(name).eval()
    x = _inputs(name)
    with torch.no_grad():
        before = _out(name, model, x)
        report = convert_attention(model, stiefel=False)
        after = _out(name, model, x)
    assert len(report.layers) == 2 and report.num_frames == 0 and list(frame_parameters(model)) == []
    assert torch.equal(after, before)
    assert {g["name"] for g in param_groups(model)} >= {"qk"}  # Q/K weights still told apart


@pytest.mark.parametrize("name", MODELS)
def test_stiefel_conversion_makes_per_head_frames_and_reports_each_layer(name):
    model = _build(name)
    report = convert_attention(model)
    kv = MODELS[name][2]
    assert [layer.kv_heads for layer in report.layers] == [kv, kv]
    assert report.num_frames == 2 * (HEADS + kv)
    shapes = sorted(tuple(p.shape) for p in frame_parameters(model))
    assert shapes == sorted([(HEADS, WIDTH, WIDTH // HEADS), (kv, WIDTH, WIDTH // HEADS)] * 2)
    assert _max_orthogonality_error(model) < 1e-5
    text = str(report)
    for layer in report.layers:
        assert layer.name in text and layer.q_polar_distance > 0 and layer.k_polar_distance > 0
        # The weights start at std 0.02, so the polar map scales every logit up by about 1 / 0.02^2 ...
        assert "fixed: logits x" in layer.logit_note(True) and layer.qk_gain < 0.1
    assert ("QK-norm" in text) == (name == "timm_vit_qk_norm")
    frames = next(g for g in param_groups(model) if g["name"] == "frames")
    assert len(frames["params"]) == 4 and frames["stiefel"]


@pytest.mark.parametrize("name", MODELS)
def test_a_second_conversion_changes_nothing(name):
    model = _build(name)
    convert_attention(model)
    frames = [p.detach().clone() for p in frame_parameters(model)]
    report = convert_attention(model)
    assert report.layers == [] and "nothing changed" in str(report)
    assert all(torch.equal(a, b) for a, b in zip(frames, frame_parameters(model), strict=True))


@pytest.mark.parametrize("name", ["gpt2", "llama_gqa"])
def test_learned_logit_scale_keeps_the_model_close_to_what_it_was(name):
    x = _inputs(name)
    outs = {}
    for scale in ("fixed", "learned"):
        model = _build(name).eval()
        with torch.no_grad():
            before = _out(name, model, x)
            report = convert_attention(model, logit_scale=scale)
            outs[scale] = float((_out(name, model, x) - before).abs().max())
    # ... and a learned per-head scale started at the singular values takes that back.
    assert outs["learned"] < 0.1 * outs["fixed"]
    assert all(layer.logit_note(True).startswith("learned, starts x") for layer in report.layers)


@pytest.mark.parametrize("name", MODELS)
def test_twenty_stiefel_adam_steps_keep_the_frames_on_the_manifold_and_lower_the_loss(name):
    model = _build(name).train()
    convert_attention(model, logit_scale="learned")
    x = _inputs(name, batch=8)
    opt = StiefelAdam(param_groups(model, weight_decay=0.01, frame_options={"lr": 3e-2}), lr=3e-3)
    losses = []
    for _ in range(20):
        opt.zero_grad()
        loss = _loss(name, model, x)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        assert _max_orthogonality_error(model) < 1e-5
    assert losses[-1] < 0.9 * losses[0], losses


@pytest.mark.parametrize("name", ["gpt2", "llama_gqa"])
def test_generation_with_the_kv_cache_gives_the_logits_of_generation_without_it(name):
    model = _build(name).eval()
    convert_attention(model, logit_scale="learned")
    ids = _inputs(name, batch=2)[:, :5]
    runs = [model.generate(ids, max_new_tokens=4, do_sample=False, use_cache=cache, output_logits=True,
                           return_dict_in_generate=True, pad_token_id=0) for cache in (True, False)]
    assert torch.equal(runs[0].sequences, runs[1].sequences)
    for with_cache, without in zip(runs[0].logits, runs[1].logits):
        torch.testing.assert_close(with_cache, without, atol=1e-5, rtol=1e-5)


def test_torch_compile_traces_a_converted_model():
    if not torch._dynamo.is_dynamo_supported():
        pytest.skip("torch.compile (dynamo) is not supported on this Python / platform")
    torch._dynamo.reset()
    model = _build("timm_vit").eval()
    convert_attention(model)
    x = _inputs("timm_vit", batch=2)
    # aot_eager: dynamo and AOTAutograd without inductor's C++ code generation (slow on this CPU).
    compiled = torch.compile(model, backend="aot_eager")
    out = compiled(x)
    torch.testing.assert_close(out, model(x))
    out.sum().backward()
    assert all(p.grad is not None for p in frame_parameters(model))


def test_dtype_device_and_mode_are_kept():
    model = _build("llama_gqa").to(torch.bfloat16).eval()
    convert_attention(model)
    proj = model.model.layers[0].self_attn.q_proj
    assert isinstance(proj, FrameProjection) and proj.q_weight.dtype == torch.bfloat16 and not proj.training
    assert _out("llama_gqa", model, _inputs("llama_gqa")).dtype == torch.bfloat16


def _projections(model: nn.Module) -> list[type]:
    return [type(m) for m in model.modules() if isinstance(m, (nn.Linear, FrameProjection))]


def test_interleaved_qkv_is_refused_with_the_module_and_its_class():
    cfg = transformers.GPTNeoXConfig(hidden_size=WIDTH, intermediate_size=64, num_hidden_layers=1,
                                     num_attention_heads=HEADS, vocab_size=VOCAB, max_position_embeddings=32)
    model = transformers.GPTNeoXForCausalLM(cfg)
    with pytest.raises(ValueError, match=r"gpt_neox\.layers\.0\.attention \(transformers\.models\.gpt_neox\."
                                         r"modeling_gpt_neox\.GPTNeoXAttention\).*interleaved.*supported: "):
        convert_attention(model)


def test_gpt2_cross_attention_is_refused_and_nothing_is_changed():
    cfg = transformers.GPT2Config(n_embd=WIDTH, n_layer=1, n_head=HEADS, vocab_size=VOCAB, n_positions=32,
                                  add_cross_attention=True)
    model = transformers.GPT2LMHeadModel(cfg)
    with pytest.raises(ValueError, match=r"transformer\.h\.0\.crossattention .*GPT2Attention.*cross-attention"):
        convert_attention(model)
    assert not any(isinstance(m, FrameProjection) for m in model.modules())  # self-attention untouched too


def test_heads_that_do_not_divide_the_projection_are_refused():
    model = _build("timm_vit")
    model.blocks[1].attn.num_heads = 3  # 3 heads cannot split 32 columns of Q
    before = _projections(model)
    with pytest.raises(ValueError, match=r"blocks\.1\.attn \(timm\.layers\.attention\.Attention\).*not 3 heads of size 8"):
        convert_attention(model)
    assert _projections(model) == before


def test_a_query_projection_wider_than_the_declared_heads_is_refused():
    model = _build("llama_gqa")
    model.model.layers[1].self_attn.q_proj = nn.Linear(WIDTH, 2 * WIDTH)  # queries and gates in one
    with pytest.raises(ValueError, match=r"model\.layers\.1\.self_attn .*from 32 to 64 features, which is not 4 heads"):
        convert_attention(model)
    assert not any(isinstance(m, FrameProjection) for m in model.modules())


def test_cross_attention_from_inputs_of_another_size_is_refused():
    model = _build("llama_gqa")
    attn = model.model.layers[0].self_attn
    attn.k_proj = nn.Linear(16, KV_HEADS * WIDTH // HEADS)  # keys from 16 features, queries from 32
    with pytest.raises(ValueError, match=r"model\.layers\.0\.self_attn .*LlamaAttention.*cross-attention with keys "
                                         r"of size 16"):
        convert_attention(model)


def test_the_reports_words_agree_with_its_numbers():
    """Random-init GPT-2 (weights of std 0.02): the polar map makes the logits larger, and the
    report says they grow; with Q/K weights scaled up 1000x they shrink, and it says so."""
    text = str(convert_attention(_build("gpt2")))
    assert "logits grow" in text and "shrink" not in text
    model = _build("gpt2")
    with torch.no_grad():
        for block in model.transformer.h:
            block.attn.c_attn.weight[:, : 2 * WIDTH].mul_(1000.0)
    report = convert_attention(model)
    assert all(layer.logit_factor < 1 for layer in report.layers)
    assert "logits shrink" in str(report) and "grow" not in str(report)
    for layer in report.layers:
        assert f"x{layer.logit_factor:.3g}" in layer.logit_note(True)


@pytest.mark.parametrize("stiefel", [False, True])
@pytest.mark.parametrize("name, attr", [("gpt2", "c_attn"), ("llama_gqa", "q_proj"), ("llama_gqa", "k_proj"),
                                        ("timm_vit", "qkv"), ("bert", "query")])
def test_weight_of_a_replaced_projection_is_a_tensor_of_its_layout_and_shape(name, attr, stiefel):
    model = _build(name)
    attn = next(m for m in model.modules() if isinstance(getattr(m, attr, None), nn.Module))
    before = getattr(attn, attr).weight.detach().clone()
    convert_attention(model, stiefel=stiefel)
    after = getattr(attn, attr)
    assert isinstance(after, FrameProjection) and isinstance(after.weight, torch.Tensor)
    assert after.weight.shape == before.shape and after.weight.dtype == before.dtype
    if not stiefel:
        assert torch.equal(after.weight, before)


class HomeAttention(nn.Module):
    """Attention as home-built (nanoGPT- / Llama-style) code writes it: separate ``q_proj``, ``k_proj``,
    ``v_proj``, ``o_proj`` Linears, heads contiguous in their outputs, a head count under one of the
    usual names (or none), grouped-query keys."""

    def __init__(self, d: int, heads: int, kv_heads: int | None = None, count: str | None = "num_heads"):
        super().__init__()
        self.h, self.kv, self.hd = heads, kv_heads or heads, d // heads
        if count is not None:
            setattr(self, count, heads)
        if kv_heads is not None:
            self.num_kv_heads = kv_heads
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, self.kv * self.hd, bias=False)
        self.v_proj = nn.Linear(d, self.kv * self.hd, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.h, self.hd).transpose(1, 2)  # (B, H, T, hd)
        k, v = (f(x).view(B, T, self.kv, self.hd).transpose(1, 2).repeat_interleave(self.h // self.kv, 1)
                for f in (self.k_proj, self.v_proj))
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, hd)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, -1))


class HomeModel(nn.Module):
    def __init__(self, **attention):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, WIDTH)
        self.blocks = nn.ModuleList(HomeAttention(WIDTH, HEADS, **attention) for _ in range(2))
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.emb(x)
        for block in self.blocks:
            h = h + block(h)
        return self.head(h)


def _home_loss(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(model(x)[:, :-1].reshape(-1, VOCAB), x[:, 1:].reshape(-1))


@pytest.mark.parametrize("attention, given", [
    ({"count": "num_heads"}, None), ({"count": "n_head"}, None), ({"count": "n_heads", "kv_heads": KV_HEADS}, None),
    ({"count": None}, HEADS),
])
def test_home_built_attention_with_separate_linears_is_converted(attention, given):
    torch.manual_seed(0)
    model = HomeModel(**attention).eval()
    x = _inputs("gpt2")
    plain = copy.deepcopy(model)
    options = {} if given is None else {"num_heads": given}
    report = convert_attention(plain, stiefel=False, **options)
    with torch.no_grad():
        assert torch.equal(plain(x), model(x))
    kv = attention.get("kv_heads", HEADS)
    report = convert_attention(model, **options)
    assert [(layer.name, layer.num_heads, layer.kv_heads) for layer in report.layers] == [
        ("blocks.0", HEADS, kv), ("blocks.1", HEADS, kv)]
    assert sorted(tuple(p.shape) for p in frame_parameters(model)) == sorted(
        [(HEADS, WIDTH, WIDTH // HEADS), (kv, WIDTH, WIDTH // HEADS)] * 2)
    opt = StiefelAdam(param_groups(model, frame_options={"lr": 2e-2}), lr=1e-2)
    model.train()
    first = float(_home_loss(model, x).detach())
    for _ in range(20):
        opt.zero_grad()
        _home_loss(model, x).backward()
        opt.step()
    assert float(_home_loss(model, x).detach()) < first and _max_orthogonality_error(model) < 1e-5


def test_home_built_attention_without_a_head_count_is_refused_with_the_fix():
    model = HomeModel(count=None)
    with pytest.raises(ValueError, match=r"blocks\.0 \(.*HomeAttention\).*no head count.*num_heads="):
        convert_attention(model)
    assert not any(isinstance(m, FrameProjection) for m in model.modules())
    with pytest.raises(ValueError, match=r"blocks\.0 .*declares 4 heads, but num_heads=3"):
        convert_attention(HomeModel(), num_heads=3)  # disagrees with the layers' own count


class FusedAttention(nn.Module):
    """Home-built attention with one fused Q|K|V Linear: its layout (rows Q|K|V, or interleaved per
    head) cannot be read from the module, so it is not converted."""

    def __init__(self):
        super().__init__()
        self.n_head, self.c_attn, self.c_proj = HEADS, nn.Linear(WIDTH, 3 * WIDTH), nn.Linear(WIDTH, WIDTH)


def test_attention_the_converter_cannot_read_is_named_with_the_route():
    model = nn.Sequential(FusedAttention(), HomeAttention(WIDTH, HEADS))
    with pytest.warns(UserWarning, match=r"not converted: 0 \(.*FusedAttention\).*FrameProjection\.from_weight"):
        report = convert_attention(model)
    assert [layer.name for layer in report.layers] == ["1"]
    assert "0 (" in str(report) and "FrameProjection.from_weight" in str(report)


class MHSA(nn.Module):
    """Attention under a class name without "attn": one fused qkv Linear, which the converter cannot read."""

    def __init__(self):
        super().__init__()
        self.heads, self.qkv, self.proj = HEADS, nn.Linear(WIDTH, 3 * WIDTH), nn.Linear(WIDTH, WIDTH)


def test_attention_like_modules_are_named_whatever_their_class_name():
    model = nn.Sequential(nn.Linear(WIDTH, WIDTH), MHSA())
    with pytest.warns(UserWarning, match=r"not converted: 1 \(.*MHSA\).*FrameProjection\.from_weight"):
        report = convert_attention(model)
    assert report.layers == [] and "MHSA" in str(report)


class HeadsAttention(HomeAttention):
    """HomeAttention with rotary embeddings (a rotation per position, which keeps each head's norms), or
    with heads cut strided, (d h): head h takes every heads-th output."""

    def __init__(self, layout: str):
        super().__init__(WIDTH, HEADS)
        self.layout = layout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        if self.layout == "strided":
            q, k, v = (f(x).view(B, T, self.hd, self.h).permute(0, 3, 1, 2) for f in (self.q_proj, self.k_proj,
                                                                                      self.v_proj))
        else:
            q, k, v = (f(x).view(B, T, self.h, self.hd).transpose(1, 2) for f in (self.q_proj, self.k_proj, self.v_proj))
            angle = torch.arange(T)[:, None] * torch.arange(1, self.hd // 2 + 1)[None] * 0.3  # (T, hd / 2)
            cos, sin = angle.cos(), angle.sin()

            def rotate(t):
                a, b = t[..., : self.hd // 2], t[..., self.hd // 2:]
                return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)

            q, k = rotate(q), rotate(k)
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, -1))


def test_the_head_slicing_is_checked_against_the_modules_own_forward():
    torch.manual_seed(0)
    rope = nn.Sequential(HeadsAttention("rotary"))
    report = convert_attention(rope)  # a rotation per position keeps each head's norms: contiguous heads found
    assert len(report.layers) == 1 and not report.notes
    strided = nn.Sequential(HeadsAttention("strided")).train()
    rng = torch.get_rng_state()
    with pytest.raises(ValueError, match=r"0 \(.*HeadsAttention\) cuts its q_proj/k_proj outputs into heads "
                       r"strided.*\(d h\).*FrameProjection\.from_weight"):
        convert_attention(strided)
    assert not any(isinstance(m, FrameProjection) for m in strided.modules())  # nothing changed
    assert all(m.training for m in strided.modules()) and torch.equal(torch.get_rng_state(), rng)


@pytest.mark.parametrize("name", ["gpt2", "timm_vit", "llama_gqa"])
def test_a_second_conversion_with_other_options_is_refused_naming_the_current_ones(name):
    model = _build(name)
    convert_attention(model, logit_scale="learned")
    frames = [p.detach().clone() for p in frame_parameters(model)]
    for options in ({"logit_scale": "fixed"}, {"stiefel": False}):
        with pytest.raises(ValueError, match=r"converted before with stiefel=True, logit_scale='learned'"):
            convert_attention(model, **options)
    assert all(torch.equal(a, b) for a, b in zip(frames, frame_parameters(model), strict=True))
    report = convert_attention(model, logit_scale="learned")  # the same options: nothing to do, and it says so
    assert report.layers == [] and "all 2 attention layer(s) were converted before with these options" in str(report)


@pytest.mark.parametrize("name", [*MODELS, "torch_mha"])
def test_a_learned_scale_started_at_unit_computes_what_the_fixed_scale_computes(name):
    """``scale_start="unit"``: every head at unit temperature, the fixed ``1 / sqrt(d_head)`` on frames
    (a fresh StiefelSelfAttention's start), so the two conversions of one model agree; "keep" does not."""
    if name == "torch_mha":
        build = lambda: nn.TransformerEncoderLayer(WIDTH, HEADS, 64, dropout=0.0, batch_first=True)  # noqa: E731
        x, out = torch.randn(2, T, WIDTH, generator=torch.Generator().manual_seed(1)), lambda m, x: m(x)  # noqa: E731
    else:
        build, x, out = (lambda: MODELS[name][0]()), _inputs(name), (lambda m, x: _out(name, m, x))  # noqa: E731
    outs, reports = {}, {}
    for scale, start in (("fixed", None), ("learned", "unit"), ("learned", "keep")):
        torch.manual_seed(0)
        model = build().eval()
        with torch.no_grad():
            reports[start] = convert_attention(model, logit_scale=scale, scale_start=start)
            outs[start] = out(model, x)
    torch.testing.assert_close(outs["unit"], outs[None], rtol=1e-5, atol=1e-5)
    if name != "timm_vit_qk_norm":  # there QK-norm sets the logits' size, whatever the scale of the frames
        assert float((outs["keep"] - outs[None]).abs().max()) > 1e-3
    assert "scale_start='unit'" in str(reports["unit"]) and "scale_start='keep'" in str(reports["keep"])
    assert {layer.scale_start for layer in reports["unit"].layers} == {"unit"}


def test_scale_start_is_checked():
    with pytest.raises(ValueError, match="scale_start must be one of"):
        convert_attention(_build("gpt2"), logit_scale="learned", scale_start="one")
    with pytest.raises(ValueError, match="logit_scale='learned'"):
        convert_attention(_build("gpt2"), scale_start="keep")
    model = _build("gpt2")
    report = convert_attention(model, logit_scale="learned")  # a trained model's default: keep
    assert {layer.scale_start for layer in report.layers} == {"keep"}
    assert all(layer.logit_factor == 1.0 for layer in report.layers)

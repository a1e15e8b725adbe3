"""Converted Hugging Face models: state_dict round trips (timm, BERT, Llama), save_pretrained +
from_pretrained_converted (GPT-2, Llama), and the model methods users call on them (num_parameters,
resize_token_embeddings, gradient checkpointing, a bfloat16 forward), on tiny models built from
configs."""

from __future__ import annotations

import copy

import pytest
import torch

from stiefel_mini.groups import frame_parameters, param_groups
from stiefel_mini.hf import from_pretrained_converted, load_converted, plain_state_dict
from stiefel_mini.convert import convert_attention
from stiefel_mini.optim import StiefelAdam

pytest.importorskip("timm")
transformers = pytest.importorskip("transformers")

from test_convert import _build, _inputs, _loss, _max_orthogonality_error, _out  # noqa: E402


def _trained(name: str, **options) -> torch.nn.Module:
    """A converted model after 2 steps, so that its frames are no longer those a fresh conversion gives."""
    model = _build(name)
    convert_attention(model, **options)
    opt = StiefelAdam(param_groups(model, frame_options={"lr": 5e-2}), lr=1e-2)
    for _ in range(2):
        opt.zero_grad()
        _loss(name, model, _inputs(name)).backward()
        opt.step()
    return model.eval()


@pytest.mark.parametrize("name", ["timm_vit", "bert", "llama_gqa"])
def test_state_dict_round_trip_through_a_fresh_converted_model(name):
    model = _trained(name, logit_scale="learned")
    x = _inputs(name)
    fresh = _build(name, seed=7).eval()  # other random weights, so only the load can make them equal
    load_converted(fresh, model.state_dict(), logit_scale="learned")
    with torch.no_grad():
        assert torch.equal(_out(name, fresh, x), _out(name, model, x))
    assert [p.shape for p in frame_parameters(fresh)] == [p.shape for p in frame_parameters(model)]


def test_a_state_dict_converted_with_other_options_is_refused():
    model = _trained("llama_gqa", logit_scale="learned")
    with pytest.raises(ValueError, match=r"unexpected \[.*log_scale"):
        load_converted(_build("llama_gqa"), model.state_dict(), logit_scale="fixed")
    with pytest.raises(ValueError, match="missing"):
        load_converted(_build("llama_gqa"), _build("llama_gqa").state_dict())  # an unconverted model's


@pytest.mark.parametrize("name, cls", [("gpt2", "GPT2LMHeadModel"), ("llama_gqa", "LlamaForCausalLM")])
def test_save_pretrained_and_from_pretrained_converted_give_the_same_model(name, cls, tmp_path):
    model = _trained(name)
    model.save_pretrained(tmp_path)
    again = from_pretrained_converted(getattr(transformers, cls), tmp_path)
    assert again.config.stiefel_attention == {"stiefel": True, "logit_scale": "fixed"}
    assert not again.training and _max_orthogonality_error(again) < 1e-5
    x = _inputs(name)
    with torch.no_grad():
        assert torch.equal(_out(name, again, x), _out(name, model, x))
    if name == "gpt2":  # the tied output layer is still tied after the load
        assert again.lm_head.weight is again.transformer.wte.weight


def test_from_pretrained_converted_keeps_the_dtype_it_was_saved_in(tmp_path):
    model = _build("llama_gqa").to(torch.bfloat16)
    convert_attention(model, logit_scale="learned")
    model.save_pretrained(tmp_path)
    again = from_pretrained_converted(transformers.LlamaForCausalLM, tmp_path)  # "auto", as from_pretrained
    assert {p.dtype for p in again.parameters()} == {torch.bfloat16}
    x = _inputs("llama_gqa")
    with torch.no_grad():
        assert torch.equal(_out("llama_gqa", again, x), _out("llama_gqa", model.eval(), x))
    wide = from_pretrained_converted(transformers.LlamaForCausalLM, tmp_path, dtype=torch.float32)
    assert {p.dtype for p in wide.parameters()} == {torch.float32}
    with pytest.raises(ValueError, match="dtype must be 'auto' or a torch.dtype"):
        from_pretrained_converted(transformers.LlamaForCausalLM, tmp_path, dtype="wide")


def test_from_pretrained_converted_refuses_an_unconverted_checkpoint(tmp_path):
    _build("gpt2").save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="not converted before it was saved"):
        from_pretrained_converted(transformers.GPT2LMHeadModel, tmp_path)


@pytest.mark.parametrize("name", ["gpt2", "llama_gqa"])
def test_hugging_face_model_methods_work_on_a_converted_model(name):
    """num_parameters, resize_token_embeddings, gradient checkpointing and a bfloat16 forward."""
    model = _build(name)
    before = model.num_parameters()
    report = convert_attention(model)
    # the frames replace the Q/K weights entry for entry ("fixed" scale: no parameter added)
    assert model.num_parameters() == before
    assert report.num_frames > 0 and _max_orthogonality_error(model) < 1e-5

    vocab = model.get_input_embeddings().num_embeddings
    model.resize_token_embeddings(vocab + 8)
    assert model.get_input_embeddings().num_embeddings == vocab + 8
    assert _out(name, model, _inputs(name)).shape[-1] == vocab + 8

    x = _inputs(name)

    def loss(m):
        logits = _out(name, m, x)  # (B, T, vocab + 8)
        return torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), x[:, 1:].flatten())

    model.train()
    model.config.use_cache = False
    opt = StiefelAdam(model.parameters(), lr=1e-2)  # the frames found by their mark
    ref = copy.deepcopy(model)
    model.activation_checkpointing_enable()  # transformers 5's name for gradient checkpointing
    assert model.is_activation_checkpointing
    for m in (model, ref):
        m.zero_grad()
        torch.manual_seed(3)  # the same dropout masks (checkpointing replays them in the recomputation)
        loss(m).backward()
    for (n, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6, msg=n)
    opt.step()
    assert _max_orthogonality_error(model) < 1e-5

    model.activation_checkpointing_disable()
    half = copy.deepcopy(model).eval().to(torch.bfloat16)
    with torch.no_grad():
        logits = _out(name, half, x)
        want = _out(name, model.eval(), x)
    assert logits.dtype == torch.bfloat16
    assert (logits.float() - want).abs().max() < 0.05 * want.abs().max()


@pytest.mark.parametrize("name, cls", [("gpt2", "GPT2LMHeadModel"), ("gpt2", "AutoModelForCausalLM"),
                                       ("llama_gqa", "LlamaForCausalLM")])
def test_the_plain_hugging_face_loader_reads_a_saved_converted_model_as_the_model_it_computes(name, cls, tmp_path):
    """``save_pretrained`` stores each replaced projection in its own layout beside the frames, so the
    usual loader builds an unconverted model that computes what the converted one computes."""
    model = _trained(name, logit_scale="learned")
    model.save_pretrained(tmp_path)
    plain = getattr(transformers, cls).from_pretrained(tmp_path)
    assert not any(type(m).__name__ == "FrameProjection" for m in plain.modules())
    x = _inputs(name)
    with torch.no_grad():
        torch.testing.assert_close(_out(name, plain, x), _out(name, model, x), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["timm_vit", "bert"])
def test_a_plain_model_loads_a_converted_state_dict_without_strict(name):
    model = _trained(name)
    plain = _build(name, seed=7).eval()
    unexpected = plain.load_state_dict(model.state_dict(), strict=False).unexpected_keys
    assert unexpected and all(k.endswith(("q_weight", "k_weight", "rest_weight")) for k in unexpected)
    x = _inputs(name)
    with torch.no_grad():
        torch.testing.assert_close(_out(name, plain, x), _out(name, model, x), atol=1e-5, rtol=1e-5)
    with pytest.raises(RuntimeError, match=r"Unexpected key\(s\).*q_weight"):
        plain.load_state_dict(model.state_dict())  # strict: the frames' keys are named


@pytest.mark.parametrize("name", ["timm_vit", "bert", "llama_gqa"])
def test_plain_state_dict_loads_strictly_into_the_unconverted_model(name):
    model = _trained(name)
    plain = _build(name, seed=7).eval()
    state = plain_state_dict(model)
    assert set(state) == set(plain.state_dict())
    plain.load_state_dict(state)  # strict, torch's default
    x = _inputs(name)
    with torch.no_grad():
        torch.testing.assert_close(_out(name, plain, x), _out(name, model, x), atol=1e-5, rtol=1e-5)


def test_plain_state_dict_refuses_a_converted_multihead_attention():
    model = torch.nn.Sequential(torch.nn.MultiheadAttention(8, 2))
    convert_attention(model)
    with pytest.raises(ValueError, match="StiefelMultiheadAttention.*load_converted"):
        plain_state_dict(model)

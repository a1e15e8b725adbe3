"""StiefelMuon's roles as the Muon recipe assigns them, read off the model: the role table on GPT-2,
Llama, BERT for classification, timm and Hugging Face ViTs and a nanoGPT with an untied head; GPT-2's
Conv1D and a transposed FrameProjection stepped as stored (in, out); conv filters flattened; heads
found by name or shape; a guessed role named once with the way to set it."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from stiefel_mini import StiefelMuon, convert_attention, mark_muon_roles, muon_update
from stiefel_mini.groups import DEFAULT_SCALE_LR
from stiefel_mini.muon import zeropower_via_newtonschulz
from stiefel_mini.projection import FrameProjection

transformers = pytest.importorskip("transformers")
timm = pytest.importorskip("timm")
W, VOCAB, CLASSES = 32, 40, 5


class NanoGPT(nn.Module):
    """A home-built nanoGPT: its attention keeps a fused c_attn Linear (not converted), its head is untied."""

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(W), nn.LayerNorm(W)
            self.attn = nn.ModuleDict({"c_attn": nn.Linear(W, 3 * W), "c_proj": nn.Linear(W, W)})
            self.mlp = nn.ModuleDict({"c_fc": nn.Linear(W, 4 * W), "c_proj": nn.Linear(4 * W, W)})

    def __init__(self):
        super().__init__()
        self.transformer = nn.ModuleDict({"wte": nn.Embedding(VOCAB, W), "wpe": nn.Embedding(16, W),
                                          "h": nn.ModuleList([self.Block(), self.Block()]), "ln_f": nn.LayerNorm(W)})
        self.lm_head = nn.Linear(W, VOCAB, bias=False)


def _vit():
    from timm.models.vision_transformer import VisionTransformer

    return VisionTransformer(img_size=16, patch_size=8, embed_dim=W, depth=2, num_heads=4, num_classes=CLASSES)


MODELS = {
    "gpt2": lambda: transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_embd=W, n_layer=2, n_head=4, vocab_size=VOCAB, n_positions=16)),
    "llama_gqa": lambda: transformers.LlamaForCausalLM(transformers.LlamaConfig(
        hidden_size=W, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=VOCAB, max_position_embeddings=16)),
    "bert_classifier": lambda: transformers.BertForSequenceClassification(transformers.BertConfig(
        hidden_size=W, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=VOCAB,
        max_position_embeddings=16, num_labels=3)),
    "timm_vit": _vit,
    "hf_vit_classifier": lambda: transformers.ViTForImageClassification(transformers.ViTConfig(
        hidden_size=W, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, image_size=16,
        patch_size=8, num_labels=CLASSES)),
    "nanogpt_untied": NanoGPT,
}
# The Muon recipe, written out by name: AdamW for embeddings of every kind, the output head (and BERT's
# pooler), every vector; manifold Muon for the frames; Muon for every other (hidden) matrix.
ADAMW_NAMES = ("wte", "wpe", "embed", "cls_token", "pos_embed", "position_embeddings", "patch_embeddings",
               "lm_head", "classifier", "pooler", "head.weight")


def _recipe(name: str, p: torch.Tensor) -> str:
    if name.endswith(("q_weight", "k_weight")):
        return "frame"
    if p.dim() < 2 or any(a in name for a in ADAMW_NAMES):
        return "adamw"
    return "muon"


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_role_table_matches_the_muon_recipe(name):
    torch.manual_seed(0)
    model = MODELS[name]()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the nanoGPT's fused attention is named as not converted
        convert_attention(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing is guessed on these models
        opt = StiefelMuon(model.parameters())
    rows = opt.roles()
    named = dict(model.named_parameters())
    assert [r["name"] for r in rows] == list(named)  # every parameter, by name, from model.parameters()
    wrong = {r["name"]: r["role"] for r in rows if r["role"] != _recipe(r["name"], named[r["name"]])}
    assert not wrong, wrong
    table = opt.role_table()
    assert all(n in table for n in named) and "found by" in table.splitlines()[1]


def test_vit_embeddings_tokens_and_patch_conv_take_adamw_and_hidden_convs_are_flattened():
    torch.manual_seed(0)
    model = _vit()
    roles = mark_muon_roles(model)
    for n in ("cls_token", "pos_embed", "patch_embed.proj.weight", "head.weight"):
        assert roles[n].role == "adamw", n
    convnet = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 16, 3), nn.Flatten(), nn.Linear(16 * 4, CLASSES))
    assert mark_muon_roles(convnet)["2.weight"].layout == "flatten"
    conv = convnet[2].weight
    # float32 Newton-Schulz, as the reference: "auto" is bfloat16 on a CPU with AVX512-BF16
    opt = StiefelMuon([conv], lr=0.1, momentum=0.0, ns_dtype="float32")
    conv.grad = torch.randn(conv.shape, generator=torch.Generator().manual_seed(1))
    before = conv.detach().clone()
    opt.step()
    step = (conv.detach() - before).reshape(16, -1)  # (out, in * kh * kw) = (16, 72): factor 1
    s = torch.linalg.svdvals(step) / 0.1
    assert s.min() > 0.6 and s.max() < 1.25  # one orthogonalised matrix, not one per (kh, kw) slice
    torch.testing.assert_close(step, muon_update(conv.grad.reshape(16, -1), 0.1))


def _ns_float32(grad, ns_coefficients, ns_steps, eps):
    return zeropower_via_newtonschulz(grad, ns_steps, eps)


def test_gpt2_conv1d_steps_as_torch_muon_on_the_same_matrix_stored_out_in(monkeypatch):
    monkeypatch.setattr(torch.optim._muon, "_zeropower_via_newtonschulz", _ns_float32)  # torch's rule, in float32
    torch.manual_seed(0)
    model = MODELS["gpt2"]()
    convert_attention(model)
    # float32 Newton-Schulz, as the reference: "auto" is bfloat16 on a CPU with AVX512-BF16
    # no in_out: Conv1D's layout is read off the model
    opt = StiefelMuon(model.parameters(), lr=0.02, ns_dtype="float32")
    x = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(0))
    model(input_ids=x, labels=x).loss.backward()
    refs = {}
    for name in ("mlp.c_fc", "mlp.c_proj", "attn.c_proj"):  # (in, out) = (32, 128), (128, 32), (32, 32)
        conv = model.transformer.h[0].get_submodule(name)
        linear = nn.Parameter(conv.weight.detach().T.clone())  # the same matrix as nn.Linear stores it
        linear.grad = conv.weight.grad.T.clone()
        torch.optim.Muon([linear], lr=0.02, weight_decay=0.0).step()
        refs[name] = linear
    opt.step()
    for name, linear in refs.items():
        torch.testing.assert_close(model.transformer.h[0].get_submodule(name).weight.detach(), linear.detach().T)


def test_a_transposed_frame_projection_built_by_hand_steps_its_rest_as_stored():
    g = torch.Generator().manual_seed(0)
    proj, _ = FrameProjection.from_weight(torch.randn(16, 48, generator=g), torch.zeros(48), {"q": 2, "k": 2}, 8,
                                          transposed=True)
    rest = proj.rest_weight  # (in, out) = (16, 16): V of a GPT-2 c_attn
    # float32 Newton-Schulz, as the reference: "auto" is bfloat16 on a CPU with AVX512-BF16
    opt = StiefelMuon(proj.parameters(), lr=0.1, momentum=0.0, ns_dtype="float32")
    proj(torch.randn(3, 16, generator=g)).pow(2).sum().backward()
    before, G = rest.detach().clone(), rest.grad.clone()
    opt.step()
    torch.testing.assert_close(rest.detach(), before + muon_update(G, 0.1, in_out=True))
    assert {r["name"]: r["rule"] for r in opt.roles()}["param 2"] == "Muon (in, out)"


def test_heads_found_by_name_and_by_shape_and_a_guess_is_named_once_with_the_route():
    roles = mark_muon_roles(NanoGPT())
    assert roles["lm_head.weight"].kind == "head" and not roles["lm_head.weight"].guessed
    bert = MODELS["bert_classifier"]()
    roles = mark_muon_roles(bert)
    assert roles["bert.pooler.dense.weight"].role == roles["classifier.weight"].role == "adamw"

    class Unnamed(nn.Module):  # its head has no conventional name: found as the last layer onto the vocabulary
        def __init__(self):
            super().__init__()
            self.emb, self.mix, self.out = nn.Embedding(VOCAB, W), nn.Linear(W, W), nn.Linear(W, VOCAB)

    model = Unnamed()
    roles = mark_muon_roles(model)
    assert roles["out.weight"].kind == "head" and roles["out.weight"].guessed and roles["mix.weight"].role == "muon"
    with pytest.warns(UserWarning) as caught:
        opt = StiefelMuon(model.parameters())
    assert len(caught) == 1  # one message for the optimizer, not one per parameter
    message = str(caught[0].message)
    assert "out.weight (40, 32): AdamW (output head (guessed" in message
    assert "role='adamw'" in message and "mark_muon_roles" in message and "role_table" in message
    assert [r["role"] for r in opt.roles()] == ["adamw", "muon", "adamw", "adamw", "adamw"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        StiefelMuon([{"params": [model.out.weight], "role": "adamw"}])  # the route: no guess left, no message


def test_an_unmarked_model_takes_roles_from_names_and_shapes_and_says_so():
    model = NanoGPT()
    with pytest.warns(UserWarning, match=r"is a guess: transformer\.wte\.weight \(40, 32\): AdamW \(embedding, by its "
                      r"name"):
        opt = StiefelMuon(model.named_parameters())
    rows = {r["name"]: r for r in opt.roles()}
    assert rows["lm_head.weight"]["role"] == "adamw" and rows["transformer.h.0.mlp.c_fc.weight"]["role"] == "muon"
    with pytest.warns(UserWarning, match=r"the role of 11 parameter\(s\) is a guess: parameter 0 \(40, 32\): Muon "
                      r"\(a matrix, by its shape\)"):
        StiefelMuon(NanoGPT().parameters())  # no names, no marks: the matrices' roles come from their shapes


def test_the_readmes_muon_recipe_runs_and_gives_the_roles_it_describes(capsys):
    import re
    from pathlib import Path

    section = re.search(r"## The Muon recipe\n(.*?)\n## ", (Path(__file__).parents[1] / "README.md").read_text(),
                        flags=re.S).group(1)
    code = re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)
    namespace: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the recipe guesses nothing
        exec(compile(code, "README.md", "exec"), namespace)
    out = capsys.readouterr().out
    assert "2 attention layer(s)" in out and "StiefelMuon roles: 4 frames (manifold Muon)" in out
    rows = namespace["opt"].roles()
    lrs = {r["role"]: r["lr"] for r in rows if r["kind"] in ("frame", "matrix")}
    assert lrs == pytest.approx({"frame": 0.02 / 25, "muon": 0.01 / 25})  # where OneCycleLR starts
    scales = [r for r in rows if r["kind"] == "scale"]  # param_groups' "scale" group: AdamW at its own lr, no decay
    assert len(scales) == 4 and all(r["role"] == "adamw" and r["weight_decay"] == 0.0 for r in scales)
    assert all(r["lr"] == pytest.approx(DEFAULT_SCALE_LR / 25) for r in scales)

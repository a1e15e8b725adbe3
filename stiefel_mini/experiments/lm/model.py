"""The language model of the study and each arm's optimizers: a converted GPT-2 and who trains what.

:func:`build_model` makes a Hugging Face ``GPT2LMHeadModel`` from a config (no weights are loaded)
and converts its attention with :func:`stiefel_mini.convert_attention`, the call a user makes:
with frames (``stiefel=True``) for the arms that hold Q/K on the manifold, without (``stiefel=False``,
the same function computed bit for bit, Q/K stored per head) for ``adamw`` and ``muon``. Every arm of
a seed starts from the same initial weights; a frame starts at the polar factor of its head's block.

:func:`parameter_roles` sorts the parameters into ``frames``, ``qk`` (unconstrained per-head Q/K),
``hidden`` (the other matrices inside the blocks: V, the attention output, the MLP), ``embedding``
(token and position embeddings; the output layer shares the token embedding) and ``vector``
(biases, layer-norm gains). :func:`make_optimizers` gives each role to its arm's optimizer.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from stiefel_mini import StiefelAdam, convert_attention
from stiefel_mini.experiments.lm.config import LM_ARMS, LMConfig, LMModel
from stiefel_mini.experiments.reference_optimizers import Muon
from stiefel_mini.experiments.runtime import stream_seed
from stiefel_mini.groups import frame_parameters, qk_parameters

__all__ = ["FRAME_ARMS", "build_model", "gpt2", "gpt2_parameter_count", "parameter_roles", "make_optimizers",
           "lr_factor", "logit_scales", "split_logit_scales", "scale_growth_bound"]

FRAME_ARMS = ("stiefel", "frozen", "muon_stiefel")
"""The arms whose Q/K are Stiefel frames."""


def build_model(cfg: LMConfig, eot_id: int = 0) -> nn.Module:
    """The GPT-2 of ``cfg.model``, initialised from stream ``"init"`` of ``cfg.seed``, converted for ``cfg.arm``.

    Dropout is off (the runs are short and deterministic). Raises ``ValueError`` for an unknown arm
    or a width the heads do not divide.
    """
    if cfg.arm not in LM_ARMS:
        raise ValueError(f"unknown arm {cfg.arm!r}; choose one of {sorted(LM_ARMS)}")
    model = gpt2(cfg, eot_id)
    convert_attention(model, stiefel=cfg.arm in FRAME_ARMS)
    if cfg.arm == "frozen":
        for p in frame_parameters(model):
            p.requires_grad_(False)
    return model


def gpt2(cfg: LMConfig, eot_id: int = 0) -> nn.Module:
    """The unconverted GPT-2 of ``cfg.model``, initialised from stream ``"init"`` of ``cfg.seed``: the
    same weights for every arm of a seed. Raises ``ValueError`` for a width the heads do not divide."""
    from transformers import GPT2Config, GPT2LMHeadModel

    m = cfg.model
    if m.d_model % m.n_head:
        raise ValueError(f"d_model={m.d_model} is not a multiple of n_head={m.n_head}")
    config = GPT2Config(vocab_size=m.vocab_size, n_positions=m.context, n_embd=m.d_model, n_layer=m.n_layer,
                        n_head=m.n_head, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        bos_token_id=eot_id, eos_token_id=eot_id)
    # transformers initialises from torch's global generator: seed it from the run's own stream.
    state = torch.random.get_rng_state()
    torch.manual_seed(stream_seed(cfg.seed, "init"))
    try:
        return GPT2LMHeadModel(config)
    finally:
        torch.random.set_rng_state(state)


def gpt2_parameter_count(m: LMModel) -> int:
    r"""The number of parameters of :func:`gpt2`'s model, counted without building it (nor importing transformers).

    .. math:: N = (V + T)\,d + L\,(12 d^2 + 13 d) + 2 d

    for vocabulary :math:`V`, context :math:`T`, width :math:`d` and :math:`L` layers: token and position
    embeddings (the output layer shares the token embedding); per block the fused ``c_attn``
    (:math:`3d^2 + 3d`), ``attn.c_proj`` (:math:`d^2 + d`), ``mlp.c_fc`` (:math:`4d^2 + 4d`), ``mlp.c_proj``
    (:math:`4d^2 + d`) and two layer norms (:math:`4d`); the final layer norm (:math:`2d`). Converting the
    attention keeps the count (``test_model`` checks both against built models). Reference: Radford et al.,
    "Language Models are Unsupervised Multitask Learners" (2019), the GPT-2 architecture.
    """
    d = m.d_model
    return (m.vocab_size + m.context) * d + m.n_layer * (12 * d * d + 13 * d) + 2 * d


def parameter_roles(model: nn.Module) -> dict[str, list[nn.Parameter]]:
    """``{"frames", "qk", "hidden", "embedding", "vector"}``: every trainable parameter in one role.

    ``embedding``: ``nn.Embedding`` weights; ``hidden``: the other parameters of 2 or more dimensions
    that are neither frames nor Q/K; ``vector``: the rest (1-D).
    """
    frames = {id(p) for p in frame_parameters(model)}
    qk = {id(p) for p in qk_parameters(model)} - frames
    embeddings = {id(mod.weight) for mod in model.modules() if isinstance(mod, nn.Embedding)}
    roles: dict[str, list[nn.Parameter]] = {k: [] for k in ("frames", "qk", "hidden", "embedding", "vector")}
    for p in model.parameters():  # each shared parameter once (the tied output layer)
        if not p.requires_grad:
            continue
        role = ("frames" if id(p) in frames else "qk" if id(p) in qk else "embedding" if id(p) in embeddings
                else "hidden" if p.ndim >= 2 else "vector")
        roles[role].append(p)
    return roles


def logit_scales(model: nn.Module) -> list[nn.Parameter]:
    """The learned per-head logit scales of ``model``'s converted attention (``logit_scale="learned"``:
    the parameters named ``*log_scale``, each ``(n_heads,)``); empty for a fixed scale."""
    return [p for name, p in model.named_parameters() if name.endswith("log_scale") and p.requires_grad]


def split_logit_scales(vectors: list[nn.Parameter], model: nn.Module, scale_lr: float | None) -> tuple[list, list]:
    """``(vectors, scale groups)``: the learned logit scales moved out of ``vectors`` into an undecayed
    group of lr ``scale_lr``, or ``vectors`` as they are and no group when ``scale_lr`` is ``None``."""
    if scale_lr is None:
        return vectors, []
    scales = {id(p) for p in logit_scales(model)}
    if not scales:
        raise ValueError("scale_lr is set but the model has no learned logit scale: convert its attention with "
                         "logit_scale='learned', or leave scale_lr unset")
    return ([p for p in vectors if id(p) not in scales],
            [{"name": "scale", "params": [p for p in vectors if id(p) in scales], "lr": scale_lr, "weight_decay": 0.0}])


def make_optimizers(model: nn.Module, cfg: LMConfig, scale_lr: float | None = None) -> list[torch.optim.Optimizer]:
    """The optimizers of ``cfg.arm`` for ``model``, stepped together each step.

    ============  ==============================  ======================  =======================
    arm           frames / Q/K                    V, output, MLP          embeddings, vectors
    ============  ==============================  ======================  =======================
    adamw         AdamW ``lr``, decayed           AdamW ``lr``, decayed   AdamW ``lr``
    stiefel       StiefelAdam ``frame_lr``        AdamW ``lr``, decayed   AdamW ``lr``
    frozen        not trained                     AdamW ``lr``, decayed   AdamW ``lr``
    muon          Muon ``muon_lr`` (Q, K whole)   Muon ``muon_lr``        AdamW ``lr``
    muon_stiefel  StiefelAdam ``frame_lr``        Muon ``muon_lr``        AdamW ``lr``
    ============  ==============================  ======================  =======================

    AdamW decays matrices and embeddings by ``weight_decay`` and never vectors; Muon and the frames
    are not decayed (the Muon recipe; a frame has no decay term). Weights are stored as GPT-2's
    ``Conv1D`` does, ``(in, out)``, which Muon's shape factor is told (``in_out``). ``scale_lr``: the
    AdamW lr of the learned logit scales (:func:`logit_scales`, undecayed); ``None`` leaves them with
    the vectors at ``lr``.
    """
    o, roles = cfg.optimizer, parameter_roles(model)
    roles["vector"], scale = split_logit_scales(roles["vector"], model, scale_lr)
    adamw = {"lr": o.lr, "betas": o.betas, "eps": o.eps}
    decayed = {"weight_decay": o.weight_decay}
    vectors = {"name": "vector", "params": roles["vector"], "weight_decay": 0.0}
    embed = {"name": "embedding", "params": roles["embedding"], **decayed}
    frames = {"name": "frames", "params": roles["frames"], "stiefel": True, "lr": o.frame_lr, "max_step": o.max_step,
              "weight_decay": 0.0}
    muon = {"lr": o.muon_lr, "momentum": o.momentum, "weight_decay": 0.0}
    hidden = {"name": "hidden", "params": roles["hidden"], **decayed}
    arm = cfg.arm
    if arm in ("adamw", "frozen"):
        groups = [{"name": "qk", "params": roles["qk"], **decayed}, hidden, embed, vectors, *scale]
        return [torch.optim.AdamW([g for g in groups if g["params"]], **adamw)]
    if arm == "stiefel":
        return [StiefelAdam([frames, hidden, embed, vectors, *scale], **adamw)]
    if arm == "muon":
        return [Muon([{"params": roles["qk"], "heads": True}, {"params": roles["hidden"], "in_out": True}], **muon),
                torch.optim.AdamW([embed, vectors, *scale], **adamw)]
    if arm == "muon_stiefel":
        return [Muon([{"params": roles["hidden"], "in_out": True}], **muon),
                StiefelAdam([frames, embed, vectors, *scale], **adamw)]
    raise ValueError(f"unknown arm {arm!r}; choose one of {sorted(LM_ARMS)}")


def lr_factor(step: int, steps: int, warmup_frac: float, final_frac: float) -> float:
    """The schedule's multiplier of every peak lr at optimizer step ``step`` (from 0) of ``steps``.

    Linear warm-up ``(s + 1) / w`` over ``w = max(1, round(warmup_frac * steps))`` steps, then a
    cosine from 1 to ``final_frac``: ``f + (1 - f) (1 + cos(pi u)) / 2`` with ``u = (s - w) /
    (steps - w)``.
    """
    w = max(1, round(warmup_frac * steps))
    if step < w:
        return (step + 1) / w
    u = min(1.0, (step - w) / max(1, steps - w))
    return final_frac + (1 - final_frac) * 0.5 * (1 + math.cos(math.pi * u))


def scale_growth_bound(steps: int, lr: float, warmup_frac: float, final_frac: float, n_scales: int = 2) -> float:
    r"""How many times over a product of ``n = n_scales`` Adam-trained scales ``e^{a_k}`` can grow in one run.

    An Adam step moves a parameter by at most about its lr when ``1 - beta_1 <= sqrt(1 - beta_2)``
    (Kingma & Ba 2015, Sec. 2.1), and the schedule scales the peak ``lr`` by ``f_t`` (:func:`lr_factor`), so

    .. math::  \prod_k e^{a_k(T)} / \prod_k e^{a_k(0)} \le \exp\Big(n\, \mathrm{lr} \sum_{t<T} f_t\Big),

    reached when every step pushes every ``a_k`` up with the same gradient. A frame's learned logit
    scale is such a product, of its query's and its key's (``n_scales = 2``).
    """
    if steps < 1 or lr < 0 or n_scales < 1:
        raise ValueError(f"need steps >= 1, lr >= 0 and n_scales >= 1; got {steps}, {lr}, {n_scales}")
    return math.exp(n_scales * lr * sum(lr_factor(t, steps, warmup_frac, final_frac) for t in range(steps)))

"""The language-model studies' arms: model and optimizers per recipe, the fourth study's as the library recommends them.

Every arm of a seed starts from the same GPT-2 weights (:func:`~stiefel_mini.experiments.lm.model.gpt2`);
:func:`build` converts or marks them as the recipe (:data:`~stiefel_mini.experiments.lm.plans.RECIPES`)
needs, and :func:`optimizers` gives each parameter to its optimizer:

==============  =============================  =========================  ==============================
recipe          attention Q/K                  other hidden matrices      embeddings, vectors, scale
==============  =============================  =========================  ==============================
adamw           AdamW ``lr`` (per head)        AdamW ``lr``               AdamW ``lr``
adamw_qknorm    AdamW ``lr``, QK-norm          AdamW ``lr``               AdamW ``lr``; gains ``scale_lr``
muon            Muon ``muon_lr`` (Q|K|V whole) Muon ``muon_lr``           AdamW ``lr``
muon_qknorm     Muon, QK-norm                  Muon ``muon_lr``           AdamW ``lr``; gains ``scale_lr``
stiefel         StiefelAdam ``frame_lr``       AdamW ``lr``               AdamW ``lr``; scale ``scale_lr``
stiefel_muon    manifold Muon ``frame_lr``     Muon ``muon_lr``           AdamW ``lr``; scale ``scale_lr``
all_stiefel     every hidden matrix whole a frame: manifold Muon           AdamW ``lr``
==============  =============================  =========================  ==============================

The Stiefel recipes convert with ``logit_scale="learned", scale_start="unit"`` and train the scale
in :func:`~stiefel_mini.groups.param_groups`' ``"scale"`` group, as the library recommends for a
model trained from scratch. ``all_stiefel`` is arXiv 2606.13276's module-wise manifold Muon
("All-Stiefel"): every block's ``attn.c_attn`` (Q|K|V fused, one isometry), ``attn.c_proj``,
``mlp.c_fc`` and ``mlp.c_proj`` started at its polar factor and kept on the Stiefel manifold by
manifold Muon of spectral step ``frame_lr`` (its ``eta``), no QK-norm and no learned scale; the
frame solve stops after ``max_iter`` multiplier updates. Weight decay (0.1) applies to AdamW's
matrices and embeddings and to Muon's matrices, never to vectors, gains, scales or frames.
GPT-2's ``Conv1D`` weights are stored ``(in, out)``, which Muon is told (``in_out=True``).

The first three studies' recipes build their arms as those studies' own code did, and read their
lrs from the run's config (which the runner sets from the point) rather than from the point:
``r1_<arm>``: :func:`~stiefel_mini.experiments.lm.model.build_model` and
:func:`~stiefel_mini.experiments.lm.model.make_optimizers` of the first study's arm;
``r2_<arm>``: the second study's, the AdamW and Stiefel arms converted as above but with the
learned scale started where GPT-2's logits start (``scale_start="keep"``) and trained with the
vectors at ``lr``, the Muon arms' fused Q|K|V orthogonalised whole or per head (``per_head``);
``r3_<arm>``: the second study's Stiefel arm, its scale in a group of its own at ``scale_lr``.
``scripts/lm_plan_check.py`` checks them bit for bit against that code.
"""

from __future__ import annotations

import torch
from torch import nn

from stiefel_mini import StiefelAdam, StiefelMuon, convert_attention, mark_muon_roles
from stiefel_mini.geometry import project
from stiefel_mini.groups import is_frame, logit_scale_parameters, mark_frame, param_groups
from stiefel_mini.experiments.config import replace
from stiefel_mini.experiments.lm.attention import QKNorm, add_qk_norm
from stiefel_mini.experiments.lm.config import LMConfig
from stiefel_mini.experiments.lm.model import build_model, gpt2, make_optimizers, parameter_roles, split_logit_scales
from stiefel_mini.experiments.lm.plans import RECIPES

__all__ = ["WHOLE_MATRICES", "build", "optimizers", "setup_for", "build_facts"]

WHOLE_MATRICES = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
"""The hidden matrices of a GPT-2 block that ``all_stiefel`` holds on the manifold, each whole."""


def _early(recipe: str) -> tuple[str, str]:
    """``(study prefix, arm)`` of a first-three-studies recipe (``("r2_", "muon")``), ``("", recipe)`` else."""
    return (recipe[:3], recipe[3:]) if recipe[:3] in ("r1_", "r2_", "r3_") else ("", recipe)


def build(recipe: str, cfg: LMConfig, eot_id: int = 0) -> nn.Module:
    """The model of ``recipe`` for ``cfg``: the seed's GPT-2, converted, normed or put on the manifold."""
    if recipe not in RECIPES:
        raise ValueError(f"unknown recipe {recipe!r}; choose one of {sorted(RECIPES)}")
    study, arm = _early(recipe)
    if study == "r1_":
        return build_model(replace(cfg, arm=arm), eot_id)
    model = gpt2(cfg, eot_id)
    if arm in ("stiefel", "stiefel_muon"):
        convert_attention(model, stiefel=True, logit_scale="learned", scale_start="keep" if study else "unit")
    elif arm in ("adamw", "adamw_qknorm"):
        convert_attention(model, stiefel=False)
    else:
        mark_muon_roles(model)  # the Muon recipe's roles; optimizers() sets each group's role itself
    if arm.endswith("_qknorm"):
        add_qk_norm(model)
    if arm == "all_stiefel":
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith(WHOLE_MATRICES):
                    p.copy_(project(p))  # the polar factor: orthonormal rows of the (in, out) weight
                    mark_frame(p)
    return model


def _gains(model: nn.Module) -> list[nn.Parameter]:
    return [p for m in model.modules() if isinstance(m, QKNorm) for p in (m.q_gain, m.k_gain)]


def _roles(model: nn.Module) -> dict[str, list[nn.Parameter]]:
    """``frames``, ``scale`` (learned logit scales and QK-norm gains), ``embedding``, ``hidden``
    (other matrices) and ``vector``: every trainable parameter once (the tied output layer too)."""
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    scales = {id(p) for p in [*logit_scale_parameters(model), *_gains(model)]}
    roles: dict[str, list[nn.Parameter]] = {k: [] for k in ("frames", "scale", "embedding", "hidden", "vector")}
    for p in model.parameters():
        if p.requires_grad:
            roles["frames" if is_frame(p) else "scale" if id(p) in scales else "embedding" if id(p) in embeddings
                  else "hidden" if p.ndim >= 2 else "vector"].append(p)
    return roles


def _muon_groups(model: nn.Module, cfg: LMConfig, per_head: bool, scale_lr: float | None) -> list[dict]:
    """The second study's StiefelMuon groups: frames, Q|K|V (whole or per head), the other matrices,
    embeddings, vectors (and the learned logit scales at ``scale_lr``, when it is set)."""
    o, roles, n_head = cfg.optimizer, parameter_roles(model), cfg.model.n_head
    roles["vector"], scale = split_logit_scales(roles["vector"], model, scale_lr)
    qkv = {id(p) for name, p in model.named_parameters()
           if name.endswith(("c_attn.weight", "c_attn.proj.weight", "c_attn.rest_weight"))}
    fused = {id(p) for name, p in model.named_parameters() if name.endswith(("c_attn.weight", "c_attn.proj.weight"))}
    groups = [{"params": roles["frames"], "role": "frame"},
              {"params": [p for p in roles["hidden"] if id(p) in fused], "role": "muon", "heads": n_head if per_head else 1,
               "projections": 3},
              {"params": [p for p in roles["hidden"] if id(p) in qkv - fused], "role": "muon",
               "heads": n_head if per_head else None},
              {"params": [p for p in roles["hidden"] if id(p) not in qkv], "role": "muon"},
              {"params": roles["embedding"], "role": "adamw", "adamw_weight_decay": o.weight_decay},
              {"params": roles["vector"] + roles["qk"], "role": "adamw", "adamw_weight_decay": 0.0},
              *({"params": g["params"], "role": "adamw", "adamw_weight_decay": 0.0, "adamw_lr": g["lr"]} for g in scale)]
    return [g for g in groups if g["params"]]


def _early_optimizers(study: str, arm: str, model: nn.Module, cfg: LMConfig, point: dict) -> list[torch.optim.Optimizer]:
    """The first three studies' optimizers, their lrs from ``cfg``: ``make_optimizers`` of the arm (the
    AdamW family as ``adamw``), or the second study's StiefelMuon."""
    if study == "r1_":
        return make_optimizers(model, replace(cfg, arm=arm))
    scale_lr = point.get("scale_lr")
    if arm in ("adamw", "adamw_qknorm", "stiefel"):
        return make_optimizers(model, replace(cfg, arm="stiefel" if arm == "stiefel" else "adamw"), scale_lr)
    o = cfg.optimizer
    return [StiefelMuon(_muon_groups(model, cfg, bool(point["per_head"]), scale_lr), lr=o.muon_lr, momentum=o.momentum,
                        weight_decay=o.weight_decay, frame_lr=o.frame_lr, adamw_lr=o.lr, betas=o.betas, eps=o.eps,
                        in_out=True, ns_dtype="float32")]  # the precision of the study's runs, on any device


def optimizers(recipe: str, model: nn.Module, cfg: LMConfig, point: dict) -> list[torch.optim.Optimizer]:
    """The optimizer of ``recipe`` for ``model`` (built by :func:`build`) at the settings of ``point``."""
    study, arm = _early(recipe)
    if study:
        return _early_optimizers(study, arm, model, cfg, point)
    o = cfg.optimizer
    adam = {"lr": point["lr"], "betas": o.betas, "eps": o.eps}
    if recipe in ("adamw", "adamw_qknorm", "stiefel"):
        frames = {"lr": point["frame_lr"], "max_step": point["max_step"]} if recipe == "stiefel" else None
        groups = param_groups(model, weight_decay=o.weight_decay, frame_options=frames,
                              scale_options={"lr": point["scale_lr"]} if recipe == "stiefel" else None)
        if recipe == "adamw_qknorm":
            gains = {id(p) for p in _gains(model)}
            for g in groups:
                g["params"] = [p for p in g["params"] if id(p) not in gains]
            groups.append({"name": "scale", "params": _gains(model), "lr": point["scale_lr"], "weight_decay": 0.0})
        groups = [g for g in groups if g["params"]]
        return [StiefelAdam(groups, **adam) if recipe == "stiefel" else torch.optim.AdamW(groups, **adam)]
    roles = _roles(model)
    adamw = {"role": "adamw", "adamw_lr": point["lr"]}
    groups = [{"params": roles["frames"], "role": "frame", "frame_lr": point.get("frame_lr")},
              {"params": roles["hidden"], "role": "muon", "in_out": True},
              {"params": roles["embedding"], **adamw, "adamw_weight_decay": o.weight_decay},
              {"params": roles["vector"], **adamw, "adamw_weight_decay": 0.0},
              {"params": roles["scale"], **adamw, "adamw_lr": point.get("scale_lr"), "adamw_weight_decay": 0.0}]
    options = {"max_iter": point["max_iter"]} if recipe == "all_stiefel" else {}
    return [StiefelMuon([g for g in groups if g["params"]], lr=point.get("muon_lr") or o.muon_lr, momentum=o.momentum,
                        weight_decay=o.weight_decay, betas=o.betas, eps=o.eps,
                        ns_dtype="float32", **options)]  # the precision of the study's runs, on any device


def build_facts(recipe: str) -> dict:
    """What a run of the second or third study records of its build, as that study's runs did:
    ``logit_scale`` (``"learned"`` for a Stiefel arm, else ``None``) and ``qk_norm``; empty for the
    other recipes (their ``recipe`` says it)."""
    study, arm = _early(recipe)
    if study not in ("r2_", "r3_"):
        return {}
    return {"logit_scale": "learned" if arm in ("stiefel", "stiefel_muon") else None, "qk_norm": arm.endswith("_qknorm")}


def setup_for(recipe: str, point: dict):
    """``setup(cfg, eot_id) -> (model, optimizers)`` of ``recipe`` at ``point``, for
    :func:`~stiefel_mini.experiments.lm.experiment.run`."""
    def setup(cfg: LMConfig, eot_id: int):
        model = build(recipe, cfg, eot_id)
        return model, optimizers(recipe, model, cfg, point)
    return setup

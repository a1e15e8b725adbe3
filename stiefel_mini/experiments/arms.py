"""The optimiser arms the experiments compare, and the one factory that builds an arm's optimiser.

An :class:`Arm` says how the attention's query/key projections are trained; every other weight gets
AdamW. It sets two things and nothing else:

* module flags (:meth:`Arm.module_flags`): whether Q/K are Stiefel frames (``stiefel``), whether they
  are trained at all (``train_qk``), QK-norm (``qk_norm``) and the logit scale; models pass them to
  :func:`stiefel_mini.attention.make_attention`;
* optimiser options: :func:`make_optimizer` calls :func:`stiefel_mini.attention.param_groups` with
  the arm's ``frame_options`` / ``qk_options`` and picks the optimiser class. It never edits the groups
  afterwards and never changes a parameter.

The names (``ARMS``) are the vocabulary of every experiment and results file; ``code`` is the label
of the CIFAR-10 issue (A0, A1, ...).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from stiefel_mini.attention import param_groups, qk_parameters
from stiefel_mini.geometry import project
from stiefel_mini.optim import StiefelAdam

__all__ = ["Arm", "ARMS", "QK_RULES", "arm_spec", "optimizer_options", "make_optimizer", "ProjectedAdamW"]

QK_RULES = ("adamw", "adamw_nodecay", "adamw_scaled", "adamw_polar", "stiefel", "frozen", "none")


@dataclass(frozen=True)
class Arm:
    """One way of training the attention Q/K projections; every other weight gets AdamW.

    ``qk``, the rule for Q/K: ``"adamw"`` (decayed like any weight), ``"adamw_nodecay"``,
    ``"adamw_scaled"`` (lr / sqrt(d_model * d_head), so the Frobenius step matches StiefelAdam's),
    ``"adamw_polar"`` (AdamW step on the frames, then the polar projection back onto the manifold),
    ``"stiefel"`` (StiefelAdam's frame rule), ``"frozen"`` (random frames, never updated), ``"none"``
    (the experiment removes the attention routing; Q/K are unused and not trained).
    ``second_moment``, ``projector``: StiefelAdam's second-moment pooling and tangent projector for
    ``qk="stiefel"``; ``capped``: whether its trust cap ``max_step`` applies (``False``: no cap).
    ``qk_norm``: the attention is :class:`~stiefel_mini.attention.QKNormSelfAttention`.
    ``logit_scale``: forces the attention's logit scale (``None``: the experiment's setting).
    """

    name: str
    qk: str
    code: str | None = None
    second_moment: str = "frame"
    projector: str = "euclidean"
    capped: bool = True
    qk_norm: bool = False
    logit_scale: str | None = None
    description: str = ""

    def __post_init__(self) -> None:
        if self.qk not in QK_RULES:
            raise ValueError(f"arm {self.name}: unknown Q/K rule {self.qk!r}; choose one of {QK_RULES}")

    @property
    def stiefel(self) -> bool:
        """Whether the attention holds Q/K as Stiefel frames (``stiefel=True`` in the module)."""
        return self.qk in ("stiefel", "adamw_polar", "frozen")

    @property
    def label(self) -> str:
        """``code`` if the arm has one, else ``name``."""
        return self.code or self.name

    def module_flags(self, logit_scale: str = "fixed") -> dict:
        """Keyword arguments for :func:`~stiefel_mini.attention.make_attention` (``logit_scale``: the
        experiment's own, unless the arm forces one)."""
        return {"stiefel": self.stiefel, "train_qk": self.qk not in ("frozen", "none"),
                "qk_norm": self.qk_norm, "logit_scale": self.logit_scale or logit_scale}


ARMS: dict[str, Arm] = {
    a.name: a
    for a in [
        Arm("adamw", "adamw", "A0", description="AdamW on everything, Q/K decayed"),
        Arm("adamw_nodecay_qk", "adamw_nodecay", "A0'", description="AdamW, no weight decay on Q/K"),
        Arm("stiefel", "stiefel", "A1", description="StiefelAdam (paper rule) on Q/K frames, AdamW on the rest"),
        Arm("frozen", "frozen", "A3", description="random Q/K frames, never updated"),
        Arm("adamw_scaled_qk", "adamw_scaled", "A4", description="AdamW, Q/K lr / sqrt(d_model*d_head)"),
        Arm("adamw_polar", "adamw_polar", "A5", description="AdamW on Q/K, then polar projection each step"),
        Arm("stiefel_element", "stiefel", "A7", "element", description="StiefelAdam, per-element second moment"),
        Arm("stiefel_column", "stiefel", second_moment="column",
            description="StiefelAdam, per-column second moment"),
        Arm("stiefel_canonical", "stiefel", projector="canonical",
            description="StiefelAdam with the canonical-metric projector"),
        Arm("stiefel_noproj", "stiefel", projector="none",
            description="StiefelAdam without tangent projection or transport (then the retraction)"),
        Arm("stiefel_nocap", "stiefel", capped=False,
            description="StiefelAdam without the trust cap (max_step None)"),
        Arm("stiefel_learned", "stiefel", logit_scale="learned",
            description="StiefelAdam on Q/K frames, learned per-head logit scale"),
        Arm("frozen_learned", "frozen", logit_scale="learned",
            description="random Q/K frames, never updated, learned per-head logit scale"),
        Arm("qknorm", "adamw", qk_norm=True, description="AdamW on QK-norm attention (normalised q, k; learned gain)"),
        Arm("uniform", "none", description="control: uniform attention, Q/K unused"),
    ]
}


def arm_spec(arm: str | Arm) -> Arm:
    """The :class:`Arm` called ``arm`` (a name of :data:`ARMS` or a code such as ``"A1"``)."""
    if isinstance(arm, Arm):
        return arm
    if arm in ARMS:
        return ARMS[arm]
    for spec in ARMS.values():
        if spec.code == arm:
            return spec
    codes = sorted(a.code for a in ARMS.values() if a.code)
    raise ValueError(f"unknown arm {arm!r}; choose a name of {sorted(ARMS)} or a code of {codes}")


class ProjectedAdamW(torch.optim.AdamW):
    """AdamW, then the polar projection of every param in groups with ``project=True`` (arm A5).

    After the Euclidean AdamW step ``W' = W - lr * (m_hat / (sqrt(v_hat) + eps) + wd W)``, the frame is
    replaced by its closest point on the Stiefel manifold, ``W <- U V^T`` with ``W' = U S V^T``
    (:func:`stiefel_mini.geometry.project`). This is the "project after an unconstrained step" baseline:
    unlike StiefelAdam its moments are never transported to the tangent space.
    """

    @torch.no_grad()
    def step(self, closure: Callable | None = None):
        loss = super().step(closure)
        for group in self.param_groups:
            if group.get("project", False):
                for p in group["params"]:
                    p.copy_(project(p))
        return loss


_OPTIONS = ("lr", "betas", "eps", "weight_decay", "frame_lr", "max_step", "retraction")


def optimizer_options(cfg: object) -> dict:
    """The :func:`make_optimizer` keywords a config holds (fields named ``lr``, ``betas``, ``eps``,
    ``weight_decay``, ``frame_lr``, ``max_step``, ``retraction``); absent fields keep the defaults."""
    return {k: getattr(cfg, k) for k in _OPTIONS if hasattr(cfg, k)}


def make_optimizer(
    model: torch.nn.Module,
    arm: str | Arm,
    *,
    lr: float,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    qk_weight_decay: float | None = None,
    frame_lr: float | None = None,
    max_step: float | None = 0.1,
    retraction: str = "polar",
) -> torch.optim.Optimizer:
    """The optimiser of ``arm`` for ``model`` (built with ``arm_spec(arm).module_flags()``).

    Args:
        lr, betas, eps: AdamW's (and StiefelAdam's) settings for every weight.
        weight_decay: decay of matrices and embeddings outside Q/K (1-D parameters: none).
        qk_weight_decay: decay handed to the Q/K group (default: ``weight_decay`` for the AdamW rules,
            0 for StiefelAdam frames, where the optimiser ignores decay); ``adamw_polar`` frames get
            none, since the projection would undo the shrinkage.
        frame_lr: lr of ``stiefel`` and ``adamw_polar`` frames (default ``lr``).
        max_step, retraction: StiefelAdam's trust cap and retraction for ``stiefel`` frames.

    The groups are :func:`~stiefel_mini.attention.param_groups` of the model with the arm's
    ``frame_options`` / ``qk_options``, unchanged. ``frozen`` and ``none`` arms need a model whose Q/K
    were built with ``train_qk=False``; a ``ValueError`` says so otherwise.
    """
    spec = arm_spec(arm)
    qk = list(qk_parameters(model))
    if spec.qk in ("frozen", "none") and any(p.requires_grad for p in qk):
        raise ValueError(f"arm {spec.name}: Q/K must not be trained; build the model with "
                         f"arm_spec({spec.name!r}).module_flags() (train_qk=False)")
    frame_lr = lr if frame_lr is None else frame_lr
    qk_wd = weight_decay if qk_weight_decay is None else qk_weight_decay
    frame_options: dict | None = None
    qk_options: dict | None = None
    opt_cls: type = torch.optim.AdamW
    if spec.qk == "adamw":
        qk_options = {"weight_decay": qk_wd}
    elif spec.qk == "adamw_nodecay":
        qk_options = {"weight_decay": 0.0}
    elif spec.qk == "adamw_scaled":
        n, p = qk[0].shape[-2:]
        qk_options = {"weight_decay": qk_wd, "lr": lr / math.sqrt(n * p)}
    elif spec.qk == "adamw_polar":
        frame_options = {"stiefel": False, "project": True, "weight_decay": 0.0, "lr": frame_lr}
        opt_cls = ProjectedAdamW
    elif spec.qk == "stiefel":
        frame_options = {"weight_decay": 0.0 if qk_weight_decay is None else qk_weight_decay,
                         "lr": frame_lr, "second_moment": spec.second_moment,
                         "max_step": max_step if spec.capped else None,
                         "retraction": retraction, "projector": spec.projector}
        opt_cls = StiefelAdam
    groups = param_groups(model, weight_decay=weight_decay, frame_options=frame_options, qk_options=qk_options)
    return opt_cls(groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)

"""The optimizer arms the experiments compare, as two tables, and the one factory that reads them.

An arm says how the attention's query/key projections are trained; every other weight gets AdamW.
Two tables hold everything, as data:

* :data:`QK_RULES`: per Q/K rule, the optimizer class, whether the attention holds Q/K as Stiefel
  frames and trains them, the param group that holds them (``"frames"`` or ``"qk"`` of
  :func:`stiefel_mini.groups.param_groups`) and that group's options. An option's value is a
  constant or :class:`Setting` ``(name)``, a run setting that :func:`make_optimizer` fills in
  (``lr``, ``frame_lr``, ``max_step``, ...);
* :data:`ARMS`: per arm, its rule and the options it changes (``{"second_moment": "element"}``).

So a run's ``lr`` goes ``cfg.optimizer.lr`` -> :func:`optimizer_options` -> :func:`make_optimizer`
-> the optimizer's default ``lr`` (and, through ``Setting("frame_lr")``, the frame group's ``lr``).
Each arm has one name; ``code`` is the label the CIFAR-10 results files store for it (A0, A1, ...), also
accepted wherever an arm is named.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch

from stiefel_mini.groups import logit_scale_parameters, param_groups, qk_parameters
from stiefel_mini.geometry import project
from stiefel_mini.optim import StiefelAdam

__all__ = ["Arm", "ARMS", "QKRule", "QK_RULES", "Setting", "arm_spec", "optimizer_options", "make_optimizer",
           "ProjectedAdamW"]


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


@dataclass(frozen=True)
class Setting:
    """A group option filled in from a run setting of :func:`make_optimizer` (see ``_settings``)."""

    name: str


@dataclass(frozen=True)
class QKRule:
    """How one Q/K rule trains the projections: optimizer class, module flags, group and its options."""

    optimizer: type
    stiefel: bool  # the attention holds Q/K as Stiefel frames
    trained: bool  # Q/K receive updates (False: frozen, or unused)
    group: str | None = None  # the param group of Q/K, "frames" or "qk" (None: not trained)
    options: Mapping[str, Any] = field(default_factory=dict)


QK_RULES: dict[str, QKRule] = {
    # Decayed like any weight.
    "adamw": QKRule(torch.optim.AdamW, False, True, "qk", {"weight_decay": Setting("qk_weight_decay")}),
    "adamw_nodecay": QKRule(torch.optim.AdamW, False, True, "qk", {"weight_decay": 0.0}),
    # lr / sqrt(d_model * d_head): AdamW's Frobenius step then matches StiefelAdam's.
    "adamw_scaled": QKRule(torch.optim.AdamW, False, True, "qk",
                           {"weight_decay": Setting("qk_weight_decay"), "lr": Setting("lr_per_entry")}),
    # No decay: the projection would undo the shrinkage.
    "adamw_polar": QKRule(ProjectedAdamW, True, True, "frames",
                          {"stiefel": False, "project": True, "weight_decay": 0.0, "lr": Setting("frame_lr")}),
    "stiefel": QKRule(StiefelAdam, True, True, "frames",
                      {"weight_decay": Setting("frame_weight_decay"), "lr": Setting("frame_lr"),
                       "second_moment": "frame", "max_step": Setting("max_step"),
                       "retraction": Setting("retraction"), "projector": "euclidean"}),
    "frozen": QKRule(torch.optim.AdamW, True, False),
    # The experiment removes the attention routing; Q/K are unused.
    "none": QKRule(torch.optim.AdamW, False, False),
}
"""Q/K rule -> :class:`QKRule`."""


@dataclass(frozen=True)
class Arm:
    """One way of training the attention Q/K projections; every other weight gets AdamW.

    ``qk``: the rule, a key of :data:`QK_RULES`; ``options``: the rule's group options this arm
    changes (StiefelAdam's ``second_moment``, ``projector``, ``max_step``); ``qk_norm``: the attention
    is :class:`~stiefel_mini.attention.QKNormSelfAttention`; ``logit_scale``: forces the attention's
    logit scale (``None``: the experiment's setting); ``code``: the CIFAR-10 results files' label.
    """

    name: str
    qk: str
    code: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    qk_norm: bool = False
    logit_scale: str | None = None
    description: str = ""

    def __post_init__(self) -> None:
        if self.qk not in QK_RULES:
            raise ValueError(f"arm {self.name}: unknown Q/K rule {self.qk!r}; choose one of {tuple(QK_RULES)}")

    @property
    def rule(self) -> QKRule:
        return QK_RULES[self.qk]

    @property
    def stiefel(self) -> bool:
        """Whether the attention holds Q/K as Stiefel frames (``stiefel=True`` in the module)."""
        return self.rule.stiefel

    @property
    def label(self) -> str:
        """``code`` if the arm has one, else ``name``."""
        return self.code or self.name

    def module_flags(self, logit_scale: str = "fixed") -> dict:
        """Keyword arguments for :func:`~stiefel_mini.attention.make_attention` (``logit_scale``: the
        experiment's own, unless the arm forces one)."""
        return {"stiefel": self.stiefel, "train_qk": self.rule.trained,
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
        Arm("stiefel_element", "stiefel", "A7", {"second_moment": "element"},
            description="StiefelAdam, per-element second moment"),
        Arm("stiefel_column", "stiefel", options={"second_moment": "column"},
            description="StiefelAdam, per-column second moment"),
        Arm("stiefel_canonical", "stiefel", options={"projector": "canonical"},
            description="StiefelAdam with the canonical-metric projector"),
        Arm("stiefel_noproj", "stiefel", options={"projector": "none"},
            description="StiefelAdam without tangent projection or transport (then the retraction)"),
        Arm("stiefel_nocap", "stiefel", options={"max_step": None},
            description="StiefelAdam without the trust cap (max_step None)"),
        Arm("stiefel_learned", "stiefel", logit_scale="learned",
            description="StiefelAdam on Q/K frames, learned per-head logit scale"),
        Arm("frozen_learned", "frozen", logit_scale="learned",
            description="random Q/K frames, never updated, learned per-head logit scale"),
        Arm("qknorm", "adamw", qk_norm=True, logit_scale="learned", description="AdamW on QK-norm attention (normalised q, k; learned gain)"),
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


_OPTIONS = ("lr", "betas", "eps", "weight_decay", "frame_lr", "max_step", "retraction")


def optimizer_options(cfg: object) -> dict:
    """The :func:`make_optimizer` keywords a run config's ``optimizer`` part holds (fields named
    ``lr``, ``betas``, ``eps``, ``weight_decay``, ``frame_lr``, ``max_step``, ``retraction``); absent
    fields keep the defaults."""
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
    scale_lr: float | None = None,
) -> torch.optim.Optimizer:
    """The optimizer of ``arm`` for ``model`` (built with ``arm_spec(arm).module_flags()``).

    Args:
        lr, betas, eps: AdamW's (and StiefelAdam's) settings for every weight.
        weight_decay: decay of matrices and embeddings outside Q/K (1-D parameters: none).
        qk_weight_decay: decay handed to the Q/K group (default: ``weight_decay`` for the AdamW rules,
            0 for StiefelAdam frames, where the optimizer ignores decay).
        frame_lr: lr of ``stiefel`` and ``adamw_polar`` frames (default ``lr``).
        max_step, retraction: StiefelAdam's trust cap and retraction for ``stiefel`` frames.
        scale_lr: lr of the learned logit scales (the ``"scale"`` group); default ``lr``, the
            setting the grokking and CIFAR-10 studies ran (the library's own default,
            :data:`~stiefel_mini.groups.DEFAULT_SCALE_LR`, came later).

    The groups are :func:`~stiefel_mini.groups.param_groups` of the model with the Q/K group's
    options from :data:`QK_RULES` and the arm, unchanged. ``frozen`` and ``none`` arms need a model
    whose Q/K were built with ``train_qk=False``; a ``ValueError`` says so otherwise.
    """
    spec = arm_spec(arm)
    qk = list(qk_parameters(model))
    if not spec.rule.trained and any(p.requires_grad for p in qk):
        raise ValueError(f"arm {spec.name}: Q/K must not be trained; build the model with "
                         f"arm_spec({spec.name!r}).module_flags() (train_qk=False)")
    settings = {
        "lr": lr, "frame_lr": lr if frame_lr is None else frame_lr, "max_step": max_step, "retraction": retraction,
        "qk_weight_decay": weight_decay if qk_weight_decay is None else qk_weight_decay,
        "frame_weight_decay": 0.0 if qk_weight_decay is None else qk_weight_decay,
        "lr_per_entry": lr / math.sqrt(math.prod(qk[0].shape[-2:])) if qk else None,
    }
    options = {k: settings[v.name] if isinstance(v, Setting) else v
               for k, v in {**spec.rule.options, **spec.options}.items()}
    groups = param_groups(model, weight_decay=weight_decay,
                          frame_options=options if spec.rule.group == "frames" else None,
                          qk_options=options if spec.rule.group == "qk" else None,
                          scale_options=({"lr": lr if scale_lr is None else scale_lr}
                                         if any(p.requires_grad for p in logit_scale_parameters(model)) else None))
    return spec.rule.optimizer(groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)

"""The checks behind :class:`~stiefel_mini.muon.StiefelMuon`'s ``ValueError`` messages: its options
(torch's meaning for ``maximize``, ``foreach``, ``fused``, ``differentiable``), and the tensors a
role cannot step, refused when their group is added."""

from __future__ import annotations

import math
from typing import Any

from torch import Tensor

ADJUST = (None, "original", "match_rms_adamw", "spectral_unclamped")
NS_DTYPES = ("auto", "float32", "bfloat16")
ROLES = ("frame", "muon", "adamw")
"""The roles, each trained by its own rule (``"frame"`` by manifold Muon, ``"muon"`` by Muon, ``"adamw"`` by AdamW)."""


def _number(x: Any) -> float | None:
    """``x`` as a float if it is a real number or a one-element tensor, else ``None``."""
    if isinstance(x, bool):
        return None
    if isinstance(x, Tensor):
        return float(x) if x.numel() == 1 and x.is_floating_point() else None
    return float(x) if isinstance(x, (int, float)) else None


def check_options(g: dict[str, Any]) -> None:
    """``ValueError`` for an option no role can use, naming it and what it takes."""
    def bad(name, want):
        raise ValueError(f"StiefelMuon: {name}={g[name]!r} is invalid; {want}")

    for name, other in (("lr", None), ("adamw_lr", None), ("weight_decay", None), ("frame_lr", "lr"),
                        ("adamw_weight_decay", "weight_decay")):
        if other is not None and g[name] is None:
            continue
        x = _number(g[name])
        if x is None or not (x >= 0 and math.isfinite(x)):
            bad(name, "it must be a finite number >= 0 (a float or a one-element tensor)"
                + (f", or None: {other}'s" if other else ""))
    if not (_number(g["eps"]) is not None and 0 <= g["eps"] < math.inf):
        bad("eps", "AdamW's epsilon, a finite number >= 0")
    if not 0 <= g["momentum"] < 1:
        bad("momentum", "it must be in [0, 1)")
    if len(g["betas"]) != 2 or not all(0 <= b < 1 for b in g["betas"]):
        bad("betas", "two numbers in [0, 1)")
    if g["adjust_lr_fn"] not in ADJUST:
        bad("adjust_lr_fn", f"choose one of {list(ADJUST)}")
    if g["role"] not in (None, *ROLES):
        bad("role", f"choose one of {list(ROLES)} or None (the role found from the model, the name or the shape)")
    if g["heads"] is not None and not (isinstance(g["heads"], int) and g["heads"] >= 1):
        bad("heads", "a number of heads >= 1, or None")
    if isinstance(g["projections"], bool) or not (isinstance(g["projections"], int) and g["projections"] >= 1):
        bad("projections", "the number of projections stacked in one weight (Q|K|V: 3), >= 1")
    if g["in_out"] not in (None, True, False):
        bad("in_out", "True (weights stored (in, out)), False ((out, in)) or None (from the model)")
    if not (isinstance(g["ns_steps"], int) and 1 <= g["ns_steps"] < 100):
        bad("ns_steps", "an integer in 1..99")
    if g["ns_dtype"] not in NS_DTYPES:
        bad("ns_dtype", f"choose one of {list(NS_DTYPES)} (auto: bfloat16 where the device computes it natively)")
    if not g["tol"] > 0 or not (isinstance(g["max_iter"], int) and g["max_iter"] >= 0):
        bad("tol" if not g["tol"] > 0 else "max_iter", "tol > 0 and an integer max_iter >= 0")
    for name in ("maximize", "stiefel"):
        if not isinstance(g[name], bool):
            bad(name, "True or False")
    if g["decay_vectors"] not in (None, True, False):
        bad("decay_vectors", "True, False or None (True where the group sets its own weight decay)")
    if g["foreach"] not in (None, True, False):
        bad("foreach", "None, True or False: torch's choice of AdamW's implementation")
    if g["fused"] not in (None, False):
        bad("fused", "StiefelMuon has no fused implementation (torch's meaning: one fused kernel for the "
            "whole step); leave it None. The number of Q|K|V projections stacked in one weight is `projections`")
    if g["differentiable"] is not False:
        bad("differentiable", "StiefelMuon's step cannot be differentiated through; leave it False")


def check_muon_tensor(p: Tensor, group: dict[str, Any], layout: str) -> None:
    """``ValueError`` for a tensor Muon cannot step: fewer than 2 dimensions, a head split (``heads``,
    ``projections``, ``in_out``) that does not cut it into equal blocks, or ``in_out`` forced on a
    conv filter; checked when the group is added."""
    if p.dim() < 2:
        raise ValueError(f"StiefelMuon: role='muon' needs a matrix, got a tensor of shape {tuple(p.shape)}; "
                         "give vectors and scalars role='adamw' (or leave role unset)")
    if layout == "flatten" and group["in_out"]:
        raise ValueError(f"StiefelMuon: in_out=True is set for a group holding a conv filter of shape "
                         f"{tuple(p.shape)}, which Muon orthogonalises flattened, (out, in * k...); put the "
                         "Conv1D / (in, out) weights in a group of their own, or leave in_out None (found from the model)")
    if group["heads"] is not None:
        blocks = group["projections"] * group["heads"]
        in_out = group["in_out"] if group["in_out"] is not None else layout == "in_out"
        f_out = p.shape[-1] if in_out else p.shape[0]
        if p.dim() != 2 or f_out % blocks:
            raise ValueError(f"StiefelMuon: heads={group['heads']}, projections={group['projections']} splits the "
                             f"output dimension of a 2-D weight into {blocks} equal blocks; this group holds a "
                             f"weight of shape {tuple(p.shape)} (in_out={in_out}). Put the Q/K/V projections in a "
                             "group of their own with heads set, and the other matrices in one without")


def parameter_label(group: dict[str, Any], index: int, j: int, p: Tensor, name: str | None) -> str:
    """How errors name the ``j``-th parameter of param group ``index``: its name when known, its position,
    the group's ``name`` and its shape."""
    what = f"{name!r}, " if name else ""
    label = f" ({group['name']!r})" if "name" in group else ""
    return f"{what}parameter {j} of param group {index}{label}, of shape {tuple(p.shape)},"

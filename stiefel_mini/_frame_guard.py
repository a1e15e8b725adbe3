"""The frames' guard: a frame updated by anything but a Stiefel rule is caught at the next
training-mode forward of its module, and an optimizer that trains frames as ordinary weights, or that
was built before ``convert_attention`` (and so holds the weights it replaced), at its first step.

Each frame remembers the version (``Tensor._version``, which every in-place write bumps) at which it
was last known to be on the manifold: after a check that passed, and after a step of
:class:`~stiefel_mini.optim.StiefelAdam` or :class:`~stiefel_mini.muon.StiefelMuon` (a global
optimizer post-hook). A training forward re-checks a frame only when its version moved since, so the
forward pays a few attribute reads per frame; the full check (one ``p x p`` Gram matrix per frame)
runs when something else wrote the frame, and every ``CHECK_EVERY``-th training forward for writes
through ``.data`` (which do not bump the version).
"""

from __future__ import annotations

import warnings
import weakref
from typing import Any

import torch
from torch import Tensor
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from . import _distributed as _dt

TRUSTED = "_stiefel_on_manifold_at"  # the version at which a frame was last known to be on the manifold
REPLACED = "_stiefel_replaced_by"  # set by convert_attention on the tensors it swapped out
_conversions = [0]  # how many conversions marked replaced weights: an optimizer is checked again after one
_seen: "weakref.WeakKeyDictionary[torch.optim.Optimizer, int]" = weakref.WeakKeyDictionary()


def trust(p: Tensor) -> None:
    """Record that ``p`` is on the manifold at its current version."""
    setattr(p, TRUSTED, p._version)


def mark_replaced(model: Any, replaced: list[tuple[Any, str, Any]]) -> None:
    """Mark the parameters of the modules ``replaced`` (``(parent, child name, old module)``) that
    ``model`` no longer holds, so that an optimizer built before the conversion is refused at its
    first step."""
    _conversions[0] += 1
    live = {id(p) for p in model.parameters()}
    names = {id(m): n for n, m in model.named_modules(remove_duplicate=False)}
    for parent, child, module in replaced:
        for pname, p in module.named_parameters():
            if id(p) not in live:
                setattr(p, REPLACED, f"{names.get(id(parent), '')}.{child}.{pname}".lstrip("."))


def _checkable(p: Tensor) -> bool:
    return not (_dt.is_dtensor(p) or p.numel() == 0 or p.is_meta or p.is_inference())


def on_training_forward(module: Any, every: int) -> None:
    """The check a frame-holding module runs before a training-mode forward: the full check when a
    frame's version moved since it was last known on the manifold, or every ``every``-th forward."""
    count = module.__dict__.get("_training_forwards", 0)
    module.__dict__["_training_forwards"] = count + 1
    if module.__dict__.get("_warned_off_manifold"):
        return
    frames = [p for p in module.frames() if _checkable(p)]
    if count % every == 0 or any(getattr(p, TRUSTED, None) != p._version for p in frames):
        if module.check_frames():
            for p in frames:
                trust(p)


def _names(opt: torch.optim.Optimizer, tensors: list[Tensor]) -> str:
    """The first few of ``tensors``, by name where the optimizer or a mark knows it, else by shape."""
    from ._muon_roles import marked

    ids = {id(t) for t in tensors}
    named = [n for g in opt.param_groups for n, p in zip(g.get("param_names", ()), g["params"]) if id(p) in ids]
    named += [getattr(t, REPLACED) for t in tensors if isinstance(getattr(t, REPLACED, None), str)]
    named += [marked(t).name for t in tensors if marked(t) is not None and marked(t).name]
    shown = list(dict.fromkeys(named)) or [str(tuple(t.shape)) for t in tensors]
    return ", ".join(shown[:4]) + (", ..." if len(shown) > 4 else "")


def _is_stiefel_rule(opt: torch.optim.Optimizer) -> bool:
    from .muon import StiefelMuon
    from .optim import StiefelAdam

    return isinstance(opt, (StiefelAdam, StiefelMuon))


def _before_step(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
    """At an optimizer's first step (and its first after a conversion): refuse one that holds weights
    ``convert_attention`` replaced, and warn when one that is not a Stiefel rule trains frames."""
    first = opt not in _seen
    if not first and _seen[opt] == _conversions[0]:
        return
    from .groups import is_frame

    params = [p for g in opt.param_groups for p in g["params"]]
    replaced = [p for p in params if getattr(p, REPLACED, None) is not None]
    if replaced:
        raise ValueError(
            f"{type(opt).__name__} was built before convert_attention: it holds {len(replaced)} weight(s) the "
            f"conversion replaced ({_names(opt, replaced)}), which the model no longer uses, and not the frames "
            "that replaced them, so it would never train them. Build the optimizer after converting the model")
    frames = [p for p in params if is_frame(p)]
    if first and frames and not _is_stiefel_rule(opt):
        warnings.warn(
            f"{type(opt).__name__} holds {len(frames)} Stiefel frame(s) ({_names(opt, frames)}) and trains them as "
            "ordinary weights: they leave the manifold from this step on. Train frames with stiefel_mini.StiefelAdam "
            "or stiefel_mini.StiefelMuon (the Hugging Face Trainer: Trainer(optimizers=(opt, None)))",
            UserWarning, stacklevel=4)
    _seen[opt] = _conversions[0]


def _after_step(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
    """After a step of a Stiefel rule: its frames are on the manifold at their new version."""
    if not _is_stiefel_rule(opt):
        return
    from .groups import is_frame

    for g in opt.param_groups:
        for p in g["params"]:
            if p.grad is not None and is_frame(p) and _checkable(p):
                trust(p)


register_optimizer_step_pre_hook(_before_step)
register_optimizer_step_post_hook(_after_step)

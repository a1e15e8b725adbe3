"""Which parameters of a model :class:`~stiefel_mini.optim.StiefelAdam` treats how: the frame mark,
and the named param groups (frames, Q/K weights, other matrices, vectors).

A frame carries a mark (:func:`is_frame`), set by the module that owns it: the modules of this
library hold their frames through :class:`FrameHolder`, which marks them when they are created and
again whenever they are replaced (``load_state_dict(assign=True)``, FSDP2's ``fully_shard``, which
swaps every parameter for a sharded one, ``copy.deepcopy``, ``.to_empty()`` from the meta device).
``StiefelAdam`` updates a marked parameter as a frame in whatever group it arrives, so
``StiefelAdam(model.parameters())`` keeps the frames on the manifold; ``torch.optim.AdamW`` does
not read the mark and trains a frame as an ordinary weight (off the manifold).

A module takes part by defining ``frames()`` (its Stiefel frames) and ``qk_weights()`` (its query and
key weights, frames or not), as :class:`~stiefel_mini.attention.StiefelSelfAttention` and
:class:`~stiefel_mini.mha.StiefelMultiheadAttention` do.
"""

from __future__ import annotations

import warnings
from typing import Any, Iterator

import torch
from torch import Tensor, nn

from . import _distributed as _dt
from . import _frame_guard
from .geometry import orthogonality_error

__all__ = ["param_groups", "frame_parameters", "qk_parameters", "logit_scale_parameters", "mark_frame", "is_frame",
           "FrameHolder", "CHECK_EVERY", "DEFAULT_SCALE_LR", "off_manifold_tolerance"]

# The mark is an attribute of the tensor: FSDP2 rebuilds each parameter as a plain DTensor, which a
# Parameter subclass would not survive, while its owner re-marks it on assignment (FrameHolder).
_MARK = "_stiefel_frame"

DEFAULT_SCALE_LR = 0.3
r"""The default lr of the ``"scale"`` group of :func:`param_groups`: Adam's step on each learned
log-scale ``tau_h`` of a head's logit scale ``s_h = exp(tau_h)``, whatever the other groups' lr.

A frame has every singular value 1, so a head's attention can sharpen only through ``s_h``; at
AdamW's usual lr (2e-3) a head's two scales (query and key) can together grow at most about
5.6-fold over an 800-step run (``lm.model.scale_growth_bound``), and attention stays near uniform
(the language-model chapter). Measured on the language model's sweep
seeds 100-101 (GPT-2, 4 layers, width 256, 800 steps, the third study of ``results/lm/round3.json``,
StiefelAdam and StiefelMuon each with every other setting at its best), validation bits per byte
for scale lr 0.03 / 0.1 / 0.3 / 1.0: StiefelAdam 1.646 / 1.635 / 1.623 / 1.660, StiefelMuon best at
0.3 too; none diverged, so 0.1 and 1.0 (about 3x below and above) are safe. Reproduce:
``python -m stiefel_mini.experiments.lm round3 --workers 2`` (its sweep comes first; with
``--dry_run true`` it reads what is stored); ``python -m stiefel_mini.evidence`` recomputes the comparison. Those runs started each scale at the
converted model's own size (``scale_start="keep"``); the fourth study re-sweeps it from the unit start.
"""

CHECK_EVERY = 100
"""A :class:`FrameHolder` checks its frames (:meth:`FrameHolder.check_frames`) at a training-mode
forward after anything but a Stiefel rule wrote them, at its first and every ``CHECK_EVERY``-th after
it (writes through ``.data`` leave no trace); ``0`` turns the check off."""


def off_manifold_tolerance(dtype: torch.dtype) -> float:
    """The distance ``||W^T W - I||_F`` above which a frame of ``dtype`` counts as off the manifold:
    ``max(1e-3, 100 eps)``, far above what rounding leaves after a Stiefel step (about ``1e-6`` in
    float32) and far below what a few Euclidean steps do (AdamW: about 1 after 20 steps)."""
    return max(1e-3, 100 * torch.finfo(dtype).eps)


def mark_frame(p: Tensor) -> Tensor:
    """Mark ``p`` as a Stiefel frame, so that :class:`~stiefel_mini.optim.StiefelAdam` updates it with
    the frame rule in any param group; returns ``p``.

    ``p``: a tensor ``(..., r, c)`` with orthonormal columns (``r >= c``) or rows (``r < c``).
    """
    if p.dim() < 2:
        raise ValueError(f"a frame needs at least 2 dimensions (..., r, c); got shape {tuple(p.shape)}")
    setattr(p, _MARK, True)
    return p


def is_frame(p: Tensor) -> bool:
    """Whether ``p`` carries the frame mark of :func:`mark_frame`."""
    return bool(getattr(p, _MARK, False))


class FrameHolder(nn.Module):
    """A module whose frames carry the mark of :func:`mark_frame` wherever they are set.

    A subclass defines :meth:`frame_names` and calls :meth:`mark_frames` at the end of its
    ``__init__``. From then on a tensor assigned to one of those names is marked, so the mark follows
    the module's frames through ``load_state_dict(assign=True)`` and FSDP2's ``fully_shard`` (both
    set parameters with ``setattr``), ``copy.deepcopy`` and pickling (which rebuild the module with
    ``__setstate__``) and ``.to()``, ``.to_empty()`` (which may put new parameter objects in place).

    Frames stay frames only under a Stiefel rule (:class:`~stiefel_mini.optim.StiefelAdam`,
    ``StiefelMuon``); ``torch.optim.AdamW`` (the Hugging Face Trainer's
    default) or a hand-written update moves them off the manifold while the model keeps running.
    So the module checks them (:meth:`check_frames`) at the first training-mode forward after
    anything but a Stiefel rule wrote them (a frame's version counter says so, at the cost of an
    attribute read), at its first training-mode forward and every :data:`CHECK_EVERY`-th after it, and
    warns once when one has left; an optimizer other than a Stiefel rule that holds frames warns at
    its first step. The check is skipped under ``torch.compile`` and for DTensor (sharded) frames.
    """

    def frame_names(self) -> tuple[str, ...]:
        """The attribute names of the module's frames; ``()`` when it holds none (``stiefel=False``)."""
        raise NotImplementedError

    def frames(self) -> list[nn.Parameter]:
        """The frame parameters (``[]`` when ``stiefel=False``); :func:`frame_parameters` and
        :func:`param_groups` find them here."""
        return [getattr(self, name) for name in self.frame_names()]

    def mark_frames(self) -> None:
        """Mark every frame, and every tensor later assigned to a frame's name."""
        for p in self.frames():
            mark_frame(p)
        self.__dict__["_marks_frames"] = True
        if not self.__dict__.get("_checks_frames"):
            self.register_forward_pre_hook(_check_hook)
            self.__dict__["_checks_frames"] = True

    @torch.no_grad()
    def check_frames(self) -> bool:
        """Whether every frame is on the manifold, ``||W^T W - I||_F <= max(1e-3, 100 eps)`` per frame
        (:func:`off_manifold_tolerance`); the first time one is not, warns (``UserWarning``) naming it.

        Shapes: each frame ``(..., n, p)``; costs one ``p x p`` Gram matrix per frame.
        """
        for name in self.frame_names():
            p = getattr(self, name)
            if _dt.is_dtensor(p) or p.numel() == 0 or p.is_meta:
                continue
            with torch.autocast(p.device.type, enabled=False):  # the Gram matrix in float32, not bf16
                error = float(orthogonality_error(p.detach().float()).max())
            if error > off_manifold_tolerance(p.dtype):
                if not self.__dict__.get("_warned_off_manifold"):
                    self.__dict__["_warned_off_manifold"] = True
                    warnings.warn(
                        f"{type(self).__name__}.{name}: a frame has left the Stiefel manifold (||W^T W - I||_F = "
                        f"{error:.3g}): it was updated by something other than a Stiefel rule (torch.optim.AdamW, "
                        "the Hugging Face Trainer's default optimizer, or a manual update). Train frames with "
                        "stiefel_mini.StiefelAdam or stiefel_mini.StiefelMuon (e.g. Trainer(optimizers=(opt, "
                        "None))); stiefel_mini.geometry.project puts a frame back", UserWarning, stacklevel=3)
                return False
        return True

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if isinstance(value, Tensor) and self.__dict__.get("_marks_frames") and name in self.frame_names():
            mark_frame(value)

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self.mark_frames()

    def _apply(self, fn: Any, recurse: bool = True) -> "FrameHolder":
        # .to_empty() from the meta device, and .to() under torch.__future__'s swap mode, put new
        # parameter objects in place without setattr.
        module = super()._apply(fn, recurse)
        self.mark_frames()
        return module


def _check_hook(module: FrameHolder, args: Any) -> None:
    """Forward pre-hook: in training mode, :meth:`FrameHolder.check_frames` when a frame was written
    by something other than a Stiefel rule since it was last checked, and at the first training-mode
    forward and every :data:`CHECK_EVERY`-th after it, until it has warned (:mod:`._frame_guard`)."""
    if module.training and CHECK_EVERY and not torch.compiler.is_compiling():
        _frame_guard.on_training_forward(module, CHECK_EVERY)


def _collect(model: nn.Module, method: str) -> Iterator[nn.Parameter]:
    """The parameters that the modules of ``model`` return from ``method()``, each once."""
    seen: set[int] = set()
    for module in model.modules():
        fn = getattr(module, method, None)
        if callable(fn):
            for p in fn():
                if id(p) not in seen:
                    seen.add(id(p))
                    yield p


def frame_parameters(model: nn.Module) -> Iterator[nn.Parameter]:
    """Every Stiefel frame in ``model``: the parameters returned by ``frames()`` of its modules.

    Any module can take part by defining a ``frames()`` method that returns its frame parameters
    (marking them with :func:`mark_frame` also lets ``StiefelAdam(model.parameters())`` find them).
    """
    return _collect(model, "frames")


def qk_parameters(model: nn.Module) -> Iterator[nn.Parameter]:
    """The query/key weights of every attention module in ``model``, constrained or not.

    A module takes part by defining ``qk_weights()``, as :class:`~stiefel_mini.attention.StiefelSelfAttention` and
    :class:`~stiefel_mini.mha.StiefelMultiheadAttention` do.
    """
    return _collect(model, "qk_weights")


def logit_scale_parameters(model: nn.Module) -> Iterator[nn.Parameter]:
    """Every learned logit scale in ``model``: the parameters registered under a name ending in
    ``log_scale`` (``tau`` of ``s_h = exp(tau_h)``, ``(n_heads,)``; ``q_log_scale`` / ``k_log_scale``
    of a converted projection), each once, frames excluded."""
    seen: set[int] = set()
    for name, p in model.named_parameters():
        if name.rsplit(".", 1)[-1].endswith("log_scale") and id(p) not in seen and not is_frame(p):
            seen.add(id(p))
            yield p


def param_groups(
    model: nn.Module,
    *,
    weight_decay: float | None = None,
    frame_options: dict[str, Any] | None = None,
    qk_options: dict[str, Any] | None = None,
    scale_options: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Split a model's trainable parameters into named param groups for :class:`~stiefel_mini.optim.StiefelAdam`.

    * ``"frames"``: Stiefel frames (``stiefel=True``, ``weight_decay=0.0``, plus ``frame_options``,
      e.g. ``lr``);
    * ``"qk"``: Q/K weights of attention modules built with ``stiefel=False``, decayed like other
      weights unless ``qk_options`` says otherwise (e.g. ``{"weight_decay": 0.0}``);
    * ``"scale"``: the learned logit scales ``tau_h`` of ``s_h = exp(tau_h)``
      (:func:`logit_scale_parameters`), at an lr of their own (``lr`` =
      :data:`DEFAULT_SCALE_LR`, 0.3, unless ``scale_options`` says otherwise) and no weight decay
      (decay would pull every head's temperature towards ``s_h = 1``);
    * ``"decay"``: every other parameter with 2 or more dimensions (matrices, embeddings);
    * ``"no_decay"``: biases, norm gains and other 1-D or scalar parameters (``weight_decay=0.0``).

    Why the scale has its own lr: a frame has every singular value 1, so a head's attention
    temperature lives only in ``s_h``, and at an AdamW lr such as 2e-3 it can grow only about
    ``exp(2 lr sum_t f_t)``-fold in a run (``f_t`` the schedule): attention stays near uniform.
    :data:`DEFAULT_SCALE_LR` says how its default was measured.

    A group sets only what it must: ``weight_decay=None`` (the default) leaves ``"qk"`` and
    ``"decay"`` without a ``weight_decay`` key, so they take the optimizer's (``StiefelAdam(groups,
    weight_decay=0.1)`` decays them by 0.1), and any option not in ``frame_options`` / ``qk_options``
    / ``scale_options`` is the optimizer's default too. A frame's ``lr`` is the Frobenius length of
    its step, and a frame ``lr`` above ``max_step`` (default 0.1) is cut back by the trust cap to
    steps of length ``max_step``, so raising it (or a scheduler's peak lr) past the cap leaves the
    frames' steps unchanged.

    Schedulers: a multiplicative scheduler (``LambdaLR``, ``CosineAnnealingLR``, ``LinearLR``...)
    scales each group's own lr, so the frames and the scale keep their lr relative to the others'.
    A scheduler that sets every group's lr from one number (``OneCycleLR(opt, max_lr=1e-3)``,
    ``CyclicLR`` with scalar bounds) would give the frames and the scale that AdamW lr; pass one
    value per group instead, e.g. ``max_lr=[{"frames": 0.01, "scale": 0.3}.get(g["name"], 1e-3) for
    g in opt.param_groups]``.

    Frames are found by ``frames()`` (:func:`frame_parameters`) or by their mark (:func:`is_frame`).
    ``StiefelAdam`` would treat a marked frame as a frame in any group; this function gives the
    frames their own group so that they get their own options. Handed to ``torch.optim.AdamW``,
    the ``"frames"`` group is trained as ordinary weights (``stiefel`` is then an inert key).

    Empty groups are left out. Parameters with ``requires_grad=False`` are skipped, which is how a
    frozen-frame baseline leaves its frames alone. Raises ``ValueError`` when ``scale_options`` is
    given but the model has no learned logit scale (build or convert it with
    ``logit_scale="learned"``, or leave ``scale_options`` out).
    """
    frames = {id(p) for p in frame_parameters(model)} | {id(p) for p in model.parameters() if is_frame(p)}
    qk = {id(p) for p in qk_parameters(model)} - frames
    scales = {id(p) for p in logit_scale_parameters(model) if p.requires_grad} - frames - qk
    if scale_options is not None and not scales:
        raise ValueError("scale_options is given but the model has no trainable learned logit scale (a parameter "
                         "named *log_scale): build or convert its attention with logit_scale='learned', or leave "
                         "scale_options out")
    buckets: dict[str, list[nn.Parameter]] = {"frames": [], "qk": [], "scale": [], "decay": [], "no_decay": []}
    for p in model.parameters():
        if not p.requires_grad:
            continue
        if id(p) in frames:
            buckets["frames"].append(p)
        elif id(p) in qk:
            buckets["qk"].append(p)
        elif id(p) in scales:
            buckets["scale"].append(p)
        elif p.dim() >= 2:
            buckets["decay"].append(p)
        else:
            buckets["no_decay"].append(p)
    decay = {} if weight_decay is None else {"weight_decay": weight_decay}
    options = {
        "frames": {"stiefel": True, "weight_decay": 0.0, **(frame_options or {})},
        "qk": {**decay, **(qk_options or {})},
        "scale": {"lr": DEFAULT_SCALE_LR, "weight_decay": 0.0, **(scale_options or {})},
        "decay": decay,
        "no_decay": {"weight_decay": 0.0},
    }
    return [
        {"name": name, "params": params, **options[name]}
        for name, params in buckets.items()
        if params
    ]

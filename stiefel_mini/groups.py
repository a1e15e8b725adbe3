"""Which parameters of a model :class:`~stiefel_mini.optim.StiefelAdam` treats how: frames, Q/K
weights, other matrices, and vectors, as named param groups.

A module takes part by defining ``frames()`` (its Stiefel frames) and ``qk_weights()`` (its query and
key weights, frames or not), as :class:`~stiefel_mini.attention.StiefelSelfAttention` and
:class:`~stiefel_mini.mha.StiefelMultiheadAttention` do.
"""

from __future__ import annotations

from typing import Any, Iterator

from torch import nn

__all__ = ["param_groups", "frame_parameters", "qk_parameters"]


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

    Any module can take part by defining a ``frames()`` method that returns its frame parameters.
    """
    return _collect(model, "frames")


def qk_parameters(model: nn.Module) -> Iterator[nn.Parameter]:
    """The query/key weights of every attention module in ``model``, constrained or not.

    A module takes part by defining ``qk_weights()``, as :class:`~stiefel_mini.attention.StiefelSelfAttention` and
    :class:`~stiefel_mini.mha.StiefelMultiheadAttention` do.
    """
    return _collect(model, "qk_weights")


def param_groups(
    model: nn.Module,
    *,
    weight_decay: float = 0.0,
    frame_options: dict[str, Any] | None = None,
    qk_options: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Split a model's trainable parameters into named param groups for :class:`~stiefel_mini.optim.StiefelAdam`.

    * ``"frames"``: Stiefel frames (``stiefel=True``, plus ``frame_options``, e.g. ``lr``);
    * ``"qk"``: Q/K weights of attention modules built with ``stiefel=False``, decayed like other
      weights unless ``qk_options`` says otherwise (e.g. ``{"weight_decay": 0.0}``);
    * ``"decay"``: every other parameter with 2 or more dimensions (matrices, embeddings);
    * ``"no_decay"``: biases, norm gains, temperatures and other 1-D or scalar parameters.

    Empty groups are left out. Parameters with ``requires_grad=False`` are skipped, which is how a
    frozen-frame baseline leaves its frames alone.
    """
    frames = {id(p) for p in frame_parameters(model)}
    qk = {id(p) for p in qk_parameters(model)} - frames
    buckets: dict[str, list[nn.Parameter]] = {"frames": [], "qk": [], "decay": [], "no_decay": []}
    for p in model.parameters():
        if not p.requires_grad:
            continue
        if id(p) in frames:
            buckets["frames"].append(p)
        elif id(p) in qk:
            buckets["qk"].append(p)
        elif p.dim() >= 2:
            buckets["decay"].append(p)
        else:
            buckets["no_decay"].append(p)
    options = {
        "frames": {"stiefel": True, "weight_decay": 0.0, **(frame_options or {})},
        "qk": {"weight_decay": weight_decay, **(qk_options or {})},
        "decay": {"weight_decay": weight_decay},
        "no_decay": {"weight_decay": 0.0},
    }
    return [
        {"name": name, "params": params, **options[name]}
        for name, params in buckets.items()
        if params
    ]

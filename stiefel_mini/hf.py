"""Reloading a model converted by :func:`stiefel_mini.convert.convert_attention`: build it as it was
built, convert it the same way, then load the saved weights (frames included).

A converted model's ``state_dict`` names its frames (``...q_proj.q_weight``, ``...qkv.k_weight``),
which an unconverted model does not have; beside them it keeps each replaced projection's weight
in its own layout (``...q_proj.weight``), so the plain ``from_pretrained`` (or
``load_state_dict(strict=False)``) builds an unconverted model that computes what the converted
one computed; :func:`plain_state_dict` leaves the frames out, for a strict load (torch's default,
timm's ``load_checkpoint``). To go on training the frames, rebuild the converted model:

>>> model.save_pretrained(path)   # after convert_attention(model) and training
>>> again = from_pretrained_converted(GPT2LMHeadModel, path)
>>> fresh = timm.create_model(...)
>>> load_converted(fresh, torch.load("ckpt.pt"), stiefel=True)
>>> plain.load_state_dict(plain_state_dict(model))   # an unconverted model, strict
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .conversion_report import ConversionReport
from .convert import convert_attention
from .mha import StiefelMultiheadAttention
from .projection import FrameProjection

__all__ = ["load_converted", "from_pretrained_converted", "plain_state_dict"]


def plain_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The state dict of converted ``model`` that the unconverted model loads strictly: each
    :class:`~stiefel_mini.projection.FrameProjection`'s assembled ``weight`` (in the replaced module's
    layout, ``W = [W_Q | W_K | rest]`` per head block) and ``bias``, without its frames
    (``q_weight``, ``k_weight``), scales or ``rest_weight``; every other entry as ``state_dict()`` has it.

    torch's strict ``load_state_dict`` (and timm's ``load_checkpoint``) refuses ``model.state_dict()``
    naming the frames' keys as unexpected; it cannot be told to name this function, so use it on the
    saving side. Raises ``ValueError`` for a model holding a
    :class:`~stiefel_mini.mha.StiefelMultiheadAttention`, whose state dict has no
    ``nn.MultiheadAttention`` layout: reload that one with :func:`load_converted`.
    """
    drop = []
    for name, module in model.named_modules():
        prefix = f"{name}." if name else ""
        if isinstance(module, StiefelMultiheadAttention):
            raise ValueError(f"{name or 'the model'} is a StiefelMultiheadAttention, which keeps no "
                             "nn.MultiheadAttention layout (in_proj_weight): reload its state dict into a "
                             "converted model with load_converted")
        if isinstance(module, FrameProjection):
            drop += [prefix + p for p, _ in module.named_parameters(recurse=False) if p != "bias"]
    dropped = set(drop)
    return {k: v for k, v in model.state_dict().items() if k not in dropped}


def load_converted(
    model: nn.Module, state_dict: dict[str, torch.Tensor], *, stiefel: bool = True, logit_scale: str = "fixed"
) -> ConversionReport:
    """Convert a freshly built ``model`` (as the saved one was, same options) and load ``state_dict``
    into it, in place.

    Keys missing from ``state_dict`` are allowed only for tensors tied to a loaded one (GPT-2's
    ``lm_head.weight`` is ``wte.weight``; ``save_pretrained`` stores it once); any other missing or
    unexpected key raises ``ValueError``, so a checkpoint of an unconverted model, or one converted
    with other options, is refused instead of half-loaded.

    Returns:
        The :class:`~stiefel_mini.conversion_report.ConversionReport` of the conversion (its polar distances are
        those of the fresh model's weights, which the load then replaces).
    """
    report = convert_attention(model, stiefel=stiefel, logit_scale=logit_scale)
    missing, unexpected = model.load_state_dict(state_dict, strict=False)
    tensors = model.state_dict(keep_vars=True)
    loaded = {id(tensors[k]) for k in state_dict if k in tensors}
    untied = [k for k in missing if id(tensors[k]) not in loaded]
    if untied or unexpected:
        raise ValueError(
            f"the state dict does not fit the model converted with stiefel={stiefel}, "
            f"logit_scale={logit_scale!r}: missing {untied[:5]}, unexpected {list(unexpected)[:5]}; "
            "save a model converted with these options, or pass the options it was converted with"
        )
    return report


def _read_weights(path: Path) -> dict[str, torch.Tensor]:
    """The tensors ``save_pretrained`` wrote to ``path``: ``model.safetensors`` or its shards."""
    from safetensors.torch import load_file  # installed with transformers

    index = path / "model.safetensors.index.json"
    if index.exists():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    elif (path / "model.safetensors").exists():
        files = ["model.safetensors"]
    else:
        raise ValueError(f"{path} holds no model.safetensors (or index): save the model with save_pretrained")
    state: dict[str, torch.Tensor] = {}
    for name in files:
        state.update(load_file(str(path / name)))
    return state


def _dtype(value: Any) -> torch.dtype | None:
    """A ``torch.dtype`` from a dtype or its name (``"bfloat16"``, ``"torch.bfloat16"``); ``None`` otherwise."""
    if isinstance(value, str):
        value = getattr(torch, value.removeprefix("torch."), None)
    return value if isinstance(value, torch.dtype) else None


def from_pretrained_converted(model_class: Any, path: str | Path, *, dtype: Any = "auto",
                              **config_kwargs: Any) -> nn.Module:
    """The converted Hugging Face model that ``save_pretrained`` wrote to the local folder ``path``.

    Builds ``model_class`` (e.g. ``GPT2LMHeadModel``) from the saved config in ``dtype`` (``"auto"``,
    as ``from_pretrained``: the dtype the checkpoint was saved in, ``config.dtype``; or a
    ``torch.dtype``), converts it with the options recorded in ``config.stiefel_attention`` by
    :func:`~stiefel_mini.convert.convert_attention` and loads the saved tensors with
    :func:`load_converted`. The model comes back in eval mode, as from ``from_pretrained``.
    ``config_kwargs`` override config entries (e.g. ``attn_implementation``).
    """
    path = Path(path)
    config = model_class.config_class.from_pretrained(str(path), **config_kwargs)
    want = _dtype(getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)) if dtype == "auto" \
        else _dtype(dtype)
    if dtype != "auto" and want is None:
        raise ValueError(f"dtype must be 'auto' or a torch.dtype (or its name); got {dtype!r}")
    options = getattr(config, "stiefel_attention", None)
    if not isinstance(options, dict):
        raise ValueError(
            f"the config in {path} has no stiefel_attention entry, so the model was not converted "
            f"before it was saved: load it with {model_class.__name__}.from_pretrained"
        )
    model = model_class(config)
    if want is not None:
        model = model.to(want)  # before the conversion, so that the frames are built in it
    load_converted(model, _read_weights(path), **options)
    return model.eval()

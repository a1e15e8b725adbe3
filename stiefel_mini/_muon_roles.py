"""Which rule of :class:`~stiefel_mini.muon.StiefelMuon` trains each parameter of a model, as the Muon
recipe says: Muon for the hidden matrices (conv filters flattened to 2-D), AdamW for embeddings of
every kind, output heads, gains, biases and scales, manifold Muon for frames.

:func:`model_roles` reads the roles off the model (module types, names, shapes, the model's own
``get_output_embeddings`` / ``get_classifier``); :func:`name_role` and :func:`shape_role` are what is
left when only a parameter (and perhaps its name) is known. Each answer is a :class:`Role`, which
says how it was found and whether it was guessed.
"""

from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass
from typing import Any

from torch import Tensor, nn

from .groups import is_frame

MARK = "_stiefel_muon_role"  # the Role a parameter carries (mark_muon_roles, FrameProjection)

HEAD_NAMES = ("lm_head", "classifier", "head", "score", "pooler", "qa_outputs", "cls", "output_layer")
"""Module names (one component of a qualified name) read as an output head: every parameter under
such a module takes AdamW."""
_EMBED_PARAM = re.compile(r"(embed|token|^pos|_pos|position|wte|wpe)", re.IGNORECASE)
_EMBED_MODULE = re.compile(r"(embed|^wte$|^wpe$|^stem$)", re.IGNORECASE)
_SCALE_PARAM = re.compile(r"(log_scale|logit_scale|temperature)$")
_DECAYED = ("matrix", "conv", "embedding", "head")  # kinds a default weight decay applies to
_CONV = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)


@dataclass(frozen=True)
class Role:
    """How :class:`~stiefel_mini.muon.StiefelMuon` trains one parameter.

    ``role``: ``"frame"``, ``"muon"`` or ``"adamw"``; ``kind``: what it is (``frame``, ``matrix``,
    ``conv``, ``embedding``, ``head``, ``gain``, ``bias``, ``scale``, ``vector``); ``layout``: how Muon
    reads it (``out_in`` a 2-D ``(fan_out, fan_in)`` matrix, ``in_out`` one stored ``(fan_in,
    fan_out)``, ``flatten`` a filter ``(out, in, k...)`` orthogonalised as ``(out, in * k...)``,
    ``heads`` a stack of per-head blocks whose smaller side is the head's output; ``-`` otherwise);
    ``why``: how it was found; ``guessed``: whether that was a guess (named in StiefelMuon's message);
    ``name``: the parameter's qualified name in the model, where it was read off one.
    """

    role: str
    kind: str
    layout: str
    why: str
    guessed: bool = False
    name: str = ""

    @property
    def decayed_by_default(self) -> bool:
        """Whether a weight decay given as a default (not by the parameter's own group) applies:
        matrices, filters, embeddings and heads yes; gains, biases, scales and other vectors no."""
        return self.kind in _DECAYED


def marked(p: Tensor) -> Role | None:
    """The :class:`Role` ``p`` carries, if any."""
    role = getattr(p, MARK, None)
    return role if isinstance(role, Role) else None


def mark(p: Tensor, role: Role) -> None:
    setattr(p, MARK, role)


def _vector(name: str, module: nn.Module | None) -> Role:
    """The role of a parameter of fewer than 2 dimensions: always AdamW, never decayed by default."""
    short = name.rsplit(".", 1)[-1]
    if _SCALE_PARAM.search(short):
        return Role("adamw", "scale", "-", "learned logit scale")
    if short.endswith("bias"):
        return Role("adamw", "bias", "-", "bias")
    if (module is not None and "norm" in type(module).__name__.lower()) or "norm" in name.lower():
        return Role("adamw", "gain", "-", "norm gain")
    return Role("adamw", "vector", "-", "vector or scalar")


def shape_role(p: Tensor) -> Role:
    """The role from the shape alone: AdamW for vectors and scalars; Muon for matrices (a guess: an
    embedding or output head is a matrix too) and for tensors of more dimensions, flattened to 2-D."""
    if p.dim() < 2:
        return Role("adamw", "vector", "-", "vector or scalar")
    if p.dim() == 2:
        return Role("muon", "matrix", "out_in", "a matrix, by its shape", guessed=True)
    return Role("muon", "conv", "flatten", f"a {p.dim()}-D tensor, by its shape: flattened to "
                f"({p.shape[0]}, {math.prod(p.shape[1:])})", guessed=True)


def name_role(name: str, p: Tensor) -> Role:
    """The role from a parameter's qualified name and shape, when the model is not at hand: the
    names of embeddings, tokens and heads (:data:`HEAD_NAMES`) take AdamW; a guess, as the name may mislead."""
    if p.dim() < 2:
        return _vector(name, None)
    parts = name.split(".")
    if any(part in HEAD_NAMES for part in parts[:-1]):
        return Role("adamw", "head", "-", f"output head, by its name {name!r}", guessed=True)
    if _EMBED_PARAM.search(parts[-1]) or any(_EMBED_MODULE.search(part) for part in parts[:-1]):
        return Role("adamw", "embedding", "-", f"embedding, by its name {name!r}", guessed=True)
    return shape_role(p)


def _out_features(module: nn.Module) -> int | None:
    if isinstance(module, nn.Linear):
        return module.out_features
    if type(module).__name__ == "Conv1D" and isinstance(getattr(module, "nf", None), int):
        return module.nf
    return None


def _counts(model: nn.Module) -> dict[int, str]:
    """The sizes an output head would have: the vocabulary and the class count, from the config, the
    model's attributes or its largest ``nn.Embedding``."""
    config = getattr(model, "config", None)
    found = {}
    for owner, attr, what in ((config, "vocab_size", "vocabulary"), (model, "num_classes", "class count"),
                              (config, "num_classes", "class count")):
        value = getattr(owner, attr, None)
        if isinstance(value, int) and value > 1:
            found.setdefault(value, what)
    if config is not None and type(model).__name__.endswith("Classification"):
        labels = getattr(config, "num_labels", None)
        if isinstance(labels, int) and labels > 0:
            found.setdefault(labels, "class count")
    embeddings = [m.num_embeddings for m in model.modules() if isinstance(m, nn.Embedding)]
    if embeddings and max(embeddings) not in found:
        found[max(embeddings)] = "vocabulary"
    return found


def head_modules(model: nn.Module) -> dict[int, tuple[str, bool]]:
    """``{id(module): (why, guessed)}`` of the modules whose parameters are an output head.

    The model's own ``get_output_embeddings()`` (Hugging Face) and ``get_classifier()`` (timm), and
    every module named one of :data:`HEAD_NAMES`; when none of these holds a parameter, the last
    ``nn.Linear`` / ``Conv1D`` whose output is the vocabulary or the class count (or, when neither is
    known, the model's last such layer), as a guess.
    """
    found: dict[int, tuple[str, bool]] = {}
    for getter in ("get_output_embeddings", "get_classifier"):
        fn = getattr(model, getter, None)
        try:
            head = fn() if callable(fn) else None
        except (AttributeError, NotImplementedError, TypeError):
            head = None
        if isinstance(head, nn.Module):
            found[id(head)] = (f"output head ({getter}())", False)
    named = list(model.named_modules())
    for name, module in named:
        if name and name.split(".")[-1] in HEAD_NAMES:
            found.setdefault(id(module), (f"output head (named {name.split('.')[-1]!r})", False))
    if any(next(m.parameters(), None) is not None for _, m in named if id(m) in found):
        return found
    layers = [(name, m, _out_features(m)) for name, m in named if _out_features(m) is not None]
    counts = _counts(model)
    if counts:
        last = [(name, m, out) for name, m, out in layers if out in counts]
        if last:
            name, m, out = last[-1]
            found[id(m)] = (f"output head (guessed: the last layer whose output is the {counts[out]}, {out})", True)
    elif len(layers) > 1:  # a model of one layer has no hidden layer to tell its head from
        name, m, _ = layers[-1]
        found[id(m)] = ("output head (guessed: the model's last layer)", True)
    return found


def model_roles(model: nn.Module) -> dict[str, tuple[Tensor, Role]]:
    """``{qualified name: (parameter, Role)}`` for every parameter of ``model`` (a tensor shared by
    several modules, a tied head, once, under its first name), as the Muon recipe assigns them.

    In order: frames (:func:`~stiefel_mini.groups.is_frame`); the roles a module declares for its
    own parameters (``muon_roles()``, as :class:`~stiefel_mini.projection.FrameProjection` does);
    learned logit scales, biases, norm gains and other vectors (AdamW, not decayed by default); the
    query/key weights of a module's ``qk_weights()`` that are not frames (Muon per head); embeddings
    (``nn.Embedding``, parameters named like ``pos_embed``, ``cls_token``, ``position_embeddings``,
    the layers of a module named like ``patch_embed``); output heads (:func:`head_modules`); GPT-2's
    ``Conv1D`` (Muon, stored ``(in, out)``); conv filters (Muon, flattened); other matrices (Muon).
    """
    owner: dict[int, tuple[str, nn.Module, str]] = {}
    for mname, module in model.named_modules():
        for pname, p in module.named_parameters(recurse=False):
            owner.setdefault(id(p), (mname, module, pname))
    heads = head_modules(model)
    modules = dict(model.named_modules())
    roles: dict[str, tuple[Tensor, Role]] = {}
    for name, p in model.named_parameters():
        mname, module, pname = owner[id(p)]
        roles[name] = (p, _module_role(name, p, mname, module, pname, heads, modules))
    return roles


def _under_head(mname: str, heads: dict[int, tuple[str, bool]], modules: dict[str, nn.Module]):
    """``(why, guessed)`` of the head module ``mname`` is, or lies under; ``None`` if none."""
    parts = mname.split(".") if mname else []
    for i in range(len(parts), -1, -1):
        found = heads.get(id(modules.get(".".join(parts[:i]))))
        if found is not None:
            return found
    return None


def _module_role(name: str, p: Tensor, mname: str, module: nn.Module, pname: str,
                 heads: dict[int, tuple[str, bool]], modules: dict[str, nn.Module]) -> Role:
    if is_frame(p):
        return Role("frame", "frame", "frame", "Stiefel frame")
    declared = getattr(module, "muon_roles", None)
    if callable(declared) and pname in declared():
        return declared()[pname]
    if p.dim() < 2:
        return _vector(name, module)
    qk = getattr(module, "qk_weights", None)
    if callable(qk) and any(p is w for w in qk()):
        return Role("muon", "matrix", "heads", "query/key weights, per head")
    head = _under_head(mname, heads, modules)
    if isinstance(module, (nn.Embedding, nn.EmbeddingBag)):
        return Role("adamw", "embedding", "-", f"embedding ({type(module).__name__})")
    if _EMBED_PARAM.search(pname) and not isinstance(module, (nn.Linear, *_CONV)):
        return Role("adamw", "embedding", "-", f"embedding (named {pname!r})")
    if any(_EMBED_MODULE.search(part) for part in mname.split(".")) and head is None:
        return Role("adamw", "embedding", "-", f"input embedding (in {mname!r})")
    if head is not None:
        return Role("adamw", "head", "-", head[0], guessed=head[1])
    if type(module).__name__ == "Conv1D" and p.dim() == 2:
        return Role("muon", "matrix", "in_out", "Conv1D weight, stored (in, out)")
    if isinstance(module, _CONV):
        return Role("muon", "conv", "flatten", f"conv filter, flattened to ({p.shape[0]}, {math.prod(p.shape[1:])})")
    if p.dim() > 2:
        return shape_role(p)
    return Role("muon", "matrix", "out_in", "hidden matrix" + (" (nn.Linear)" if isinstance(module, nn.Linear) else ""))


def group_role(p: Tensor, name: str | None, group: dict[str, Any]) -> Role:
    """The role of ``p`` in ``group``: a frame stays a frame; then the group's ``role``, a group named
    ``"scale"`` (AdamW, as a learned logit scale), the mark, the name, the shape."""
    found = marked(p)
    if group["stiefel"] or is_frame(p):
        return Role("frame", "frame", "frame", "Stiefel frame" if not group["stiefel"] else "group stiefel=True",
                    name=getattr(found, "name", ""))
    if group["role"] is not None:
        kind = found.kind if found is not None and found.role == group["role"] else (
            "vector" if p.dim() < 2 else "matrix")
        layout = found.layout if found is not None and found.role == group["role"] else (
            "-" if p.dim() < 2 else "out_in" if p.dim() == 2 else "flatten")
        return Role(group["role"], kind, layout, f"group role={group['role']!r}", name=getattr(found, "name", ""))
    if group.get("name") == "scale":  # param_groups' group of the learned logit scales
        return Role("adamw", "scale", "-", "in the 'scale' param group", name=getattr(found, "name", ""))
    if found is not None:
        return found
    return name_role(name, p) if name else shape_role(p)


def muon_layout(p: Tensor, role: Role, group: dict[str, Any]) -> tuple[bool, bool]:
    """``(in_out, flatten)`` of a Muon tensor: a group's ``in_out`` wins, then the role's layout."""
    if role.layout == "flatten" and p.dim() > 2:
        return False, True
    if group["in_out"] is not None:
        return group["in_out"], False
    if role.layout == "heads":
        return p.shape[-2] > p.shape[-1], False
    return role.layout == "in_out", False


def rule_text(role: Role, p: Tensor | None = None, group: dict[str, Any] | None = None) -> str:
    if role.role == "frame":
        return "manifold Muon"
    if role.role == "adamw":
        return "AdamW"
    if p is not None and group is not None:
        in_out, flatten = muon_layout(p, role, group)
        if flatten:
            return f"Muon, flattened ({p.shape[0]}, {math.prod(p.shape[1:])})"
        what = "per head" if group["heads"] is not None or role.layout == "heads" else ""
        return " ".join(x for x in ("Muon", what, "(in, out)" if in_out else "") if x)
    return {"flatten": "Muon, flattened", "in_out": "Muon (in, out)", "heads": "Muon per head"}.get(role.layout, "Muon")


def warn_guesses(guesses: list[str]) -> None:
    if guesses:
        shown = "; ".join(guesses[:8]) + (f"; and {len(guesses) - 8} more" if len(guesses) > 8 else "")
        warnings.warn(
            f"StiefelMuon: the role of {len(guesses)} parameter(s) is a guess: {shown}. Set a role by putting the "
            "parameters in a param group with role='adamw' or role='muon', or call stiefel_mini.mark_muon_roles(model) "
            "before building the optimizer (convert_attention does); print(opt.role_table()) shows every role",
            UserWarning, stacklevel=3)

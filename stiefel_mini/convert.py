"""Converting a model's attention to Stiefel Q/K frames in place: :func:`convert_attention`, the
layouts it recognises, and the swap of their Q/K projections for
:class:`stiefel_mini.projection.FrameProjection` (or of a whole ``nn.MultiheadAttention`` for a
:class:`stiefel_mini.mha.StiefelMultiheadAttention`).

>>> report = convert_attention(model)   # every supported attention layer -> Stiefel frames
>>> print(report)                       # what changed, layer by layer
>>> opt = StiefelAdam(param_groups(model, weight_decay=0.05, frame_options={"lr": 0.01}), lr=1e-3)

Recognised layouts, besides ``nn.MultiheadAttention``:

* timm ``Attention``: one fused ``qkv = nn.Linear(dim, 3 * H * hd)``, output rows Q | K | V, heads
  contiguous in each (optional ``q_norm`` / ``k_norm`` after it);
* GPT-2 attention: ``c_attn`` a ``Conv1D`` with weight ``(d_model, 3 * d_model)``, columns Q | K | V;
* BERT-style self-attention: separate ``query``, ``key``, ``value`` ``nn.Linear`` s;
* Llama-family and ViT attention: separate ``q_proj``, ``k_proj`` ``nn.Linear`` s, with fewer key heads
  than query heads allowed (grouped-query attention); rotary embeddings are applied by the model
  after the projection, a rotation of each head's coordinates, so they leave a frame a frame;
* home-built attention (any other module, nanoGPT- or Llama-style code): a pair of ``nn.Linear``
  children named as in :data:`HOME_BUILT_PAIRS` (``q_proj``/``k_proj``, ``query``/``key``,
  ``q``/``k``, ``wq``/``wk``, ``to_q``/``to_k``), whose outputs the module's forward splits into
  heads with ``view(B, T, heads, head_dim)`` (heads contiguous), and a head count in one of
  :data:`HEAD_COUNT_NAMES` or given as ``convert_attention(model, num_heads=H)``; key heads (grouped-query
  attention) are ``k.out_features // head_dim``.

A module whose class name says attention but whose Q/K projection is none of these (a fused Q|K|V
``nn.Linear`` of home-built code, whose row order the module does not reveal) is left as it is,
and the report and a ``UserWarning`` name it with the route: build a
:class:`~stiefel_mini.projection.FrameProjection` with
:meth:`~stiefel_mini.projection.FrameProjection.from_weight` and put it in place of the projection.

Only the projection modules are replaced, so the model's own forward (SDPA, masks, the KV cache,
rotary embeddings, QK-norm, dropout) runs as before. timm and transformers are not imported here:
layers are recognised by their class's module and their attributes.
"""

from __future__ import annotations

import math
import warnings

import torch
from torch import nn

from ._frame_guard import mark_replaced
from ._head_check import attention_like, check_home_layer
from .attention import LOGIT_SCALES
from .conversion_report import ConversionReport, ConvertedLayer
from .muon import mark_muon_roles
from .mha import StiefelMultiheadAttention
from .groups import FrameHolder
from .projection import FrameProjection, mean_gain

__all__ = ["convert_attention", "SCALE_STARTS", "SUPPORTED", "convert_adapted", "find_adapted", "unread_attention",
           "HOME_BUILT_PAIRS", "HEAD_COUNT_NAMES", "ROUTE"]

HOME_BUILT_PAIRS = {"q_proj": "k_proj", "query": "key", "q": "k", "wq": "wk", "to_q": "to_k"}
"""The query -> key ``nn.Linear`` child names recognised in home-built attention modules."""
HEAD_COUNT_NAMES = ("num_heads", "n_head", "n_heads", "num_attention_heads", "nhead")
"""Attribute names read as a home-built attention module's (query) head count."""
_KV_COUNT_NAMES = ("num_key_value_heads", "num_kv_heads", "n_kv_heads", "n_kv_head")
ROUTE = ("convert such a layer by hand: proj, _ = FrameProjection.from_weight(lin.weight, lin.bias, "
         "{'q': H, 'k': H}, head_dim) for a fused Q|K|V Linear whose rows are Q|K|V with heads contiguous "
         "(or {'q': H} for a query Linear), then setattr(module, child_name, proj); "
         "see help(stiefel_mini.projection.FrameProjection.from_weight)")

SUPPORTED = (
    "torch nn.MultiheadAttention; timm Attention (fused qkv nn.Linear, rows Q|K|V); Hugging Face "
    "GPT-2 attention (Conv1D c_attn, columns Q|K|V); BERT-style self-attention (query/key/value "
    "nn.Linear); Llama-family and ViT attention (q_proj/k_proj nn.Linear, grouped-query allowed); "
    "home-built attention with separate q/k nn.Linear children (q_proj/k_proj, query/key, q/k, wq/wk, "
    "to_q/to_k) and a head count (num_heads, n_head, n_heads, num_attention_heads, nhead, or "
    "convert_attention(model, num_heads=H)); each with heads that divide the projection and keys "
    "computed from inputs of the queries' size"
)


def _unsupported(name: str, module: nn.Module, why: str) -> ValueError:
    cls = type(module)
    return ValueError(
        f"convert_attention: {name or 'model'} ({cls.__module__}.{cls.__qualname__}) {why}; "
        f"supported: {SUPPORTED}"
    )


def _layout(name: str, module: nn.Module) -> str | None:
    """``"timm"``, ``"gpt2"``, ``"q_proj"``, ``"query"`` or ``"home:<query child>"`` for a recognised
    attention layer, ``None``
    for any other module (a layer converted before included: its projection is no ``nn.Linear`` or
    ``Conv1D`` any more); raises ``ValueError`` for a timm or transformers attention layer whose
    layout is not supported."""
    cls = type(module)
    origin = cls.__module__.split(".")[0]
    if origin not in ("timm", "transformers"):
        if isinstance(module, (FrameHolder, nn.MultiheadAttention)):
            return None
        for q, k in HOME_BUILT_PAIRS.items():
            if isinstance(getattr(module, q, None), nn.Linear) and isinstance(getattr(module, k, None), nn.Linear):
                return f"home:{q}"
        return None
    if isinstance(getattr(module, "query_key_value", None), nn.Module):
        raise _unsupported(name, module, "has a fused query_key_value projection with Q, K and V "
                           "interleaved per head (GPT-NeoX, Falcon, Bloom), which is not supported")
    if origin == "timm":
        qkv = getattr(module, "qkv", None)
        if isinstance(qkv, FrameProjection):
            return None  # converted before
        if cls.__module__ == "timm.layers.attention" and cls.__name__ == "Attention":
            return "timm"
        if isinstance(qkv, nn.Linear):
            raise _unsupported(name, module, "is a timm attention layer other than timm.layers.Attention")
        return None
    if "Attention" not in cls.__name__:
        return None
    c_attn = getattr(module, "c_attn", None)
    if isinstance(c_attn, nn.Module) and type(c_attn).__name__ == "Conv1D":
        if getattr(module, "is_cross_attention", False):
            raise _unsupported(name, module, "is GPT-2 cross-attention (c_attn holds K|V of the encoder's "
                               "states and q_attn Q), which is not supported")
        return "gpt2"
    for q, k in (("q_proj", "k_proj"), ("query", "key")):
        if isinstance(getattr(module, q, None), nn.Linear) and isinstance(getattr(module, k, None), nn.Linear):
            return q
    return None


def find_adapted(model: nn.Module) -> list[tuple[str, nn.Module, str]]:
    """``(name, module, layout)`` of every recognised timm / transformers attention layer in ``model``,
    each module once; raises ``ValueError`` on the first unsupported one."""
    found, seen = [], set()
    for name, module in model.named_modules():
        layout = _layout(name, module)
        if layout is not None and id(module) not in seen:
            seen.add(id(module))
            found.append((name, module, layout))
    return found


def _heads(name: str, module: nn.Module, width: int, head_dim: int, declared: int | None, d_in: int) -> int:
    """The number of heads of a projection from ``d_in`` to ``width`` features, checked against
    ``declared`` (the layer's or its config's head count) and against ``head_dim <= d_in`` (a frame
    ``(d_in, head_dim)`` must fit)."""
    if declared is not None and declared * head_dim != width:
        raise _unsupported(name, module, f"has a projection from {d_in} to {width} features, which is not "
                           f"{declared} heads of size {head_dim}")
    if not 0 < head_dim <= d_in or width % head_dim:
        raise _unsupported(name, module, f"has a projection from {d_in} to {width} features that heads of "
                           f"size {head_dim} do not divide into frames")
    return width // head_dim


Swap = tuple[nn.Module, str, FrameProjection]  # (parent, child name, replacement)


def _fused(name: str, module: nn.Module, layout: str, opts: dict) -> tuple[ConvertedLayer, list[Swap]]:
    """timm ``Attention`` (``qkv`` Linear) or GPT-2 (``c_attn`` Conv1D): one FrameProjection."""
    if layout == "timm":
        proj, child, transposed = module.qkv, "qkv", False
        width, d_in = proj.out_features, proj.in_features
    else:
        proj, child, transposed = module.c_attn, "c_attn", True
        width, d_in = proj.nf, proj.nx
    H, hd = module.num_heads, module.head_dim
    if width != 3 * _heads(name, module, width // 3, hd, H, d_in) * hd:
        raise _unsupported(name, module, f"has a fused projection of {width} outputs, not 3 x {H} heads x {hd}")
    new, info = FrameProjection.from_weight(proj.weight, proj.bias, {"q": H, "k": H}, hd, transposed=transposed,
                                            stiefel=opts["stiefel"], logit_scale=opts["logit_scale"])
    layer = ConvertedLayer(name, d_in, H, (d_in, hd), info["q"].polar_distance, info["k"].polar_distance,
                           kind=f"{type(module).__name__} ({child})", kv_heads=H,
                           qk_gain=mean_gain(info["q"], info["k"]), logit_scale=opts["logit_scale"])
    return layer, [(module, child, new.train(proj.training))]


def _home_heads(name: str, module: nn.Module, q_lin: nn.Linear, given: int | None) -> tuple[int, int, int | None]:
    """``(heads, head_dim, key heads or None)`` of a home-built layer, from its attributes or ``given``."""
    found = [getattr(module, n) for n in HEAD_COUNT_NAMES if isinstance(getattr(module, n, None), int)]
    declared = found[0] if found else given
    if declared is None:
        raise _unsupported(name, module, f"has query/key Linears but no head count (none of {HEAD_COUNT_NAMES}); "
                           "pass it as convert_attention(model, num_heads=H)")
    if given is not None and given != declared:
        raise _unsupported(name, module, f"declares {declared} heads, but num_heads={given} was given")
    kv = [getattr(module, n) for n in _KV_COUNT_NAMES if isinstance(getattr(module, n, None), int)]
    hd = getattr(module, "head_dim", None)
    if not isinstance(hd, int) or hd <= 0:
        hd = q_lin.out_features // declared
        if hd * declared != q_lin.out_features:
            raise _unsupported(name, module, f"has num_heads={declared} that do not divide its query projection "
                               f"of {q_lin.out_features} features")
    return declared, hd, kv[0] if kv else None


def _separate(name: str, module: nn.Module, layout: str, opts: dict) -> tuple[ConvertedLayer, list[Swap]]:
    """Separate Q and K Linears (BERT ``query``/``key``, Llama/ViT ``q_proj``/``k_proj``, home-built)."""
    home = layout.startswith("home:")
    q_name = layout.removeprefix("home:")
    k_name = HOME_BUILT_PAIRS[q_name]
    q_lin, k_lin = getattr(module, q_name), getattr(module, k_name)
    if home:
        declared, hd, declared_kv = _home_heads(name, module, q_lin, opts["num_heads"])
    else:
        hd = getattr(module, "head_dim", None) or getattr(module, "attention_head_size", None)
        # Llama-family layers keep their head counts in their config only. A projection wider than the
        # declared heads (e.g. queries and gates interleaved in one q_proj) is refused by _heads.
        config = getattr(module, "config", None)
        declared = (getattr(module, "num_heads", None) or getattr(module, "num_attention_heads", None)
                    or getattr(config, "num_attention_heads", None))
        declared_kv = getattr(config, "num_key_value_heads", None) if layout == "q_proj" else None
        if declared_kv is None and layout == "query":
            declared_kv = declared
    if hd is None:
        raise _unsupported(name, module, "has no head_dim or attention_head_size attribute")
    d_in = q_lin.in_features
    if k_lin.in_features != d_in:
        raise _unsupported(name, module, f"is cross-attention with keys of size {k_lin.in_features} and "
                           f"queries of size {d_in}")
    H = _heads(name, module, q_lin.out_features, hd, declared, d_in)
    H_kv = _heads(name, module, k_lin.out_features, hd, declared_kv, d_in)
    if H % H_kv:
        raise _unsupported(name, module, f"has {H} query heads, not a multiple of its {H_kv} key heads")
    infos, swaps = {}, []
    options = {k: v for k, v in opts.items() if k != "num_heads"}
    for child, lin, seg, h in ((q_name, q_lin, "q", H), (k_name, k_lin, "k", H_kv)):
        new, info = FrameProjection.from_weight(lin.weight, lin.bias, {seg: h}, hd, **options)
        swaps.append((module, child, new.train(lin.training)))
        infos[seg] = info[seg]
    layer = ConvertedLayer(name, d_in, H, (d_in, hd), infos["q"].polar_distance, infos["k"].polar_distance,
                           kind=f"{type(module).__name__} ({q_name}, {k_name})", kv_heads=H_kv,
                           qk_gain=mean_gain(infos["q"], infos["k"], H // H_kv), logit_scale=opts["logit_scale"])
    return layer, swaps


def _qk_norm(module: nn.Module) -> bool:
    """Whether ``module`` normalises q and k after projecting them (timm and Qwen3-style QK-norm)."""
    norms = [getattr(module, n, None) for n in ("q_norm", "k_norm")]
    return any(isinstance(m, nn.Module) and not isinstance(m, nn.Identity) for m in norms)


def unread_attention(model: nn.Module) -> list[str]:
    """``"name (module.Class)"`` of every attention-like module of ``model`` (``_head_check.attention_like``:
    by its class name, or a fused Q|K|V or query/key pair of children, whatever its class name) that
    :func:`convert_attention` neither converts nor has converted."""
    read = {id(module) for _, module, _ in find_adapted(model)}
    return [f"{name or 'model'} ({type(m).__module__}.{type(m).__qualname__})" for name, m in model.named_modules()
            if id(m) not in read and not isinstance(m, (FrameHolder, nn.MultiheadAttention))
            and not any(isinstance(c, (FrameProjection, StiefelMultiheadAttention)) for c in m.children())
            and attention_like(m, HOME_BUILT_PAIRS)]


@torch.no_grad()
def _unit_scales(modules: list[nn.Module]) -> None:
    """Start the learned logit scale of each module this conversion made at unit temperature:
    ``tau = 0`` on a projection (``s = 1`` on each of Q and K), ``tau = log(1 / sqrt(head_dim))`` in a
    :class:`~stiefel_mini.mha.StiefelMultiheadAttention` (its ``s_h`` carries the ``1 / sqrt(d)``)."""
    for m in modules:
        if isinstance(m, FrameProjection):
            for seg in m.heads:
                scale = getattr(m, f"{seg}_log_scale")
                if scale is not None:
                    scale.zero_()
        elif isinstance(m, StiefelMultiheadAttention) and m.log_scale is not None:
            m.log_scale.fill_(-0.5 * math.log(m.head_dim))


def _converted_before(model: nn.Module) -> dict[tuple[bool, str], int]:
    """``{(stiefel, logit_scale): how many}`` of the layers an earlier :func:`convert_attention` made."""
    counts: dict[tuple[bool, str], int] = {}
    for module in model.modules():
        made = module if isinstance(module, StiefelMultiheadAttention) else next(
            (c for c in module.children() if isinstance(c, FrameProjection)), None)
        if made is not None:  # a StiefelMultiheadAttention, or an attention layer holding FrameProjections
            key = (made.stiefel, made.logit_scale)
            counts[key] = counts.get(key, 0) + 1
    return counts


def convert_adapted(model: nn.Module, *, stiefel: bool, logit_scale: str,
                    num_heads: int | None = None) -> tuple[list[ConvertedLayer], list[str]]:
    """Swap the Q/K projections of every recognised timm / transformers / home-built attention layer of
    ``model`` for :class:`~stiefel_mini.projection.FrameProjection` modules, in place; returns the
    converted layers and notes for the report (``num_heads``: the head count of home-built layers that
    declare none).

    Every layer is checked and its replacements built before any is swapped in, so an unsupported
    layer raises ``ValueError`` and leaves ``model`` untouched.
    """
    opts = {"stiefel": stiefel, "logit_scale": logit_scale, "num_heads": num_heads}
    layers, swaps, normed = [], [], 0
    notes = []
    for name, module, layout in find_adapted(model):
        layer, new = (_fused if layout in ("timm", "gpt2") else _separate)(name, module, layout, opts)
        if layout.startswith("home:"):  # the known layouts' head order is their library's; this one's is its code's
            notes += check_home_layer(name, module, layout.removeprefix("home:"), HOME_BUILT_PAIRS, layer)
        layers.append(layer)
        swaps += new
        normed += _qk_norm(module)
    replaced = [(parent, child, getattr(parent, child)) for parent, child, _ in swaps]
    for parent, child, new in swaps:
        setattr(parent, child, new)
    mark_replaced(model, replaced)
    if normed and stiefel:
        notes.append(f"{normed} layer(s) normalise q and k after the projection (QK-norm): there the norms "
                     "set the logits' size, and the polar map changes directions only")
    return layers, notes


SCALE_STARTS = ("keep", "unit")
"""Where a learned logit scale starts (:func:`convert_attention`'s ``scale_start``)."""


def convert_attention(
    model: nn.Module, *, stiefel: bool = True, logit_scale: str = "fixed", num_heads: int | None = None,
    scale_start: str | None = None,
) -> ConversionReport:
    """Give every attention layer of ``model`` Stiefel query/key frames, in place.

    * ``nn.MultiheadAttention`` is swapped for a :class:`~stiefel_mini.mha.StiefelMultiheadAttention`;
    * timm ``Attention``, Hugging Face GPT-2, BERT-style, ViT and Llama-family attention, and
      home-built attention with separate query/key ``nn.Linear`` children, keep their module and
      forward; only their Q/K projection (a fused ``qkv`` Linear whose rows are Q|K|V, GPT-2's
      ``Conv1D`` whose columns are Q|K|V, or the ``q_proj``/``k_proj``, ``query``/``key``, ``q``/``k``,
      ``wq``/``wk``, ``to_q``/``to_k`` Linears) is replaced by a
      :class:`stiefel_mini.projection.FrameProjection` whose per-head frames ``(heads, d_model,
      d_head)`` :func:`stiefel_mini.groups.param_groups` finds. Heads are contiguous blocks of
      ``d_head`` outputs (the model reshapes to ``(B, T, heads, d_head)``); a home-built layer's head
      count is its ``num_heads``, ``n_head``, ``n_heads``, ``num_attention_heads`` or ``nhead``
      attribute, else ``num_heads``; its key heads are ``k.out_features // d_head``.

    Q/K weights are mapped per head onto the manifold with the polar map
    ``W_h -> W_h (W_h^T W_h)^{-1/2}`` (for each head's ``(d_model, d_head)`` block ``W_h``: its
    closest frame in Frobenius norm); V,
    output projections, biases, norms, dropout, device, dtype and train/eval mode are kept. With
    ``stiefel=False`` the weights are copied exactly and the model computes what it computed before.
    ``logit_scale="learned"`` gives each head a learned scale ``s_h = exp(tau_h)``, started by
    ``scale_start``: ``"keep"`` (default; a trained model) at the scale the polar map removed (per
    head, the mean singular value of its Q and of its K block), so the model computes what it did;
    ``"unit"`` (a model trained from scratch) at unit temperature, orthonormal frames under the
    model's ``1 / sqrt(d_head)``, where a new StiefelSelfAttention starts (a random GPT-2 of width 256
    would otherwise start near uniform attention, logits about 10x smaller). ``"fixed"`` keeps the
    model's own ``1 / sqrt(d_head)`` (unit temperature: ``"keep"`` is refused), and the report says by which
    factor that multiplies each layer's logits (above 1 where the weights' singular values were
    below 1, as in a freshly initialised model). A module shared by several parents is converted once and stays
    shared. ``nn.TransformerEncoder`` modules holding converted layers get
    ``use_nested_tensor = False``: their nested-tensor inference path reads ``in_proj_weight``. A
    Hugging Face model's config records the options (``config.stiefel_attention``), so that
    :func:`stiefel_mini.hf.from_pretrained_converted` can rebuild it from ``save_pretrained`` (the
    plain ``from_pretrained`` loads it too, as an unconverted model with the trained weights).

    A module whose class name says attention but whose layout it cannot read (a home-built fused
    Q|K|V Linear, T5's or DistilBERT's attention) is left as it is; the report and a ``UserWarning``
    name it and the route: ``FrameProjection.from_weight`` (see its docstring) and ``setattr``.
    Calling it again on a converted model converts what is not converted yet; a model converted
    before with other options raises ``ValueError`` naming them (convert a fresh model instead).

    Args:
        model: any module; it must not itself be an ``nn.MultiheadAttention`` (use
            :meth:`~stiefel_mini.mha.StiefelMultiheadAttention.from_torch` for that).
        stiefel: make the new Q/K projections frames.
        logit_scale: ``"fixed"`` or ``"learned"`` (above).
        num_heads: the head count of home-built layers that declare none; a layer that declares
            another raises ``ValueError``.
        scale_start: ``"keep"`` or ``"unit"`` (above); ``None`` is ``"keep"`` for a learned scale.

    Returns:
        A :class:`~stiefel_mini.conversion_report.ConversionReport`; ``print`` it to see what changed.

    Raises:
        ValueError: for a timm / transformers attention layer of an unsupported layout (Q, K, V
            interleaved per head as in GPT-NeoX and Falcon, cross-attention from inputs of another
            size, heads that do not divide the projection), for home-built query/key Linears with
            no head count, or for a model converted before with other options, naming the module,
            its class and what is supported; then nothing is changed.

    Shapes: each frame ``(d_model, d_head)``, stacked per layer and projection as ``(heads, d_model,
    d_head)``. Reference: Higham (1986), "Computing the polar decomposition" (the closest frame);
    Guerrero, "Stiefel Attention" (arXiv 2609.19363).
    """
    if isinstance(model, nn.MultiheadAttention):
        raise TypeError(
            "convert_attention swaps submodules in place, so it cannot replace the model itself; "
            "use StiefelMultiheadAttention.from_torch(mha) for a bare nn.MultiheadAttention"
        )
    if logit_scale not in LOGIT_SCALES:
        raise ValueError(f"logit_scale must be one of {list(LOGIT_SCALES)}; got {logit_scale!r}")
    if scale_start is not None and scale_start not in SCALE_STARTS:
        raise ValueError(f"scale_start must be one of {list(SCALE_STARTS)}; got {scale_start!r}")
    if scale_start == "keep" and logit_scale == "fixed":
        raise ValueError("scale_start='keep' needs a learned scale to keep the model's logit size in: pass "
                         "logit_scale='learned', or leave scale_start out (a fixed scale is the unit one)")
    scale_start = scale_start or ("keep" if logit_scale == "learned" else "unit")
    if num_heads is not None and (not isinstance(num_heads, int) or num_heads <= 0):
        raise ValueError(f"num_heads must be a positive int (the head count of home-built layers); got {num_heads!r}")
    before = _converted_before(model)
    other = {key: n for key, n in before.items() if key != (stiefel, logit_scale)}
    if other:
        was = "; ".join(f"{n} layer(s) with stiefel={st}, logit_scale={ls!r}" for (st, ls), n in other.items())
        raise ValueError(
            f"convert_attention: the model was converted before with stiefel={next(iter(other))[0]}, "
            f"logit_scale={next(iter(other))[1]!r} ({was}), and a conversion cannot be changed in place; "
            f"convert a freshly built (or loaded) model with stiefel={stiefel}, logit_scale={logit_scale!r}, "
            "or call it with the options above"
        )
    existing = {id(m) for m in model.modules()}
    adapted, notes = convert_adapted(model, stiefel=stiefel, logit_scale=logit_scale, num_heads=num_heads)
    report = ConversionReport(stiefel=stiefel, layers=adapted, notes=notes, kept=sum(before.values()))
    if adapted and hasattr(getattr(model, "config", None), "to_json_string"):
        model.config.stiefel_attention = {"stiefel": stiefel, "logit_scale": logit_scale}
    converted: dict[int, StiefelMultiheadAttention] = {}
    # Collect first: swapping while iterating named_modules would visit the new modules.
    targets = [
        (parent_name, parent, child_name, child)
        for parent_name, parent in model.named_modules(remove_duplicate=False)
        for child_name, child in parent.named_children()
        if isinstance(child, nn.MultiheadAttention)
    ]
    for parent_name, parent, child_name, child in targets:
        name = f"{parent_name}.{child_name}" if parent_name else child_name
        if id(child) not in converted:
            new = StiefelMultiheadAttention.configured_like(child, stiefel=stiefel, logit_scale=logit_scale)
            d_q, d_k = new.load_from_torch(child)
            converted[id(child)] = new
            report.layers.append(
                ConvertedLayer(name, new.embed_dim, new.num_heads, tuple(new.q_weight.shape[1:]), d_q, d_k,
                               logit_scale=logit_scale)
            )
        else:
            report.notes.append(f"{name} is the same module as an earlier one; kept shared")
        setattr(parent, child_name, converted[id(child)])
    mark_replaced(model, [(parent, child_name, child) for _, parent, child_name, child in targets])
    mark_muon_roles(model)  # the role StiefelMuon gives each parameter, read off the model
    for name, module in model.named_modules():
        if isinstance(module, nn.TransformerEncoder) and getattr(module, "use_nested_tensor", False):
            if any(isinstance(m, StiefelMultiheadAttention) for m in module.modules()):
                module.use_nested_tensor = False
                report.notes.append(f"{name or 'model'}.use_nested_tensor set to False")
    if logit_scale == "learned":
        for layer in report.layers:
            layer.scale_start = scale_start
        if scale_start == "unit":
            _unit_scales([m for m in model.modules() if id(m) not in existing])
    unread = unread_attention(model)
    if unread:
        message = (f"not converted: {', '.join(unread)}: attention whose Q/K projection convert_attention "
                   f"cannot read; {ROUTE}")
        report.notes.append(message)
        warnings.warn(f"convert_attention: {message}", UserWarning, stacklevel=2)
    return report


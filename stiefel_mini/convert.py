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
  after the projection, a rotation of each head's coordinates, so they leave a frame a frame.

Only the projection modules are replaced, so the model's own forward (SDPA, masks, the KV cache,
rotary embeddings, QK-norm, dropout) runs as before. timm and transformers are not imported here:
layers are recognised by their class's module and their attributes.
"""

from __future__ import annotations

from torch import nn

from .attention import LOGIT_SCALES
from .conversion_report import ConversionReport, ConvertedLayer
from .muon import mark_adamw_params
from .mha import StiefelMultiheadAttention
from .projection import FrameProjection, mean_gain

__all__ = ["convert_attention", "SUPPORTED", "convert_adapted", "find_adapted"]

SUPPORTED = (
    "torch nn.MultiheadAttention; timm Attention (fused qkv nn.Linear, rows Q|K|V); Hugging Face "
    "GPT-2 attention (Conv1D c_attn, columns Q|K|V); BERT-style self-attention (query/key/value "
    "nn.Linear); Llama-family and ViT attention (q_proj/k_proj nn.Linear, grouped-query allowed), "
    "each with heads that divide the projection and keys computed from inputs of the queries' size"
)


def _unsupported(name: str, module: nn.Module, why: str) -> ValueError:
    cls = type(module)
    return ValueError(
        f"convert_attention: {name or 'model'} ({cls.__module__}.{cls.__qualname__}) {why}; "
        f"supported: {SUPPORTED}"
    )


def _layout(name: str, module: nn.Module) -> str | None:
    """``"timm"``, ``"gpt2"``, ``"q_proj"`` or ``"query"`` for a recognised attention layer, ``None``
    for any other module (a layer converted before included: its projection is no ``nn.Linear`` or
    ``Conv1D`` any more); raises ``ValueError`` for a timm or transformers attention layer whose
    layout is not supported."""
    cls = type(module)
    origin = cls.__module__.split(".")[0]
    if origin not in ("timm", "transformers"):
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
    new, info = FrameProjection.from_weight(proj.weight, proj.bias, {"q": H, "k": H}, hd,
                                            transposed=transposed, **opts)
    layer = ConvertedLayer(name, d_in, H, (d_in, hd), info["q"].polar_distance, info["k"].polar_distance,
                           kind=f"{type(module).__name__} ({child})", kv_heads=H,
                           qk_gain=mean_gain(info["q"], info["k"]), logit_scale=opts["logit_scale"])
    return layer, [(module, child, new.train(proj.training))]


def _separate(name: str, module: nn.Module, layout: str, opts: dict) -> tuple[ConvertedLayer, list[Swap]]:
    """Separate Q and K Linears (BERT ``query``/``key``, Llama/ViT ``q_proj``/``k_proj``)."""
    q_name, k_name = ("q_proj", "k_proj") if layout == "q_proj" else ("query", "key")
    q_lin, k_lin = getattr(module, q_name), getattr(module, k_name)
    hd = getattr(module, "head_dim", None) or getattr(module, "attention_head_size", None)
    # Llama-family layers keep their head counts in their config only. A projection wider than the
    # declared heads (e.g. queries and gates interleaved in one q_proj) is refused by _heads.
    config = getattr(module, "config", None)
    declared = (getattr(module, "num_heads", None) or getattr(module, "num_attention_heads", None)
                or getattr(config, "num_attention_heads", None))
    declared_kv = getattr(config, "num_key_value_heads", None) if layout == "q_proj" else None
    if hd is None:
        raise _unsupported(name, module, "has no head_dim or attention_head_size attribute")
    d_in = q_lin.in_features
    if k_lin.in_features != d_in:
        raise _unsupported(name, module, f"is cross-attention with keys of size {k_lin.in_features} and "
                           f"queries of size {d_in}")
    H = _heads(name, module, q_lin.out_features, hd, declared, d_in)
    H_kv = _heads(name, module, k_lin.out_features, hd, declared_kv or (declared if layout == "query" else None),
                  d_in)
    if H % H_kv:
        raise _unsupported(name, module, f"has {H} query heads, not a multiple of its {H_kv} key heads")
    infos, swaps = {}, []
    for child, lin, seg, h in ((q_name, q_lin, "q", H), (k_name, k_lin, "k", H_kv)):
        new, info = FrameProjection.from_weight(lin.weight, lin.bias, {seg: h}, hd, **opts)
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


def convert_adapted(model: nn.Module, *, stiefel: bool, logit_scale: str) -> tuple[list[ConvertedLayer], list[str]]:
    """Swap the Q/K projections of every recognised timm / transformers attention layer of ``model``
    for :class:`~stiefel_mini.projection.FrameProjection` modules, in place; returns the converted layers and notes for the report.

    Every layer is checked and its replacements built before any is swapped in, so an unsupported
    layer raises ``ValueError`` and leaves ``model`` untouched.
    """
    opts = {"stiefel": stiefel, "logit_scale": logit_scale}
    layers, swaps, normed = [], [], 0
    for name, module, layout in find_adapted(model):
        layer, new = (_fused if layout in ("timm", "gpt2") else _separate)(name, module, layout, opts)
        layers.append(layer)
        swaps += new
        normed += _qk_norm(module)
    for parent, child, new in swaps:
        setattr(parent, child, new)
    notes = []
    if normed and stiefel:
        notes.append(f"{normed} layer(s) normalise q and k after the projection (QK-norm): there the norms "
                     "set the logits' size, and the polar map changes directions only")
    return layers, notes


def convert_attention(
    model: nn.Module, *, stiefel: bool = True, logit_scale: str = "fixed"
) -> ConversionReport:
    """Give every attention layer of ``model`` Stiefel query/key frames, in place.

    * ``nn.MultiheadAttention`` is swapped for a :class:`~stiefel_mini.mha.StiefelMultiheadAttention`;
    * timm ``Attention``, Hugging Face GPT-2, BERT-style, ViT and Llama-family attention keep their
      module and forward; only their Q/K projection (a fused ``qkv`` Linear, GPT-2's ``Conv1D``, or the
      ``q_proj``/``k_proj`` or ``query``/``key`` Linears) is replaced by a
      :class:`stiefel_mini.projection.FrameProjection` whose per-head frames ``(heads, d_model,
      d_head)`` :func:`stiefel_mini.groups.param_groups` finds (layouts: above).

    Q/K weights are mapped per head onto the manifold with the polar map (their closest frames); V,
    output projections, biases, norms, dropout, device, dtype and train/eval mode are kept. With
    ``stiefel=False`` the weights are copied exactly and the model computes what it computed before.
    ``logit_scale="learned"`` gives each head a learned scale started at the logit scale the polar
    map removed (for the timm / Hugging Face layers: per head, the mean singular value of its Q and of
    its K block); ``"fixed"`` keeps the model's own ``1 / sqrt(d_head)``, and the report says by which
    factor that multiplies each layer's logits (above 1 where the weights' singular values were
    below 1, as in a freshly initialised model). A module shared by several parents is converted once and stays
    shared. ``nn.TransformerEncoder`` modules holding converted layers get
    ``use_nested_tensor = False``: their nested-tensor inference path reads ``in_proj_weight``. A
    Hugging Face model's config records the options (``config.stiefel_attention``), so that
    :func:`stiefel_mini.hf.from_pretrained_converted` can rebuild it from ``save_pretrained``.

    Args:
        model: any module; it must not itself be an ``nn.MultiheadAttention`` (use
            :meth:`~stiefel_mini.mha.StiefelMultiheadAttention.from_torch` for that).
        stiefel: make the new Q/K projections frames.
        logit_scale: ``"fixed"`` or ``"learned"`` (see :meth:`~stiefel_mini.mha.StiefelMultiheadAttention.load_from_torch`).

    Returns:
        A :class:`~stiefel_mini.conversion_report.ConversionReport`; ``print`` it to see what changed.

    Raises:
        ValueError: for a timm / transformers attention layer of an unsupported layout (Q, K, V
            interleaved per head as in GPT-NeoX and Falcon, cross-attention from inputs of another
            size, heads that do not divide the projection), naming the module, its class and what is
            supported; then nothing is changed.
    """
    if isinstance(model, nn.MultiheadAttention):
        raise TypeError(
            "convert_attention swaps submodules in place, so it cannot replace the model itself; "
            "use StiefelMultiheadAttention.from_torch(mha) for a bare nn.MultiheadAttention"
        )
    if logit_scale not in LOGIT_SCALES:
        raise ValueError(f"logit_scale must be one of {list(LOGIT_SCALES)}; got {logit_scale!r}")
    adapted, notes = convert_adapted(model, stiefel=stiefel, logit_scale=logit_scale)
    mark_adamw_params(model)  # StiefelMuon trains the embeddings and the output head with AdamW
    report = ConversionReport(stiefel=stiefel, layers=adapted, notes=notes)
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
                ConvertedLayer(name, new.embed_dim, new.num_heads, tuple(new.q_weight.shape[1:]), d_q, d_k)
            )
        else:
            report.notes.append(f"{name} is the same module as an earlier one; kept shared")
        setattr(parent, child_name, converted[id(child)])
    for name, module in model.named_modules():
        if isinstance(module, nn.TransformerEncoder) and getattr(module, "use_nested_tensor", False):
            if any(isinstance(m, StiefelMultiheadAttention) for m in module.modules()):
                module.use_nested_tensor = False
                report.notes.append(f"{name or 'model'}.use_nested_tensor set to False")
    return report


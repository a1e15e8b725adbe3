"""Checking a home-built attention layer's head slicing against its own forward, before
:func:`~stiefel_mini.convert.convert_attention` builds frames from it.

The converter takes head ``h`` to be the contiguous block of outputs ``h * d_head ... (h + 1) *
d_head - 1`` of the query/key projection (the ``(h d)`` layout that ``view(B, T, heads, d_head)``
reads). One forward of the module on a random input shows what its code does: the query and key
vectors that reach the attention product (``F.scaled_dot_product_attention`` or the first matrix
product after both projections ran; the input of ``q_norm`` / ``k_norm`` where the module has them)
are compared with the projection's output cut into heads both ways. Per token and head their norms
must match the contiguous cut: rotary embeddings, transposes and a common scale keep them, while a
strided cut (``(d h)``, ``view(B, T, d_head, heads)``) mixes the coordinates of different heads.
"""

from __future__ import annotations

import re

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

_PRODUCTS = (torch.matmul, Tensor.__matmul__, torch.bmm)
_ATTENTION_NAME = re.compile(r"att(n|ention)", re.IGNORECASE)
_FUSED_QKV = ("qkv", "c_attn", "Wqkv", "wqkv", "qkv_proj", "to_qkv", "in_proj", "query_key_value", "qkv_linear")


def _linear(module: nn.Module | None) -> bool:
    return isinstance(module, nn.Linear) or type(module).__name__ == "Conv1D"


def attention_like(module: nn.Module, pairs: dict[str, str]) -> bool:
    """Whether ``module`` looks like attention: its class name says so and it has ``nn.Linear`` /
    ``Conv1D`` children, or, whatever its class name, it holds a fused Q|K|V projection (a child
    named ``qkv``, ``c_attn``, ``Wqkv``, ``in_proj``...) or a query/key pair of modules (``pairs``)."""
    children = dict(module.named_children())
    if _ATTENTION_NAME.search(type(module).__name__) and any(_linear(c) for c in children.values()):
        return True
    return any(_linear(children.get(n)) for n in _FUSED_QKV) or any(
        isinstance(children.get(q), nn.Module) and isinstance(children.get(k), nn.Module) for q, k in pairs.items())


class _Capture(TorchFunctionMode):
    """Records the query and key operands of the first attention product once both projections ran."""

    def __init__(self, ready, head_dim: int) -> None:
        super().__init__()
        self.ready, self.head_dim, self.q, self.k = ready, head_dim, None, None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.q is None and self.ready():
            if func is F.scaled_dot_product_attention:
                named = {"query": args[0] if args else None, "key": args[1] if len(args) > 1 else None, **kwargs}
                self.q, self.k = named["query"], named["key"]
            elif func in _PRODUCTS and len(args) >= 2 and isinstance(args[1], Tensor) and args[1].dim() >= 2 \
                    and args[0].shape[-1] == self.head_dim and args[1].shape[-2] == self.head_dim:
                self.q, self.k = args[0], args[1].mT
        return func(*args, **kwargs)


def _norms(t: Tensor, heads: int, head_dim: int, strided: bool, repeat: int = 1) -> Tensor:
    """Sorted per-(token, head) norms of a projection output ``(..., heads * head_dim)``, cut ``(h d)``
    or ``(d h)``, each repeated ``repeat`` times, as a fraction of their sum."""
    shape = (*t.shape[:-1], head_dim, heads) if strided else (*t.shape[:-1], heads, head_dim)
    n = torch.linalg.vector_norm(t.reshape(shape).float(), dim=-2 if strided else -1).flatten()
    n = n.repeat_interleave(repeat).sort().values
    return n / n.sum()


def _seen(t: Tensor) -> Tensor:
    """Sorted norms of the vectors ``(..., head_dim)`` that reached the product, as a fraction of their sum."""
    n = torch.linalg.vector_norm(t.float(), dim=-1).flatten().sort().values
    return n / n.sum()


def check_head_slicing(name: str, module: nn.Module, q_name: str, k_name: str, heads: int, kv_heads: int,
                       head_dim: int) -> str | None:
    """Run ``module`` once on a random ``(2, 5, d_in)`` input and check that its forward cuts the
    ``q_name`` / ``k_name`` projections into contiguous heads of ``head_dim``.

    Returns ``None`` when it does, or a note saying why it could not be checked (the forward needs
    more than ``x``, no attention product was seen, the vectors are normalised before it). Raises
    ``ValueError`` when the forward cuts them otherwise (strided ``(d h)`` heads, named as such).
    Nothing of the module changes: it runs in eval mode, without gradients, with the RNG state kept.
    """
    q_lin, k_lin = getattr(module, q_name), getattr(module, k_name)
    outputs: dict[str, Tensor] = {}
    hooks = [lin.register_forward_hook(lambda m, a, out, key=key: outputs.setdefault(key, out))
             for key, lin in (("q", q_lin), ("k", k_lin))]
    norms = [getattr(module, n, None) for n in ("q_norm", "k_norm")]
    normed: dict[str, Tensor] = {}
    for key, norm in zip("qk", norms):
        if isinstance(norm, nn.Module) and not isinstance(norm, nn.Identity):
            hooks.append(norm.register_forward_pre_hook(lambda m, a, key=key: normed.setdefault(key, a[0])))
    modes = {m: m.training for m in module.modules()}
    weight = q_lin.weight
    x = torch.randn(2, 5, q_lin.in_features, generator=torch.Generator().manual_seed(0)).to(weight)
    capture = _Capture(lambda: len(outputs) == 2, head_dim)
    try:
        module.eval()
        with torch.random.fork_rng(devices=[]), torch.no_grad(), capture:
            module(x)
    except Exception as error:  # noqa: BLE001: any failure of a forward called without its other inputs
        return f"{name}: head slicing not checked (its forward(x) raised {type(error).__name__})"
    finally:
        for h in hooks:
            h.remove()
        for m, training in modes.items():
            m.train(training)
    q, k = normed.get("q", capture.q), normed.get("k", capture.k)
    if q is None or k is None or "q" not in outputs:
        return f"{name}: head slicing not checked (no attention product of the projections was seen)"
    tol = 1e-3 if weight.dtype in (torch.float32, torch.float64) else 3e-2
    results = []
    for seen, out, h in ((q, outputs["q"], heads), (k, outputs["k"], kv_heads)):
        s = _seen(seen)
        repeat = max(1, s.numel() // max(1, out.numel() // head_dim))
        fits = {}
        for strided in (False, True):
            want = _norms(out, h, head_dim, strided, repeat)
            fits[strided] = want.shape == s.shape and bool((want - s).abs().max() <= tol * s.max())
        flat = bool((s.max() - s.min()) <= tol * s.max())
        results.append((fits, flat))
    if all(fits[False] for fits, _ in results):
        return None
    if any(flat for _, flat in results):
        return f"{name}: head slicing not checked (the query/key vectors are normalised before the product)"
    strided = all(fits[True] for fits, _ in results)
    how = ("strided: head h takes every heads-th output, (d h), as view(B, T, head_dim, heads) reads it"
           if strided else "in a way it cannot read")
    raise ValueError(
        f"convert_attention: {name} ({type(module).__module__}.{type(module).__qualname__}) cuts its {q_name}/{k_name} "
        f"outputs into heads {how}; frames need each head's {head_dim} outputs contiguous, (h d), as "
        "view(B, T, heads, head_dim) reads them. Reorder the projection's outputs (and the forward) to (h d), or "
        "convert the layer by hand with FrameProjection.from_weight on weights whose rows are in (h d) order")


def check_home_layer(name: str, module: nn.Module, q_name: str, pairs: dict[str, str], layer) -> list[str]:
    """:func:`check_head_slicing` of a home-built layer converted as ``layer`` (a ``ConvertedLayer``):
    ``[]``, or the note saying why it was not checked."""
    note = check_head_slicing(name, module, q_name, pairs[q_name], layer.num_heads, layer.kv_heads or layer.num_heads,
                              layer.frame_shape[1])
    return [note] if note else []

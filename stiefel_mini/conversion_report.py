"""What :func:`stiefel_mini.convert.convert_attention` reports: each converted layer, how far the
polar map moved its query and key weights, and how the logit scale is handled."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ConversionReport", "ConvertedLayer"]


@dataclass
class ConvertedLayer:
    """One converted layer: its name, kind, sizes, how far the polar map moved Q and K
    (``||W - polar(W)||_F / ||W||_F``) and how the logit scale is handled.

    ``qk_gain`` is the mean over query heads of ``mean sigma(Q_h) * mean sigma(K_h)`` of the weights
    before the polar map: the factor the map divides the logits by unless a learned per-head scale
    (``logit_scale="learned"``, started at the singular values) absorbs it, so with ``"fixed"`` the
    logits are multiplied by ``1 / qk_gain`` (they grow where the weights' singular values are below
    1, as in a freshly initialised model, and shrink where they are above 1). ``None`` for
    ``nn.MultiheadAttention``, whose learned temperature :meth:`stiefel_mini.mha.StiefelMultiheadAttention.load_from_torch`
    starts from the same product.
    """

    name: str
    embed_dim: int
    num_heads: int
    frame_shape: tuple[int, ...]
    q_polar_distance: float
    k_polar_distance: float
    kind: str = "nn.MultiheadAttention"
    kv_heads: int | None = None  # key heads (fewer than num_heads under grouped-query attention)
    qk_gain: float | None = None
    logit_scale: str = "fixed"
    scale_start: str = "keep"  # "keep" (the scale the polar map removed) or "unit", for a learned scale

    @property
    def logit_factor(self) -> float | None:
        """The factor by which the conversion multiplies this layer's logits.

        ``1 / qk_gain`` with ``logit_scale="fixed"`` or a learned scale started at unit temperature
        (``scale_start="unit"``), ``1.0`` with a learned scale that keeps the model's (the scale
        absorbs the gain), ``None`` when unknown (``nn.MultiheadAttention``'s gain is not recorded).
        """
        if self.logit_scale == "learned" and self.scale_start == "keep":
            return 1.0
        return None if self.qk_gain is None else 1 / self.qk_gain

    @property
    def num_frames(self) -> int:
        """Number of per-head frames of this layer, one per query head and one per key head."""
        return self.num_heads + (self.num_heads if self.kv_heads is None else self.kv_heads)

    def logit_note(self, stiefel: bool) -> str:
        """How the logit scale is handled, in a few words."""
        if not stiefel:
            return "unchanged"
        if self.logit_scale == "learned" and self.scale_start == "unit":
            return "learned, starts at unit" + ("" if self.qk_gain is None else f": logits x{self.logit_factor:.3g}")
        if self.logit_scale == "learned":
            return "learned" if self.qk_gain is None else f"learned, starts x{self.qk_gain:.3g}"
        return "fixed" if self.qk_gain is None else f"fixed: logits x{self.logit_factor:.3g}"


@dataclass
class ConversionReport:
    """What :func:`~stiefel_mini.convert.convert_attention` changed; ``print(report)`` shows it as a table.

    ``stiefel``: the option the layers were converted with; ``layers``: one :class:`ConvertedLayer`
    per converted layer (its name, kind, sizes, the polar distances ``||W - polar(W)||_F / ||W||_F``
    of its Q and K weights and its logit-scale factor ``1 / qk_gain``); ``notes``: what else it did
    or left alone (QK-norm, shared modules, attention it cannot read and how to convert that by
    hand); ``kept``: layers converted before, with the same options, left as they were.
    """

    stiefel: bool
    layers: list[ConvertedLayer] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    kept: int = 0

    @property
    def num_frames(self) -> int:
        """Number of per-head frames created (Q and K for every head of every layer)."""
        return sum(layer.num_frames for layer in self.layers) if self.stiefel else 0

    def __str__(self) -> str:
        kind = "Stiefel Q/K frames" if self.stiefel else "unconstrained (stiefel=False, exact copy)"
        lines = [f"convert_attention: {len(self.layers)} attention layer(s) -> {kind}"]
        if self.layers:
            width = max(len(layer.name) for layer in self.layers)
            kinds = max(len(layer.kind) for layer in self.layers)
            lines.append(
                f"  {'module':<{width}}  {'kind':<{kinds}}  {'E':>4}  {'H':>2}  {'KV':>2}  "
                f"{'frame (per head)':<16}  {'|Q-polar(Q)|/|Q|':>16}  {'|K-polar(K)|/|K|':>16}  logit scale"
            )
            for layer in self.layers:
                shape = " x ".join(str(s) for s in layer.frame_shape)
                kv = layer.num_heads if layer.kv_heads is None else layer.kv_heads
                lines.append(
                    f"  {layer.name:<{width}}  {layer.kind:<{kinds}}  {layer.embed_dim:>4}  "
                    f"{layer.num_heads:>2}  {kv:>2}  {shape:<16}  {layer.q_polar_distance:>16.3f}  "
                    f"{layer.k_polar_distance:>16.3f}  {layer.logit_note(self.stiefel)}"
                )
        elif self.kept:
            lines.append(f"  all {self.kept} attention layer(s) were converted before with these options: "
                         "nothing changed")
        else:
            lines.append("  no supported attention layer found: nothing changed")
        lines += [f"  note: {note}" for note in self.notes]
        if self.stiefel and self.layers:
            lines.append(
                f"  {self.num_frames} frames; V, output projections, biases and norms copied unchanged"
            )
            learned = sorted({layer.scale_start for layer in self.layers if layer.logit_scale == "learned"})
            if learned == ["keep"]:
                lines.append("  learned logit scale, scale_start='keep': each head's scale starts at the size the polar "
                             "map removed, so the model computes what it computed before (for a trained model)")
            elif learned == ["unit"]:
                lines.append("  learned logit scale, scale_start='unit': each head starts at unit temperature, the "
                             "scale of orthonormal frames (for a model trained from scratch); its logits change by "
                             "the factor shown")
            factors = [layer.logit_factor for layer in self.layers
                       if layer.qk_gain is not None and layer.logit_scale == "fixed"]
            if factors:
                change = ("grow" if min(factors) > 1 else "shrink" if max(factors) < 1 else "grow or shrink")
                lines.append(
                    f"  logit scale 'fixed': the model's own 1/sqrt(d_head) is kept, so the logits {change} "
                    "by the factor shown (x1/gain: the singular values the polar map removed); "
                    "logit_scale='learned' keeps their size"
                )
        return "\n".join(lines)

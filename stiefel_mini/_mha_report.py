"""What :func:`stiefel_mini.mha.convert_attention` reports: each swapped module and how far the
polar map moved its query and key weights."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ConvertedLayer:
    """One swapped module: its name, sizes and how far the polar map moved Q and K."""

    name: str
    embed_dim: int
    num_heads: int
    frame_shape: tuple[int, ...]
    q_polar_distance: float
    k_polar_distance: float


@dataclass
class ConversionReport:
    """What :func:`convert_attention` changed; ``print(report)`` shows it as a table."""

    stiefel: bool
    layers: list[ConvertedLayer] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def num_frames(self) -> int:
        """Number of per-head frames created (Q and K for every head of every layer)."""
        return sum(2 * layer.num_heads for layer in self.layers) if self.stiefel else 0

    def __str__(self) -> str:
        kind = "Stiefel Q/K frames" if self.stiefel else "unconstrained (stiefel=False, exact copy)"
        lines = [
            f"convert_attention: {len(self.layers)} nn.MultiheadAttention -> "
            f"StiefelMultiheadAttention, {kind}"
        ]
        if self.layers:
            width = max(len(layer.name) for layer in self.layers)
            lines.append(
                f"  {'module':<{width}}  {'E':>4}  {'H':>2}  {'frame (per head)':<16}  "
                f"{'|Q-polar(Q)|/|Q|':>16}  {'|K-polar(K)|/|K|':>16}"
            )
            for layer in self.layers:
                shape = " x ".join(str(s) for s in layer.frame_shape)
                lines.append(
                    f"  {layer.name:<{width}}  {layer.embed_dim:>4}  {layer.num_heads:>2}  "
                    f"{shape:<16}  {layer.q_polar_distance:>16.3f}  {layer.k_polar_distance:>16.3f}"
                )
        else:
            lines.append("  no nn.MultiheadAttention found: nothing changed")
        lines += [f"  note: {note}" for note in self.notes]
        if self.stiefel and self.layers:
            lines.append(
                f"  {self.num_frames} frames; V, output projections and biases copied unchanged"
            )
        return "\n".join(lines)

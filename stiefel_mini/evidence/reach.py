"""The speedrun measure: how many tokens a run needs to reach its baseline's final validation loss.

For a seed's baseline run ``a`` and another arm's run ``b`` of the language-model study, both with a
validation curve (``history``: ``tokens``, ``val_bpb``), ``a``'s value is its whole budget (the
tokens of its last evaluation) and ``b``'s the tokens at which its curve first reaches ``a``'s final
value, linearly interpolated between the two evaluations around the crossing; ``None`` (censored:
never reached within the budget) otherwise. ``b``'s value over ``a``'s is the fraction of the
tokens it needs (a speedrun record's "1.35x fewer tokens" is a fraction of 1 / 1.35).
"""

from __future__ import annotations

from typing import Mapping

__all__ = ["tokens_to_reach", "sides"]


def tokens_to_reach(history: Mapping[str, list], target: float) -> float | None:
    """The tokens at which the curve ``history["val_bpb"]`` (at ``history["tokens"]``) first falls to
    ``target`` or below, interpolated linearly between evaluations; ``None`` if it never does."""
    tokens, curve = history["tokens"], history["val_bpb"]
    for i, (t, v) in enumerate(zip(tokens, curve)):
        if v <= target:
            if i == 0:
                return float(t)
            t0, v0 = tokens[i - 1], curve[i - 1]
            return float(t0 + (t - t0) * (v0 - target) / (v0 - v))
    return None


def sides(a: Mapping[int, dict], b: Mapping[int, dict], key: str = "tokens") -> tuple[dict, dict]:
    """Runs keyed by seed, each with ``key`` set: ``a``'s budget and ``b``'s tokens to reach ``a``'s
    final validation value (:func:`tokens_to_reach`), over the seeds both hold."""
    seeds = sorted(set(a) & set(b))
    out_a = {s: {**a[s], key: float(a[s]["history"]["tokens"][-1])} for s in seeds}
    out_b = {s: {**b[s], key: tokens_to_reach(b[s]["history"], a[s]["history"]["val_bpb"][-1])} for s in seeds}
    return out_a, out_b

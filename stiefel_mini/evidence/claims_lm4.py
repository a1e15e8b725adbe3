"""The fourth language-model study's declared questions: its primaries and secondaries, before any of its runs.

The study is :data:`stiefel_mini.experiments.lm.studies.ROUND4`; each comparison names it
(``plan="round4"``), so a family's better arm is the one that study's plan picks.
"""

from __future__ import annotations

from typing import Any

from stiefel_mini.evidence.claims import LM2_SWEEP_SEEDS, Claim, Comparison

__all__ = ["LM4", "LM4_REGIME", "LM4_SEEDS", "LM4_CLAIMS"]


def _sel(**kw: Any) -> tuple[tuple[str, Any], ...]:
    return tuple(kw.items())


LM4 = ("lm/round4.json",)
LM4_REGIME = ("GPT-2, 4 layers, width 256, State of the Union addresses, 2,400 steps (4.9M tokens), every arm "
              "tuned for itself on sweep seeds 100-101 at 800 steps, its main lr re-checked at 2,400 steps on seed 100")
LM4_SEEDS = tuple(range(16, 24))


def _lm4(label: str, a: str, b: str, **kw: Any) -> Comparison:
    """A fourth-study comparison: test bits per byte at 2,400 steps on seeds 16-23."""
    return Comparison(label, LM4_REGIME, LM4, a, b, metric=kw.pop("metric", "test_bpb"), scale=1.0,
                      unit=kw.pop("unit", "bpb"), higher_is_better=kw.pop("higher_is_better", False),
                      censored=True, select=_sel(phase="long"), seeds=LM4_SEEDS, chosen_on=LM2_SWEEP_SEEDS,
                      plan="round4", **kw)


_LONG4 = ("stiefel", "stiefel_muon", "all_stiefel", "muon")

LM4_CLAIMS: tuple[Claim, ...] = (
    Claim("lm4_stiefel_adam", "Trained as the library recommends, StiefelAdam beats the better AdamW (with or "
          "without QK-norm) at 2,400 steps", "not claimed", "language_model", "size",
          what="stiefel − the better AdamW-family arm, 2,400 steps",
          primaries=((_lm4("stiefel − better of adamw / adamw_qknorm, 2,400 steps, test bits per byte",
                           "adamw_family", "stiefel"),),),
          secondary=(*(_lm4(f"{arm} − adamw_family, tokens to reach its final validation bits per byte",
                            "adamw_family", arm, metric="tokens", unit="tokens", reach=True) for arm in _LONG4),
                     *(_lm4(f"{arm} − adamw_family, {m} at the last evaluation", "adamw_family", arm, metric=m,
                            unit=u, higher_is_better=m == "min_entropy")
                       for arm in ("stiefel", "stiefel_muon", "all_stiefel")
                       for m, u in (("max_logit", "logit"), ("min_entropy", "nats")))),
          scale_note="a 4-layer GPT-2 of width 256 trained for 4.9M tokens on a CPU",
          declared="a2f5f71",
          short="language model 4, stiefel − better AdamW"),
    Claim("lm4_stiefel_muon", "Trained as the library recommends, StiefelMuon (manifold Muon on the Q/K frames) "
          "beats the better Muon (with or without QK-norm) at 2,400 steps", "not claimed", "language_model", "size",
          what="stiefel_muon − the better Muon-family arm, 2,400 steps",
          primaries=((_lm4("stiefel_muon − better of muon / muon_qknorm, 2,400 steps, test bits per byte",
                           "muon_family", "stiefel_muon"),),),
          scale_note="a 4-layer GPT-2 of width 256 trained for 4.9M tokens on a CPU",
          declared="a2f5f71",
          short="language model 4, stiefel_muon − better Muon"),
    Claim("lm4_all_stiefel", "Every hidden matrix on the Stiefel manifold (module-wise manifold Muon) beats the "
          "better Muon (with or without QK-norm) at 2,400 steps",
          "not claimed here (arXiv 2606.13276, GPT-2 small, 50k iterations: validation loss 3.3679 against "
          "Muon's 3.3855, one run each)", "language_model", "size",
          what="all_stiefel − the better Muon-family arm, 2,400 steps",
          primaries=((_lm4("all_stiefel − better of muon / muon_qknorm, 2,400 steps, test bits per byte",
                           "muon_family", "all_stiefel"),),),
          secondary=(_lm4("all_stiefel − muon (the published pair), 2,400 steps, test bits per byte", "muon",
                          "all_stiefel"),
                     _lm4("all_stiefel − stiefel_muon, 2,400 steps, test bits per byte", "stiefel_muon",
                          "all_stiefel")),
          scale_note="a 4-layer GPT-2 of width 256 trained for 4.9M tokens on a CPU; the published result is "
                     "GPT-2 small, 50k iterations",
          declared="a2f5f71",
          short="language model 4, all_stiefel − better Muon"),
)
"""The fourth language-model study's questions (:data:`stiefel_mini.experiments.lm.studies.ROUND4`),
declared before any of its runs: three primaries in test bits per byte at 2,400 steps on seeds
16-23, each a family of one, no correction across them: ``stiefel`` against the better AdamW-family
arm, ``stiefel_muon`` and ``all_stiefel`` against the better Muon-family arm; the published pair
(``all_stiefel`` against plain ``muon``), the tokens each arm needs to reach the AdamW family's
final validation value, and the largest logit and lowest entropy at the last evaluation are
secondaries. Every arm's validation curve (``history``) is kept per run. Declared at ``a2f5f71``, the
commit that declared the study; its runs start from a clean worktree at that commit."""



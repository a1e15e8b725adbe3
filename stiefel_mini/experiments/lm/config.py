"""The run config of the language-model experiment (:mod:`stiefel_mini.experiments.lm`).

A run (:class:`LMConfig`) trains one arm on one seed: a GPT-2 of :class:`LMModel`'s size from
Hugging Face ``transformers``, its attention converted by :func:`stiefel_mini.convert_attention`, on
the State of the Union addresses for a fixed number of tokens (``steps * batch_size * context``).
The studies are declared plans (:mod:`~stiefel_mini.experiments.lm.studies`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["LM_ARMS", "LMModel", "LMOptimizer", "LMConfig", "PRESETS"]

LM_ARMS = {
    "adamw": "AdamW on every weight",
    "stiefel": "StiefelAdam on the Q/K frames, AdamW on the rest",
    "muon": "Muon on every hidden matrix (Q, K, V, output, MLP), AdamW on embeddings, norms and biases",
    "frozen": "the Q/K frames kept at their start, AdamW on the rest",
    "muon_stiefel": "StiefelAdam on the Q/K frames, Muon on the other hidden matrices, AdamW on the rest",
}
"""The arms of a single run (``--arm``) and of the first study: name -> what trains what
(:func:`~stiefel_mini.experiments.lm.model.build_model`)."""


@dataclass
class LMModel:
    """The GPT-2: layers, width, heads (head size ``d_model / n_head``), context and vocabulary."""

    n_layer: int = 4
    d_model: int = 256
    n_head: int = 4
    context: int = 128
    vocab_size: int = 2048


@dataclass
class LMOptimizer:
    """Every arm's optimizer settings; each arm reads the ones it uses (:mod:`.model`).

    ``lr``: AdamW's (embeddings, norms, biases; every weight for ``adamw``); ``frame_lr`` and
    ``max_step``: StiefelAdam's frames (a frame moves about ``frame_lr`` per step, at most
    ``max_step``, so a ``frame_lr`` above ``max_step`` moves it by ``max_step`` until the schedule
    brings it under); ``muon_lr``, ``momentum``: Muon's. Every lr follows one schedule: linear
    warm-up over ``warmup_frac`` of the steps, then a cosine to ``final_lr_frac`` of its peak.
    ``weight_decay`` applies to AdamW's matrices and embeddings only.
    """

    lr: float = 2e-3
    frame_lr: float = 0.03
    muon_lr: float = 0.02
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    weight_decay: float = 0.1
    max_step: float = 0.1
    momentum: float = 0.95
    warmup_frac: float = 0.05
    final_lr_frac: float = 0.1
    grad_clip: float = 1.0


@dataclass
class LMConfig:
    """One run: arm, seed, length and how it is measured.

    ``steps`` of ``batch_size`` windows of ``context`` tokens; every ``eval_every`` steps the
    validation bits per byte on ``eval_windows`` windows spread over the validation addresses (the
    curve); at the end on every validation and test window. ``samples`` texts of ``sample_tokens``
    tokens are drawn from the trained model. ``device``: where it computes (``"cpu"`` or
    ``"cuda"``); the initial weights and the batches are drawn on the CPU either way, so a seed
    starts from the same point on both. A study stores it per run, not in its base config.
    """

    arm: str = "adamw"
    seed: int = 0
    steps: int = 800
    batch_size: int = 16
    eval_every: int = 50
    eval_windows: int = 96
    samples: int = 3
    sample_tokens: int = 48
    threads: int = 1
    progress: bool = True
    device: str = "cpu"
    model: LMModel = field(default_factory=LMModel)
    optimizer: LMOptimizer = field(default_factory=LMOptimizer)


PRESETS = {
    "cpu": LMConfig(),
    # A few seconds: the tests' and the chapter's live run.
    "tiny": LMConfig(steps=40, batch_size=4, eval_every=20, eval_windows=8, samples=1, sample_tokens=8,
                     model=LMModel(n_layer=1, d_model=32, n_head=2, context=32)),
}
"""Named run configs: ``cpu`` (the study's, about 8 CPU minutes at one thread), ``tiny`` (tests)."""

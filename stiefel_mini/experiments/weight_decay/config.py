"""The weight-decay experiment's run config and its sweep config, as data.

:class:`WeightDecayConfig` is one run, an arm at one decay, made of the parts :class:`RecallTask`,
:class:`AttentionSizes` and :class:`RecallOptimizer`. :class:`WeightDecaySweep` is the grid, every arm
of ``arms`` at every decay of ``weight_decays``, with the run config as its part ``run``;
:data:`CHAPTER_CONFIG` is the sweep of the book's chapter. Every leaf field keeps one flat name across
the parts (``--d_head 8``, ``config.replace(sweep, lr=3e-3)``, the stored ``config``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = ["RecallTask", "AttentionSizes", "RecallOptimizer", "WeightDecayConfig", "WeightDecaySweep",
           "CHAPTER_CONFIG"]


@dataclass
class RecallTask:
    """Associative recall: ``n_pairs`` key/value tokens and a query key; the answer is the key's value."""

    n_pairs: int = 6  # key/value pair tokens per sequence
    n_keys: int = 16
    n_values: int = 16
    label_noise: float = 0.2  # fraction of training targets replaced by a random value
    batch_size: int = 64
    eval_size: int = 256


@dataclass
class AttentionSizes:
    """The one attention layer's sizes: model width, heads, head width."""

    d_model: int = 32  # token width
    n_heads: int = 2
    d_head: int = 8  # each head's W_Q^h, W_K^h: d_model x d_head (a frame in the Stiefel arms)


@dataclass
class RecallOptimizer:
    """The settings of :func:`stiefel_mini.experiments.arms.make_optimizer`: rates, the decay and where it acts."""

    lr: float = 1e-2  # AdamW learning rate (every non-frame weight; Q/K in the AdamW arms)
    frame_lr: float = 0.05  # StiefelAdam: Frobenius length of one frame step
    betas: tuple[float, float] = (0.9, 0.98)
    weight_decay: float = 1.0
    # "qk": the decay acts on Q/K only, every other weight is trained without; "all": on every matrix.
    decay_scope: Literal["qk", "all"] = "qk"


@dataclass
class WeightDecayConfig:
    """One run: ``arm`` at decay ``optimizer.weight_decay``, logged every ``log_every`` steps, with the
    Q/K weights kept at ``snapshot_steps``."""

    arm: str = "stiefel"
    seed: int = 0
    steps: int = 300
    log_every: int = 10
    snapshot_steps: tuple[int, ...] = (0, 50, 100, 200, 300)
    threads: int | None = 1  # a model this small runs fastest on one thread
    task: RecallTask = field(default_factory=RecallTask)
    model: AttentionSizes = field(default_factory=AttentionSizes)
    optimizer: RecallOptimizer = field(default_factory=RecallOptimizer)


@dataclass
class WeightDecaySweep:
    """The grid: ``run`` for every arm of ``arms`` at every decay of ``weight_decays``, same seed, same
    batches."""

    arms: tuple[str, ...] = ("adamw", "stiefel", "qknorm")
    weight_decays: tuple[float, ...] = (0.0, 0.3, 1.0, 3.0, 10.0)
    progress: bool = False
    run: WeightDecayConfig = field(default_factory=WeightDecayConfig)


#: The sweep the book's weight-decay chapter runs (the defaults); the browser test re-runs it to check
#: the numbers on the built page.
CHAPTER_CONFIG = WeightDecaySweep()

"""The grokking experiment's run config, its sweep config, and their plans, as data.

:class:`GrokkingConfig` is one training run, made of the parts :class:`ModularTask`,
:class:`GrokkingModel` and :class:`GrokkingOptimizer`; :data:`PLANS` names its settings (``cpu``, the book's;
``reference``, Nanda et al.'s recipe; ``endpoint``, the paper's 20,000 epochs; ``live``, ``long``, ``short``, ``tiny``). :class:`SweepConfig` is
a paired sweep over arms and seeds (and weight decays) of one plan; :data:`SWEEPS` names the studies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional

__all__ = ["ARM_NAMES", "STUDY_ARMS", "ModularTask", "GrokkingModel", "GrokkingOptimizer", "GrokkingConfig", "PLANS",
           "SweepConfig", "SWEEPS", "STUDY_NAMES"]

ARM_NAMES = ("adamw", "adamw_nodecay_qk", "stiefel", "frozen", "uniform")
STUDY_ARMS = ("adamw", "stiefel_learned", "frozen_learned", "uniform", "adamw_scaled_qk", "qknorm")
"""The studies' arms, in order of information value: the first three separate the optimizer from flat
attention."""


@dataclass
class ModularTask:
    """The task: ``c = a op b (mod p)`` over all ``p^2`` pairs, a ``train_frac`` share of them trained on."""

    p: int = 59  # modulus (prime); vocabulary is 0..p-1 plus the "=" token p
    op: Literal["add", "sub", "div"] = "add"  # a+b, a-b, a*b^-1 (mod p); div excludes b = 0
    train_frac: float = 0.3


@dataclass
class GrokkingModel:
    """The one-layer transformer's sizes and its attention's logit scale."""

    d_model: int = 128
    n_heads: int = 4
    d_mlp: int = 512
    logit_scale: Literal["fixed", "learned"] = "fixed"
    # Initial RMS of each head's attention logits for a learned logit scale (QK-norm excepted):
    # None keeps the module's 1/sqrt(d_head); see match_logit_scale.
    logit_rms_init: Optional[float] = None


@dataclass
class GrokkingOptimizer:
    """The settings of :func:`stiefel_mini.experiments.arms.make_optimizer`, shared by every arm."""

    lr: float = 1e-2
    frame_lr: Optional[float] = None  # StiefelAdam lr on the frames (None: lr)
    betas: tuple[float, float] = (0.9, 0.98)
    weight_decay: float = 1.0
    max_step: Optional[float] = 0.1  # StiefelAdam's cap on a frame step's Frobenius norm
    # Linear warm-up: optimizer step s (from 0) uses lr * min(s / warmup_steps, 1), every group alike
    # (Nanda et al.'s LambdaLR(min(step / 10, 1))); 0: none.
    warmup_steps: int = 0


@dataclass
class GrokkingConfig:
    """One training run: an arm, a seed and a length, with its task, model and optimizer as parts.

    Defaults are the CPU setting of the book (see :data:`PLANS`). Every leaf field keeps one flat name
    across the parts (``--d_model 64``, ``config.replace(cfg, lr=3e-3)``, the stored ``base_config``).
    """

    arm: str = "adamw"
    seed: int = 0
    steps: int = 1800  # full-batch steps (= epochs)
    eval_every: int = 20
    late_frac: float = 0.25  # "late" evaluations: the last late_frac of training
    threads: int = 1
    progress: bool = True
    task: ModularTask = field(default_factory=ModularTask)
    model: GrokkingModel = field(default_factory=GrokkingModel)
    optimizer: GrokkingOptimizer = field(default_factory=GrokkingOptimizer)


PLANS: dict[str, GrokkingConfig] = {
    # Nanda et al. (2023): p = 113, 30% train, lr 1e-3, wd 1, betas (0.9, 0.98), 10 warm-up steps;
    # they report memorisation by ~1.4k epochs, circuit formation to ~9.4k, clean-up after.
    # Learned temperatures start at unit logit RMS, as in "long".
    "reference": GrokkingConfig(steps=20_000, eval_every=50, task=ModularTask(p=113),
                                model=GrokkingModel(logit_rms_init=1.0),
                                optimizer=GrokkingOptimizer(lr=1e-3, warmup_steps=10)),
    # The book's CPU setting: the same model and recipe on a smaller modulus (1,044 training
    # equations instead of 3,831) with a 10x larger lr; AdamW reaches 99% validation accuracy within
    # the 1,800 steps on every seed of results/grokking/cpu.json.
    "cpu": GrokkingConfig(),
    # The chapter's live run: small enough to memorise and grok within about a minute of CPU.
    "live": GrokkingConfig(steps=1200, task=ModularTask(p=31, train_frac=0.5)),
    # The long horizon: the cpu setting for 8,000 steps (>= 4x the slowest AdamW grok of
    # results/grokking/cpu.json), learned temperatures started at unit logit RMS (the size the
    # 1/sqrt(d_head) rule aims at for unit-variance q and k; AdamW's own logits pass it within its
    # first ~10 steps here, while all arms start at RMS ~0.02 from the shared initialisation).
    "long": GrokkingConfig(steps=8000, model=GrokkingModel(logit_rms_init=1.0)),
    # The paper's horizon: "long" for 20,000 steps (full batch, so steps are epochs).
    "endpoint": GrokkingConfig(steps=20_000, model=GrokkingModel(logit_rms_init=1.0)),
    # The studies' arms at the cpu length (1,800 steps): the grokking-time comparisons at a third of
    # the cost of "long" (collapses need "long").
    "short": GrokkingConfig(model=GrokkingModel(logit_rms_init=1.0)),
    # A few seconds: the tests' stand-in for "long" (same code path, tiny sizes).
    "tiny": GrokkingConfig(steps=40, eval_every=5, progress=False, task=ModularTask(p=11),
                           model=GrokkingModel(d_model=16, n_heads=2, d_mlp=32, logit_rms_init=1.0)),
}


@dataclass
class SweepConfig:
    """A paired sweep: every arm on every seed (and weight decay), seed-major, rewritten after each run."""

    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    arms: tuple[str, ...] = ARM_NAMES
    out: str = "results/grokking/cpu.json"
    preset: str = "cpu"
    history_points: int = 200  # evaluations kept per run in the file (metrics use all of them)
    repro_arm: str = "stiefel"
    repro_seed: int = 0
    repro_steps: int = 300  # length of the short run stored for the reproduction test
    # Arms whose stored runs are dropped and run again, e.g. after a change to their optimizer's
    # numerics (the repro record too, if its arm is among them).
    redo_arms: tuple[str, ...] = ()
    # Drop the stored runs that record ``git_dirty: true`` and run them again (from a clean tree).
    redo_dirty: bool = False
    # A weight-decay sweep: every (seed, arm) at each of these values of ``weight_decay`` (the decay
    # of every weight outside Q/K; the Q/K rules' own decay as in arms.make_optimizer). () = no sweep.
    weight_decays: tuple[float, ...] = ()
    # A results file of the same base config (weight decay aside), e.g. r2_long.json: its finished
    # runs of this sweep's arms and seeds, at a decay of this sweep's grid, are copied (marked
    # ``copied_from``) instead of being run again. None = run everything.
    reuse: str | None = None


SWEEPS: dict[str, SweepConfig] = {
    # Each resumable (re-run the same command to continue a stopped sweep).
    # Long horizon: 8,000 steps, the six arms of STUDY_ARMS; the first three are the priority.
    "r2_long": SweepConfig(seeds=(0, 1, 2, 3, 4), arms=STUDY_ARMS, out="results/grokking/r2_long.json",
                           preset="long", history_points=400, repro_arm="stiefel_learned", repro_steps=100),
    # The same arms at the cpu setting's 1,800 steps: time to grok, with paired seeds, cheaply.
    "r2_short": SweepConfig(seeds=(0, 1, 2, 3, 4), arms=STUDY_ARMS, out="results/grokking/r2_short.json",
                            preset="short", repro_arm="stiefel_learned", repro_steps=100),
    # Weight decay of the rest of the model, 0.1 .. 3 (30x), AdamW against Stiefel, long horizon;
    # decay 1.0 is r2_long's own, so those runs are copied from it.
    "r2_wd": SweepConfig(seeds=(0, 1, 2), arms=("adamw", "stiefel_learned"), out="results/grokking/r2_wd.json",
                         preset="long", history_points=400, repro_arm="stiefel_learned", repro_steps=100,
                         weight_decays=(0.1, 0.3, 1.0, 3.0), reuse="results/grokking/r2_long.json"),
    # The endpoint study: the paper's 20,000 epochs at p = 59, 8 paired seeds, every evaluation kept.
    "endpoint": SweepConfig(seeds=tuple(range(8)), arms=("adamw", "stiefel_learned"),
                            out="results/grokking/endpoint.json", preset="endpoint", history_points=2000,
                            repro_arm="stiefel_learned", repro_steps=100),
    # Its frozen_learned arm on seeds 0-2, in a file of its own (one file of 19 runs would pass 2 MB).
    "endpoint_frozen": SweepConfig(seeds=(0, 1, 2), arms=("frozen_learned",),
                                   out="results/grokking/endpoint_frozen.json", preset="endpoint",
                                   history_points=2000, repro_arm="stiefel_learned", repro_steps=100),
    # The peer curve: Nanda et al.'s p = 113 recipe (20,000 steps), every evaluation kept.
    "nanda": SweepConfig(seeds=(0, 1, 2), arms=("adamw", "stiefel_learned"), out="results/grokking/nanda.json",
                         preset="reference", history_points=2000, repro_arm="stiefel_learned", repro_steps=100),
    # Seconds: the tests' version of r2_long and r2_wd.
    "tiny": SweepConfig(seeds=(0, 1), arms=("adamw", "stiefel_learned", "frozen_learned"),
                        out="results/grokking/tiny.json", preset="tiny", repro_arm="stiefel_learned",
                        repro_steps=10),
}


STUDY_NAMES: dict[str, str] = {
    "cpu": "the first study",
    "r2_short": "the 1,800-step study",
    "r2_long": "the 8,000-step study",
    "r2_wd": "the weight-decay sweep",
    "endpoint": "the endpoint study",
    "endpoint_frozen": "the endpoint study's frozen arm",
    "nanda": "the peer curve",
}
"""Each results file of ``results/grokking/`` (without ``.json``) -> the study's name in the book's
text, where file and plan names appear only under Reproduce."""

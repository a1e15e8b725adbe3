"""The CIFAR-10 benchmark's run config, its sweep config and their plans, as data.

:class:`CifarConfig` is one run: its arm, seed and training fraction, and four small parts (the
model, the optimizer, the schedule, the data) and the machine. :class:`CifarSweep` is a paired
sweep: that run over a grid of ``arms`` x ``seeds`` x ``train_fractions`` x each arm's learning rates
(:func:`swept_lrs`). :data:`PLANS` names the sweeps: ``cpu`` / ``gpu`` (the benchmark at two scales),
``repro`` (the stored reproduction record, on the tiny synthetic set), ``live`` (the chapter's live
cell), and the studies (``r2_*``, ``r3_*``), each a resumable sweep into its own results file
(``out``). Every leaf field keeps one flat name (:mod:`stiefel_mini.experiments.config`): on the
command line, in :func:`~stiefel_mini.experiments.config.replace`, and in the stored
``provenance.config``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from stiefel_mini.experiments.arms import Arm, arm_spec
from stiefel_mini.experiments.config import replace
from stiefel_mini.experiments.records import config_dict, config_from_dict

__all__ = ["ALL_ARMS", "CifarModel", "CifarOptimizer", "CifarSchedule", "CifarData", "CifarMachine", "CifarConfig",
           "CifarSweep", "PLANS", "STUDIES", "REPRO_TINY_SET", "swept_lrs", "sweep_settings", "stored_config"]

ALL_ARMS = ("A0", "A0'", "A1", "A3", "A4", "A5", "A7")
"""The arms of the benchmark, by their codes (``arms.ARMS[...].code``); A0 is the paired baseline."""


@dataclass
class CifarModel:
    """The patch ViT (:class:`stiefel_mini.vit.PatchViT`); the arm sets its attention flags."""

    patch_size: int = 8
    d_model: int = 96
    depth: int = 3
    n_heads: int = 4
    d_head: int | None = None  # None: d_model // n_heads
    mlp_ratio: int = 4
    logit_scale: str = "fixed"


@dataclass
class CifarOptimizer:
    """The keywords of :func:`stiefel_mini.experiments.arms.make_optimizer` (the arm picks the rule)."""

    lr: float = 1e-3
    frame_lr: float | None = None  # None: Q/K use lr
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.05
    max_step: float | None = 0.1
    retraction: str = "polar"


@dataclass
class CifarSchedule:
    """How long to train, in batches of what size, with what warm-up, and when to evaluate and log."""

    epochs: int = 6
    steps: int = 0  # > 0: exactly this many optimizer steps whatever the subset size (epochs ignored)
    batch_size: int = 128
    warmup_epochs: float = 1.0  # linear warm-up, then cosine decay to zero
    warmup_share: float | None = None  # warm-up as a share of all steps instead (None: warmup_epochs)
    eval_every: int = 0  # epochs between test evaluations during training; 0: only at the end
    log_every: int = 20  # steps between recorded training-loss points


@dataclass
class CifarData:
    """Where the images come from and which of them are scored."""

    data_dir: str | None = None  # ImageFolder copy; None -> $STIEFEL_MINI_CIFAR_DIR, else torchvision
    test_size: int = 0  # 0 = the whole test split; else a fixed class-balanced subset
    train_eval_size: int = 2000  # un-augmented training images scored for train accuracy
    augment: bool = True


@dataclass
class CifarMachine:
    """Where and how fast to run; none of it changes what a CPU run computes."""

    device: str = "auto"  # "auto": cuda if available, else cpu
    bf16: bool = True  # bf16 autocast of the forward pass on cuda (weights and optimizer stay float32)
    threads: int = 1  # torch intra-op threads on the CPU (0: torch's default)
    progress: bool = True


@dataclass
class CifarConfig:
    """One training run: ``arm`` from the paired start ``seed`` on ``train_fraction`` of the images."""

    arm: str = "A1"
    seed: int = 0
    train_fraction: float = 0.1  # share of the 50k training images, class-balanced, chosen by the seed
    # Random streams: "streams" is the package rule (runtime.generator(seed, name)); "v0" draws the
    # weights from the global torch seed = seed, batches and augmentation from Generator(seed), the
    # training subset from Generator(10_000 + seed) and the fixed test / train-eval subsets from
    # Generator(12_345), so that the results files whose provenance says seeding="v0" rerun bit for bit.
    seeding: Literal["v0", "streams"] = "streams"
    model: CifarModel = field(default_factory=CifarModel)
    optimizer: CifarOptimizer = field(default_factory=CifarOptimizer)
    schedule: CifarSchedule = field(default_factory=CifarSchedule)
    data: CifarData = field(default_factory=CifarData)
    machine: CifarMachine = field(default_factory=CifarMachine)


@dataclass
class CifarSweep:
    """A paired sweep of ``run`` (seed-major): every arm, seed, training fraction and swept lr."""

    run: CifarConfig = field(default_factory=CifarConfig)  # its arm / seed / fraction are the grid's
    arms: tuple[str, ...] = ALL_ARMS
    seeds: tuple[int, ...] = (0, 1, 2)
    train_fractions: tuple[float, ...] = (0.1, 0.3)
    lrs: tuple[float, ...] = ()  # lr grid for arms without trained frames (A0, QK-norm, ...); (): lr only
    frame_lrs: tuple[float, ...] = ()  # frame-lr grid for StiefelAdam / polar arms (A1, A5, A7, ...); (): frame_lr
    out: str | None = None  # results JSON, rewritten after every run; an existing file is resumed
    repro_steps: int = 0  # > 0: the sweep first stores its first grid point, this many steps on the tiny set
    redo_dirty: bool = False  # drop stored runs that record git_dirty: true and run them again


def _plan(**leaves) -> CifarSweep:
    """A :class:`CifarSweep` from flat leaf names (the plans below read as one list of settings)."""
    return replace(CifarSweep(), **leaves)


_V0 = dict(seeding="v0")
_R2 = dict(augment=False, seeding="streams", eval_every=2, log_every=50, repro_steps=30)
PLANS: dict[str, CifarSweep] = {
    # Sized to run 7 arms x 3 seeds x 2 fractions (5k and 15k images, 6 epochs) on one shared CPU
    # core in about an hour: a small model trained briefly, far from the paper's scale.
    "cpu": _plan(**_V0),
    # The paper's scale: patch 4 (64 tokens), a wider and deeper model, 12 paired seeds.
    "gpu": _plan(
        patch_size=4, d_model=256, depth=6, n_heads=8, d_head=32, epochs=50, batch_size=256,
        seeds=tuple(range(12)), train_fractions=(0.2, 1.0), device="cuda", threads=0,
        eval_every=10, log_every=50, **_V0,
    ),
    # A few seconds on the tiny synthetic set that the tests write: the stored reproduction record.
    "repro": _plan(
        arm="A1", seed=0, train_fraction=1.0, arms=("A1",), seeds=(0,), train_fractions=(1.0,),
        d_model=32, depth=1, n_heads=2, epochs=3, batch_size=25, lr=3e-3, warmup_epochs=0.5,
        train_eval_size=0, log_every=4, progress=False, **_V0,
    ),
    # The chapter's live cell: A0 against A1 on 5k real images, well under two minutes on one core.
    "live": _plan(
        arms=("A0", "A1"), seeds=(0,), train_fractions=(0.1,), epochs=4, test_size=2000,
        train_eval_size=1000, **_V0,
    ),

    # The studies below use the package's random streams, no augmentation (so that a CPU-sized model
    # fits its training set: training accuracy above test accuracy) and evaluate every 2 epochs. Each is
    # one resumable sweep: re-run the same command to continue. CPU times per run are in
    # results/ROUND2_PLAN.md. Set --frame_lr to A1's best frame lr from r2_lr for r2_fitted / r2_ablation.
    # Learning-rate sensitivity (Wortsman et al. 2023): A0's lr (100x), A1's frame lr (10,000x; the
    # trust cap max_step = 0.1 binds from about 0.1 up, so 3 and 10 bracket a best found at the first
    # grid's top, 1.0) and QK-norm's lr, 15k images, 10 epochs.
    "r2_lr": _plan(
        out="results/cifar/r2_lr.json", arms=("A0", "A1", "qknorm"), seeds=(0, 1), train_fractions=(0.3,),
        epochs=10, lrs=(3e-4, 1e-3, 3e-3, 1e-2, 3e-2), frame_lrs=(1e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0, 3.0, 10.0),
        **_R2),
    # Fitted baselines on all 50k images, 10 epochs, 5 paired seeds (A0 and A1 were run on 3 more,
    # --arms A0 A1 --seeds 5 6 7: study_status counts them as beyond the plan).
    "r2_fitted": _plan(
        out="results/cifar/r2_fitted.json", arms=("A0", "A1", "A3", "qknorm"), seeds=(0, 1, 2, 3, 4),
        train_fractions=(1.0,), epochs=10, **_R2),
    # Data scaling at a fixed number of optimizer steps (2,000 = 5 epochs of 50k, 51 of 5k).
    "r2_scaling": _plan(
        out="results/cifar/r2_scaling.json", arms=("A0", "A1"), seeds=(0, 1, 2), train_fractions=(0.1, 0.3, 1.0),
        steps=2000, warmup_share=0.1, **_R2),
    # Ablations where frames move (frame lr 0.03): second moment frame / column / element, projector
    # euclidean / canonical / none, and AdamW + polar (A5).
    "r2_ablation": _plan(
        out="results/cifar/r2_ablation.json",
        arms=("A0", "A1", "stiefel_column", "A7", "stiefel_canonical", "stiefel_noproj", "A5"), seeds=(0, 1, 2),
        train_fractions=(0.3,), epochs=10, frame_lr=0.03, **_R2),
    # The mechanism where the frames move: r2_ablation's variants at A1's best frame lr (1.0, the
    # mean step ~3/4 of the trust cap), plus A1 without the cap, on the same paired starts.
    "r3_mechanism": _plan(
        out="results/cifar/r3_mechanism.json",
        arms=("A1", "stiefel_column", "A7", "stiefel_canonical", "stiefel_noproj", "stiefel_nocap"),
        seeds=(0, 1, 2), train_fractions=(0.3,), epochs=10, frame_lr=1.0, **_R2),
    # A5 (AdamW then polar projection, no cap) around its r2_ablation frame lr 0.03, same starts.
    "r3_polar": _plan(
        out="results/cifar/r3_polar.json", arms=("A5",), seeds=(0, 1, 2), train_fractions=(0.3,), epochs=10,
        frame_lrs=(0.01, 0.1, 0.3), **_R2),
    # Data scaling at a fixed number of epochs: r2_fitted's A0 and A1 on 5k and 15k images, the same
    # lrs and 10 epochs (so fewer steps), paired with r2_fitted's 50k-image runs of the same seeds.
    "r3_epochs": _plan(
        out="results/cifar/r3_epochs.json", arms=("A0", "A1"), seeds=(0, 1, 2), train_fractions=(0.1, 0.3),
        epochs=10, lr=3e-3, frame_lr=1.0, **_R2),
    # The GPU study: patch 4, a wider and deeper model, 12 paired seeds (results/cifar/gpu_round2.sh).
    "r2_gpu": _plan(
        out="results/cifar/r2_gpu.json", arms=("A0", "A1", "A3", "qknorm"), seeds=tuple(range(12)),
        train_fractions=(1.0,), patch_size=4, d_model=256, depth=6, n_heads=8, d_head=32, epochs=50,
        batch_size=256, device="cuda", threads=0, augment=True, seeding="streams", eval_every=10, log_every=50,
        repro_steps=30),
    # Seconds, on the tests' tiny image folder: every code path of the studies (lr grid, fixed steps).
    "r2_tiny": _plan(arms=("A0", "A1"), seeds=(0, 1), train_fractions=(0.5, 1.0), lrs=(1e-3, 3e-3),
                     frame_lrs=(1e-2, 0.3), steps=6, warmup_share=0.1, d_model=32, depth=1, n_heads=2,
                     batch_size=25, train_eval_size=50, log_every=2, progress=False, seeding="streams",
                     repro_steps=3),
}

REPRO_TINY_SET = {"n_train": 20, "n_test": 10, "seed": 0}
"""Arguments of ``cifar_data.write_tiny_image_folder`` for the repro record (200 + 100 images)."""

STUDIES = tuple(name for name, cfg in PLANS.items() if cfg.out)
"""The plans that sweep into a committed results file (``results/cifar/<name>.json``)."""


def stored_config(stored: dict) -> CifarSweep:
    """The :class:`CifarSweep` a results file records (``provenance.config``); a record without a
    ``seeding`` field was made with the ``"v0"`` streams."""
    return config_from_dict(CifarSweep, {"seeding": "v0", **stored})


def swept_lrs(sweep: CifarSweep, arm: str | Arm) -> list[tuple[float, float | None]]:
    """The ``(lr, frame_lr)`` pairs ``arm`` runs at: its grid (``frame_lrs`` for arms whose frames
    StiefelAdam or the polar AdamW step trains, ``lrs`` otherwise), else the run's own values.
    ``frame_lr`` is ``None`` for arms without trained frames (it would be unused)."""
    spec = arm_spec(arm)
    opt = sweep.run.optimizer
    if spec.qk in ("stiefel", "adamw_polar"):
        return [(opt.lr, float(f)) for f in sweep.frame_lrs] or [(opt.lr, opt.frame_lr)]
    return [(float(lr), None) for lr in sweep.lrs] or [(opt.lr, None)]


def sweep_settings(cfg: CifarSweep) -> dict:
    """The fields that must agree for stored runs to be reused (everything but the grid and the output)."""
    skip = {"arm", "seed", "train_fraction", "arms", "seeds", "train_fractions", "lrs", "frame_lrs", "out",
            "progress", "device", "threads", "repro_steps", "redo_dirty"}
    settings = {k: v for k, v in config_dict(cfg).items() if k not in skip}
    # Fields at their defaults that older files do not hold are left out, so those files still resume.
    for key, default in (("steps", 0), ("warmup_share", None)):
        if settings.get(key) == default:
            del settings[key]
    return settings

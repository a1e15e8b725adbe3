"""The language-model studies, declared as :class:`~stiefel_mini.experiments.lm.plans.Study` data.

:data:`ROUND1`, :data:`ROUND2` and :data:`ROUND3` are the first three studies, finished, as their
own plan types declared them (until commit af0ff4e: ``lm.config.STUDY``, ``lm.round2.ROUND2``,
``lm.round3.ROUND3``); their arms are built by the recipes of their own code (``r1_``, ``r2_``,
``r3_`` in :data:`~stiefel_mini.experiments.lm.plans.RECIPES`), and ``scripts/lm_plan_check.py``
checks that the plans and the arms give what that code gave. :data:`ROUND4` is the fourth study: every arm tuned for itself on the sweep seeds at 800 steps,
one axis at a time around the last best, each best inside its grid; then each decisive arm's main
lr re-checked at 0.5x / 1x / 2x at 2,400 steps on sweep seed 100; then 2,400 steps on eight paired
seeds no earlier study used (16-23) for ``stiefel``, ``stiefel_muon``, ``all_stiefel``, the
better arm of each baseline family, and ``muon`` (``all_stiefel``'s published pair). Its comparisons are declared in
:data:`stiefel_mini.evidence.claims.LM4_CLAIMS`. This module imports no torch and no runner.
"""

from __future__ import annotations

from stiefel_mini.experiments.lm.plans import Study, Tuning

__all__ = ["ROUND1", "ROUND2", "ROUND3", "ROUND4", "STUDIES", "study"]

_FRAME_LR1 = ("frame_lr", (0.01, 0.03, 0.1, 0.3))

ROUND1 = Study(
    name="round1",
    out="results/lm/study.json",
    arms=(("adamw", "r1_adamw"), ("frozen", "r1_frozen"), ("stiefel", "r1_stiefel"), ("muon", "r1_muon"),
          ("muon_stiefel", "r1_muon_stiefel")),
    tunings=(
        Tuning("adamw", stages=((("lr", (1e-3, 2e-3, 4e-3, 8e-3)),),)),
        Tuning("frozen", stages=((("lr", (1e-3, 2e-3, 4e-3, 8e-3)),),)),
        Tuning("stiefel", stages=((_FRAME_LR1,),), takes=(("lr", "adamw"),)),
        Tuning("muon", stages=((("muon_lr", (0.005, 0.01, 0.02, 0.04)),),), takes=(("lr", "adamw"),)),
        Tuning("muon_stiefel", stages=((_FRAME_LR1,),), takes=(("lr", "adamw"), ("muon_lr", "muon"))),
    ),
    sweep_seeds=(100,),
    fields=("lr", "frame_lr", "muon_lr"),
    steps=800,
    paired_seeds=tuple(range(8)),
    records_steps=False,
    paired_phase="seeds",
    layout="round1",
)
"""The first study, ``results/lm/study.json``: AdamW's lr first (``frozen`` sweeps its own),
StiefelAdam's frame lr and Muon's lr with the rest at AdamW's best, then ``muon_stiefel``'s frame lr
with Muon at its best; seed 100 for the sweeps, seeds 0-7 (phase ``"seeds"``) for the comparison.
Its runs record no ``steps``: each ran the base config's 800."""

_R2_FIELDS = ("lr", "warmup_frac", "frame_lr", "max_step", "muon_lr", "per_head")
_R2_TAKES = (("lr", "adamw"), ("warmup_frac", "adamw"))

ROUND2 = Study(
    name="round2",
    out="results/lm/round2.json",
    arms=(("adamw", "r2_adamw"), ("adamw_qknorm", "r2_adamw_qknorm"), ("stiefel", "r2_stiefel"),
          ("muon", "r2_muon"), ("muon_qknorm", "r2_muon_qknorm"), ("stiefel_muon", "r2_stiefel_muon")),
    tunings=(
        Tuning("adamw", stages=((("lr", (1e-3, 2e-3, 4e-3)), ("warmup_frac", (0.05, 0.25))),)),
        Tuning("adamw_qknorm", stages=((("lr", (2e-3, 4e-3, 8e-3, 1.6e-2)),),), takes=(("warmup_frac", "adamw"),)),
        Tuning("stiefel", stages=((("frame_lr", (0.03, 0.1, 0.3)), ("max_step", (0.3, 1.0))),), takes=_R2_TAKES),
        Tuning("muon", stages=((("muon_lr", (0.005, 0.01, 0.02)), ("per_head", (False, True))),), takes=_R2_TAKES),
        Tuning("muon_qknorm", stages=((("muon_lr", (0.005, 0.01, 0.02, 0.04)),),),
               takes=(*_R2_TAKES, ("per_head", "muon"))),
        Tuning("stiefel_muon", stages=((("frame_lr", (0.005, 0.01, 0.02, 0.04)),),),
               takes=(*_R2_TAKES, ("muon_lr", "muon"), ("per_head", "muon"))),
    ),
    sweep_seeds=(100, 101),
    fields=_R2_FIELDS,
    steps=800,
    families=(("adamw", ("adamw", "adamw_qknorm")), ("muon", ("muon", "muon_qknorm"))),
    paired_seeds=tuple(range(16)),
    paired_first=("stiefel", "family:adamw", "stiefel_muon", "family:muon"),
    long_arms=("stiefel", "family:adamw"),
    long_steps=2400,
    long_seeds=tuple(range(8)),
    check_seed=100,
    check_factors=(0.5, 1.0, 2.0),
    main_lr=(("adamw", "lr"), ("adamw_qknorm", "lr"), ("stiefel", "frame_lr")),
    order="long_by_arm",
    layout="round2",
)
"""The second study, ``results/lm/round2.json``: six arms in two families, each arm's grid on two
sweep seeds (StiefelAdam's frame lr with the trust cap at or above it, 0.3 and 1.0: the first
study's cap of 0.1 bound at its best frame lr; StiefelMuon's frame lr a spectral length, hence its
smaller values), every arm at its best on 16 paired seeds (the primaries' arms first on each), then
2,400 steps on seeds 0-7 for ``stiefel`` and the better AdamW-family arm, each main lr re-checked at
three points on seed 100. Its questions: :data:`stiefel_mini.evidence.claims.LM2_CLAIMS`."""

ROUND3 = Study(
    name="round3",
    out="results/lm/round3.json",
    arms=(("stiefel_scale", "r3_stiefel"), ("stiefel_muon_scale", "r3_stiefel_muon")),
    tunings=(
        Tuning("stiefel_scale", stages=((("scale_lr", (0.03, 0.1, 0.3, 1.0)),),),
               start=(("lr", 2e-3), ("warmup_frac", 0.25), ("frame_lr", 0.3), ("max_step", 0.3))),
        Tuning("stiefel_muon_scale", stages=((("scale_lr", (0.03, 0.1, 0.3, 1.0)),),),
               start=(("lr", 2e-3), ("warmup_frac", 0.25), ("muon_lr", 0.01), ("per_head", True), ("frame_lr", 0.02))),
    ),
    sweep_seeds=ROUND2.sweep_seeds,
    fields=(*_R2_FIELDS, "scale_lr"),
    steps=ROUND2.steps,
    paired_seeds=ROUND2.paired_seeds,
    order="arm_by_arm",
    layout="round3",
)
"""The third study, ``results/lm/round3.json``: the second study's Stiefel arms with their learned
logit scale at an lr of its own, ``scale_lr`` from 15 to 500 times the second study's 2e-3 (at 0.03
the scale can already grow about 10^11-fold in a run), every other setting at the second study's
best (``plan(ROUND2, runs).best`` of its committed runs, which a test checks), on its sweep seeds;
then each arm at its best on the second study's 16 paired seeds, so that its runs pair with that
study's baselines. Its question: ``lm3_scale`` in :data:`stiefel_mini.evidence.claims.LM2_CLAIMS`."""

_LR = ("lr", (1e-3, 2e-3, 4e-3))
_WARMUP = ("warmup_frac", (0.05, 0.25, 0.5))
_SHORT_WARMUP = ("warmup_frac", (0.0, 0.05, 0.25))
_SCALE = ("scale_lr", (0.03, 0.1, 0.3))
_GAIN = ("scale_lr", (0.002, 0.01, 0.05))

ROUND4 = Study(
    name="round4",
    out="results/lm/round4.json",
    arms=(("adamw", "adamw"), ("adamw_qknorm", "adamw_qknorm"), ("muon", "muon"), ("muon_qknorm", "muon_qknorm"),
          ("stiefel", "stiefel"), ("stiefel_muon", "stiefel_muon"), ("all_stiefel", "all_stiefel")),
    tunings=(
        Tuning("adamw", stages=((_WARMUP,), (_LR,))),
        Tuning("adamw_qknorm", stages=((_GAIN,), (_LR,)), takes=(("warmup_frac", "adamw"),)),
        Tuning("muon", stages=((("muon_lr", (0.005, 0.01, 0.02)),), (_SHORT_WARMUP,)),
               start=(("warmup_frac", 0.25),), takes=(("lr", "adamw"),)),
        Tuning("muon_qknorm", stages=((("muon_lr", (0.02, 0.04, 0.08)),), (_SHORT_WARMUP,), (_GAIN,)),
               start=(("warmup_frac", 0.25), ("scale_lr", 0.002)), takes=(("lr", "adamw"),)),
        Tuning("stiefel", stages=((_SCALE,), (_LR,), (_WARMUP,), (("frame_lr", (0.1, 0.3, 1.0)),)),
               start=(("warmup_frac", 0.25), ("frame_lr", 0.3), ("max_step", 1.0))),
        Tuning("stiefel_muon", stages=((_SCALE,), (("muon_lr", (0.005, 0.01, 0.02)),),
                                       (("frame_lr", (0.01, 0.02, 0.04)),), (_SHORT_WARMUP,)),
               start=(("warmup_frac", 0.25), ("muon_lr", 0.01), ("frame_lr", 0.02)), takes=(("lr", "adamw"),)),
        Tuning("all_stiefel", stages=((("frame_lr", (0.01, 0.02, 0.04)),), (_SHORT_WARMUP,)),
               start=(("warmup_frac", 0.25), ("max_iter", 1)), takes=(("lr", "adamw"),)),
    ),
    sweep_seeds=(100, 101),
    fields=("lr", "warmup_frac", "frame_lr", "max_step", "muon_lr", "scale_lr", "max_iter"),
    steps=800,
    families=(("adamw", ("adamw", "adamw_qknorm")), ("muon", ("muon", "muon_qknorm"))),
    long_arms=("stiefel", "family:adamw", "stiefel_muon", "family:muon", "all_stiefel", "muon"),
    long_steps=2400,
    long_seeds=tuple(range(16, 24)),
    check_seed=100,
    check_factors=(0.5, 1.0, 2.0),
    main_lr=(("adamw", "lr"), ("adamw_qknorm", "lr"), ("muon", "muon_lr"), ("muon_qknorm", "muon_lr"),
             ("stiefel", "lr"), ("stiefel_muon", "muon_lr"), ("all_stiefel", "frame_lr")),
)
"""The fourth study, ``results/lm/round4.json``. Each tuning starts where the earlier studies found
the arm's best (the second study's warm-up 0.25 and Muon lr, StiefelAdam's frame lr 0.3 with the
trust cap out of the way, StiefelMuon's frame lr 0.02) and sweeps the settings it was never tuned
for: AdamW's warm-up up to 0.5, the Muon arms' short warm-ups (0 and 0.05), the QK-norm gains' and
the frames' logit scale's own lr, StiefelAdam's own lr and warm-up. ``all_stiefel`` (arXiv
2606.13276's All-Stiefel) sweeps its spectral step and warm-up, its AdamW lr taken from ``adamw``,
its frame solve capped at one multiplier update per step, warm-started from the last step's
(``benchmarks/manifold_muon_cap.py``, ``results/benchmarks/manifold_muon_cap.json``: the capped
step reaches 98.4-99.8% of the converged step's objective, but it is not quite tangent, so after the
retraction a frame moves about 1.14 ``frame_lr``, not ``frame_lr``, turned 8-13 degrees from the
converged move; the swept grid absorbs the length). Uncapped, the whole step took 2.9x the capped
one (one thread, 16 frames with 256 columns, 10-20 updates each)."""

STUDIES = {s.name: s for s in (ROUND1, ROUND2, ROUND3, ROUND4)}
"""Every study declared as a plan, by name."""


def study(name: str) -> Study:
    """The declared study ``name``, or ``ValueError`` naming those there are."""
    if name not in STUDIES:
        raise ValueError(f"no language-model study {name!r}; declared: {sorted(STUDIES)}")
    return STUDIES[name]

"""The paper's claims, each with one primary comparison declared here, and the verdict it gets.

A claim (:class:`Claim`) names the paper's number, the chapter that tests it, and its **primary**
comparison (:class:`Comparison`: results file, arms, selection of runs, metric, direction, test):
the regime that can decide it, i.e. fitted baselines, each arm at its best lr, the most seeds.
Where a claim is a bundle (the mechanism: one comparison per ingredient), its primary is a family
of comparisons, Holm-corrected among themselves with Tarone's rule
(:func:`stiefel_mini.evidence.compare.correct`); a single primary is a family of one. Every other
regime is a **secondary** comparison: computed by the same function, shown, never voting.

Each claim names the commit that declared its primary (``declared``). Most were declared after
their data had been seen; the runs that can confirm one started after that commit and use no seed a
choice was made on (``Comparison.chosen_on``): :mod:`stiefel_mini.evidence.ledger` finds them.

How a declaration becomes a verdict: :mod:`stiefel_mini.evidence.judge`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal


__all__ = ["Comparison", "Claim", "CLAIMS", "LM_CLAIMS", "LM2_CLAIMS", "FAMILY_ARMS", "PAIRED_SETTINGS", "claim"]

# Settings that must agree for runs of several files to be paired (each run records its own lr).
PAIRED_SETTINGS = ("patch_size", "d_model", "depth", "n_heads", "epochs", "steps", "batch_size", "weight_decay",
         "max_step", "augment", "seeding")


@dataclass(frozen=True)
class Comparison:
    """One declared paired comparison ``b - a`` (or, with ``of_gap``, a change of the gap ``b - a``).

    ``files``: results files (relative to ``results/``) whose runs are pooled (their settings must
    agree on :data:`PAIRED_SETTINGS`); ``select``: fields every run must match (e.g. a train fraction);
    ``select_a`` / ``select_b``: fields for one arm only (e.g. a frame lr); ``at_best``: arms taken
    at their own best lr of the pooled runs (:func:`stiefel_mini.evidence.runs.at_best_lr`);
    ``metric``: a run field, or ``"metrics.<key>"`` for grokking runs; ``scale`` multiplies it (100:
    fractions to points); ``of_gap``: ``(select_low, select_high)``: the per-seed gap ``b - a`` at
    ``select_high`` minus the gap at ``select_low``; ``ratio``: the comparison is the ratio
    ``metric(a) / metric(b)`` (:func:`stiefel_mini.evidence.compare.ratio`), not a difference;
    ``seeds``: the only seeds used, before any best lr is chosen (all when empty), for a study run on
    fewer seeds than the files it is pooled with, so that every lr is judged on the same seeds;
    ``chosen_on``: the seeds on which a choice this comparison relies on was made (an lr picked on
    them): no run of these seeds can confirm it (:mod:`stiefel_mini.evidence.ledger`); ``reach``: the
    value of a run is the number of tokens its validation curve (``history``: ``tokens``,
    ``val_bpb``) needs to reach the final value of its seed's ``a`` run's curve (the speedrun
    measure: ``a``'s own value is its whole budget; a curve that never reaches it is censored);
    ``baseline_files``: files among ``files`` whose runs were made before this comparison was declared,
    as its fixed baseline (round 3 pairs its new arms with round 2's runs): they count toward its
    confirmation whatever their start, since no declaration can have chosen them, while every other run
    must start after it (:func:`stiefel_mini.evidence.measure.confirming`); ``plan``: the declared
    language-model study (:data:`stiefel_mini.experiments.lm.studies.STUDIES`) whose plan picks a
    family's better arm (empty: the second study's, ``round2``).
    """

    label: str
    regime: str
    files: tuple[str, ...]
    a: str
    b: str
    metric: str = "test_acc"
    scale: float = 100.0
    unit: str = "pp"
    higher_is_better: bool = True
    censored: bool = False
    test: str = "sign"
    select: tuple[tuple[str, Any], ...] = ()
    select_a: tuple[tuple[str, Any], ...] = ()
    select_b: tuple[tuple[str, Any], ...] = ()
    at_best: tuple[str, ...] = ()
    of_gap: tuple[tuple[tuple[str, Any], ...], tuple[tuple[str, Any], ...]] | None = None
    ratio: bool = False
    seeds: tuple[int, ...] = ()
    chosen_on: tuple[int, ...] = ()
    reach: bool = False
    baseline_files: tuple[str, ...] = ()
    plan: str = ""


@dataclass(frozen=True)
class Claim:
    """A claim of the paper, its primary comparison(s), its secondary evidence and how it is judged.

    ``kind``: ``"size"`` (an effect of the paper's size ``paper_value``), ``"at_most"`` (an effect no
    larger than ``paper_value``), ``"ratio"`` (a ratio inside ``paper_range``), ``"ingredients"``
    (a family: ``expect_zero`` comparisons the claim says do not matter, the others that it says
    do), ``"design"`` (true of the algorithm's definition; ``design`` says how it is checked).
    ``primaries``: alternatives in order of preference, each a family; the first whose first file
    exists is used. ``what``: how the primary's number reads in a verdict. ``declared``: the commit
    that declared the first primary (its time, from ``results/ledger.json``, splits the runs into
    those that can confirm it and those that cannot). ``scale_note``: the paper's regime this book
    did not reach.
    """

    key: str
    claim: str
    paper: str
    chapter: str
    kind: Literal["size", "at_most", "ratio", "ingredients", "design"]
    what: str = ""
    paper_value: float | None = None
    paper_range: tuple[float, float] | None = None
    primaries: tuple[tuple[Comparison, ...], ...] = ()
    secondary: tuple[Comparison, ...] = ()
    expect_zero: tuple[str, ...] = ()
    declared: str = ""
    scale_note: str = ""
    design: str = ""
    anchor: str = "verdict"
    short: str = ""


def _sel(**kw: Any) -> tuple[tuple[str, Any], ...]:
    return tuple(kw.items())


FIT = ("cifar/r2_fitted.json",)
LR_SEEDS = (0, 1)
"""The seeds of the lr sweep, on which the CIFAR studies' lr 3e-3 and A1's frame lr 1.0 were chosen."""
FIT_REGIME = "fitted, 50,000 images, 10 epochs, lr 3e-3, A1's frame lr 1.0"
BRACKET = ("cifar/r2_fitted.json", "cifar/r3_bracket.json", "cifar/r3_bracket_a1.json")
BRACKET_REGIME = "lr re-bracket at 50,000 images, 10 epochs, seeds 0-1, A1's frame lr 1.0"
LR_REGIME = "lr sweep, 15,000 images, 10 epochs, each arm at its best lr"
SCL_REGIME = "fixed 2,000 steps"
EPOCHS = ("cifar/r3_epochs.json", "cifar/r2_fitted.json")
EPOCHS_REGIME = "fixed 10 epochs (steps grow with the images), lr 3e-3, A1's frame lr 1.0"
ABL_REGIME = "ablation at frame lr 0.03, 15,000 images, 10 epochs"
MECH_REGIME = "mechanism at frame lr 1.0, 15,000 images, 10 epochs"
R1 = "first study, shared lr 1e-3, 6 epochs"
GROK_LONG = ("grokking/r2_long.json",)
GROK_REGIME = "p = 59, 8,000 steps, learned temperature"
GROK_END = ("grokking/endpoint.json",)
# frozen_learned of the endpoint study, in its own file so that neither file passes 2 MB.
GROK_END_FROZEN = GROK_END + ("grokking/endpoint_frozen.json",)
GROK_END_REGIME = "p = 59, 20,000 steps (the paper's epochs), learned temperature"


def _r1(label: str, a: str, b: str, frac: float, **kw: Any) -> Comparison:
    n = f"{round(50_000 * frac):,}"
    return Comparison(f"{label}, {n} images", R1, ("cifar/cpu.json",), a, b, select=_sel(train_fraction=frac), **kw)


def _mechanism(files: tuple[str, ...], regime: str, a5_files: tuple[str, ...]) -> tuple[Comparison, ...]:
    variants = (("A7", "A1 − A7 (element-wise moment, not equivariant)"),
                ("stiefel_column", "A1 − column moment"),
                ("stiefel_canonical", "A1 − canonical projector"),
                ("stiefel_noproj", "A1 − no projection"),
                ("stiefel_nocap", "A1 − no trust cap"))
    out = tuple(Comparison(label, regime, files, b, "A1", chosen_on=LR_SEEDS) for b, label in variants)
    # A5's frame lr is picked on the very seeds it is compared on (the polar study has no others).
    return out + (Comparison("A1 − A5 (AdamW's step + polar projection, A5 at its best frame lr)", regime,
                             files + a5_files, "A5", "A1", at_best=("A5",), select_b=_sel(frame_lr=1.0)
                             if "r3" in files[0] else (), chosen_on=(0, 1, 2) if a5_files else LR_SEEDS),)


CLAIMS: tuple[Claim, ...] = (
    Claim("optimizer", "One scalar second moment per frame, a trust cap, the polar retraction",
          "the method", "riemannian_adam", "design", anchor="",
          design="implemented as described, and tested step by step against a from-scratch version"),
    Claim("cifar_gain", "CIFAR-10: StiefelAdam (A1) beats AdamW (A0)", "+8.98 pp, 12 paired starts",
          "cifar", "size", what="A1 − A0", paper_value=8.98,
          primaries=((Comparison("A1 − A0", FIT_REGIME, FIT, "A0", "A1", chosen_on=LR_SEEDS),),),
          secondary=(Comparison("A1 − A0", LR_REGIME, ("cifar/r2_lr.json",), "A0", "A1", at_best=("A0", "A1")),
                     Comparison("QK-norm − A0", LR_REGIME, ("cifar/r2_lr.json",), "A0", "qknorm",
                                at_best=("A0", "qknorm")),
                     Comparison("QK-norm − A0", FIT_REGIME, FIT, "A0", "qknorm"),
                     Comparison("A1 − A0 at its best of lr 1e-3 / 3e-3 / 1e-2", BRACKET_REGIME, BRACKET, "A0", "A1",
                                at_best=("A0",), select_b=_sel(lr=3e-3), seeds=(0, 1)),
                     Comparison("A1 − A0, both at lr 1e-3", BRACKET_REGIME, BRACKET, "A0", "A1", select=_sel(lr=1e-3),
                                seeds=(0, 1)),
                     *(Comparison(f"A1 − A0, {round(50_000 * f):,} images", SCL_REGIME, ("cifar/r2_scaling.json",),
                                  "A0", "A1", select=_sel(train_fraction=f)) for f in (0.1, 0.3, 1.0)),
                     *(Comparison(f"A1 − A0, {round(50_000 * f):,} images", EPOCHS_REGIME, EPOCHS, "A0", "A1",
                                  select=_sel(train_fraction=f)) for f in (0.1, 0.3)),
                     Comparison("A1 − A0", ABL_REGIME, ("cifar/r2_ablation.json",), "A0", "A1"),
                     _r1("A1 − A0", "A0", "A1", 0.1), _r1("A1 − A0", "A0", "A1", 0.3),
                     Comparison("A1 − A0, 5,000 images", "first study, 30 epochs", ("cifar/cpu_long.json",), "A0", "A1")),
          declared="ceb61dd",
          scale_note="patch 8 (16 tokens) and a small model; the paper's patch 4 and model not run",
          short="CIFAR-10 gain, A1 − A0"),
    Claim("cifar_widens", "The gap to AdamW widens with more data", "widens", "cifar", "size",
          what="gap at 50,000 − at 5,000 images", paper_value=None,
          primaries=((Comparison("(A1 − A0) at 50,000 − at 5,000 images", SCL_REGIME + ", 5,000 vs 50,000 images",
                                 ("cifar/r2_scaling.json",), "A0", "A1",
                                 of_gap=(_sel(train_fraction=0.1), _sel(train_fraction=1.0)), chosen_on=LR_SEEDS),),),
          secondary=tuple(Comparison(f"(A1 − A0) at 50,000 − at {round(50_000 * f):,} images", EPOCHS_REGIME, EPOCHS,
                                     "A0", "A1", of_gap=(_sel(train_fraction=f), _sel(train_fraction=1.0)))
                          for f in (0.1, 0.3)),
          declared="ceb61dd",
          scale_note="the primary holds the number of steps fixed; at a fixed number of epochs (secondary) the "
                     "5,000- and 15,000-image runs were made on another CPU than the 50,000-image ones",
          short="gain at 50,000 − at 5,000 images"),
    Claim("grokking_endpoint", "Grokking: Stiefel attention ends higher than AdamW",
          "97.0% vs 61.1% at epoch 20,000 (one run)", "grokking", "size",
          what="", paper_value=97.0 - 61.1,
          # The endpoint study is the paper's horizon; where a copy of the results lacks its file, the
          # 8,000-step study stands in.
          primaries=((Comparison("stiefel_learned − adamw, final validation accuracy", GROK_END_REGIME, GROK_END,
                                 "adamw", "stiefel_learned", metric="metrics.final_val_acc"),),
                     (Comparison("stiefel_learned − adamw, final validation accuracy", GROK_REGIME, GROK_LONG,
                                 "adamw", "stiefel_learned", metric="metrics.final_val_acc"),)),
          secondary=(Comparison("stiefel_learned − adamw, steps to 95% validation", GROK_END_REGIME, GROK_END,
                                "adamw", "stiefel_learned", metric="metrics.steps_to_val95", scale=1.0,
                                unit="steps", higher_is_better=False, censored=True),
                     Comparison("stiefel_learned − adamw, falls of ≥ 10 points", GROK_END_REGIME, GROK_END, "adamw",
                                "stiefel_learned", metric="metrics.collapses10", scale=1.0, unit="falls",
                                higher_is_better=False),
                     Comparison("stiefel_learned − adamw, steps at ≥ 95%", GROK_END_REGIME, GROK_END, "adamw",
                                "stiefel_learned", metric="metrics.steps_above95", scale=1.0, unit="steps"),
                     Comparison("stiefel_learned − frozen_learned, final validation accuracy", GROK_END_REGIME,
                                GROK_END_FROZEN, "frozen_learned", "stiefel_learned", metric="metrics.final_val_acc"),
                     Comparison("stiefel_learned − adamw, final validation accuracy", GROK_REGIME, GROK_LONG,
                                "adamw", "stiefel_learned", metric="metrics.final_val_acc"),
                     Comparison("stiefel_learned − adamw, falls of ≥ 10 points", GROK_REGIME, GROK_LONG, "adamw",
                                "stiefel_learned", metric="metrics.collapses10", scale=1.0, unit="falls",
                                higher_is_better=False),
                     Comparison("stiefel_learned − frozen_learned, final validation accuracy", GROK_REGIME,
                                GROK_LONG, "frozen_learned", "stiefel_learned", metric="metrics.final_val_acc"),
                     Comparison("stiefel_learned − adamw, final validation accuracy", "p = 59, 1,800 steps",
                                ("grokking/r2_short.json",), "adamw", "stiefel_learned",
                                metric="metrics.final_val_acc"),
),
          declared="4804197",
          scale_note="p = 59, not the paper's modulus",
          short="grokking, final accuracy"),
    Claim("grokking_sooner", "Grokking: Stiefel attention groks sooner", "sooner", "grokking", "size",
          what="to 95%:",
          primaries=((Comparison("stiefel_learned − adamw, steps to 95% validation", GROK_REGIME, GROK_LONG, "adamw",
                                 "stiefel_learned", metric="metrics.steps_to_val95", scale=1.0, unit="steps",
                                 higher_is_better=False, censored=True),),),
          secondary=(Comparison("stiefel_learned − frozen_learned, steps to 95%", GROK_REGIME, GROK_LONG,
                                "frozen_learned", "stiefel_learned", metric="metrics.steps_to_val95", scale=1.0,
                                unit="steps", higher_is_better=False, censored=True),
                     Comparison("stiefel_learned − adamw, steps to 95%", "p = 59, 1,800 steps",
                                ("grokking/r2_short.json",), "adamw", "stiefel_learned",
                                metric="metrics.steps_to_val95", scale=1.0, unit="steps", higher_is_better=False,
                                censored=True),
                     Comparison("stiefel − adamw, steps to 95%", "first study, fixed logit scale (flat attention), "
                                "1,800 steps", ("grokking/cpu.json",), "adamw", "stiefel",
                                metric="metrics.steps_to_val95", scale=1.0, unit="steps", higher_is_better=False,
                                censored=True),
                     Comparison("frozen − adamw, steps to 95%", "first study, fixed logit scale (flat attention), "
                                "1,800 steps", ("grokking/cpu.json",), "adamw", "frozen",
                                metric="metrics.steps_to_val95", scale=1.0, unit="steps", higher_is_better=False,
                                censored=True)),
          declared="10c5156",
          scale_note="p = 59 and 8,000 steps",
          short="grokking, steps to 95%"),
    Claim("weight_decay", "Weight decay does nothing to the frames", "no effect", "weight_decay", "design",
          anchor="", design="true by construction: the frame rule has no decay term",
          secondary=(_r1("A0' (no decay on Q/K) − A0", "A0", "A0'", 0.1), _r1("A0' (no decay on Q/K) − A0", "A0",
                                                                                "A0'", 0.3))),
    Claim("step_ratio", "StiefelAdam's Q/K steps are smaller than AdamW's", "24-40x smaller", "cifar", "ratio",
          what="A0's step / A1's", paper_range=(24.0, 40.0),
          # The ratio is set by the two lrs (a frame step is about its lr): one primary at a shared lr,
          # one at each arm's best lr, judged together (declared after both had been measured).
          primaries=((Comparison("A0's Q/K step / A1's, both at lr 1e-3", "lr sweep, 15,000 images, 10 epochs, "
                                 "shared lr 1e-3 (A1's frame lr 1e-3)", ("cifar/r2_lr.json",), "A0", "A1",
                                 metric="qk_step_mean", ratio=True, select_a=_sel(lr=1e-3),
                                 select_b=_sel(frame_lr=0.001)),
                      Comparison("A0's Q/K step / A1's, each at its best lr", FIT_REGIME, FIT, "A0", "A1",
                                 metric="qk_step_mean", ratio=True, chosen_on=LR_SEEDS)),),
          secondary=(Comparison("A0's Q/K step / A1's", LR_REGIME, ("cifar/r2_lr.json",), "A0", "A1",
                                metric="qk_step_mean", ratio=True, at_best=("A0", "A1")),
                     *(Comparison(f"A0 at lr 1e-3 / A1 at frame lr {v:g}", "lr sweep, 15,000 images, 10 epochs",
                                  ("cifar/r2_lr.json",), "A0", "A1", metric="qk_step_mean", ratio=True,
                                  select_a=_sel(lr=1e-3), select_b=_sel(frame_lr=v))
                       for v in (0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0)),
                     _r1("A0's Q/K step / A1's", "A0", "A1", 0.3, metric="qk_step_mean", ratio=True)),
          declared="7123eb2",
          scale_note="a frame's step is about its lr, AdamW's about lr per entry: the ratio is set by the two "
                     "learning rates",
          short="Q/K step ratio"),
    Claim("freezing", "Freezing the frames at their start (A3) costs little", "0.28 pp", "cifar", "at_most",
          what="freezing costs", paper_value=0.28,
          primaries=((Comparison("A1 − A3 (cost of freezing)", FIT_REGIME, FIT, "A3", "A1", chosen_on=LR_SEEDS),),),
          secondary=(Comparison("A3 − A0", FIT_REGIME, FIT, "A0", "A3"),
                     _r1("A1 − A3", "A3", "A1", 0.1), _r1("A1 − A3", "A3", "A1", 0.3),
                     Comparison("A1 − A3, 5,000 images", "first study, 30 epochs", ("cifar/cpu_long.json",), "A3", "A1")),
          declared="ceb61dd",
          short="cost of freezing, A1 − A3"),
    Claim("mechanism", "The gain comes from the scale-free step, not the projector or equivariance",
          "the scale-free step", "cifar", "ingredients", what="",
          primaries=(_mechanism(("cifar/r3_mechanism.json",), MECH_REGIME, ("cifar/r3_polar.json",)),
                     _mechanism(("cifar/r2_ablation.json",), ABL_REGIME, ())),
          secondary=(*_mechanism(("cifar/r2_ablation.json",), ABL_REGIME, ()),
                     _r1("A1 − A7", "A7", "A1", 0.3), _r1("A1 − A4 (AdamW with A1's small step)", "A4", "A1", 0.3),
                     _r1("A1 − A5", "A5", "A1", 0.3)),
          expect_zero=("A7", "stiefel_column", "stiefel_canonical", "stiefel_noproj", "stiefel_nocap"),
          declared="ceb61dd",
          short="mechanism"),
)
"""The claims, in the order of the paper's abstract."""


LM = ("lm/study.json",)
LM_REGIME = "GPT-2, 4 layers, width 256, 1.6M tokens of State of the Union addresses, each arm at its best lr"
LM_SWEEP_SEEDS = (100,)
"""The seed of the language-model study's lr sweeps (:data:`stiefel_mini.experiments.lm.studies.ROUND1`)."""


def _lm(label: str, a: str, b: str, **kw: Any) -> Comparison:
    # censored: a run that diverged (bits per byte None) counts as the worst possible.
    return Comparison(label, LM_REGIME, LM, a, b, metric=kw.pop("metric", "val_bpb"), scale=1.0,
                      unit=kw.pop("unit", "bpb"), higher_is_better=False, censored=True,
                      select=_sel(phase="seeds"), seeds=tuple(range(8)), chosen_on=LM_SWEEP_SEEDS, **kw)


LM_CLAIMS: tuple[Claim, ...] = (
    Claim("lm_gain", "A small language model: StiefelAdam on the Q/K frames beats AdamW",
          "not claimed", "language_model", "size", what="stiefel − adamw",
          primaries=((_lm("stiefel − adamw, validation bits per byte", "adamw", "stiefel"),),),
          secondary=(_lm("muon − adamw, validation bits per byte", "adamw", "muon"),
                     _lm("stiefel − muon, validation bits per byte", "muon", "stiefel"),
                     _lm("muon_stiefel − muon, validation bits per byte", "muon", "muon_stiefel"),
                     _lm("frozen − stiefel (cost of freezing), validation bits per byte", "stiefel", "frozen"),
                     *(_lm(f"{arm} − adamw, tokens to reach AdamW's final validation bits per byte", "adamw",
                           arm, metric="tokens", unit="tokens", reach=True)
                       for arm in ("stiefel", "muon", "muon_stiefel", "frozen")),
                     _lm("adamw's Q/K step / stiefel's", "adamw", "stiefel", metric="qk_step_mean", ratio=True)),
          scale_note="a 4-layer GPT-2 of width 256 trained for 1.6M tokens on a CPU; the published studies are "
                     "GPT-2 small (124M parameters) and a 1.38B-parameter model",
          declared="b9f3336",
          short="language model, stiefel − adamw"),
)
"""The reader's question on a language model, declared before any run of its study finished: the
primary is ``stiefel − adamw`` in validation bits per byte on seeds 0-7 at each arm's best lr (chosen
on seed 100); the secondaries compare Muon, the frozen frames and the tokens each arm needs."""


LM2 = ("lm/round2.json",)
LM2_REGIME = ("GPT-2, 4 layers, width 256, State of the Union addresses, 800 steps (1.6M tokens), each arm at "
              "its best on sweep seeds 100-101")
LM2_LONG_REGIME = "as the short runs, 2,400 steps (4.9M tokens, 1.8 passes), lr re-checked at 3 points on seed 100"
LM2_SWEEP_SEEDS = (100, 101)
"""The sweep seeds of the second language-model study (:data:`stiefel_mini.experiments.lm.studies.ROUND2`)."""
FAMILY_ARMS = {"adamw_family": "adamw", "muon_family": "muon"}
"""Arm names a round-2 comparison may use for a family's better arm: the arm
:func:`stiefel_mini.experiments.lm.plans.better_arm` picks for that family (``adamw`` or
``adamw_qknorm``; ``muon`` or ``muon_qknorm``) from the sweep runs, before any paired run."""


def _lm2(label: str, a: str, b: str, phase: str = "paired", **kw: Any) -> Comparison:
    seeds = kw.pop("seeds", tuple(range(16)) if phase == "paired" else tuple(range(8)))
    regime = LM2_LONG_REGIME if phase == "long" else LM2_REGIME
    return Comparison(label, regime, LM2, a, b, metric=kw.pop("metric", "test_bpb"), scale=1.0,
                      unit=kw.pop("unit", "bpb"), higher_is_better=kw.pop("higher_is_better", False),
                      censored=True, select=_sel(phase=phase), seeds=seeds,
                      chosen_on=kw.pop("chosen_on", LM2_SWEEP_SEEDS), **kw)


_ARMS2 = ("adamw", "adamw_qknorm", "stiefel", "muon", "muon_qknorm", "stiefel_muon")

LM3 = ("lm/round2.json", "lm/round3.json")
LM3_REGIME = LM2_REGIME + "; the Stiefel arm's logit scale at an lr of its own, chosen on the same seeds"


def _lm3(label: str, a: str, b: str, **kw: Any) -> Comparison:
    """A round-3 comparison: its runs pooled with round 2's (the baselines' paired runs are round 2's)."""
    return dataclasses.replace(_lm2(label, a, b, **kw), files=LM3, regime=LM3_REGIME, baseline_files=LM2)


LM2_CLAIMS: tuple[Claim, ...] = (
    Claim("lm2_stiefel_adam", "A small language model against strong baselines: StiefelAdam beats the better "
          "AdamW (with or without QK-norm)", "not claimed", "language_model", "size",
          what="stiefel − the better AdamW-family arm",
          primaries=((_lm2("stiefel − better of adamw / adamw_qknorm, test bits per byte", "adamw_family",
                           "stiefel"),),),
          secondary=(*(_lm2(f"{b} − {a}, test bits per byte", a, b)
                       for i, a in enumerate(_ARMS2) for b in _ARMS2[i + 1:]),
                     *(_lm2(f"{arm} − adamw_family, tokens to reach its final validation bits per byte",
                            "adamw_family", arm, metric="tokens", unit="tokens", reach=True)
                       for arm in ("stiefel", "muon", "stiefel_muon")),
                     *(_lm2(f"{arm} − adamw, {m} at the last evaluation", "adamw", arm, metric=m, unit=u,
                            higher_is_better=m == "min_entropy")
                       for arm in ("adamw_qknorm", "stiefel") for m, u in (("max_logit", "logit"),
                                                                           ("min_entropy", "nats"))),
                     _lm2("muon per head − muon whole, validation bits per byte, sweep seeds, each at its "
                          "best muon lr", "muon", "muon", phase="sweep", metric="val_bpb", seeds=LM2_SWEEP_SEEDS,
                          chosen_on=(), select_a=_sel(per_head=False), select_b=_sel(per_head=True),
                          at_best=("muon",))),
          scale_note="a 4-layer GPT-2 of width 256 trained for 1.6M tokens on a CPU",
          declared="e077df4",
          short="language model 2, stiefel − better AdamW"),
    Claim("lm2_stiefel_muon", "Manifold Muon on the Q/K frames beats the better Muon (with or without QK-norm)",
          "not claimed (arXiv 2606.13276, GPT-2 small: validation loss 3.3679 against Muon's 3.3855, one run each)", "language_model", "size",
          what="stiefel_muon − the better Muon-family arm",
          primaries=((_lm2("stiefel_muon − better of muon / muon_qknorm, test bits per byte", "muon_family",
                           "stiefel_muon"),),),
          scale_note="a 4-layer GPT-2 of width 256 trained for 1.6M tokens on a CPU; the published result is "
                     "GPT-2 small, 50k iterations",
          declared="e077df4",
          short="language model 2, stiefel_muon − better Muon"),
    Claim("lm2_long", "Over 3x the steps, StiefelAdam beats its AdamW-family arm", "not claimed", "language_model",
          "size", what="stiefel − the better AdamW-family arm, 2,400 steps",
          primaries=((_lm2("stiefel − better of adamw / adamw_qknorm, 2,400 steps, test bits per byte",
                           "adamw_family", "stiefel", phase="long"),),),
          scale_note="a 4-layer GPT-2 of width 256 trained for 4.9M tokens on a CPU",
          declared="e077df4",
          short="language model 2, long"),
    Claim("lm3_scale", "With its logit scale at an lr of its own, StiefelAdam beats the better AdamW (with or "
          "without QK-norm)", "not claimed", "language_model", "size",
          what="stiefel_scale − the better AdamW-family arm",
          primaries=((_lm3("stiefel_scale − better of adamw / adamw_qknorm, test bits per byte", "adamw_family",
                           "stiefel_scale"),),),
          secondary=(_lm3("stiefel_scale − stiefel, test bits per byte", "stiefel", "stiefel_scale"),
                     _lm3("stiefel_muon_scale − better of muon / muon_qknorm, test bits per byte", "muon_family",
                          "stiefel_muon_scale"),
                     _lm3("stiefel_muon_scale − stiefel_muon, test bits per byte", "stiefel_muon",
                          "stiefel_muon_scale"),
                     *(_lm3(f"stiefel_scale − adamw, {m} at the last evaluation", "adamw", "stiefel_scale",
                            metric=m, unit=u, higher_is_better=m == "min_entropy")
                       for m, u in (("max_logit", "logit"), ("min_entropy", "nats")))),
          scale_note="a 4-layer GPT-2 of width 256 trained for 1.6M tokens on a CPU",
          declared="66c533e",
          short="language model 3, stiefel with its own scale lr − better AdamW"),
)
"""The second language-model study's questions, declared before any of its runs: three primaries in
test bits per byte on paired seeds (``stiefel`` against the better AdamW-family arm and
``stiefel_muon`` against the better Muon-family arm on seeds 0-15; the long phase's ``stiefel``
against its AdamW-family arm on seeds 0-7), each a family of one, no correction across them; every
other pair of arms, the tokens to reach the family arm's final value, the last evaluation's largest
logit and lowest entropy, and per-head against whole Muon on the sweep seeds are secondaries. Then
its follow-up, declared before any run of round 3 (:data:`stiefel_mini.experiments.lm.studies.ROUND3`):
``stiefel_scale`` (StiefelAdam, its logit scale at an lr of its own) against the same better
AdamW-family arm on seeds 0-15; against ``stiefel``, and StiefelMuon's like pairs, as secondaries."""


def claim(key: str) -> Claim:
    """The declared claim ``key`` (a :attr:`Claim.key` of :data:`CLAIMS`, :data:`LM_CLAIMS`, :data:`LM2_CLAIMS`
    or :data:`stiefel_mini.evidence.claims_lm4.LM4_CLAIMS`)."""
    from stiefel_mini.evidence.claims_lm4 import LM4_CLAIMS  # it builds its comparisons from this module's types

    for c in CLAIMS + LM_CLAIMS + LM2_CLAIMS + LM4_CLAIMS:
        if c.key == key:
            return c
    raise ValueError(f"no claim {key!r}; claims: {[c.key for c in CLAIMS]}")

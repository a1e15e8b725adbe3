"""The paper's claims, each with one primary comparison declared here, and the verdict it gets.

A claim (:class:`Claim`) names the paper's number, the chapter that tests it, and its **primary**
comparison (:class:`Comparison`: results file, arms, selection of runs, metric, direction, test):
the regime that can decide it, i.e. fitted baselines, each arm at its best lr, the most seeds.
Where a claim is a bundle (the mechanism: one comparison per ingredient), its primary is a family
of comparisons, Holm-corrected among themselves with Tarone's rule
(:func:`stiefel_mini.evidence.compare.correct`); a single primary is a family of one. Every other
regime is a **secondary** comparison: computed by the same function, shown, never voting.

The primaries were declared after the round-2 results had been seen; the runs that confirm them
are those started afterwards, listed per claim in ``confirm`` (seeds never used for a choice).

Verdict words (:func:`verdicts`), from the primary:

- ``reproduced``: resolved in the paper's direction, the paper's number inside the 95% t interval;
- ``smaller effect`` / ``larger effect``: resolved in the paper's direction, the paper's number
  above / below the interval ("+2.51 pp [+2.14, +2.89], not +8.98");
- ``contradicted``: resolved against the claim, or a claimed small effect whose interval lies
  above it ("freezing costs +1.87 pp [+0.64, +3.10], not 0.28");
- ``not resolved``: either the test cannot reach the level at this n ("n = 5 cannot go below
  p = 0.0625") or it can and did not; the numbers are given, and neither reads as "no effect";
- ``partly reproduced`` (a bundle whose resolved parts agree with the claim while the rest is not
  resolved), ``not tested yet`` (the file or its paired seeds are missing), and ``by construction``
  for claims about the algorithm's definition. What a regime did not reach (the paper's scale) is
  each claim's ``scale_note``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from stiefel_mini.evidence import compare, runs
from stiefel_mini.experiments.stats import smallest_p

__all__ = ["Comparison", "Claim", "CLAIMS", "claim", "compute", "evaluate", "verdicts", "effect_text", "number_text",
           "sure_text", "as_data"]

# Settings that must agree for runs of several files to be paired (each run records its own lr).
_SAME = ("patch_size", "d_model", "depth", "n_heads", "epochs", "steps", "batch_size", "weight_decay",
         "max_step", "augment", "seeding")


@dataclass(frozen=True)
class Comparison:
    """One declared paired comparison ``b - a`` (or, with ``of_gap``, a change of the gap ``b - a``).

    ``files``: results files (relative to ``results/``) whose runs are pooled (their settings must
    agree on :data:`_SAME`); ``select``: fields every run must match (e.g. a train fraction);
    ``select_a`` / ``select_b``: fields for one arm only (e.g. a frame lr); ``at_best``: arms taken
    at their own best lr of the pooled runs (:func:`stiefel_mini.evidence.runs.at_best_lr`);
    ``metric``: a run field, or ``"metrics.<key>"`` for grokking runs; ``scale`` multiplies it (100:
    fractions to points); ``of_gap``: ``(select_low, select_high)``: the per-seed gap ``b - a`` at
    ``select_high`` minus the gap at ``select_low``; ``ratio``: the comparison is the ratio
    ``metric(a) / metric(b)`` (:func:`stiefel_mini.evidence.compare.ratio`), not a difference.
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


@dataclass(frozen=True)
class Claim:
    """A claim of the paper, its primary comparison(s), its secondary evidence and how it is judged.

    ``kind``: ``"size"`` (an effect of the paper's size ``paper_value``), ``"at_most"`` (an effect no
    larger than ``paper_value``), ``"ratio"`` (a ratio inside ``paper_range``), ``"ingredients"``
    (a family: ``expect_zero`` comparisons the claim says do not matter, the others that it says
    do), ``"design"`` (true of the algorithm's definition; ``design`` says how it is checked).
    ``primaries``: alternatives in order of preference, each a family; the first whose first file
    exists is used. ``what``: how the primary's number reads in a verdict. ``confirm``: the seeds
    run after the primaries were declared. ``scale_note``: the paper's regime this book did not reach.
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
    confirm: tuple[int, ...] = ()
    confirm_note: str = ""
    scale_note: str = ""
    design: str = ""
    anchor: str = "verdict"


def _sel(**kw: Any) -> tuple[tuple[str, Any], ...]:
    return tuple(kw.items())


FIT = ("cifar/r2_fitted.json",)
FIT_REGIME = "fitted, 50,000 images, 10 epochs, lr 3e-3, A1's frame lr 1.0"
LR_REGIME = "lr sweep, 15,000 images, 10 epochs, each arm at its best lr"
SCL_REGIME = "fixed 2,000 steps"
ABL_REGIME = "ablation at frame lr 0.03 (frames barely move), 15,000 images, 10 epochs"
MECH_REGIME = "mechanism at frame lr 1.0, 15,000 images, 10 epochs"
R1 = "first study, shared lr 1e-3, 6 epochs (underfit)"
GROK_LONG = ("grokking/r2_long.json",)
GROK_REGIME = "p = 59, 8,000 steps, learned temperature"


def _r1(label: str, a: str, b: str, frac: float, **kw: Any) -> Comparison:
    n = f"{round(50_000 * frac):,}"
    return Comparison(f"{label}, {n} images", R1, ("cifar/cpu.json",), a, b, select=_sel(train_fraction=frac), **kw)


def _mechanism(files: tuple[str, ...], regime: str, a5_files: tuple[str, ...]) -> tuple[Comparison, ...]:
    variants = (("A7", "A1 − A7 (element-wise moment, not equivariant)"),
                ("stiefel_column", "A1 − column moment"),
                ("stiefel_canonical", "A1 − canonical projector"),
                ("stiefel_noproj", "A1 − no projection"),
                ("stiefel_nocap", "A1 − no trust cap"))
    out = tuple(Comparison(label, regime, files, b, "A1") for b, label in variants)
    return out + (Comparison("A1 − A5 (AdamW's step + polar projection, A5 at its best frame lr)", regime,
                             files + a5_files, "A5", "A1", at_best=("A5",), select_b=_sel(frame_lr=1.0)
                             if "r3" in files[0] else ()),)


CLAIMS: tuple[Claim, ...] = (
    Claim("optimizer", "One scalar second moment per frame, a trust cap, the polar retraction",
          "the method", "riemannian_adam", "design", anchor="",
          design="implemented as described, and tested step by step against a from-scratch version"),
    Claim("cifar_gain", "CIFAR-10: StiefelAdam (A1) beats AdamW (A0)", "+8.98 pp, 12 paired starts",
          "cifar", "size", what="A1 − A0", paper_value=8.98,
          primaries=((Comparison("A1 − A0", FIT_REGIME, FIT, "A0", "A1"),),),
          secondary=(Comparison("A1 − A0", LR_REGIME, ("cifar/r2_lr.json",), "A0", "A1", at_best=("A0", "A1")),
                     Comparison("QK-norm − A0", LR_REGIME, ("cifar/r2_lr.json",), "A0", "qknorm",
                                at_best=("A0", "qknorm")),
                     Comparison("QK-norm − A0", FIT_REGIME, FIT, "A0", "qknorm"),
                     *(Comparison(f"A1 − A0, {round(50_000 * f):,} images", SCL_REGIME, ("cifar/r2_scaling.json",),
                                  "A0", "A1", select=_sel(train_fraction=f)) for f in (0.1, 0.3, 1.0)),
                     Comparison("A1 − A0", ABL_REGIME, ("cifar/r2_ablation.json",), "A0", "A1"),
                     _r1("A1 − A0", "A0", "A1", 0.1), _r1("A1 − A0", "A0", "A1", 0.3),
                     Comparison("A1 − A0, 5,000 images", "first study, 30 epochs", ("cifar/cpu_long.json",), "A0", "A1")),
          confirm=(8, 9, 10, 11), confirm_note="A0 and A1 on seeds 8-11 (12 paired starts, the paper's count)",
          scale_note="patch 8 (16 tokens) and a small model; the paper's patch 4 and model not run"),
    Claim("cifar_widens", "The gap to AdamW widens with more data", "widens", "cifar", "size",
          what="gap at 50,000 − at 5,000 images", paper_value=None,
          primaries=((Comparison("(A1 − A0) at 50,000 − at 5,000 images", SCL_REGIME + ", 5,000 vs 50,000 images",
                                 ("cifar/r2_scaling.json",), "A0", "A1",
                                 of_gap=(_sel(train_fraction=0.1), _sel(train_fraction=1.0))),),),
          scale_note="at a fixed number of steps only; at a fixed number of epochs not run"),
    Claim("grokking_endpoint", "Grokking: Stiefel attention ends higher than AdamW",
          "97.0% vs 61.1% at epoch 20,000 (one run)", "grokking", "size",
          what="", paper_value=97.0 - 61.1,
          primaries=((Comparison("stiefel_learned − adamw, final validation accuracy", GROK_REGIME, GROK_LONG,
                                 "adamw", "stiefel_learned", metric="metrics.final_val_acc"),),),
          secondary=(Comparison("stiefel_learned − adamw, falls of ≥ 10 points", GROK_REGIME, GROK_LONG, "adamw",
                                "stiefel_learned", metric="metrics.collapses10", scale=1.0, unit="falls",
                                higher_is_better=False),
                     Comparison("stiefel_learned − frozen_learned, final validation accuracy", GROK_REGIME,
                                GROK_LONG, "frozen_learned", "stiefel_learned", metric="metrics.final_val_acc"),
                     Comparison("stiefel_learned − adamw, final validation accuracy", "p = 59, 1,800 steps",
                                ("grokking/r2_short.json",), "adamw", "stiefel_learned",
                                metric="metrics.final_val_acc"),
),
          confirm=(5, 6, 7), confirm_note="adamw, stiefel_learned and frozen_learned on seeds 5-7",
          scale_note="8,000 steps and p = 59, not the paper's 20,000 epochs"),
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
          confirm=(5, 6, 7), confirm_note="adamw and stiefel_learned on seeds 5-7",
          scale_note="p = 59 and 8,000 steps"),
    Claim("weight_decay", "Weight decay does nothing to the frames", "no effect", "weight_decay", "design",
          anchor="", design="true by construction: the frame rule has no decay term",
          secondary=(_r1("A0' (no decay on Q/K) − A0", "A0", "A0'", 0.1), _r1("A0' (no decay on Q/K) − A0", "A0",
                                                                                "A0'", 0.3))),
    Claim("step_ratio", "StiefelAdam's Q/K steps are smaller than AdamW's", "24-40x smaller", "cifar", "ratio",
          what="A0's step / A1's", paper_range=(24.0, 40.0),
          primaries=((Comparison("A0's Q/K step / A1's", FIT_REGIME, FIT, "A0", "A1", metric="qk_step_mean",
                                 ratio=True),),),
          secondary=(Comparison("A0's Q/K step / A1's", LR_REGIME, ("cifar/r2_lr.json",), "A0", "A1",
                                metric="qk_step_mean", ratio=True, at_best=("A0", "A1")),
                     *(Comparison(f"A0 at lr 1e-3 / A1 at frame lr {v:g}", "lr sweep, 15,000 images, 10 epochs",
                                  ("cifar/r2_lr.json",), "A0", "A1", metric="qk_step_mean", ratio=True,
                                  select_a=_sel(lr=1e-3), select_b=_sel(frame_lr=v))
                       for v in (0.001, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0)),
                     _r1("A0's Q/K step / A1's", "A0", "A1", 0.3, metric="qk_step_mean", ratio=True)),
          confirm=(8, 9, 10, 11), confirm_note="A0 and A1 on seeds 8-11",
          scale_note="the ratio is set by the two learning rates (A1's frame lr against AdamW's lr)"),
    Claim("freezing", "Freezing the frames at their start (A3) costs little", "0.28 pp", "cifar", "at_most",
          what="freezing costs", paper_value=0.28,
          primaries=((Comparison("A1 − A3 (cost of freezing)", FIT_REGIME, FIT, "A3", "A1"),),),
          secondary=(Comparison("A3 − A0", FIT_REGIME, FIT, "A0", "A3"),
                     _r1("A1 − A3", "A3", "A1", 0.1), _r1("A1 − A3", "A3", "A1", 0.3),
                     Comparison("A1 − A3, 5,000 images", "first study, 30 epochs", ("cifar/cpu_long.json",), "A3", "A1")),
          confirm=(5, 6, 7), confirm_note="A3 and QK-norm on seeds 5-7 (8 paired seeds)"),
    Claim("mechanism", "The gain comes from the scale-free step, not the projector or equivariance",
          "the scale-free step", "cifar", "ingredients", what="",
          primaries=(_mechanism(("cifar/r3_mechanism.json",), MECH_REGIME, ("cifar/r3_polar.json",
                                                                            "cifar/r2_ablation.json")),
                     _mechanism(("cifar/r2_ablation.json",), ABL_REGIME, ())),
          secondary=(*_mechanism(("cifar/r2_ablation.json",), ABL_REGIME, ()),
                     _r1("A1 − A7", "A7", "A1", 0.3), _r1("A1 − A4 (AdamW with A1's small step)", "A4", "A1", 0.3),
                     _r1("A1 − A5", "A5", "A1", 0.3)),
          expect_zero=("A7", "stiefel_column", "stiefel_canonical", "stiefel_noproj", "stiefel_nocap"),
          confirm=(0, 1, 2), confirm_note="every run of the mechanism study at frame lr 1.0 (run after the "
                                          "declaration)"),
)
"""The claims, in the order of the paper's abstract."""


def claim(key: str) -> Claim:
    """The declared claim ``key`` (a :attr:`Claim.key`)."""
    for c in CLAIMS:
        if c.key == key:
            return c
    raise ValueError(f"no claim {key!r}; claims: {[c.key for c in CLAIMS]}")


# ----------------------------------------------------------------------------------------------------
# Computing a declared comparison from the files
# ----------------------------------------------------------------------------------------------------


def _pooled(files: tuple[str, ...], root: Path | None) -> tuple[list[dict], list[str]]:
    """The runs of the files that exist, pooled, and the names of those files."""
    out, present, first = [], [], None
    for name in files:
        res = runs.load(name, root)
        if res is None:
            continue
        settings = res.get("settings") or res.get("base_config") or {}
        if first is None:
            first = settings
        elif any(settings.get(k) != first.get(k) for k in _SAME):
            diff = [k for k in _SAME if settings.get(k) != first.get(k)]
            raise ValueError(f"{name} cannot be paired with {present[0]}: settings {diff} differ")
        out += res["runs"]
        present.append(name)
    return out, present


def _value(comp: Comparison):
    if comp.metric.startswith("metrics."):
        key = comp.metric.split(".", 1)[1]
        raw = lambda r: r["metrics"].get(key)  # noqa: E731
    else:
        raw = lambda r: r.get(comp.metric)  # noqa: E731
    return lambda r: None if raw(r) is None else comp.scale * raw(r)


def _side(pool: list[dict], comp: Comparison, arm: str, extra: tuple) -> dict[int, dict]:
    chosen = [r for r in pool if all(r.get(k) == v for k, v in comp.select + extra)]
    if arm in comp.at_best:
        return runs.at_best_lr([r for r in chosen if r["arm"] == arm], arm)[1]
    return runs.by_seed(chosen, arm=arm)


def compute(comp: Comparison, root: Path | None = None, seeds: tuple[int, ...] | None = None) -> dict:
    """The row of a declared comparison (:func:`stiefel_mini.evidence.compare.paired` or ``ratio``).

    Adds ``files`` (those present) and ``declared`` (the label). ``seeds`` restricts the pairing to
    those seeds (the confirmation of a primary).
    """
    pool, present = _pooled(comp.files, root)
    if comp.of_gap is None:
        a = _side(pool, comp, comp.a, comp.select_a)
        b = _side(pool, comp, comp.b, comp.select_b)
        value = _value(comp)
    else:  # the per-seed gap b - a at the high selection against the low one
        v = _value(comp)
        gaps = []
        for sel in comp.of_gap:
            ra = runs.by_seed([r for r in pool if all(r.get(k) == x for k, x in sel)], arm=comp.a)
            rb = runs.by_seed([r for r in pool if all(r.get(k) == x for k, x in sel)], arm=comp.b)
            gaps.append({s: v(rb[s]) - v(ra[s]) for s in set(ra) & set(rb)})
        a, b = gaps
        value = float
    if seeds is not None:
        a = {s: r for s, r in a.items() if s in seeds}
    if comp.ratio:
        row = compare.ratio(a, b, lambda r: r[comp.metric], label=comp.label, regime=comp.regime)
    else:
        row = compare.paired(a, b, value, label=comp.label, regime=comp.regime, higher_is_better=comp.higher_is_better,
                             censored=comp.censored, test=comp.test, unit=comp.unit)
    row.update(files=present, declared_files=list(comp.files), ratio=comp.ratio, arm=comp.b, baseline=comp.a)
    return row


# ----------------------------------------------------------------------------------------------------
# Verdicts
# ----------------------------------------------------------------------------------------------------


def number_text(x: float, unit: str) -> str:
    """A signed difference for the tables: whole steps, else two decimals; ``+inf`` as ``never``."""
    if math.isinf(x):  # a censored run on the side of the difference's sign
        return "never" if x > 0 else "-never"
    return f"{x:+,.0f}" if unit == "steps" else f"{x:+.2f}"


def effect_text(row: dict, what: str = "") -> str:
    """A comparison's size in words: ``"A1 − A0 +2.51 pp [+2.14, +2.89]"`` (or its censoring)."""
    unit = row.get("unit", "")
    head = f"{what} " if what else ""
    if row.get("ratio"):
        if row["gmean"] is None:
            return head + "no paired seed"
        ci = "" if row["ci"] is None else f" [{row['ci'][0]:.3g}, {row['ci'][1]:.3g}]"
        return f"{head}{row['gmean']:.3g}x{ci}"
    if row["n"] == 0:
        return head + "no paired seed"
    if row["mean"] is None:
        med = number_text(row["median"], unit) + ("" if math.isinf(row["median"]) else f" {unit}")
        return (f"{head}median {med}, {row['n_censored']} of {row['n']} pairs censored "
                "(never reached), no mean")
    ci = "" if row["ci"] is None else f" [{number_text(row['ci'][0], unit)}, {number_text(row['ci'][1], unit)}]"
    return f"{head}{number_text(row['mean'], unit)} {unit}{ci}"


def sure_text(row: dict, family: int) -> str:
    """How sure: the test, its n, its p and the corrected p (or why it cannot reach the level)."""
    if row.get("ratio"):
        return f"95% t interval, {row['n']} seeds" if row["n"] >= 2 else f"{row['n']} seed(s)"
    if row["n"] == 0:
        return "no paired seed"
    test = "exact sign test" if row["test"] == "sign" else "exact signed-rank test"
    if not row["testable"]:
        return f"{test}, {row['wins']}/{row['n']} wins, p = {row['p']:.3g}: too few seeds for 0.05"
    corr = "" if family == 1 else f", Holm over {family}"
    return f"{test}, {row['wins']}/{row['n']} wins, p = {row['p']:.2g}{corr}" + (
        f" → {row['p_holm']:.2g}" if family > 1 else "")


def n_text(row: dict) -> str:
    """``"n = 5"``, or ``"n = 5 (2 tied)"`` when the test drops tied pairs."""
    tied = row["n"] - row["n_test"]
    return f"n = {row['n']}" + (f" ({tied} tied)" if tied else "")


def _not_resolved(row: dict, what: str) -> str:
    if not row["testable"]:
        return f"not resolved: {n_text(row)} cannot go below p = {row['p_min']:.3g} ({effect_text(row, what)})"
    return f"not resolved: {effect_text(row, what)}, p = {row['p_holm']:.2g}"


def _missing(row: dict) -> str:
    """``"not tested yet: ..."``: which declared file is absent, or that it holds no paired seed."""
    absent = [f for f in row["declared_files"] if f not in row["files"]]
    if absent and not row["files"]:
        return f"not tested yet: {', '.join(absent)} not run yet"
    return f"not tested yet: no paired seed in {', '.join(row['files'])} yet"


def _size_verdict(c: Claim, row: dict) -> tuple[str, str]:
    if row["n"] == 0:
        return "not tested yet", _missing(row)
    if not row["resolved"]:
        return "not resolved", _not_resolved(row, c.what)
    lo, hi = row["ci"] if row["ci"] is not None else (row["mean"], row["mean"])
    pv = c.paper_value
    up = (row["mean"] if row["mean"] is not None else row["median"]) > 0
    paper = "" if pv is None else f", not {pv:+.2f}" if c.kind == "size" else f", not {pv:g}"
    if c.kind == "size":
        if pv is None:  # a claimed direction: b better than a, in the metric's sense
            return ("reproduced", f"reproduced: {effect_text(row, c.what)}") if row["wins"] > row["losses"] else \
                ("contradicted", f"contradicted: {effect_text(row, c.what)}")
        if up != (pv > 0):
            return "contradicted", f"contradicted: {effect_text(row, c.what)}{paper}"
        if lo <= pv <= hi:
            return "reproduced", f"reproduced: {effect_text(row, c.what)}"
        word = "smaller effect" if abs(hi) < abs(pv) else "larger effect"
        return word, f"{word}: {effect_text(row, c.what)}{paper}"
    # at_most: the claim is an effect no larger than the paper's
    if hi < pv or lo <= pv <= hi:
        return "reproduced", f"reproduced: {effect_text(row, c.what)}"
    return "contradicted", f"contradicted: {effect_text(row, c.what)}{paper}"


def _ratio_verdict(c: Claim, row: dict) -> tuple[str, str]:
    lo_p, hi_p = c.paper_range
    want = f"not {lo_p:g}-{hi_p:g}x"
    if row["n"] < 2:
        return "not tested yet", _missing(row) if row["n"] == 0 else f"not tested yet: {row['n']} paired seed"
    lo, hi = row["ci"]
    if lo >= lo_p and hi <= hi_p:
        return "reproduced", f"reproduced: {effect_text(row, c.what)}"
    if hi < lo_p or lo > hi_p:
        return "contradicted", f"contradicted: {effect_text(row, c.what)}, {want}"
    return "not resolved", f"not resolved: {effect_text(row, c.what)} overlaps {lo_p:g}-{hi_p:g}x"


def _ingredients_verdict(c: Claim, rows: list[dict]) -> tuple[str, str]:
    have = [r for r in rows if r["n"]]
    if not have:
        return "not tested yet", _missing(rows[0])
    differ = [r for r in have if r["resolved"] and r["baseline"] in c.expect_zero]
    step = [r for r in have if r["baseline"] not in c.expect_zero]
    against = [r for r in step if r["resolved"] and r["mean"] is not None and r["mean"] < 0]
    if differ or against:
        r = min(differ + against, key=lambda r: r["p_holm"])
        return "contradicted", f"contradicted: {effect_text(r, r['label'].split(' (')[0])}, resolved"
    big = max(have, key=lambda r: abs(r["mean"] if r["mean"] is not None else 0.0))
    largest = f"largest: {effect_text(big, big['label'].split(' (')[0])}"
    if not any(r["testable"] for r in have):
        n = max(r["n"] for r in have)
        return "not resolved", f"not resolved: n = {n} cannot go below p = {smallest_p(n):.3g} ({largest})"
    if step and all(r["resolved"] for r in step):
        return "partly reproduced", ("partly reproduced: " + "; ".join(
            effect_text(r, r["label"].split(" (")[0]) for r in step) + " resolved; the variants are not resolved "
            "apart from A1, which does not show that they are equal")
    return "not resolved", f"not resolved: no comparison of the family resolved after correction ({largest})"


def evaluate(c: Claim, root: str | Path | None = None) -> dict:
    """The verdict of claim ``c`` from the results under ``root`` (``None``: the committed files).

    Returns ``{"key", "claim", "paper", "chapter", "anchor", "status", "verdict", "sure",
    "primary": [rows], "secondary": [rows], "confirmation": {...}, "declared", "scale_note"}``; every row is a
    :func:`compute` row, the primaries corrected as one family.
    """
    root = None if root is None else Path(root)
    out: dict[str, Any] = {"key": c.key, "claim": c.claim, "paper": c.paper, "chapter": c.chapter,
                           "anchor": c.anchor, "scale_note": c.scale_note, "primary": [], "secondary": [],
                           "confirmation": None}
    family: tuple[Comparison, ...] = ()
    for option in c.primaries:
        if runs.load(option[0].files[0], root) is not None:
            family = option
            break
    if not family and c.primaries:
        family = c.primaries[-1]
    declared_first = bool(c.primaries) and family == c.primaries[0]
    prim = [compute(comp, root) for comp in family]
    compare.correct([r for r in prim if not r["ratio"]])
    sec = [compute(comp, root) for comp in c.secondary]
    shown = {(r["label"], r["regime"]) for r in prim}
    out["primary"] = prim
    out["secondary"] = [r for r in sec if r["n"] and (r["label"], r["regime"]) not in shown]
    out["declared"] = "; ".join(f"{comp.label} ({comp.regime}, {', '.join(comp.files)}, "
                                f"{'ratio' if comp.ratio else comp.test + ' test'})" for comp in family)
    if c.kind == "design":
        out.update(status="by construction", verdict=c.design, sure="by construction")
        return out
    if c.kind == "ratio":
        status, verdict = _ratio_verdict(c, prim[0])
    elif c.kind == "ingredients":
        status, verdict = _ingredients_verdict(c, prim)
    else:
        status, verdict = _size_verdict(c, prim[0])
    if c.kind == "ingredients":
        n = max((r["n"] for r in prim), default=0)
        k = sum(r["testable"] for r in prim)
        out["sure"] = (f"{len(prim)} comparisons, at most {n} seed{'' if n == 1 else 's'}: " +
                       (f"Holm over the {k} that can reach 0.05" if k else "none can reach 0.05"))
    else:
        out["sure"] = sure_text(prim[0], 1)
    if not declared_first:
        out["sure"] += f"; the declared study ({c.primaries[0][0].regime.split(',')[0]}) not run yet"
    out.update(status=status, verdict=verdict)
    if c.confirm and declared_first:
        conf = [compute(comp, root, seeds=c.confirm) for comp in family]
        present = sorted({s for r in conf for s in r["seeds"]})
        out["confirmation"] = {"seeds": list(c.confirm), "present": present, "note": c.confirm_note,
                               "rows": conf}
    return out


def verdicts(root: str | Path | None = None) -> list[dict]:
    """Every claim's verdict (:func:`evaluate`), in the order of :data:`CLAIMS`."""
    return [evaluate(c, root) for c in CLAIMS]


def _finite(x: Any) -> Any:
    """``x`` with non-finite floats as strings, for strict JSON."""
    if isinstance(x, float) and not math.isfinite(x):
        return "inf" if x > 0 else "-inf" if x < 0 else "nan"
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def as_data(vs: list[dict]) -> list[dict]:
    """The verdicts as JSON-ready data (non-finite numbers as strings): for ``--json``."""
    return [_finite({k: v for k, v in c.items()}) for c in vs]


"""The language-model studies as data: one plan type, its instances, and the plan read against the runs.

A study (:class:`Study`) is a declared plan: its arms and how each is built (:attr:`Study.arms`,
``arm -> recipe``, the recipes of :mod:`~stiefel_mini.experiments.lm.arms`), how each arm is tuned
(:class:`Tuning`: stages of grids on the sweep seeds, each around the last stage's best), the
baseline families whose better arm a comparison names, an optional paired phase at the sweep's
length, and an optional long phase (each long arm's main lr re-checked at a few factors on one
sweep seed, then its best on the long seeds). :func:`plan` reads a study against its finished runs:
which runs are ready, what remains, each arm's best and each family's better arm. It is a pure
function, so a study resumes from its results file and the evidence layer reads the same choices
the runner made; this module imports no torch and no runner. The four studies are its instances
(:mod:`~stiefel_mini.experiments.lm.studies`); the first three were declared with plan types of their
own before this one, and a few fields with defaults (the order of ``ready``, a run without a
``steps`` field, the layout of the stored plan) say where they differ.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["RECIPES", "DEFAULTS", "BOUNDS", "ORDERS", "LAYOUTS", "Tuning", "Study", "PlanState", "point_key",
           "grid_best", "better_arm", "plan", "declared"]

_R2 = ("lr", "warmup_frac")  # what every arm of the second study reads
RECIPES: dict[str, tuple[str, ...]] = {
    "r1_adamw": ("lr",),
    "r1_frozen": ("lr",),
    "r1_stiefel": ("lr", "frame_lr"),
    "r1_muon": ("lr", "muon_lr"),
    "r1_muon_stiefel": ("lr", "frame_lr", "muon_lr"),
    "r2_adamw": _R2,
    "r2_adamw_qknorm": _R2,
    "r2_stiefel": (*_R2, "frame_lr", "max_step"),
    "r2_muon": (*_R2, "muon_lr", "per_head"),
    "r2_muon_qknorm": (*_R2, "muon_lr", "per_head"),
    "r2_stiefel_muon": (*_R2, "muon_lr", "per_head", "frame_lr"),
    "r3_stiefel": (*_R2, "frame_lr", "max_step", "scale_lr"),
    "r3_stiefel_muon": (*_R2, "muon_lr", "per_head", "frame_lr", "scale_lr"),
    "adamw": ("lr", "warmup_frac"),
    "adamw_qknorm": ("lr", "warmup_frac", "scale_lr"),
    "muon": ("lr", "warmup_frac", "muon_lr"),
    "muon_qknorm": ("lr", "warmup_frac", "muon_lr", "scale_lr"),
    "stiefel": ("lr", "warmup_frac", "frame_lr", "max_step", "scale_lr"),
    "stiefel_muon": ("lr", "warmup_frac", "muon_lr", "frame_lr", "scale_lr"),
    "all_stiefel": ("lr", "warmup_frac", "frame_lr", "max_iter"),
}
"""The studies' recipes (:mod:`~stiefel_mini.experiments.lm.arms` builds them): recipe -> the
settings it reads; a run records the others as ``None``. ``r1_``, ``r2_``, ``r3_``: the first three
studies' arms, as their own code built them; the rest: the fourth study's, as the library recommends."""

DEFAULTS: dict[str, Any] = {"lr": 2e-3, "warmup_frac": 0.05, "frame_lr": 0.03, "max_step": 0.1, "muon_lr": 0.02,
                            "per_head": False, "scale_lr": 0.3, "max_iter": 20}
"""A setting an arm reads but neither tunes, fixes nor takes keeps this value."""

BOUNDS: dict[str, tuple[float, float]] = {"warmup_frac": (0.0, 1.0)}
"""A grid axis of these settings does not grow past its bounds (a warm-up is a fraction of the run)."""

ORDERS = ("phases", "long_by_arm", "arm_by_arm")
"""How :func:`plan` orders ``ready``: ``phases``: every sweep (arm by arm), the paired seeds seed by
seed, every check, the long runs seed by seed; ``long_by_arm``: the same, but each long arm's checks
then its long runs, arm by arm (the second study); ``arm_by_arm``: each arm's sweep then its paired
seeds, arm by arm, then the checks and long runs as in ``phases`` (the third study)."""

LAYOUTS = ("", "round1", "round2", "round3")
"""How :func:`declared` stores a study: ``""``, its own fields; ``round1``-``round3``: the layout the
first three studies' own plan types wrote into their results files, which a resumed run compares."""

_LATER = ("records_steps", "paired_phase", "paired_first", "order", "layout")
# Fields added after the fourth study's plan was stored: a stored plan lists them only where they
# differ from their defaults, so that the fourth study's stays equal to its declaration.


@dataclass(frozen=True)
class Tuning:
    """How one arm is tuned: ``stages``, each a product grid of axes ``(setting, values)``, run in
    order, each with every other setting at the last stage's best (one axis at a time around the
    last best when a full product does not fit the budget); ``start``: the settings it starts from
    (a stage's axis replaces its own; a setting no stage sweeps stays there); ``takes``
    ``(setting, arm)``: that setting at another arm's best. An axis of at least ``grow_min``
    numbers whose best sits at an end grows by one value beyond it (the ratio of its two end
    values), up to ``extend`` times, inside :data:`BOUNDS`; shorter axes and booleans are categorical."""

    arm: str
    stages: tuple[tuple[tuple[str, tuple], ...], ...]
    start: tuple[tuple[str, Any], ...] = ()
    takes: tuple[tuple[str, str], ...] = ()
    extend: int = 2
    grow_min: int = 3


@dataclass(frozen=True)
class Study:
    """A declared language-model study: ``arms`` ``(arm, recipe)``, ``tunings`` on ``sweep_seeds`` at
    ``steps``; ``families`` ``(name, arms)``; ``paired_seeds``: every arm at its best on them (at
    ``steps``); ``long_arms`` (an arm, or ``"family:<name>"`` for a family's better arm): each at
    ``check_factors`` times its best ``main_lr`` on ``check_seed`` at ``long_steps``, then at the best
    of those on ``long_seeds``. ``fields``: the settings a run records, in its key's order.

    ``records_steps``: a run records its ``steps`` (the first study's runs did not: they all ran the
    base config's); ``paired_phase``: the paired runs' ``phase`` (the first study's ``"seeds"``);
    ``paired_first``: arms (or ``"family:<name>"``) whose paired runs come first on each seed, the
    others following in the order of ``arms``; ``order``: the order of ``ready`` (:data:`ORDERS`);
    ``layout``: how the plan is stored (:data:`LAYOUTS`)."""

    name: str
    out: str
    arms: tuple[tuple[str, str], ...]
    tunings: tuple[Tuning, ...]
    sweep_seeds: tuple[int, ...]
    fields: tuple[str, ...]
    steps: int = 800
    families: tuple[tuple[str, tuple[str, ...]], ...] = ()
    paired_seeds: tuple[int, ...] = ()
    long_arms: tuple[str, ...] = ()
    long_steps: int = 2400
    long_seeds: tuple[int, ...] = ()
    check_seed: int | None = None
    check_factors: tuple[float, ...] = (0.5, 1.0, 2.0)
    main_lr: tuple[tuple[str, str], ...] = ()
    preset: str = "cpu"
    records_steps: bool = True
    paired_phase: str = "paired"
    paired_first: tuple[str, ...] = ()
    order: str = "phases"
    layout: str = ""

    def __post_init__(self) -> None:
        if self.order not in ORDERS or self.layout not in LAYOUTS:
            raise ValueError(f"{self.name}: order must be one of {ORDERS} and layout one of {LAYOUTS}; "
                             f"got {self.order!r}, {self.layout!r}")
        names = [a for a, _ in self.arms]
        tuned = [t.arm for t in self.tunings]
        if sorted(tuned) != sorted(names) or len(set(names)) != len(names):
            raise ValueError(f"{self.name}: every arm is tuned exactly once; arms {names}, tunings {tuned}")
        for t in self.tunings:
            uses = self.uses(t.arm)
            named = [f for stage in t.stages for f, _ in stage] + [f for f, _ in t.start] + [f for f, _ in t.takes]
            if any(f not in uses for f in named):
                raise ValueError(f"{self.name}: {t.arm} sets {named}, but its recipe reads only {uses}")
            for _, other in t.takes:
                if other not in tuned or tuned.index(other) >= tuned.index(t.arm):
                    raise ValueError(f"{self.name}: {t.arm} takes a setting at {other}'s best: tune {other} first")
        used = set(self.sweep_seeds) & (set(self.paired_seeds) | set(self.long_seeds))
        if used or (self.long_arms and self.check_seed not in self.sweep_seeds):
            raise ValueError(f"{self.name}: the sweeps' seeds (and the check seed among them) must not be the "
                             "comparisons' seeds")
        for arm in self.long_arms + self.paired_first:
            if not arm.startswith("family:") and arm not in names:
                raise ValueError(f"{self.name}: {arm!r} is neither an arm nor 'family:<name>'")

    def recipe(self, arm: str) -> str:
        """The recipe ``arm`` is built by."""
        return dict(self.arms)[arm]

    def uses(self, arm: str) -> tuple[str, ...]:
        """The settings ``arm`` reads (its recipe's, :data:`RECIPES`)."""
        return RECIPES[self.recipe(arm)]

    def tuning(self, arm: str) -> Tuning:
        """The :class:`Tuning` of ``arm``."""
        return next(t for t in self.tunings if t.arm == arm)

    def key(self, r: dict) -> tuple:
        """What tells two runs of this study apart (:func:`point_key`)."""
        return point_key(r, self.fields, self.records_steps)


@dataclass
class PlanState:
    """``ready``: runs that can start now, in order; ``remaining``: runs not finished, in runs of
    ``steps`` (a long run counts ``long_steps / steps``), counting those still waiting on a choice;
    ``best``: each tuned arm's settings at its best; ``better``: each family's better arm, once known;
    ``long_best``: the long phase's settings per arm, once its check is complete."""

    ready: list[dict] = field(default_factory=list)
    remaining: float = 0.0
    best: dict[str, dict] = field(default_factory=dict)
    better: dict[str, str] = field(default_factory=dict)
    long_best: dict[str, dict] = field(default_factory=dict)


def point_key(r: dict, fields: tuple[str, ...], records_steps: bool = True) -> tuple:
    """What tells two runs apart: ``(arm, seed, phase, steps, *fields)`` (without ``steps`` for runs
    that do not record it)."""
    steps = (int(r["steps"]),) if records_steps else ()
    return (r["arm"], int(r["seed"]), r["phase"], *steps, *(r.get(k) for k in fields))


def _point(study: Study, arm: str, seed: int, phase: str, steps: int, values: dict) -> dict:
    uses = study.uses(arm)
    return {"arm": arm, "seed": seed, "phase": phase, **({"steps": steps} if study.records_steps else {}),
            **{k: (values[k] if k in uses else None) for k in study.fields}}


def _of(r: dict, arm: str, phase: str, steps: int | None) -> bool:
    """``r`` is a run of ``arm`` in ``phase`` of ``steps`` steps (any, for ``None``: runs without the field)."""
    return r["arm"] == arm and r["phase"] == phase and (steps is None or r["steps"] == steps)


def _score(runs: list[dict]) -> float:
    """Mean validation bits per byte; a diverged run (``None``) counts as ``+inf``."""
    return float(np.mean([math.inf if r["val_bpb"] is None else r["val_bpb"] for r in runs]))


def _grown(name: str, values: tuple, best: Any, grow_min: int) -> tuple | None:
    """``values`` grown past ``best`` at an end, or ``None`` when it need not (or cannot) grow."""
    numeric = len(values) >= grow_min and all(isinstance(v, float) and not isinstance(v, bool) for v in values)
    if not numeric or best not in (values[0], values[-1]):
        return None
    lo, hi = BOUNDS.get(name, (0.0, math.inf))
    if best == values[-1]:
        new = values[-1] ** 2 / values[-2] if values[-2] > 0 else 2 * values[-1] - values[-2]
        new = min(float(f"{new:.6g}"), hi)
        return None if new <= values[-1] else (*values, new)
    new = values[0] ** 2 / values[1] if values[0] > 0 else None
    if new is None:  # an axis from 0 (a warm-up) has no smaller value to try
        return None
    new = max(float(f"{new:.6g}"), lo)
    return None if new >= values[0] else (new, *values)


def grid_best(axes: tuple[tuple[str, tuple], ...], fixed: dict, arm: str, runs: list[dict], seeds: tuple[int, ...],
              steps: int | None, extend: int, grow_min: int) -> tuple[list[dict], dict | None]:
    """``(settings to run, best)`` of the product of ``axes`` with ``fixed`` given the finished sweep
    ``runs`` of ``steps`` steps (``None``: runs that record none): every setting of the (grown) grid,
    and the best once each has a run on every seed (``None`` before): lowest mean validation bits
    per byte, the earlier setting on a tie."""
    values = [list(v) for _, v in axes]
    names = [f for f, _ in axes]
    grown = [0] * len(values)
    while True:
        settings = [{**fixed, **dict(zip(names, combo))} for combo in itertools.product(*values)]
        scores = []
        for s in settings:
            mine = [r for r in runs if _of(r, arm, "sweep", steps) and all(r.get(k) == v for k, v in s.items())]
            scores.append(_score(mine) if {int(r["seed"]) for r in mine} >= set(seeds) else None)
        if any(sc is None for sc in scores):
            return settings, None
        best = settings[min(range(len(settings)), key=lambda i: (scores[i], i))]
        for i, name in enumerate(names):
            if grown[i] < extend:
                new = _grown(name, tuple(values[i]), best[name], grow_min)
                if new is not None:
                    values[i], grown[i] = list(new), grown[i] + 1
                    break
        else:
            return settings, best


def better_arm(arms: tuple[str, ...], best: dict[str, dict], runs: list[dict], seeds: tuple[int, ...],
               steps: int | None) -> str | None:
    """The better of ``arms`` (a family): the lower mean validation bits per byte of each arm's sweep
    runs at its best on the sweep ``seeds``, the first-listed arm on a tie; ``None`` until every arm
    has a best."""
    if any(a not in best for a in arms):
        return None

    def score(arm):
        return _score([r for r in runs if _of(r, arm, "sweep", steps) and int(r["seed"]) in seeds
                       and all(r.get(k) == v for k, v in best[arm].items())])
    return min(arms, key=lambda a: (score(a), arms.index(a)))


def _stage_size(stage: tuple[tuple[str, tuple], ...]) -> int:
    return math.prod(len(v) for _, v in stage)


def _tune(study: Study, runs: list[dict], state: PlanState) -> dict[str, list[dict]]:
    """Each arm's sweep points so far (its grids, grown), in the study's order; ``state.best`` gains
    each arm whose tuning is complete, ``state.remaining`` the stages not yet open."""
    sweeps: dict[str, list[dict]] = {}
    steps = study.steps if study.records_steps else None
    for t in study.tunings:
        if any(other not in state.best for _, other in t.takes):
            state.remaining += sum(_stage_size(s) for s in t.stages) * len(study.sweep_seeds)
            continue
        values = {k: DEFAULTS[k] for k in study.uses(t.arm)}
        values.update(dict(t.start))
        values.update({f: state.best[other][f] for f, other in t.takes})
        sweeps[t.arm] = []
        for i, stage in enumerate(t.stages):
            settings, best = grid_best(stage, values, t.arm, runs, study.sweep_seeds, steps, t.extend, t.grow_min)
            sweeps[t.arm] += [_point(study, t.arm, seed, "sweep", study.steps, s) for s in settings
                              for seed in study.sweep_seeds]
            if best is None:
                state.remaining += sum(_stage_size(s) for s in t.stages[i + 1:]) * len(study.sweep_seeds)
                break
            values = best
        else:
            state.best[t.arm] = values
    return sweeps


def _arm(entry: str, state: PlanState) -> str | None:
    """The arm an entry names: itself, or ``"family:<name>"``'s better arm (``None`` until known)."""
    return state.better.get(entry.split(":", 1)[1]) if entry.startswith("family:") else entry


def _long(study: Study, runs: list[dict], state: PlanState, done: set) -> list[tuple[list[dict], list[dict]]]:
    """Per long arm, its checks and (once they are done) its long runs; ``state.long_best`` gains each
    arm whose check is complete, ``state.remaining`` what waits on a choice."""
    ratio = study.long_steps / study.steps
    main = dict(study.main_lr)
    out, entered = [], set()
    for entry in study.long_arms:
        arm = _arm(entry, state)
        if arm in entered:  # a family's better arm that the list also names itself
            continue
        if arm is not None:
            entered.add(arm)
        if arm is None or arm not in state.best:
            state.remaining += (len(study.check_factors) + len(study.long_seeds)) * ratio
            continue
        lr_field = main[arm]
        checks = [_point(study, arm, study.check_seed, "check", study.long_steps,
                         {**state.best[arm], lr_field: float(f"{state.best[arm][lr_field] * f:.6g}")})
                  for f in study.check_factors]
        out.append((checks, []))
        if not all(study.key(c) in done for c in checks):
            state.remaining += len(study.long_seeds) * ratio
            continue
        scored = [(_score([r for r in runs if study.key(r) == study.key(c)]), i) for i, c in enumerate(checks)]
        pick = checks[min(scored)[1]]
        state.long_best[arm] = {k: pick[k] for k in study.uses(arm)}
        out[-1][1].extend(_point(study, arm, seed, "long", study.long_steps, state.long_best[arm])
                          for seed in study.long_seeds)
    return out


def plan(study: Study, runs: list[dict]) -> PlanState:
    """The state of ``study`` given its finished ``runs``: what is ready, what remains, each choice.

    ``ready`` in the study's order (:data:`ORDERS`; by default each arm's sweep in the study's order,
    then the paired seeds seed by seed, then the long phase's checks and its runs seed by seed).
    """
    state = PlanState()
    done = {study.key(r) for r in runs}
    sweeps = _tune(study, runs, state)
    for name, arms in study.families:
        arm = better_arm(arms, state.best, runs, study.sweep_seeds, study.steps if study.records_steps else None)
        if arm is not None:
            state.better[name] = arm
    first = [a for a in (_arm(e, state) for e in study.paired_first) if a]
    paired = {a: [_point(study, a, seed, study.paired_phase, study.steps, state.best[a]) for seed in study.paired_seeds]
              for a in first + [a for a, _ in study.arms if a not in first] if a in state.best}
    state.remaining += len(study.paired_seeds) * sum(1 for a, _ in study.arms if a not in state.best)
    longs = _long(study, runs, state, done)
    by_seed = [p[i] for i in range(len(study.paired_seeds)) for p in paired.values()]
    if study.order == "arm_by_arm":
        head = [p for t in study.tunings for p in sweeps.get(t.arm, []) + paired.get(t.arm, [])]
    else:
        head = [p for points in sweeps.values() for p in points] + by_seed
    if study.order == "long_by_arm":
        tail = [p for checks, mine in longs for p in checks + mine]
    else:
        tail = [p for checks, _ in longs for p in checks] + sorted((p for _, mine in longs for p in mine),
                                                                   key=lambda p: p["seed"])
    state.ready = [p for p in head + tail if study.key(p) not in done]
    ratio = study.long_steps / study.steps
    state.remaining += sum(ratio if p.get("steps", study.steps) == study.long_steps else 1 for p in state.ready)
    return state


def _plain(v: Any) -> Any:
    if isinstance(v, (tuple, list)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


def _layout(study: Study) -> dict:
    """The plan as the first three studies' own plan types stored it (:data:`LAYOUTS`): one grid per
    arm, each a single stage (the first and third studies': a single axis)."""
    if any(len(t.stages) != 1 for t in study.tunings):
        raise ValueError(f"{study.name}: layout {study.layout!r} stores one stage per arm")
    seeds = {"sweep_seeds": study.sweep_seeds, "seeds": study.paired_seeds}
    if study.layout == "round1":
        return {"sweeps": [{"arm": t.arm, "swept": t.stages[0][0][0], "values": t.stages[0][0][1], "takes": t.takes,
                            "extend": t.extend} for t in study.tunings], **seeds, "preset": study.preset}
    if study.layout == "round3":
        return {"grids": [{"arm": t.arm, "fixed": t.start, "values": t.stages[0][0][1], "extend": t.extend}
                          for t in study.tunings], **seeds, "steps": study.steps, "preset": study.preset}
    return {"grids": [{"arm": t.arm, "axes": t.stages[0], "takes": t.takes, "extend": t.extend} for t in study.tunings],
            **seeds, "steps": study.steps, "long_steps": study.long_steps, "long_seeds": study.long_seeds,
            "check_seed": study.check_seed, "check_factors": study.check_factors, "preset": study.preset}


def declared(study: Study) -> dict:
    """The study as stored in its results file (and compared when a run resumes), as plain JSON
    values: its fields (those added since the fourth study only where they are not their defaults),
    or the layout its own plan type wrote (``study.layout``, :data:`LAYOUTS`)."""
    if study.layout:
        return _plain(_layout(study))
    defaults = {f.name: f.default for f in dataclasses.fields(Study)}
    return _plain({k: v for k, v in dataclasses.asdict(study).items() if k not in _LATER or v != defaults[k]})

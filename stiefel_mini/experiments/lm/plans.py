"""The language-model studies as data: one plan type, its instances, and the plan read against the runs.

A study (:class:`Study`) is a declared plan: its arms and how each is built (:attr:`Study.arms`,
``arm -> recipe``, the recipes of :mod:`~stiefel_mini.experiments.lm.arms`), how each arm is tuned
(:class:`Tuning`: stages of grids on the sweep seeds, each around the last stage's best), the
baseline families whose better arm a comparison names, an optional paired phase at the sweep's
length, and an optional long phase (each long arm's main lr re-checked at a few factors on one
sweep seed, then its best on the long seeds). :func:`plan` reads a study against its finished runs:
which runs are ready, what remains, each arm's best and each family's better arm. It is a pure
function, so a study resumes from its results file and the evidence layer reads the same choices
the runner made; this module imports no torch and no runner.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["RECIPES", "DEFAULTS", "BOUNDS", "Tuning", "Study", "PlanState", "point_key", "grid_best", "better_arm",
           "plan", "declared"]

RECIPES: dict[str, tuple[str, ...]] = {
    "adamw": ("lr", "warmup_frac"),
    "adamw_qknorm": ("lr", "warmup_frac", "scale_lr"),
    "muon": ("lr", "warmup_frac", "muon_lr"),
    "muon_qknorm": ("lr", "warmup_frac", "muon_lr", "scale_lr"),
    "stiefel": ("lr", "warmup_frac", "frame_lr", "max_step", "scale_lr"),
    "stiefel_muon": ("lr", "warmup_frac", "muon_lr", "frame_lr", "scale_lr"),
    "all_stiefel": ("lr", "warmup_frac", "frame_lr", "max_iter"),
}
"""The fourth study's recipes (:mod:`~stiefel_mini.experiments.lm.arms` builds them): recipe ->
the settings it reads; a run records the others as ``None``."""

DEFAULTS: dict[str, Any] = {"lr": 2e-3, "warmup_frac": 0.05, "frame_lr": 0.03, "max_step": 0.1, "muon_lr": 0.02,
                            "per_head": False, "scale_lr": 0.3, "max_iter": 20}
"""A setting an arm reads but neither tunes, fixes nor takes keeps this value."""

BOUNDS: dict[str, tuple[float, float]] = {"warmup_frac": (0.0, 1.0)}
"""A grid axis of these settings does not grow past its bounds (a warm-up is a fraction of the run)."""


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
    of those on ``long_seeds``. ``fields``: the settings a run records, in its key's order."""

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

    def __post_init__(self) -> None:
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
        for arm in self.long_arms:
            if not arm.startswith("family:") and arm not in names:
                raise ValueError(f"{self.name}: long arm {arm!r} is neither an arm nor 'family:<name>'")

    def recipe(self, arm: str) -> str:
        """The recipe ``arm`` is built by."""
        return dict(self.arms)[arm]

    def uses(self, arm: str) -> tuple[str, ...]:
        """The settings ``arm`` reads (its recipe's, :data:`RECIPES`)."""
        return RECIPES[self.recipe(arm)]

    def tuning(self, arm: str) -> Tuning:
        """The :class:`Tuning` of ``arm``."""
        return next(t for t in self.tunings if t.arm == arm)


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


def point_key(r: dict, fields: tuple[str, ...]) -> tuple:
    """What tells two runs apart: ``(arm, seed, phase, steps, *fields)``."""
    return (r["arm"], int(r["seed"]), r["phase"], int(r["steps"]), *(r.get(k) for k in fields))


def _point(study: Study, arm: str, seed: int, phase: str, steps: int, values: dict) -> dict:
    uses = study.uses(arm)
    return {"arm": arm, "seed": seed, "phase": phase, "steps": steps,
            **{k: (values[k] if k in uses else None) for k in study.fields}}


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
              steps: int, extend: int, grow_min: int) -> tuple[list[dict], dict | None]:
    """``(settings to run, best)`` of the product of ``axes`` with ``fixed`` given the finished sweep
    ``runs``: every setting of the (grown) grid, and the best once each has a run on every seed
    (``None`` before): lowest mean validation bits per byte, the earlier setting on a tie."""
    values = [list(v) for _, v in axes]
    names = [f for f, _ in axes]
    grown = [0] * len(values)
    while True:
        settings = [{**fixed, **dict(zip(names, combo))} for combo in itertools.product(*values)]
        scores = []
        for s in settings:
            mine = [r for r in runs if r["arm"] == arm and r["phase"] == "sweep" and r["steps"] == steps
                    and all(r.get(k) == v for k, v in s.items())]
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
               steps: int) -> str | None:
    """The better of ``arms`` (a family): the lower mean validation bits per byte of each arm's sweep
    runs at its best on the sweep ``seeds``, the first-listed arm on a tie; ``None`` until every arm
    has a best."""
    if any(a not in best for a in arms):
        return None

    def score(arm):
        return _score([r for r in runs if r["arm"] == arm and r["phase"] == "sweep" and r["steps"] == steps
                       and int(r["seed"]) in seeds and all(r.get(k) == v for k, v in best[arm].items())])
    return min(arms, key=lambda a: (score(a), arms.index(a)))


def _stage_size(stage: tuple[tuple[str, tuple], ...]) -> int:
    return math.prod(len(v) for _, v in stage)


def plan(study: Study, runs: list[dict]) -> PlanState:
    """The state of ``study`` given its finished ``runs``: what is ready, what remains, each choice.

    Order of ``ready``: each arm's sweep (in the study's order), then the paired seeds seed by seed,
    then the long phase's checks and its runs seed by seed.
    """
    state = PlanState()
    key = lambda r: point_key(r, study.fields)  # noqa: E731
    done = {key(r) for r in runs}
    sweeps, paired, checks, longs = [], [], [], []
    ratio = study.long_steps / study.steps
    for t in study.tunings:
        if any(other not in state.best for _, other in t.takes):
            state.remaining += sum(_stage_size(s) for s in t.stages) * len(study.sweep_seeds)
            continue
        values = {k: DEFAULTS[k] for k in study.uses(t.arm)}
        values.update(dict(t.start))
        values.update({f: state.best[other][f] for f, other in t.takes})
        for i, stage in enumerate(t.stages):
            settings, best = grid_best(stage, values, t.arm, runs, study.sweep_seeds, study.steps, t.extend,
                                       t.grow_min)
            sweeps += [_point(study, t.arm, seed, "sweep", study.steps, s) for s in settings
                       for seed in study.sweep_seeds]
            if best is None:
                state.remaining += sum(_stage_size(s) for s in t.stages[i + 1:]) * len(study.sweep_seeds)
                break
            values = best
        else:
            state.best[t.arm] = values
    for name, arms in study.families:
        arm = better_arm(arms, state.best, runs, study.sweep_seeds, study.steps)
        if arm is not None:
            state.better[name] = arm
    for seed in study.paired_seeds:
        paired += [_point(study, a, seed, "paired", study.steps, state.best[a]) for a, _ in study.arms
                   if a in state.best]
    state.remaining += len(study.paired_seeds) * sum(1 for a, _ in study.arms if a not in state.best)
    main = dict(study.main_lr)
    entered: set[str] = set()
    for entry in study.long_arms:
        arm = state.better.get(entry.split(":", 1)[1]) if entry.startswith("family:") else entry
        if arm in entered:  # a family's better arm that the list also names itself
            continue
        if arm is not None:
            entered.add(arm)
        if arm is None or arm not in state.best:
            state.remaining += (len(study.check_factors) + len(study.long_seeds)) * ratio
            continue
        lr_field = main[arm]
        mine = [_point(study, arm, study.check_seed, "check", study.long_steps,
                       {**state.best[arm], lr_field: float(f"{state.best[arm][lr_field] * f:.6g}")})
                for f in study.check_factors]
        checks += mine
        if not all(key(c) in done for c in mine):
            state.remaining += len(study.long_seeds) * ratio
            continue
        scored = [(_score([r for r in runs if key(r) == key(c)]), i) for i, c in enumerate(mine)]
        pick = mine[min(scored)[1]]
        state.long_best[arm] = {k: pick[k] for k in study.uses(arm)}
        longs += [_point(study, arm, seed, "long", study.long_steps, state.long_best[arm]) for seed in study.long_seeds]
    longs.sort(key=lambda p: p["seed"])
    state.ready = [p for p in sweeps + paired + checks + longs if key(p) not in done]
    state.remaining += sum(ratio if p["steps"] == study.long_steps else 1 for p in state.ready)
    return state


def declared(study: Study) -> dict:
    """The study as stored in its results file (and compared when a run resumes): its fields as plain
    JSON values."""
    def plain(v: Any) -> Any:
        if isinstance(v, (tuple, list)):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return v
    return plain(dataclasses.asdict(study))

"""The second language-model study (round 2) as data, and the plan read against its runs.

Six arms (:data:`ARMS2`) in two families: AdamW with and without QK-norm, Muon with and without
QK-norm, and the two Stiefel arms, StiefelAdam against the AdamW family and StiefelMuon (manifold
Muon on the frames) against the Muon family. :data:`ROUND2` is the plan: each arm's sweep, a grid
of one or two fields on two sweep seeds that no comparison uses (a best at an end of a grid axis of
three or more values grows that axis); then every arm at its best on 16 paired seeds; then a long
phase (3x the steps) for ``stiefel`` and the better AdamW-family arm, each with its lr re-checked
at three points on one sweep seed. :func:`plan2` is a pure function of the plan and the finished
runs (which runs are ready, each best, the better arm of each family), so the study resumes from
its results file. The comparisons this study answers are declared in
:data:`stiefel_mini.evidence.claims.LM2_CLAIMS`; :func:`better_arm` is the rule they name.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np

__all__ = ["ARMS2", "FAMILIES", "FIELDS", "USES2", "ArmGrid", "Round2", "ROUND2", "Plan2", "point_key",
           "grid_best", "better_arm", "plan2", "budget"]

ARMS2 = {
    "adamw": "AdamW on every weight",
    "adamw_qknorm": "AdamW on every weight, queries and keys RMS-normalised per head (QK-norm)",
    "stiefel": "StiefelAdam on the Q/K frames (learned logit scale), AdamW on the rest",
    "muon": "Muon on the hidden matrices (Q|K|V whole or per head), AdamW on embeddings and vectors",
    "muon_qknorm": "Muon as in muon, with QK-norm",
    "stiefel_muon": "StiefelMuon: manifold Muon on the Q/K frames (learned logit scale), Muon on the other "
                    "hidden matrices, AdamW on embeddings and vectors",
}
"""Round 2's arms: name -> what trains what."""

FAMILIES = {"adamw": ("adamw", "adamw_qknorm"), "muon": ("muon", "muon_qknorm")}
"""The baseline families: each Stiefel arm is compared with the better arm of its family."""

FIELDS = ("lr", "warmup_frac", "frame_lr", "max_step", "muon_lr", "per_head")
"""The settings a run records; ``lr`` is AdamW's (every weight for the AdamW family, the rest otherwise)."""

USES2 = {
    "adamw": ("lr", "warmup_frac"),
    "adamw_qknorm": ("lr", "warmup_frac"),
    "stiefel": ("lr", "warmup_frac", "frame_lr", "max_step"),
    "muon": ("lr", "warmup_frac", "muon_lr", "per_head"),
    "muon_qknorm": ("lr", "warmup_frac", "muon_lr", "per_head"),
    "stiefel_muon": ("lr", "warmup_frac", "muon_lr", "per_head", "frame_lr"),
}
"""The fields each arm reads; the others are stored as ``None``."""

DEFAULTS = {"lr": 2e-3, "warmup_frac": 0.05, "frame_lr": 0.03, "max_step": 0.1, "muon_lr": 0.02,
            "per_head": False}
"""A field an arm uses but neither sweeps nor takes keeps this value."""

MAIN_LR = {"adamw": "lr", "adamw_qknorm": "lr", "stiefel": "frame_lr"}
"""The lr the long phase's three-point check scales, per arm that can enter the long phase."""


@dataclass(frozen=True)
class ArmGrid:
    """An arm's sweep: the product of ``axes`` (``(field, values)``), every field of ``takes``
    (``(field, arm)``) at that arm's best. An axis of three or more increasing numbers whose best
    sits at an end grows by one value beyond it (the ratio of its two end values), up to ``extend``
    times per end; shorter axes and booleans are categorical."""

    arm: str
    axes: tuple[tuple[str, tuple], ...]
    takes: tuple[tuple[str, str], ...] = ()
    extend: int = 2

    def __post_init__(self) -> None:
        if self.arm not in ARMS2:
            raise ValueError(f"unknown arm {self.arm!r}; choose one of {sorted(ARMS2)}")
        names = [f for f, _ in self.axes] + [f for f, _ in self.takes]
        if any(f not in USES2[self.arm] for f in names) or len(set(names)) != len(names):
            raise ValueError(f"{self.arm}: swept and taken fields must be distinct fields it uses "
                             f"{USES2[self.arm]}; got {names}")
        if math.prod(len(v) for _, v in self.axes) < 4:
            raise ValueError(f"{self.arm}: sweep at least four settings; got {self.axes}")


@dataclass(frozen=True)
class Round2:
    """The plan: grids on ``sweep_seeds``; every arm at its best on ``seeds`` (``steps`` each);
    ``long_steps`` for ``stiefel`` and the better AdamW-family arm on ``long_seeds``, each at the best
    of ``check_factors`` times its short best main lr (:data:`MAIN_LR`) on ``check_seed``."""

    grids: tuple[ArmGrid, ...]
    sweep_seeds: tuple[int, ...] = (100, 101)
    seeds: tuple[int, ...] = tuple(range(16))
    steps: int = 800
    long_steps: int = 2400
    long_seeds: tuple[int, ...] = tuple(range(8))
    check_seed: int = 100
    check_factors: tuple[float, ...] = (0.5, 1.0, 2.0)
    preset: str = "cpu"

    def __post_init__(self) -> None:
        arms = [g.arm for g in self.grids]
        if sorted(arms) != sorted(ARMS2):
            raise ValueError(f"every arm is swept exactly once; got {arms}")
        for g in self.grids:
            for _, other in g.takes:
                if arms.index(other) >= arms.index(g.arm):
                    raise ValueError(f"{g.arm} takes a value at {other}'s best: sweep {other} first")
        if set(self.sweep_seeds) & (set(self.seeds) | set(self.long_seeds)) or self.check_seed not in self.sweep_seeds:
            raise ValueError("the sweeps' seeds (and the check seed among them) must not be the comparisons' seeds")

    def grid(self, arm: str) -> ArmGrid:
        """The :class:`ArmGrid` of ``arm``."""
        return next(g for g in self.grids if g.arm == arm)


ROUND2 = Round2(grids=(
    ArmGrid("adamw", (("lr", (1e-3, 2e-3, 4e-3)), ("warmup_frac", (0.05, 0.25)))),
    ArmGrid("adamw_qknorm", (("lr", (2e-3, 4e-3, 8e-3, 1.6e-2)),), takes=(("warmup_frac", "adamw"),)),
    ArmGrid("stiefel", (("frame_lr", (0.03, 0.1, 0.3)), ("max_step", (0.3, 1.0))),
            takes=(("lr", "adamw"), ("warmup_frac", "adamw"))),
    ArmGrid("muon", (("muon_lr", (0.005, 0.01, 0.02)), ("per_head", (False, True))),
            takes=(("lr", "adamw"), ("warmup_frac", "adamw"))),
    ArmGrid("muon_qknorm", (("muon_lr", (0.005, 0.01, 0.02, 0.04)),),
            takes=(("lr", "adamw"), ("warmup_frac", "adamw"), ("per_head", "muon"))),
    ArmGrid("stiefel_muon", (("frame_lr", (0.005, 0.01, 0.02, 0.04)),),
            takes=(("lr", "adamw"), ("warmup_frac", "adamw"), ("muon_lr", "muon"), ("per_head", "muon"))),
))
"""The round-2 study of ``results/lm/round2.json``. StiefelAdam's frame lr is swept with the trust
cap at or above it (0.3 and 1.0: round 1's cap of 0.1 bound at its best frame lr); StiefelMuon's
frame lr is a spectral length (radians per step), hence its smaller values."""


@dataclass
class Plan2:
    """``ready``: runs that can start now, in order; ``remaining``: runs not finished (counting those
    still waiting on a choice, in 800-step runs: a long run counts ``long_steps / steps``);
    ``best``: each swept arm's settings at its best; ``better``: each family's better arm, once known;
    ``long_best``: the long phase's settings per arm, once its check is complete."""

    ready: list[dict] = field(default_factory=list)
    remaining: float = 0.0
    best: dict[str, dict] = field(default_factory=dict)
    better: dict[str, str] = field(default_factory=dict)
    long_best: dict[str, dict] = field(default_factory=dict)


def point_key(r: dict) -> tuple:
    """What tells two runs apart: ``(arm, seed, phase, steps, *FIELDS)``."""
    return (r["arm"], int(r["seed"]), r["phase"], int(r["steps"]), *(r.get(k) for k in FIELDS))


def _point(arm: str, seed: int, phase: str, steps: int, values: dict) -> dict:
    return {"arm": arm, "seed": seed, "phase": phase, "steps": steps,
            **{k: (values[k] if k in USES2[arm] else None) for k in FIELDS}}


def _score(runs: list[dict]) -> float:
    """Mean validation bits per byte; a diverged run (``None``) counts as ``+inf``."""
    return float(np.mean([math.inf if r["val_bpb"] is None else r["val_bpb"] for r in runs]))


def _grown(values: tuple, best) -> tuple | None:
    """``values`` grown past ``best`` at an end, or ``None`` when it need not (or cannot) grow."""
    numeric = len(values) >= 3 and all(isinstance(v, float) for v in values)
    if not numeric or best not in (values[0], values[-1]):
        return None
    if best == values[-1]:
        return (*values, float(f"{values[-1] ** 2 / values[-2]:.6g}"))
    return (float(f"{values[0] ** 2 / values[1]:.6g}"), *values)


def grid_best(g: ArmGrid, fixed: dict, runs: list[dict], seeds: tuple[int, ...], steps: int
              ) -> tuple[list[dict], dict | None]:
    """``(settings to run, best)`` of grid ``g`` with ``fixed`` (the taken fields) given the finished
    sweep ``runs``: every setting of the (grown) grid, and the best once each has a run on every
    seed (``None`` before): lowest mean validation bits per byte, the earlier setting on a tie."""
    axes = [list(v) for _, v in g.axes]
    names = [f for f, _ in g.axes]
    grown = [0] * len(axes)
    while True:
        settings = [{**fixed, **dict(zip(names, combo))} for combo in itertools.product(*axes)]
        scores = []
        for s in settings:
            mine = [r for r in runs if r["arm"] == g.arm and r["phase"] == "sweep" and r["steps"] == steps
                    and all(r.get(k) == v for k, v in s.items())]
            got = {int(r["seed"]) for r in mine}
            scores.append(_score(mine) if got >= set(seeds) else None)
        if any(sc is None for sc in scores):
            return settings, None
        best = settings[min(range(len(settings)), key=lambda i: (scores[i], i))]
        for i, name in enumerate(names):
            if grown[i] < g.extend:
                new = _grown(tuple(axes[i]), best[name])
                if new is not None:
                    axes[i], grown[i] = list(new), grown[i] + 1
                    break
        else:
            return settings, best


def better_arm(family: str, best: dict[str, dict], runs: list[dict], seeds: tuple[int, ...], steps: int) -> str | None:
    """The better arm of ``family`` (:data:`FAMILIES`): the lower mean validation bits per byte of
    each arm's sweep runs at its best on the sweep ``seeds``, the first-listed arm on a tie; ``None``
    until every arm of the family has a best. This is the choice the round-2 primaries name."""
    arms = FAMILIES[family]
    if any(a not in best for a in arms):
        return None
    def score(arm):
        mine = [r for r in runs if r["arm"] == arm and r["phase"] == "sweep" and r["steps"] == steps
                and int(r["seed"]) in seeds and all(r.get(k) == v for k, v in best[arm].items())]
        return _score(mine)
    return min(arms, key=lambda a: (score(a), arms.index(a)))


def plan2(study: Round2, runs: list[dict]) -> Plan2:
    """The state of ``study`` given the finished ``runs``: what is ready, what remains, each choice.

    Order of ``ready``: sweeps (in the plan's order), then paired seeds seed by seed (the primaries'
    arms first: ``stiefel``, the better AdamW-family arm, ``stiefel_muon``, the better Muon-family
    arm, then the others), then the long phase's checks and runs.
    """
    state = Plan2()
    done = {point_key(r) for r in runs}
    sweeps, paired, longs = [], [], []
    long_ratio = study.long_steps / study.steps
    for g in study.grids:
        if any(other not in state.best for _, other in g.takes):
            state.remaining += math.prod(len(v) for _, v in g.axes) * len(study.sweep_seeds) + len(study.seeds)
            continue
        fixed = {k: DEFAULTS[k] for k in USES2[g.arm]}
        fixed.update({f: state.best[other][f] for f, other in g.takes})
        settings, best = grid_best(g, fixed, runs, study.sweep_seeds, study.steps)
        sweeps += [_point(g.arm, seed, "sweep", study.steps, s) for s in settings for seed in study.sweep_seeds]
        if best is None:
            state.remaining += len(study.seeds)
            continue
        state.best[g.arm] = best
    for family in FAMILIES:
        arm = better_arm(family, state.best, runs, study.sweep_seeds, study.steps)
        if arm is not None:
            state.better[family] = arm
    first = ["stiefel", state.better.get("adamw"), "stiefel_muon", state.better.get("muon")]
    order = [a for a in first if a] + [a for a in ARMS2 if a not in first]
    for seed in study.seeds:
        paired += [_point(a, seed, "paired", study.steps, state.best[a]) for a in order if a in state.best]
    long_arms = ["stiefel", state.better.get("adamw")]
    for arm in long_arms:
        if arm is None or arm not in state.best:
            state.remaining += (len(study.check_factors) + len(study.long_seeds)) * long_ratio
            continue
        main = MAIN_LR[arm]
        checks = [_point(arm, study.check_seed, "check", study.long_steps,
                         {**state.best[arm], main: float(f"{state.best[arm][main] * f:.6g}")})
                  for f in study.check_factors]
        longs += checks
        if not all(point_key(c) in done for c in checks):
            state.remaining += len(study.long_seeds) * long_ratio
            continue
        scored = [(_score([r for r in runs if point_key(r) == point_key(c)]), i) for i, c in enumerate(checks)]
        pick = checks[min(scored)[1]]
        state.long_best[arm] = {k: pick[k] for k in USES2[arm]}
        longs += [_point(arm, seed, "long", study.long_steps, state.long_best[arm]) for seed in study.long_seeds]
    state.ready = [p for p in sweeps + paired + longs if point_key(p) not in done]
    state.remaining += sum(long_ratio if p["steps"] == study.long_steps else 1 for p in state.ready)
    return state


def budget(study: Round2, minutes_per_run: float) -> dict:
    """The plan's size before any growth: runs per phase, in 800-step run equivalents, and CPU hours."""
    sweep = sum(math.prod(len(v) for _, v in g.axes) for g in study.grids) * len(study.sweep_seeds)
    paired = len(ARMS2) * len(study.seeds)
    ratio = study.long_steps / study.steps
    long_ = 2 * (len(study.check_factors) + len(study.long_seeds)) * ratio
    total = sweep + paired + long_
    return {"sweep": sweep, "paired": paired, "long_equivalents": long_, "equivalents": total,
            "cpu_hours": total * minutes_per_run / 60}

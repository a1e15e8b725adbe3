"""The third language-model study (round 3): the Stiefel arms with a logit scale at an lr of its own.

Round 2's Stiefel arms train their learned per-head logit scale with AdamW at the other weights' lr
(2e-3); over an 800-step run that bounds how far the scale can grow
(:func:`~stiefel_mini.experiments.lm.model.scale_growth_bound`: 5.6-fold), and their attention stayed
close to uniform. Round 3 gives each Stiefel arm's scale an lr of its own (``scale_lr``), swept on
round 2's sweep seeds with every other setting at the arm's round-2 best (:data:`ROUND3`), then runs
each arm at its best on round 2's 16 paired seeds, so that its runs pair with round 2's baselines.
:func:`plan3` is a pure function of the plan and the finished runs, as
:func:`~stiefel_mini.experiments.lm.round2.plan2` is; the comparisons are declared in
:data:`stiefel_mini.evidence.claims.LM2_CLAIMS` (``lm3_scale``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from stiefel_mini.experiments.lm import round2_run
from stiefel_mini.experiments.lm.config import LMConfig
from stiefel_mini.experiments.lm.experiment import Schedule
from stiefel_mini.experiments.lm.round2 import FIELDS, ROUND2, USES2, Plan2, grid_best, point_key
from stiefel_mini.experiments.records import jsonable

__all__ = ["ARMS3", "BASE3", "ScaleGrid", "Round3", "ROUND3", "point_key3", "plan3", "run_point", "schedule"]

ARMS3 = {
    "stiefel_scale": "StiefelAdam as in stiefel, its learned logit scale at an lr of its own",
    "stiefel_muon_scale": "StiefelMuon as in stiefel_muon, its learned logit scale at an lr of its own",
}
"""Round 3's arms: name -> what trains what."""

BASE3 = {"stiefel_scale": "stiefel", "stiefel_muon_scale": "stiefel_muon"}
"""The round-2 arm each round-3 arm is, but for its scale's lr."""


@dataclass(frozen=True)
class ScaleGrid:
    """One arm's sweep of ``scale_lr`` over ``values``, every field of its round-2 arm fixed at
    ``fixed`` (round 2's best); a best at an end grows the axis, up to ``extend`` times per end, as
    :class:`~stiefel_mini.experiments.lm.round2.ArmGrid` does."""

    arm: str
    fixed: tuple[tuple[str, object], ...]
    values: tuple[float, ...] = (0.03, 0.1, 0.3, 1.0)
    extend: int = 2

    def __post_init__(self) -> None:
        if self.arm not in ARMS3:
            raise ValueError(f"unknown arm {self.arm!r}; choose one of {sorted(ARMS3)}")
        if sorted(f for f, _ in self.fixed) != sorted(USES2[BASE3[self.arm]]):
            raise ValueError(f"{self.arm}: fix every field {BASE3[self.arm]} uses, {USES2[BASE3[self.arm]]}; "
                             f"got {[f for f, _ in self.fixed]}")
        if len(self.values) < 4 or list(self.values) != sorted(set(self.values)):
            raise ValueError(f"{self.arm}: sweep at least four increasing values; got {self.values}")

    @property
    def axes(self) -> tuple[tuple[str, tuple[float, ...]], ...]:
        """The one axis, as :func:`~stiefel_mini.experiments.lm.round2.grid_best` reads a grid."""
        return (("scale_lr", self.values),)


@dataclass(frozen=True)
class Round3:
    """The plan: each grid on round 2's ``sweep_seeds``, then each arm at its best on ``seeds``."""

    grids: tuple[ScaleGrid, ...]
    sweep_seeds: tuple[int, ...] = ROUND2.sweep_seeds
    seeds: tuple[int, ...] = ROUND2.seeds
    steps: int = ROUND2.steps
    preset: str = ROUND2.preset


ROUND3 = Round3(grids=(
    ScaleGrid("stiefel_scale", (("lr", 2e-3), ("warmup_frac", 0.25), ("frame_lr", 0.3), ("max_step", 0.3))),
    ScaleGrid("stiefel_muon_scale", (("lr", 2e-3), ("warmup_frac", 0.25), ("muon_lr", 0.01), ("per_head", True),
                                     ("frame_lr", 0.02))),
))
"""The round-3 study of ``results/lm/round3.json``: ``scale_lr`` from 15 to 500 times round 2's lr of
2e-3 (at 0.03 the scale can already grow about 10^11-fold in a run), the rest at round 2's bests
(``plan2(ROUND2, runs).best`` of its committed runs, which a test checks)."""


def point_key3(r: dict) -> tuple:
    """What tells two round-3 runs apart: round 2's :func:`~stiefel_mini.experiments.lm.round2.point_key`
    and the ``scale_lr``."""
    return (*point_key(r), r.get("scale_lr"))


def _point(arm: str, seed: int, phase: str, steps: int, values: dict) -> dict:
    uses = USES2[BASE3[arm]]
    return {"arm": arm, "seed": seed, "phase": phase, "steps": steps,
            **{k: (values[k] if k in uses else None) for k in FIELDS}, "scale_lr": values["scale_lr"]}


def plan3(study: Round3, runs: list[dict]) -> Plan2:
    """The state of ``study`` given the finished ``runs`` (``ready``, ``remaining``, ``best``; no
    family and no long phase). Order of ``ready``: each arm's sweep, then its paired seeds, arm by arm."""
    state = Plan2()
    done = {point_key3(r) for r in runs}
    order = []
    for g in study.grids:
        settings, best = grid_best(g, dict(g.fixed), runs, study.sweep_seeds, study.steps)
        order += [_point(g.arm, seed, "sweep", study.steps, s) for s in settings for seed in study.sweep_seeds]
        if best is None:
            state.remaining += len(study.seeds)
            continue
        state.best[g.arm] = best
        order += [_point(g.arm, seed, "paired", study.steps, best) for seed in study.seeds]
    state.ready = [p for p in order if point_key3(p) not in done]
    state.remaining += len(state.ready)
    return state


def run_point(cfg: LMConfig, point: dict, commit: dict) -> dict:
    """One round-3 run: round 2's run of the arm's round-2 arm with the point's ``scale_lr``
    (:func:`~stiefel_mini.experiments.lm.round2_run.run_point`), recorded under the round-3 arm."""
    return {**round2_run.run_point(cfg, {**point, "arm": BASE3[point["arm"]]}, commit), "arm": point["arm"]}


def schedule(study: Round3 = ROUND3) -> Schedule:
    """The :class:`~stiefel_mini.experiments.lm.experiment.Schedule` of the third study."""
    def state(runs):
        s = plan3(study, runs)
        return s.ready, s.remaining
    return Schedule(state, point_key3, run_point, jsonable(dataclasses.asdict(study)), study.seeds)

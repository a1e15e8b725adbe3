"""Which runs of the language-model study are ready, and each arm's best lr: the plan read against the runs.

:func:`plan` is a pure function of the study (:class:`~stiefel_mini.experiments.lm.config.LMStudy`)
and the runs finished so far, so an interrupted study resumes where it stopped and two processes
never need to agree on anything but the results file. An arm's sweep waits until the arms it takes
an lr from have a best; its best is the value of lowest mean validation bits per byte over the
sweep seeds, once every value of its grid has run; a best at an end of the grid grows the grid
(:class:`~stiefel_mini.experiments.lm.config.ArmSweep`); then its paired seeds are ready.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from stiefel_mini.experiments.lm.config import SWEPT, ArmSweep, LMConfig, LMStudy

__all__ = ["USES", "PlanState", "run_settings", "sweep_grid", "plan"]

USES = {"adamw": ("lr",), "frozen": ("lr",), "stiefel": ("lr", "frame_lr"), "muon": ("lr", "muon_lr"),
        "muon_stiefel": ("lr", "frame_lr", "muon_lr")}
"""The lr fields each arm's optimizers read; the others are stored as ``None``."""


@dataclass
class PlanState:
    """``ready``: runs that can start now, sweeps first; ``remaining``: runs not yet finished, counting
    those still waiting on another arm's best; ``best``: per arm whose sweep is complete, its lr
    fields at its best (``{"lr": 0.002, "frame_lr": 0.1}``); ``grids``: each arm's swept values so far."""

    ready: list[dict] = field(default_factory=list)
    remaining: int = 0
    best: dict[str, dict[str, float]] = field(default_factory=dict)
    grids: dict[str, list[float]] = field(default_factory=dict)


def run_settings(r: dict) -> tuple:
    """``(arm, seed, phase, lr, frame_lr, muon_lr)``: what tells two runs apart."""
    return (r["arm"], int(r["seed"]), r["phase"], *(r.get(k) for k in SWEPT))


def _point(arm: str, seed: int, phase: str, values: dict[str, float]) -> dict:
    return {"arm": arm, "seed": seed, "phase": phase,
            **{k: (float(values[k]) if k in USES[arm] else None) for k in SWEPT}}


def _next(a: float, b: float) -> float:
    """The value beyond ``b`` on the grid's ratio ``b / a``, to 6 significant digits."""
    return float(f"{b * b / a:.6g}")


def sweep_grid(s: ArmSweep, done: dict[float, list[float | None]]) -> tuple[list[float], float | None]:
    """``(values, best)`` of sweep ``s`` given ``done`` (value -> validation bpb of its finished sweep
    runs, one per sweep seed when complete; ``None`` for a run that diverged, which counts as
    ``+inf``): the grid grown past a best at an end, and the best once every value has run (``None``
    before), lowest mean bpb, the smaller value on a tie."""
    values = list(s.values)
    for grown in range(s.extend + 1):
        means = {v: float(np.mean([math.inf if b is None else b for b in done[v]])) if done.get(v) else None
                 for v in values}
        if any(m is None for m in means.values()):
            return values, None
        best = min(values, key=lambda v: (means[v], v))
        if grown == s.extend or best not in (values[0], values[-1]):
            return values, best
        if best == values[0]:
            values.insert(0, _next(values[1], values[0]))
        else:
            values.append(_next(values[-2], values[-1]))
    return values, best


def plan(study: LMStudy, runs: list[dict], base: LMConfig | None = None) -> PlanState:
    """The state of ``study`` given the finished ``runs``: what is ready, what remains, each best.

    A field an arm uses but neither sweeps nor takes keeps ``base``'s value (default config).
    """
    base = base or LMConfig()
    finished = {run_settings(r): r for r in runs}
    state = PlanState()
    waiting: list[dict] = []
    seeds_ready: list[dict] = []
    for s in study.sweeps:
        if any(other not in state.best for _, other in s.takes):
            state.remaining += len(s.values) * len(study.sweep_seeds) + len(study.seeds)
            continue
        fixed = {k: getattr(base.optimizer, k) for k in USES[s.arm]}
        fixed.update({f: state.best[other][f] for f, other in s.takes})
        done: dict[float, list[float]] = {}
        for r in runs:
            if r["arm"] == s.arm and r["phase"] == "sweep" and r["seed"] in study.sweep_seeds and \
                    all(r.get(f) == fixed[f] for f, _ in s.takes):
                done.setdefault(r[s.swept], []).append(r["val_bpb"])
        done = {v: b for v, b in done.items() if len(b) == len(study.sweep_seeds)}
        values, best = sweep_grid(s, done)
        state.grids[s.arm] = values
        for seed in study.sweep_seeds:
            for v in values:
                p = _point(s.arm, seed, "sweep", {**fixed, s.swept: v})
                if run_settings(p) not in finished:
                    waiting.append(p)
        if best is None:
            state.remaining += len(study.seeds)
            continue
        state.best[s.arm] = {**fixed, s.swept: best}
        for seed in study.seeds:
            p = _point(s.arm, seed, "seeds", state.best[s.arm])
            if run_settings(p) not in finished:
                seeds_ready.append(p)
    seeds_ready.sort(key=lambda p: (p["seed"], [s.arm for s in study.sweeps].index(p["arm"])))
    state.ready = waiting + seeds_ready
    state.remaining += len(state.ready)
    return state

"""The command line of the second and third language-model studies: run one, or read its plan.

``round2`` runs :data:`~stiefel_mini.experiments.lm.round2.ROUND2` into ``results/lm/round2.json``,
``round3`` runs :data:`~stiefel_mini.experiments.lm.round3.ROUND3` into ``results/lm/round3.json``,
each with :func:`~stiefel_mini.experiments.lm.experiment.study` (resumable); ``--dry_run true``
reads the results file and prints what is left, running nothing. Usage::

    python -m stiefel_mini.experiments.lm round2 --workers 2
    python -m stiefel_mini.experiments.lm round3 --dry_run true
"""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path
from typing import Sequence

from stiefel_mini.experiments.config import parse_config, split_argv
from stiefel_mini.experiments.lm import round2_run, round3
from stiefel_mini.experiments.lm.config import PRESETS, LMConfig
from stiefel_mini.experiments.lm.experiment import study
from stiefel_mini.experiments.lm.round2 import ROUND2, budget, plan2
from stiefel_mini.experiments.records import load_results
from stiefel_mini.experiments.runner import parse_cli

__all__ = ["ROUNDS", "measured_minutes_per_run", "parse_args", "main"]

ROUNDS = ("round2", "round3")
"""The commands this module answers."""


@dataclasses.dataclass
class _Round2Args:
    workers: int = 2
    out: str = "results/lm/round2.json"
    dry_run: bool = False
    minutes_per_run: float = 7.5


@dataclasses.dataclass
class _Round3Args(_Round2Args):
    out: str = "results/lm/round3.json"


def parse_args(argv: Sequence[str]) -> tuple[str, _Round2Args, LMConfig]:
    """``(command, its arguments, the base config)`` of ``argv`` (``round2 ...`` or ``round3 ...``)."""
    if not argv or argv[0] not in ROUNDS:
        raise ValueError(f"expected one of {list(ROUNDS)} first; got {list(argv)[:1]}")
    kind, cls = argv[0], (_Round2Args if argv[0] == "round2" else _Round3Args)
    mine, rest = split_argv(list(argv[1:]), cls)
    base, _, _ = parse_cli(LMConfig, rest, presets=PRESETS, default_preset="cpu")
    return kind, parse_config(cls, mine), base


def measured_minutes_per_run(runs: Sequence[dict], steps: int = 800) -> tuple[float, int] | None:
    """The pace the finished ``runs`` kept: median wall-clock minutes per ``steps`` steps, and how many.

    ``median_r(wall_time_s_r / steps_r) * steps / 60`` over the runs that record both; None if none does.
    The plan's ``minutes_per_run`` is an estimate for an idle core; this is what the machine that ran
    them took, with its other worker and anything else it ran at the time."""
    paces = [r["wall_time_s"] / r["steps"] for r in runs if r.get("wall_time_s") and r.get("steps")]
    return (statistics.median(paces) * steps / 60, len(paces)) if paces else None


def main(argv: Sequence[str]) -> None:
    """Run the study ``argv`` names, or print its plan and what is left (``--dry_run true``)."""
    kind, args, base = parse_args(argv)
    if args.dry_run:
        runs = load_results(args.out)["runs"] if Path(args.out).exists() else []
        if kind == "round2":
            b = budget(ROUND2, args.minutes_per_run)
            state = plan2(ROUND2, runs)
            print(f"round 2: {b['sweep']} sweep runs, {b['paired']} paired runs, {b['long_equivalents']:g} "
                  f"800-step equivalents of long runs and checks: {b['equivalents']:g} in all, about "
                  f"{b['cpu_hours']:.1f} CPU hours at {args.minutes_per_run:g} min per run, before any grid grows")
        else:
            state = round3.plan3(round3.ROUND3, runs)
        pace = measured_minutes_per_run(runs)
        measured = (f", {state.remaining * pace[0] / 60:.1f} at the {pace[0]:.1f} min per 800 steps its "
                    f"{pace[1]} finished runs took (median)" if pace else "")
        print(f"{args.out}: {len(runs)} runs finished; left: {state.remaining:g} 800-step equivalents, about "
              f"{state.remaining * args.minutes_per_run / 60:.1f} CPU hours at {args.minutes_per_run:g} min per run"
              f"{measured}; ready now: {len(state.ready)} runs" + (f", first {state.ready[0]}" if state.ready else ""))
        return
    sched = round2_run.schedule(ROUND2) if kind == "round2" else round3.schedule(round3.ROUND3)
    try:
        payload = study(base, args.out, workers=args.workers, schedule=sched)
    except ValueError as err:
        raise SystemExit(f"error: {err}") from None
    print(f"wrote {args.out}: {len(payload['runs'])} runs")

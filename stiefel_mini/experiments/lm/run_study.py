"""The one runner of the declared language-model studies: any :class:`~stiefel_mini.experiments.lm.plans.Study`, resumable.

:func:`schedule` turns a declared study (:mod:`~stiefel_mini.experiments.lm.studies`) into the
:class:`~stiefel_mini.experiments.lm.experiment.Schedule` that
:func:`~stiefel_mini.experiments.lm.experiment.study` runs on several processes, writing the results
file after every run and resuming from it; :func:`run_point` is one planned run (in a worker
process), built by its recipe (:mod:`~stiefel_mini.experiments.lm.arms`). :func:`main` is the
package's command line (``python -m stiefel_mini.experiments.lm``): the studies here, anything else
(the tokenizer, one run) :func:`stiefel_mini.experiments.lm.experiment.main`. Usage::

    python -m stiefel_mini.experiments.lm study round4 --workers 2        # results/lm/round4.json
    python -m stiefel_mini.experiments.lm study round4 --dry_run true     # what is left, running nothing

The commands the first three studies' results files store run the same runner: ``study [...]``
(no name) is ``study round1``, ``round2 [...]`` is ``study round2``, ``round3 [...]`` is ``study round3``.
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
import sys
import time
from pathlib import Path
from typing import Sequence

import torch

from stiefel_mini.experiments.config import config_help, parse_config, replace, split_argv
from stiefel_mini.experiments.lm import experiment
from stiefel_mini.experiments.lm.arms import build_facts, setup_for
from stiefel_mini.experiments.lm.config import PRESETS, LMConfig
from stiefel_mini.experiments.lm.experiment import Schedule, device_name, run, study as run_study
from stiefel_mini.experiments.lm.plans import Study, declared, plan
from stiefel_mini.experiments.lm.studies import study as declared_study
from stiefel_mini.experiments.records import cpu_description, load_results, utc_now
from stiefel_mini.experiments.runner import parse_cli

__all__ = ["STATS_WINDOWS", "ALIASES", "run_point", "schedule", "minutes_per_run", "parse_args", "main"]

STATS_WINDOWS = 8
"""Validation windows on which each evaluation measures the largest logit and the lowest entropy."""

_SETTINGS = ("lr", "frame_lr", "muon_lr", "warmup_frac", "max_step")  # LMConfig fields a point sets

ALIASES = ("round2", "round3")
"""Commands the second and third studies' results files store: each runs the study of its name
(``study`` with no name runs ``round1``, the first study's ``results/lm/study.json``)."""


def run_point(name: str, cfg: LMConfig, point: dict, commit: dict) -> dict:
    """One run of study ``name``: the point's arm, built by its recipe, trained on its seed for its steps.

    The record: the point, ``recipe`` (and what the second and third studies' runs recorded of their
    build, :func:`~stiefel_mini.experiments.lm.arms.build_facts`), ``max_logit`` and ``min_entropy``
    at the last evaluation, the run's measurements
    (:func:`~stiefel_mini.experiments.lm.experiment.run`, with both at every evaluation in
    ``history``), when, where and at which commit it ran. A point without ``steps`` (the first
    study's) runs the base config's.
    """
    started = utc_now()
    t0 = time.perf_counter()
    recipe = declared_study(name).recipe(point["arm"])
    settings = {k: point[k] for k in _SETTINGS if point.get(k) is not None}
    cfg = replace(cfg, arm=point["arm"], seed=point["seed"], steps=point.get("steps", cfg.steps), progress=False,
                  **settings)
    result = run(cfg, setup=setup_for(recipe, point), stats_windows=STATS_WINDOWS)
    last = {k: (result["history"][k][-1] if result["diverged_at"] is None else None) for k in ("max_logit", "min_entropy")}
    return {**point, "recipe": recipe, **build_facts(recipe), **last, **result, "started_utc": started,
            "wall_time_s": time.perf_counter() - t0, "git_commit": commit["git_commit"],
            "git_dirty": commit["git_dirty"], "cpu": cpu_description(), "threads": torch.get_num_threads(),
            "device": device_name(cfg.device)}


def schedule(study: Study) -> Schedule:
    """The :class:`~stiefel_mini.experiments.lm.experiment.Schedule` of a declared study."""
    def state(runs):
        s = plan(study, runs)
        return s.ready, s.remaining
    seeds = tuple(study.paired_seeds) + tuple(study.long_seeds)
    return Schedule(state, study.key, functools.partial(run_point, study.name), declared(study), seeds)


def minutes_per_run(runs: Sequence[dict], steps: int = 800) -> tuple[float, int] | None:
    """The pace the finished ``runs`` kept: median wall-clock minutes per ``steps`` steps, and how many.

    ``median_r(wall_time_s_r / steps_r) * steps / 60`` over the runs that record both; None if none does."""
    paces = [r["wall_time_s"] / r["steps"] for r in runs if r.get("wall_time_s") and r.get("steps")]
    return (statistics.median(paces) * steps / 60, len(paces)) if paces else None


@dataclasses.dataclass
class _Args:
    workers: int = 2
    out: str = ""
    dry_run: bool = False
    minutes_per_run: float = 12.0


def _named(argv: list[str]) -> list[str]:
    """``argv`` with an old command spelled as ``study NAME ...`` (:data:`ALIASES`)."""
    if argv and argv[0] in ALIASES:
        return ["study", *argv]
    if argv and argv[0] == "study" and (len(argv) == 1 or argv[1].startswith("-")):
        return ["study", "round1", *argv[1:]]
    return argv


def is_study_command(argv: Sequence[str]) -> bool:
    """Whether ``argv`` names a declared study (``study ...`` or an old spelling, :data:`ALIASES`) rather
    than one run of :mod:`stiefel_mini.experiments.lm.experiment`."""
    return bool(argv) and argv[0] in ("study", *ALIASES)


def parse_args(argv: Sequence[str]) -> tuple[Study, _Args, LMConfig]:
    """``(study, its arguments, the base config)`` of ``study NAME [--workers N] [--out PATH] [--dry_run true]
    [--field value ...]`` (or an old spelling of it, :data:`ALIASES`)."""
    argv = _named(list(argv))
    if len(argv) < 2 or argv[0] != "study":
        raise ValueError(f"expected 'study NAME ...' or one of {sorted(ALIASES)}; got {argv[:2]}")
    s = declared_study(argv[1])
    mine, rest = split_argv(argv[2:], _Args)
    args = parse_config(_Args, mine)
    args.out = args.out or s.out
    base, _, _ = parse_cli(LMConfig, rest, presets=PRESETS, default_preset=s.preset)
    return s, args, base


def main(argv: Sequence[str] | None = None) -> None:
    """Run the declared study ``argv`` names, or print what is left of it (``--dry_run true``);
    any other command is :func:`stiefel_mini.experiments.lm.experiment.main`'s."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "-h" in argv or "--help" in argv:
        print(__doc__)
        print(config_help(_Args))
    if not is_study_command(argv) or "-h" in argv or "--help" in argv:
        experiment.main(argv)
        return
    try:
        s, args, base = parse_args(argv)
    except ValueError as err:
        raise SystemExit(f"error: {err}") from None
    if args.dry_run:
        runs = load_results(args.out)["runs"] if Path(args.out).exists() else []
        state = plan(s, runs)
        pace = minutes_per_run(runs)
        measured = (f", {state.remaining * pace[0] / 60:.1f} at the {pace[0]:.1f} min per 800 steps its "
                    f"{pace[1]} finished runs took (median)" if pace else "")
        print(f"{args.out}: {len(runs)} runs finished; left: {state.remaining:g} {s.steps}-step equivalents, about "
              f"{state.remaining * args.minutes_per_run / 60:.1f} CPU hours at {args.minutes_per_run:g} min per run"
              f"{measured}; ready now: {len(state.ready)} runs" + (f", first {state.ready[0]}" if state.ready else ""))
        return
    try:
        payload = run_study(base, args.out, workers=args.workers, schedule=schedule(s))
    except ValueError as err:
        raise SystemExit(f"error: {err}") from None
    print(f"wrote {args.out}: {len(payload['runs'])} runs")

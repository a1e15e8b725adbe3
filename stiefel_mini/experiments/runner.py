"""What every experiment's sweep and command line share: resume a results file, run a grid, one CLI.

A sweep runs a grid of points (seed-major, so an interrupted sweep leaves complete paired seeds),
stores each finished run with the commit it ran at, and rewrites its results file after every run
(:func:`stiefel_mini.experiments.records.save_results` is atomic). Re-running the same command
resumes: :func:`resume` reads the file back and refuses one made with other settings, naming the
fields, rather than mixing runs of two settings. :func:`run_grid` is the loop itself. Before the
grid, a sweep stores a short run of its first point (the *repro* record) that the reproduction
tests re-run, so even a stopped sweep's file can be checked.

The command line of every experiment is ``python -m stiefel_mini.experiments.<name> [--preset NAME]
[--out PATH] [--field value ...]`` (:func:`stiefel_mini.experiments.config.parse_cli`); a sweep of
two configs (grokking's) names its plan with ``--plan`` and takes the fields of both.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from stiefel_mini.experiments.config import ConfigError, cli, parse_cli, parse_config, split_argv
from stiefel_mini.experiments.records import cpu_description, load_results
from stiefel_mini.experiments.runtime import progress

__all__ = ["changed_fields", "resume", "stamp", "run_grid", "parse_cli", "parse_sweep_cli", "cli"]


def changed_fields(theirs: Mapping[str, Any] | None, mine: Mapping[str, Any]) -> list[str]:
    """The sorted keys on which two settings dicts disagree (a key missing on one side counts)."""
    theirs = theirs or {}
    return sorted(k for k in set(theirs) | set(mine) if theirs.get(k) != mine.get(k))


def resume(path: str | Path | None, key: str, settings: Mapping[str, Any]) -> dict | None:
    """The results file at ``path`` if it exists and holds ``settings`` under ``key``, else ``None``.

    A file of other settings raises ``ValueError`` naming the fields that differ, so that a sweep
    never appends runs of one setting to a file of another.
    """
    if not path or not Path(path).exists():
        return None
    old = load_results(path)
    if old.get(key) != settings:
        raise ValueError(f"{path} holds runs of other settings (fields {changed_fields(old.get(key), settings)}); "
                         "resume with the same settings, or write to another --out")
    return old


def stamp(record: dict, provenance: Mapping[str, Any], started: str | None = None) -> dict:
    """``record`` with the commit it ran at (``git_commit``, ``git_dirty`` of ``provenance``), when it
    started (``started_utc``, if given) and the CPU it ran on (``cpu``: :func:`records.cpu_description`)."""
    record["git_commit"], record["git_dirty"] = provenance["git_commit"], provenance["git_dirty"]
    if started is not None:
        record["started_utc"] = started
    record["cpu"] = cpu_description()
    return record


def run_grid(points: Iterable[Any], done: Callable[[Any], bool], run_point: Callable[[Any], None],
             save: Callable[[], None], *, enabled: bool = True) -> None:
    """For each grid point not ``done``: ``run_point`` it (which stores its record), then ``save``."""
    for point in progress(list(points), desc="sweep", enabled=enabled):
        if done(point):
            continue
        run_point(point)
        save()


@dataclass
class _Plan:
    """The ``--plan NAME`` option of :func:`parse_sweep_cli`, as a one-field config."""

    plan: str | None = None


def parse_sweep_cli(sweep_cls: type, run_cls: type, argv: list[str], *, plans: Mapping[str, Any],
                    presets: Mapping[str, Any]) -> tuple[Any, Any]:
    """``(sweep config, base run config)`` from ``[--plan NAME] [--field value ...]``.

    ``--plan`` picks the sweep config from ``plans`` (default: the dataclass defaults); each
    ``--field`` goes to the config that has it, the sweep's first; the sweep's ``preset`` field
    names the base run config in ``presets``.
    """
    sweep_argv, rest = split_argv(argv, sweep_cls)
    plan_argv, rest = split_argv(rest, _Plan)
    plan = parse_config(_Plan, plan_argv).plan
    if plan is not None and plan not in plans:
        raise ConfigError(f"--plan: expected one of {sorted(plans)}, got {plan!r}")
    scfg = parse_config(sweep_cls, sweep_argv, base=None if plan is None else plans[plan])
    base, _, _ = parse_cli(run_cls, rest, presets=presets, default_preset=scfg.preset)
    return scfg, base

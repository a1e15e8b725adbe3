"""CIFAR-10 patch benchmark: does constraining Q/K to the Stiefel manifold help a small ViT, and why?

The benchmark's other modules: the run config and its plans (:mod:`.config`), the data
(:mod:`.data`), one run (:mod:`.train`) and reading sweep files (:mod:`.results`). This module is
the sweep and the command line (:func:`main`, run by ``python -m stiefel_mini.experiments.cifar``),
over :mod:`stiefel_mini.experiments.runner`. Arms at their own best learning rate are compared by
:mod:`stiefel_mini.evidence`.

Reference: the paper's CIFAR-10 patch benchmark (abstract: +8.98 pp over AdamW over 12 paired
starts; Q/K steps 24-40x smaller than AdamW's; frozen frames cost 0.28 pp).

CLI (``--preset`` picks a plan of :data:`PLANS`, every config field can be overridden as
``--field value``)::

    python -m stiefel_mini.experiments.cifar --preset cpu --data_dir DIR
    python -m stiefel_mini.experiments.cifar --preset gpu --data_dir DIR
    python -m stiefel_mini.experiments.cifar --preset repro      # tiny synthetic set, for the tests
    python -m stiefel_mini.experiments.cifar --preset r2_lr --data_dir DIR   # a study (STUDIES)
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path
from typing import Iterator, Sequence

from stiefel_mini.experiments.arms import arm_spec
from stiefel_mini.experiments.cifar import data as cifar_data
from stiefel_mini.experiments.cifar.config import (PLANS, REPRO_TINY_SET, CifarConfig, CifarSweep, sweep_settings,
                                                   swept_lrs)
from stiefel_mini.experiments.cifar.results import run_key, summary_table
from stiefel_mini.experiments.cifar.train import resolve_device, run
from stiefel_mini.experiments.config import replace
from stiefel_mini.experiments.records import describe_file, provenance, save_results, utc_now
from stiefel_mini.experiments.runner import changed_fields, parse_cli, resume, run_grid, stamp
from stiefel_mini.experiments.runtime import set_threads

__all__ = ["sweep", "merge_results", "tiny_set", "tiny_set_run", "repro_record", "parse_args", "main"]


def sweep(cfg: CifarSweep, data: cifar_data.Cifar10 | None = None) -> dict:
    """Run every (seed, fraction, arm, lr) of the grid, rewriting ``cfg.out`` after each run.

    Seeds are the outer loop, so an interrupted sweep leaves complete paired seeds. Runs already in
    ``cfg.out`` with the same settings are kept and skipped (a killed sweep resumes where it stopped),
    except, with ``redo_dirty``, those that record ``git_dirty: true``, which run again; a file of
    other settings raises a ``ValueError`` instead of being overwritten. With ``repro_steps`` the
    first grid point is first run for that many steps on the tiny synthetic set (:func:`tiny_set_run`)
    and stored as ``repro``, for the reproduction test, which then needs no data. Each run records
    the commit it ran at (``git_commit``, ``git_dirty``).

    Returns:
        The results payload: ``provenance``, ``settings``, ``runs`` and ``summary``.
    """
    if not isinstance(cfg, CifarSweep):
        raise TypeError(f"sweep takes a CifarSweep (a plan of PLANS), got {type(cfg).__name__}")
    set_threads(cfg.run.machine.threads)
    if data is None:
        data = cifar_data.load_cifar10(cfg.run.data.data_dir)
    old = resume(cfg.out, "settings", sweep_settings(cfg)) or {}
    runs = [h for h in old.get("runs", []) if not (cfg.redo_dirty and h.get("git_dirty"))]
    repro = old.get("repro")
    previous = [*old.get("provenance_previous", []), old["provenance"]] if old else []
    # Runs of files that record no lrs ran at the file's own (lr, frame_lr).
    done = {k if k[3] is not None else k[:3] + swept_lrs(replace(cfg, lrs=(), frame_lrs=()), k[2])[0]
            for k in map(run_key, runs)}
    prov = provenance(cfg, cfg.seeds, device=resolve_device(cfg.run.machine.device))
    prov["data_source"] = data.source
    grid = [(s, f, a, lrs) for s in cfg.seeds for f in cfg.train_fractions for a in cfg.arms
            for lrs in swept_lrs(cfg, a)]

    def payload() -> dict:
        out = {"provenance": prov, "settings": sweep_settings(cfg), "runs": runs, "summary": summary_table(runs)}
        if repro is not None:
            out["repro"] = repro
        out = {**out, "provenance_previous": previous} if previous else out
        return {**out, "file": describe_file(out)}

    def save() -> None:
        if cfg.out:
            save_results(cfg.out, payload())

    def point_cfg(point) -> CifarConfig:
        seed, fraction, arm, (lr, frame_lr) = point
        return replace(cfg.run, arm=arm, seed=seed, train_fraction=fraction, lr=lr,
                       frame_lr=frame_lr if frame_lr is not None else cfg.run.optimizer.frame_lr)

    if cfg.repro_steps > 0 and repro is None and grid:
        repro = tiny_set_run(point_cfg(grid[0]), cfg.repro_steps)
        save()

    def done_(point) -> bool:
        seed, fraction, arm, (lr, frame_lr) = point
        return (float(fraction), int(seed), arm_spec(arm).label, lr, frame_lr) in done

    def run_point(point) -> None:
        started = utc_now()
        h = stamp(run(point_cfg(point), data), prov, started)
        runs.append(h)
        done.add(run_key(h))

    run_grid(grid, done_, run_point, save, enabled=cfg.run.machine.progress)
    return payload()


def merge_results(results: Sequence[dict]) -> dict:
    """One sweep payload from sweeps of the same settings run in parallel into separate files.

    The runs are concatenated in order (a run whose :func:`run_key` is in several files raises
    ``ValueError``) and the summary recomputed; ``provenance`` and ``repro`` are the first file's, and
    every other file's provenance, with the earlier invocations of each, go to
    ``provenance_previous``; ``file`` describes the merged file (:func:`records.describe_file`). Files of other settings raise ``ValueError`` naming the fields.
    """
    if not results:
        raise ValueError("merge_results needs at least one results payload")
    first = results[0]
    runs, seen, previous = [], set(), list(first.get("provenance_previous", []))
    for res in results:
        if res["settings"] != first["settings"]:
            raise ValueError("results of other settings cannot be merged "
                             f"(fields {changed_fields(first['settings'], res['settings'])})")
        for h in res["runs"]:
            if run_key(h) in seen:
                raise ValueError(f"run {run_key(h)} is in more than one file")
            seen.add(run_key(h))
            runs.append(h)
        if res is not first:
            previous += [*res.get("provenance_previous", []), res["provenance"]]
    out = {**first, "runs": runs, "summary": summary_table(runs), "provenance_previous": previous}
    return {**out, "file": describe_file(out)}


@contextlib.contextmanager
def tiny_set() -> Iterator[Path]:
    """The tiny synthetic image folder (:data:`REPRO_TINY_SET`) in a temporary folder, with the
    decoded-tensor cache beside it (so ``~/.cache`` holds no tiny sets)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = cifar_data.write_tiny_image_folder(Path(tmp) / "tiny", **REPRO_TINY_SET)
        os.environ[cifar_data.ENV_CACHE_DIR] = str(Path(tmp) / "cache")
        try:
            yield root
        finally:
            del os.environ[cifar_data.ENV_CACHE_DIR]


def repro_record(cfg: CifarSweep = PLANS["repro"]) -> dict:
    """Run ``cfg.run`` (the ``repro`` plan's) on the tiny synthetic set.

    Saves ``{"provenance", "tiny_set", "history"}`` to ``cfg.out`` when set and returns it.
    """
    with tiny_set() as root:
        history = run(replace(cfg.run, data_dir=str(root)))
    payload = {"provenance": provenance(cfg, cfg.seeds), "tiny_set": REPRO_TINY_SET, "history": history}
    if cfg.out:
        save_results(cfg.out, payload)
    return payload


def tiny_set_run(cfg: CifarConfig, steps: int) -> dict:
    """The run ``cfg`` (its arm, seed, lrs, model) for ``steps`` steps on the tiny synthetic set.

    All of the set trains and scores (train fraction 1, no train-accuracy subset, eval only at the
    end), on the CPU with one thread; the history records ``repro_steps``. The reproduction record of
    a study's file: it checks the code and settings the file was made with, anywhere, without data.
    """
    short = replace(cfg, train_fraction=1.0, steps=steps, train_eval_size=0, test_size=0, eval_every=0,
                    progress=False, device="cpu", threads=1)
    with tiny_set() as root:
        history = run(replace(short, data_dir=str(root)))
    return {**history, "repro_steps": steps}


def parse_args(argv: Sequence[str]) -> tuple[CifarSweep, str]:
    """``(sweep, plan name)`` of a command line: ``[--preset NAME] [--field value ...]`` (every leaf
    field of :class:`CifarSweep`, its run's included)."""
    cfg, _, preset = parse_cli(CifarSweep, list(argv), presets=PLANS, default_preset="cpu",
                               usage="python -m stiefel_mini.experiments.cifar [--preset NAME] [--field value ...]")
    return cfg, preset


def main(argv: Sequence[str] | None = None) -> dict:
    """``--preset NAME`` (a plan of :data:`PLANS`; default cpu), then ``--field value`` overrides."""
    cfg, preset = parse_args(sys.argv[1:] if argv is None else argv)
    if preset == "repro":
        return repro_record(cfg)
    try:
        payload = sweep(cfg)
    except (FileNotFoundError, ValueError) as err:  # no data, or a results file of other settings
        raise SystemExit(str(err)) from None
    for row in payload["summary"]:
        diff = f"{row['diff_pp']:+6.2f} pp, wins {row['wins']}/{row['n_pairs']}" if "diff_pp" in row else ""
        lrs = f"lr {row['lr']:g}" + ("" if row["frame_lr"] is None else f" frame_lr {row['frame_lr']:g}")
        print(f"frac {row['train_fraction']:<5} {row['arm']:<3} {lrs:<24} acc {100 * row['acc_mean']:5.2f}%  {diff}")
    return payload

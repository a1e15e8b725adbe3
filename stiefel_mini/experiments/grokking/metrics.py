"""What a grokking run measured: summary metrics of a history, and the runs of a sweep file by arm.

:func:`metrics` turns one run's evaluation curve into steps-to-threshold, collapse counts and frame
numbers; :func:`stored_metrics` / :func:`recount` recompute them from the curve a file keeps;
:func:`runs_by_arm`, :func:`seed_runs` and :func:`curve_bands` select and summarise a sweep's runs
(the paired comparisons are in :mod:`stiefel_mini.evidence`).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Sequence

from stiefel_mini.experiments.grokking.config import GrokkingConfig
from stiefel_mini.experiments.records import config_from_dict, load_results, save_results

__all__ = ["first_step", "collapses", "drops", "metrics", "stored_metrics", "recount", "subsample", "runs_by_arm",
           "seed_runs", "curve_bands"]


def first_step(steps: Sequence[int], values: Sequence[float], threshold: float) -> int | None:
    """First evaluated step with ``value >= threshold`` (``None`` if never: censored)."""
    for s, v in zip(steps, values):
        if v >= threshold:
            return int(s)
    return None


def collapses(values: Sequence[float], high: float = 0.95, low: float = 0.5) -> int:
    """Number of falls below ``low`` after having been at ``>= high`` (counted again after recovering)."""
    n, armed = 0, False
    for v in values:
        if v >= high:
            armed = True
        elif armed and v < low:
            n, armed = n + 1, False
    return n


def drops(values: Sequence[float], reach: float = 0.95, drop: float = 0.10) -> list[int]:
    """Indices of the collapses of a validation curve: falls of ``>= drop`` after first reaching ``reach``.

    Armed at the first value ``>= reach``; a collapse is the first later value at or below
    ``peak - drop``, ``peak`` the highest value since arming. It is re-armed when the curve is back at
    ``>= reach``, so a curve that oscillates is counted once per fall. With the defaults a collapse
    takes validation accuracy at least 10 points below a peak of at least 95%.
    """
    out, armed, peak = [], False, -math.inf
    for i, v in enumerate(values):
        if v >= reach and not armed:
            armed, peak = True, v
        elif armed:
            peak = max(peak, v)
            if v <= peak - drop + 1e-9:  # 1e-9: 0.96 - 0.10 is 0.8599999... in floating point
                out.append(i)
                armed, peak = False, -math.inf
    return out


def metrics(hist: dict, cfg: GrokkingConfig) -> dict:
    """Summary numbers of one run's history.

    ``steps_to_val95/99``, ``steps_to_train99``: first evaluation at or above the threshold (None:
    never). ``grok_delay``: ``steps_to_val99 - steps_to_train99``. ``late_share95``: share of the
    evaluations in the last ``late_frac`` of training with val acc >= 95%. ``post_grok_share95``: share
    of evaluations after the first >= 95% that stay >= 95%. ``collapses``: falls below 50% after
    reaching 95%. ``collapses10``: falls of >= 10 points after first reaching 95% (:func:`drops`),
    ``first_collapse_step`` the step of the first (None: none); ``steps_above95``: evaluations with
    val acc >= 95% times ``eval_every`` (the time spent there), ``share_above95`` their share of all
    evaluations. Frame numbers are at the end of training; ``entropy_final`` is the mean over heads;
    ``max_logit_final`` / ``max_logit_peak``: the largest attention logit at the end / over training.
    """
    steps, val, train = hist["step"], hist["val_acc"], hist["train_acc"]
    s95, s99, t99 = (first_step(steps, val, 0.95), first_step(steps, val, 0.99),
                     first_step(steps, train, 0.99))
    late = [v for s, v in zip(steps, val) if s >= (1 - cfg.late_frac) * cfg.steps]
    falls = drops(val)
    post = [v for s, v in zip(steps, val) if s95 is not None and s >= s95]
    return {
        "steps_to_val95": s95,
        "steps_to_val99": s99,
        "steps_to_train99": t99,
        "grok_delay": None if s99 is None or t99 is None else s99 - t99,
        "final_val_acc": val[-1],
        "final_train_acc": train[-1],
        "max_val_acc": max(val),
        "late_share95": sum(v >= 0.95 for v in late) / len(late),
        "post_grok_share95": None if not post else sum(v >= 0.95 for v in post) / len(post),
        "collapses": collapses(val),
        "collapses10": len(falls),
        "first_collapse_step": steps[falls[0]] if falls else None,
        "steps_above95": cfg.eval_every * sum(v >= 0.95 for v in val),
        "share_above95": sum(v >= 0.95 for v in val) / len(val),
        "dist_q_final": hist["dist_q"][-1],
        "dist_k_final": hist["dist_k"][-1],
        "orth_q_final": hist["orth_q"][-1],
        "mean_step_q": sum(hist["step_q"][1:]) / max(len(hist["step_q"]) - 1, 1),
        "mean_step_k": sum(hist["step_k"][1:]) / max(len(hist["step_k"]) - 1, 1),
        "entropy_final": sum(hist["entropy"][-1]) / len(hist["entropy"][-1]),
        **_logit_metrics(hist),
    }


def stored_metrics(run: dict, base_config: dict) -> dict:
    """A stored run's :func:`metrics`, recomputed from the history its file keeps.

    A file may keep only every k-th evaluation (``SweepConfig.history_points``); the metrics are then
    those of the stored curve, each stored evaluation standing for the spacing of the stored steps
    (``steps[1] - steps[0]``, for ``steps_above95``), so that every stored number can be recounted from
    the file. ``base_config`` is the file's ``base_config``.
    """
    cfg = config_from_dict(GrokkingConfig, base_config)
    steps = run["history"]["step"]
    spacing = steps[1] - steps[0] if len(steps) > 1 else cfg.eval_every
    return metrics(run["history"], dataclasses.replace(cfg, eval_every=int(spacing)))


def recount(path: str | Path) -> int:
    """Rewrite the metrics of every run in the results file ``path`` by :func:`stored_metrics`.

    Deterministic and idempotent: apply it after runs are merged into a file. Returns the number of
    runs whose metrics changed.
    """
    res = load_results(path)
    changed = 0
    for r in res["runs"]:
        m = stored_metrics(r, res["base_config"])
        if m != r["metrics"]:
            r["metrics"] = m
            changed += 1
    save_results(path, res)
    return changed


def _logit_metrics(hist: dict) -> dict:
    """``max_logit_final`` and ``max_logit_peak`` of a history (``{}`` for one without ``max_logit``)."""
    logits = [v for v in hist.get("max_logit", []) if v is not None]
    if not logits:
        return {}
    return {"max_logit_final": logits[-1], "max_logit_peak": max(logits)}


def subsample(hist: dict, max_points: int) -> dict:
    """Every k-th evaluation of ``hist`` (always keeping the last) so at most ~``max_points`` remain."""
    n = len(hist["step"])
    k = max(1, math.ceil(n / max_points))
    idx = list(range(0, n, k))
    if idx[-1] != n - 1:
        idx.append(n - 1)
    return {key: [vals[i] for i in idx] for key, vals in hist.items()}



def runs_by_arm(results: dict, weight_decay: float | None = None,
                arms: Sequence[str] | None = None) -> dict[str, list[dict]]:
    """The runs of a sweep grouped by arm, each list in seed order, keeping only complete seeds.

    A seed counts when every arm of the sweep (or of ``arms``, a subset) has finished it, so every
    comparison is paired. In a weight-decay sweep, ``weight_decay`` picks the runs at that value
    (required there).
    """
    arms = list(results["sweep"]["arms"] if arms is None else arms)
    swept = bool(results["sweep"].get("weight_decays"))
    if swept and weight_decay is None:
        raise ValueError("this sweep varies weight_decay: pass weight_decay= one of "
                         f"{results['sweep']['weight_decays']}")
    by_seed: dict[int, dict[str, dict]] = {}
    for r in results["runs"]:
        if swept and r["weight_decay"] != weight_decay:
            continue
        by_seed.setdefault(r["seed"], {})[r["arm"]] = r
    seeds = sorted(s for s, runs in by_seed.items() if all(a in runs for a in arms))
    return {a: [by_seed[s][a] for s in seeds] for a in arms}


def seed_runs(results: dict, arm: str, weight_decay: float | None = None) -> dict[int, dict]:
    """The finished runs of one arm, by seed (in a weight-decay sweep, those at ``weight_decay``).

    Unlike :func:`runs_by_arm` this keeps every seed the arm has, whether or not the other arms
    finished it: a growing results file can then be paired comparison by comparison.
    """
    swept = bool(results["sweep"].get("weight_decays"))
    if swept and weight_decay is None:
        raise ValueError("this sweep varies weight_decay: pass weight_decay= one of "
                         f"{results['sweep']['weight_decays']}")
    return {r["seed"]: r for r in sorted(results["runs"], key=lambda r: r["seed"])
            if r["arm"] == arm and (not swept or r["weight_decay"] == weight_decay)}




def curve_bands(results: dict, arm: str, key: str = "val_acc",
                weight_decay: float | None = None) -> dict[str, list[float]]:
    """Median and quartiles over seeds of ``history[key]`` per evaluated step, for one arm.

    Runs of one sweep share their evaluation steps, so the curves align step by step. ``entropy``
    (per head) is averaged over heads first.
    """
    import numpy as np

    hists = [r["history"] for r in runs_by_arm(results, weight_decay)[arm]]
    steps = hists[0]["step"]
    vals = np.array([[np.mean(v) if isinstance(v, list) else v for v in h[key]] for h in hists])
    q25, med, q75 = np.quantile(vals, [0.25, 0.5, 0.75], axis=0)  # (n_seeds, n_steps) -> (n_steps,)
    return {"step": list(steps), "median": med.tolist(), "q25": q25.tolist(), "q75": q75.tolist()}

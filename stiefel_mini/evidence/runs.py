"""Reading results files: which runs a comparison pairs, with no training code and no statistics.

The results files of ``results/`` hold one record per run (``arm``, ``seed``, ``train_fraction``,
``lr``, ``frame_lr`` and its measurements). The evidence layer and the chapters select runs with the
functions here: :func:`load` (a file, or ``None`` when it is not there yet), :func:`by_seed` (one
setting's runs keyed by seed, for pairing), :func:`lr_curves` (accuracy against each arm's swept lr and
its best value), :func:`at_best_lr` (each arm's runs at its own best lr), :func:`fitted_check`
(training minus test accuracy per seed) and :func:`held_out_best` (best lr chosen on the other seeds).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from stiefel_mini.experiments.cifar.results import groups, run_key
from stiefel_mini.experiments.records import load_results
from stiefel_mini.resources import results_path

__all__ = ["load", "run_key", "by_seed", "lr_curves", "at_best_lr", "fitted_check", "held_out_best"]


def load(name: str, root: str | Path | None = None) -> dict | None:
    """The results file ``name`` (relative to ``results/``, e.g. ``"cifar/r2_fitted.json"``), or ``None``.

    ``root`` is a folder holding ``results/``; ``None`` finds the file where
    :func:`stiefel_mini.resources.results_path` does (the checkout, else the packaged copy). A sweep
    still running writes its file after every run, so a file may hold part of its grid. Read by
    :func:`stiefel_mini.experiments.records.load_results` (histories unpacked).
    """
    if root is None:
        try:
            path = results_path(name)
        except FileNotFoundError:
            return None
    else:
        path = Path(root) / "results" / name
        if not path.is_file():
            return None
    return load_results(path)


def _mean(xs: list) -> float | None:
    xs = [x for x in xs if x is not None]
    return float(np.mean(xs)) if xs else None


def lr_curves(runs: list[dict]) -> list[dict]:
    """Learning-rate sensitivity: per (train fraction, arm), accuracy against the arm's swept lr.

    The swept lr is ``frame_lr`` for arms with trained frames, else ``lr``. Each row holds
    ``train_fraction``, ``arm``, ``swept`` (``"frame_lr"`` or ``"lr"``), and ``points``: one
    ``{"value", "acc_mean", "acc_min", "acc_max", "n", "max_logit", "attn_entropy"}`` per value in
    increasing order (seed means; the spread is the min/max over seeds); ``best`` is the value with
    the highest mean accuracy and ``sensitivity_pp`` the mean accuracy lost, in points, at the
    neighbouring grid values (mean over the one or two neighbours; ``None`` with one value).
    """
    curves: dict[tuple, dict] = {}
    for (fraction, arm, lr, frame_lr), by_seed in groups(runs).items():
        swept = "frame_lr" if frame_lr is not None else "lr"
        value = frame_lr if frame_lr is not None else lr
        accs = [h["test_acc"] for h in by_seed.values()]
        point = {
            "value": value, "acc_mean": float(np.mean(accs)), "acc_min": float(min(accs)),
            "acc_max": float(max(accs)), "n": len(accs),
            "max_logit": _mean([max(h["max_logit_final"]) if h.get("max_logit_final") else None
                                for h in by_seed.values()]),
            "attn_entropy": _mean([float(np.mean(h["attn_entropy_final"])) if h.get("attn_entropy_final") else None
                                   for h in by_seed.values()]),
        }
        curves.setdefault((fraction, arm, swept), {"train_fraction": fraction, "arm": arm, "swept": swept,
                                                   "points": []})["points"].append(point)
    rows = []
    for row in curves.values():
        pts = sorted(row["points"], key=lambda p: p["value"])
        i = max(range(len(pts)), key=lambda j: pts[j]["acc_mean"])
        near = [pts[j]["acc_mean"] for j in (i - 1, i + 1) if 0 <= j < len(pts)]
        rows.append({**row, "points": pts, "best": pts[i]["value"],
                     "sensitivity_pp": 100.0 * (pts[i]["acc_mean"] - float(np.mean(near))) if near else None})
    return rows


def at_best_lr(runs: Sequence[dict], arm: str) -> tuple[float | None, dict[int, dict]]:
    """``arm``'s best value of its swept lr (:func:`lr_curves`, one train fraction) and its runs there.

    Returns ``(None, {})`` when ``arm`` has no run in ``runs``; raises ``ValueError`` when the runs hold
    several train fractions (pass one fraction's runs).
    """
    curves = [c for c in lr_curves(list(runs)) if c["arm"] == arm]
    if not curves:
        return None, {}
    if len(curves) > 1:
        raise ValueError(f"{arm} has runs at several train fractions or swept fields; pass one fraction's runs")
    c = curves[0]
    return c["best"], by_seed(runs, arm=arm, **{c["swept"]: c["best"]})


def by_seed(runs: Sequence[dict], **fields: Any) -> dict[int, dict]:
    """The runs whose ``fields`` (e.g. ``arm="A1"``, ``frame_lr=0.1``) all match, keyed by seed.

    Raises ``ValueError`` when two matching runs share a seed (the fields do not pick one setting:
    add ``lr``, ``frame_lr`` or ``train_fraction``).
    """
    out: dict[int, dict] = {}
    for h in runs:
        if all(h.get(k) == v for k, v in fields.items()):
            if h["seed"] in out:
                raise ValueError(f"two runs with {fields} share seed {h['seed']}; add the field that "
                                 "tells them apart (lr, frame_lr or train_fraction)")
            out[h["seed"]] = h
    return out


def fitted_check(runs: Sequence[dict]) -> list[dict]:
    """Has each setting fitted its training set? Training minus test accuracy, seed by seed.

    One row per (train fraction, arm, lr, frame lr) whose runs record ``train_acc`` (accuracy on a
    fixed un-augmented subset of the run's own training images): ``n_train``, ``seeds``,
    ``train_acc`` and ``test_acc`` (seed means), ``gaps_pp`` (train - test per seed, points),
    ``min_gap_pp`` and ``fitted`` (train above test on every seed). A model below that line has
    not learned what it was shown, and a comparison of optimizers on it says little.
    """
    rows = []
    for (fraction, arm, lr, frame_lr), group in groups(list(runs)).items():
        seeds = sorted(s for s, h in group.items() if h.get("train_acc") is not None)
        if not seeds:
            continue
        gaps = [100.0 * (group[s]["train_acc"] - group[s]["test_acc"]) for s in seeds]
        rows.append({"train_fraction": fraction, "arm": arm, "lr": lr, "frame_lr": frame_lr,
                     "n_train": group[seeds[0]]["n_train"], "seeds": seeds,
                     "train_acc": float(np.mean([group[s]["train_acc"] for s in seeds])),
                     "test_acc": float(np.mean([group[s]["test_acc"] for s in seeds])),
                     "gaps_pp": gaps, "min_gap_pp": min(gaps), "fitted": min(gaps) > 0})
    return rows


def held_out_best(runs: Sequence[dict], baseline: str = "A0") -> list[dict]:
    """Best lr against best lr, with each seed's lr chosen on the *other* seeds (leave one seed out).

    :func:`at_best_lr` picks each arm's best lr on the seeds it then compares, which flatters
    whichever arm has the luckier maximum. Here, for each seed ``s``, every arm's lr is the one with
    the best mean accuracy over its runs on seeds other than ``s``, and the difference to
    ``baseline`` is measured on ``s`` alone. One row per (train fraction, arm != baseline) with
    ``seeds`` (those both arms ran at every grid value, at least 2), ``chosen`` (per seed,
    ``(arm value, baseline value)``), ``diffs_pp`` and ``diff_pp`` (their mean). An arm with fewer
    than 2 such seeds gets no row.
    """
    curves = lr_curves(list(runs))
    grouped = groups(list(runs))

    def table(fraction: float, arm: str, swept: str) -> dict[float, dict[int, dict]]:
        out: dict[float, dict[int, dict]] = {}
        for (f, a, lr, frame_lr), g in grouped.items():
            if f == fraction and a == arm and (frame_lr is not None) == (swept == "frame_lr"):
                out[frame_lr if swept == "frame_lr" else lr] = g
        return out

    def complete(t: dict[float, dict[int, dict]]) -> set[int]:
        return set.intersection(*(set(g) for g in t.values())) if t else set()

    def pick(t: dict[float, dict[int, dict]], seeds: list[int]) -> float:
        return max(t, key=lambda v: float(np.mean([t[v][s]["test_acc"] for s in seeds])))

    rows = []
    for base in (c for c in curves if c["arm"] == baseline):
        bt = table(base["train_fraction"], baseline, base["swept"])
        for other in (c for c in curves if c["train_fraction"] == base["train_fraction"] and c["arm"] != baseline):
            ot = table(other["train_fraction"], other["arm"], other["swept"])
            seeds = sorted(complete(bt) & complete(ot))
            if len(seeds) < 2:
                continue
            chosen, diffs = [], []
            for s in seeds:
                rest = [t for t in seeds if t != s]
                vo, vb = pick(ot, rest), pick(bt, rest)
                chosen.append((vo, vb))
                diffs.append(100.0 * (ot[vo][s]["test_acc"] - bt[vb][s]["test_acc"]))
            rows.append({"train_fraction": base["train_fraction"], "arm": other["arm"], "seeds": seeds,
                         "chosen": chosen, "diffs_pp": diffs, "diff_pp": float(np.mean(diffs))})
    return rows

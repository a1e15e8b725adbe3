"""Reading CIFAR-10 sweep files: run keys, groups by setting, the stored summary, the studies' status.

A sweep file holds one record per run (``arm``, ``seed``, ``train_fraction``, ``lr``, ``frame_lr``
and its measurements). :func:`run_key` and :func:`groups` are how the sweep resumes and how
:mod:`stiefel_mini.evidence` pairs runs; :func:`summary_table` is the ``summary`` a sweep stores;
:func:`load_studies` and :func:`study_status` say what each study's file holds against its plan.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from stiefel_mini.experiments.arms import arm_spec
from stiefel_mini.experiments.cifar_config import PLANS, STUDIES, swept_lrs
from stiefel_mini.experiments.records import load_results
from stiefel_mini.experiments.stats import compare, holm
from stiefel_mini.resources import results_path

__all__ = ["run_key", "groups", "summary_table", "load_studies", "study_status"]


def run_key(h: dict) -> tuple:
    """(train_fraction, seed, arm, lr, frame_lr) of a run, for resuming and pairing.

    Runs of the first sweep files hold no ``lr`` / ``frame_lr``: their key has ``None`` there, and
    the sweep fills in the file's own settings (such a file holds one setting of each).
    """
    return (float(h["train_fraction"]), int(h["seed"]), str(h["arm"]), h.get("lr"), h.get("frame_lr"))


def groups(runs: list[dict]) -> dict[tuple, dict[int, dict]]:
    """Runs by ``(train_fraction, arm, lr, frame_lr)`` (first-seen order), each ``{seed: run}``."""
    out: dict[tuple, dict[int, dict]] = {}
    for h in runs:
        frac, seed, arm, lr, frame_lr = run_key(h)
        out.setdefault((frac, arm, lr, frame_lr), {})[seed] = h
    return out


def _mean(xs: list) -> float | None:
    xs = [x for x in xs if x is not None]
    return float(np.mean(xs)) if xs else None



def summary_table(runs: list[dict], baseline: str = "A0") -> list[dict]:
    """One row per (train fraction, arm, lr, frame lr): accuracy, paired difference to ``baseline``.

    The baseline is ``baseline``'s runs at the same fraction and the same (whole-model) lr; only
    seeds where both finished are paired. ``diff_pp`` is the mean of the per-seed accuracy
    differences in percentage points with its 95% t interval (``diff_ci_pp``); ``p_sign`` /
    ``p_wilcoxon`` are the exact two-sided paired tests and ``p_wilcoxon_holm`` the Wilcoxon p-value
    Holm-corrected across every comparison of the table (one family); ``wins`` counts seeds where the
    arm's accuracy is higher; ``step_ratio`` is the mean over seeds of qk_step_mean(arm) /
    qk_step_mean(baseline) (the Q/K step relative to AdamW's). ``max_logit`` (largest attention
    logit over blocks) and ``attn_entropy`` (mean over blocks) are seed means at the end of training,
    ``train_acc`` the seed mean of the training accuracy (``None`` for runs that lack them).

    This is the ``summary`` a sweep stores in its file, kept in the format of the files already
    written; the book's comparisons and verdicts are computed by :mod:`stiefel_mini.evidence`.
    """
    grouped = groups(runs)
    rows = []
    for (fraction, arm, lr, frame_lr), by_seed in grouped.items():
        seeds = sorted(by_seed)
        first = by_seed[seeds[0]]
        accs = [by_seed[s]["test_acc"] for s in seeds]
        row = {
            "train_fraction": fraction, "arm": arm, "arm_name": first["arm_name"], "lr": lr, "frame_lr": frame_lr,
            "n_train": first["n_train"], "steps_total": first["steps_total"], "seeds": seeds,
            "acc_mean": float(np.mean(accs)), "acc_sd": float(np.std(accs, ddof=1)) if len(accs) > 1 else None,
            "train_acc": _mean([by_seed[s].get("train_acc") for s in seeds]),
            "qk_drift": float(np.mean([by_seed[s]["qk_drift"] for s in seeds])),
            "orth_error": float(np.mean([by_seed[s]["orth_error"] for s in seeds])),
            "max_logit": _mean([max(by_seed[s]["max_logit_final"]) if by_seed[s].get("max_logit_final") else None
                                for s in seeds]),
            "attn_entropy": _mean([float(np.mean(by_seed[s]["attn_entropy_final"]))
                                   if by_seed[s].get("attn_entropy_final") else None for s in seeds]),
        }
        base_runs = next((g for (f, a, blr, _), g in grouped.items() if f == fraction and a == baseline and blr == lr),
                         {})
        paired = [s for s in seeds if s in base_runs]
        if paired:
            base = [base_runs[s] for s in paired]
            mine = [by_seed[s] for s in paired]
            c = compare([b["test_acc"] for b in base], [m["test_acc"] for m in mine], lower_is_better=False)
            diffs = [100.0 * d for d in c["differences"]]
            ci = c["mean_difference_t_interval"]
            ratios = [m["qk_step_mean"] / b["qk_step_mean"] for m, b in zip(mine, base)]
            row.update(
                paired_seeds=paired, diffs_pp=diffs, diff_pp=float(np.mean(diffs)),
                diff_ci_pp=None if ci is None else [100.0 * ci[0], 100.0 * ci[1]],
                p_sign=c["p_sign"], p_wilcoxon=c["p_wilcoxon"],
                wins=c["wins"]["wins"], n_pairs=c["wins"]["n"], step_ratio=float(np.mean(ratios)),
            )
        rows.append(row)
    tested = [r for r in rows if "p_wilcoxon" in r and r["arm"] != baseline]
    for r, p in zip(tested, holm([r["p_wilcoxon"] for r in tested])["adjusted"]):
        r["p_wilcoxon_holm"] = p
    return rows



def load_studies(presets: Sequence[str] = ("r2_lr", "r2_fitted", "r2_scaling", "r2_ablation", "r2_gpu")
                 ) -> dict[str, dict | None]:
    """The results of each study (``results/cifar/<preset>.json``), ``None`` where absent.

    Files are found by :func:`stiefel_mini.resources.results_path` (the checkout, else the packaged
    copy); a sweep still running writes its file after every run, so a file may hold part of its grid.
    """
    out: dict[str, dict | None] = {}
    for name in presets:
        if name not in STUDIES:
            raise ValueError(f"unknown study {name!r}; choose from {sorted(STUDIES)}")
        try:
            out[name] = load_results(results_path(f"cifar/{name}.json"))
        except FileNotFoundError:
            out[name] = None
    return out


def study_status(files: dict[str, dict | None]) -> list[dict]:
    """What each study's file holds against its planned grid (its plan in :data:`PLANS`).

    One row per preset: ``preset``, ``planned`` (runs: seeds x train fractions x each arm's lr grid),
    ``done`` (planned runs present, matched by arm, seed, fraction and the swept lr), ``missing``:
    ``{arm: number of its planned runs not present}`` for arms with any missing, and ``extra``:
    ``{arm: number of its runs outside the plan}`` (e.g. more seeds of some arms). ``r2_fitted`` /
    ``r2_scaling`` run A1 at a frame lr chosen on the command line, so for them only arm, seed and
    fraction are matched.
    """
    rows = []
    for preset, res in files.items():
        cfg = PLANS[preset]
        chosen_on_cli = not cfg.frame_lrs and not cfg.lrs  # one setting per arm, picked when run
        have = set()
        for h in (res or {}).get("runs", []):
            frac, seed, arm, lr, frame_lr = run_key(h)
            have.add((frac, seed, arm) if chosen_on_cli else (frac, seed, arm, lr, frame_lr))
        missing: dict[str, int] = {}
        plan = set()
        planned = done = 0
        for seed in cfg.seeds:
            for frac in cfg.train_fractions:
                for arm in cfg.arms:
                    label = arm_spec(arm).label
                    for lr, frame_lr in swept_lrs(cfg, arm):
                        key = ((float(frac), int(seed), label) if chosen_on_cli
                               else (float(frac), int(seed), label, lr, frame_lr))
                        planned += 1
                        plan.add(key)
                        if key in have:
                            done += 1
                        else:
                            missing[label] = missing.get(label, 0) + 1
        extra: dict[str, int] = {}
        for key in have - plan:
            extra[key[2]] = extra.get(key[2], 0) + 1
        rows.append({"preset": preset, "planned": planned, "done": done, "missing": missing, "extra": extra})
    return rows

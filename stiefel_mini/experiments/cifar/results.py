"""Reading CIFAR-10 sweep files: run keys, groups by setting, the stored summary, the studies' status.

A sweep file holds one record per run (``arm``, ``seed``, ``train_fraction``, ``lr``, ``frame_lr``
and its measurements). :func:`run_key` and :func:`groups` are how the sweep resumes and how
:mod:`stiefel_mini.evidence` pairs runs; :func:`summary_table` is the ``summary`` a sweep stores;
:func:`load_studies` and :func:`study_status` say what each study's file holds against its plan,
:func:`study_plan` what it holds as its runs record it; :data:`STUDY_NAMES` are the studies' names
for a reader, and :func:`direction` / :func:`lead_text` word a paired difference from its sign.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from stiefel_mini.experiments.arms import arm_spec
from stiefel_mini.experiments.cifar.config import PLANS, STUDIES, swept_lrs
from stiefel_mini.experiments.records import load_results
from stiefel_mini.experiments.stats import compare, holm
from stiefel_mini.resources import results_path

__all__ = ["run_key", "groups", "summary_table", "load_studies", "study_status", "STUDY_NAMES", "study_plan",
           "chosen_settings", "direction", "lead_text"]

STUDY_NAMES: dict[str, str] = {
    "cpu": "the first study",
    "cpu_long": "the first study at 30 epochs",
    "cpu_a1_large_step": "the first study's A1 at frame lr 0.048",
    "r2_lr": "the lr sweep",
    "r2_fitted": "the fitted study",
    "r3_bracket": "the lr re-bracket (A0)",
    "r3_bracket_a1": "the lr re-bracket (A1)",
    "r2_scaling": "the data-scaling study at fixed steps",
    "r3_epochs": "the fixed-epoch study",
    "r2_ablation": "the ablation at frame lr 0.03",
    "r3_mechanism": "the mechanism study at frame lr 1.0",
    "r3_polar": "the polar study",
    "r2_gpu": "the study at the paper's scale (GPU)",
}
"""A reader's name for each results file of ``results/cifar/`` (by file stem); the file and preset
names belong in the chapter's Reproduce section and provenance blocks only."""


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


def study_plan(res: dict) -> dict:
    """What a study's file holds, as its runs record it (never the file's top-level provenance).

    The top-level ``provenance`` describes the sweep that last wrote the file (a resumed or merged
    sweep may have run one arm on one seed), so the plan is read from the runs: ``runs`` (count),
    ``arms`` (``{arm: {"seeds": [...], "lrs": [...], "frame_lrs": [...]}}`` in first-seen order;
    ``lrs`` / ``frame_lrs`` are the values the arm's runs record, the file's ``settings`` for the
    first files whose runs hold none), ``n_train`` (the sizes), ``steps`` (the run lengths) and
    ``epochs`` (passes over the training images, ``steps_total / (n_train // batch_size)``: the
    loader drops the last partial batch). ``settings`` is the file's settings, which every run shares
    (a sweep refuses to add runs of other settings to a file).
    """
    runs = res.get("runs") or []
    settings = res.get("settings") or {}
    batch = settings.get("batch_size")
    arms: dict[str, dict] = {}
    for h in runs:
        a = arms.setdefault(h["arm"], {"seeds": set(), "lrs": set(), "frame_lrs": set()})
        a["seeds"].add(int(h["seed"]))
        lr = h.get("lr", settings.get("lr"))
        frame_lr = h.get("frame_lr", settings.get("frame_lr"))
        if lr is not None:
            a["lrs"].add(float(lr))
        if frame_lr is not None:
            a["frame_lrs"].add(float(frame_lr))
    return {
        "runs": len(runs),
        "arms": {arm: {k: sorted(v) for k, v in a.items()} for arm, a in arms.items()},
        "n_train": sorted({int(h["n_train"]) for h in runs}),
        "steps": sorted({int(h["steps_total"]) for h in runs}),
        "epochs": sorted({round(h["steps_total"] / (h["n_train"] // batch), 1) for h in runs}) if batch else [],
        "settings": settings,
    }


def chosen_settings(res: dict, arm: str = "A1") -> dict:
    """The settings ``arm`` ran at in a study of one setting per arm (the fitted study), as its runs
    and the file's ``settings`` record them.

    ``{"lr", "frame_lr", "max_step", "warmup_share", "epochs", "batch_size", "betas", "weight_decay",
    "logit_scale"}``: ``lr`` of the weights outside Q/K and ``frame_lr`` of the frames from the runs,
    the rest from ``settings``; ``warmup_share`` is the warm-up's share of the run
    (``warmup_epochs / epochs``). Raises ``ValueError`` where ``arm`` has no run, or runs at more
    than one lr or frame lr (a sweep, whose best is not a single setting).
    """
    plan = study_plan(res)
    if arm not in plan["arms"]:
        raise ValueError(f"{arm} has no run in this file; its arms: {sorted(plan['arms'])}")
    a, s = plan["arms"][arm], res["settings"]
    if len(a["lrs"]) != 1 or len(a["frame_lrs"]) > 1:
        raise ValueError(f"{arm} ran at lrs {a['lrs']} and frame lrs {a['frame_lrs']}: not one setting; "
                         "read a sweep's best with the evidence layer's lr curves instead")
    return {"lr": a["lrs"][0], "frame_lr": a["frame_lrs"][0] if a["frame_lrs"] else None,
            "max_step": s["max_step"], "warmup_share": s["warmup_epochs"] / s["epochs"], "epochs": s["epochs"],
            "batch_size": s["batch_size"], "betas": tuple(s["betas"]), "weight_decay": s["weight_decay"],
            "logit_scale": s["logit_scale"]}


def direction(x: float, up: str, down: str, level: str = "level with") -> str:
    """The word for the sign of ``x``: ``up`` if ``x > 0``, ``down`` if ``x < 0``, else ``level``.

    A sentence that states a direction takes its word from the number it states, so that it reads
    the other way when the number does (the counterfactual test swaps two arms and checks this).
    """
    if x is None or x != x:
        raise ValueError(f"direction needs a number, got {x!r}; a row with no paired seed has no direction")
    return up if x > 0 else down if x < 0 else level


def lead_text(row: dict, b: str, a: str, up: str = "ahead of", down: str = "behind",
              level: str = "level with") -> str:
    """A paired row ``b - a`` in words: ``"A1 is ahead of A0 by 2.41 pp (95% interval +2.15 to +2.68),
    ahead on 12 of 12 paired seeds"``.

    ``row`` is a row of :func:`stiefel_mini.evidence.paired` (``mean``, ``ci``, ``median``, ``unit``,
    ``wins``, ``losses``, ``ties``, ``n``; a win is a seed where ``b`` is better). The direction word
    comes from the sign of the mean (of the median where a difference is censored), the count is the
    seeds on that side; where the 95% interval holds zero no direction is given ("A1 and A7 not told
    apart: a mean gap of 0.36 pp (...)"). Raises ``ValueError`` for a row with no paired seed.
    """
    if not row.get("n"):
        raise ValueError(f"row {row.get('label', '')!r} has no paired seed; there is no difference to word")
    unit = row.get("unit", "pp")
    x = row["mean"] if row["mean"] is not None else row["median"]
    word = direction(x, up, down, level)
    # A win is b better in the metric's direction; the seeds on the side of the stated sign:
    better_up = row.get("higher_is_better", True)
    side = row["ties"] if x == 0 else row["wins"] if (x > 0) == better_up else row["losses"]
    ci = "" if row["ci"] is None else f" (95% interval {row['ci'][0]:+.2f} to {row['ci'][1]:+.2f})"
    if row["ci"] is not None and row["ci"][0] <= 0 <= row["ci"][1]:  # no direction for an interval holding zero
        ups = row["wins"] if better_up else row["losses"]  # the seeds on the side of a positive difference
        return (f"{b} and {a} not told apart: a mean gap of {abs(x):.2f} {unit}{ci}, {b} {up.split()[0]} on "
                f"{ups} of {row['n']} paired seeds")
    size = f" by {abs(x):.2f} {unit}{ci}" if x else ""
    return f"{b} is {word} {a}{size}, {word.split()[0]} on {side} of {row['n']} paired seeds"

"""Reading the language-model study's results file: sweeps, curves, costs and samples per arm.

Pure functions of the payload :func:`stiefel_mini.experiments.lm.study` writes (``results/lm/study.json``),
for the chapter and the evidence layer; no training code. The comparisons and verdicts are the
evidence layer's (:data:`stiefel_mini.evidence.claims.LM_CLAIMS`).
"""

from __future__ import annotations

import numpy as np

from stiefel_mini.experiments.lm_config import LM_ARMS, STUDY, LMStudy
from stiefel_mini.experiments.lm_plan import plan
from stiefel_mini.experiments.records import load_results
from stiefel_mini.resources import results_path

__all__ = ["STUDY_FILE", "load_study", "progress_counts", "sweep_rows", "seed_runs", "curve_band", "cost_rows",
           "samples"]

STUDY_FILE = "lm/study.json"
"""The study's results file under ``results/``."""


def load_study() -> dict | None:
    """The study's results file, or ``None`` where this copy of the results lacks it."""
    try:
        return load_results(results_path(STUDY_FILE))
    except FileNotFoundError:
        return None


def progress_counts(payload: dict | None, study: LMStudy = STUDY) -> dict:
    """``{"sweep", "seeds", "remaining", "best"}``: finished sweep and seed runs, runs still to go
    (:func:`stiefel_mini.experiments.lm_plan.plan`) and each swept arm's best lr fields."""
    runs = payload["runs"] if payload else []
    state = plan(study, runs)
    return {"sweep": sum(r["phase"] == "sweep" for r in runs), "seeds": sum(r["phase"] == "seeds" for r in runs),
            "remaining": state.remaining, "best": state.best}


def sweep_rows(payload: dict | None) -> list[dict]:
    """One row per (arm, swept value) of the lr sweeps: ``{"arm", "swept", "value", "val_bpb", "n"}``,
    the mean validation bits per byte over the sweep seeds, in study order then by value."""
    if not payload:
        return []
    order = [s.arm for s in STUDY.sweeps]
    rows: dict[tuple, list[float]] = {}
    for r in payload["runs"]:
        if r["phase"] == "sweep":
            swept = STUDY.sweep(r["arm"]).swept
            rows.setdefault((r["arm"], swept, r[swept]), []).append(r["val_bpb"])
    out = [{"arm": a, "swept": s, "value": v, "val_bpb": float(np.mean(b)), "n": len(b)}
           for (a, s, v), b in rows.items()]
    return sorted(out, key=lambda row: (order.index(row["arm"]), row["value"]))


def seed_runs(payload: dict | None, arm: str) -> dict[int, dict]:
    """``arm``'s runs of the paired seeds (at its best lr), keyed by seed."""
    if arm not in LM_ARMS:
        raise ValueError(f"unknown arm {arm!r}; choose one of {sorted(LM_ARMS)}")
    if not payload:
        return {}
    return {r["seed"]: r for r in payload["runs"] if r["phase"] == "seeds" and r["arm"] == arm}


def curve_band(runs: dict[int, dict]) -> dict | None:
    """The validation curves of ``runs`` on one token axis: ``{"tokens", "median", "low", "high"}``
    (median and range over seeds at each evaluation; runs that diverged left out), ``None`` without runs."""
    runs = {s: r for s, r in runs.items() if r.get("diverged_at") is None}
    if not runs:
        return None
    curves = np.array([r["history"]["val_bpb"] for r in runs.values()], dtype=float)  # (seeds, evals)
    tokens = next(iter(runs.values()))["history"]["tokens"]
    return {"tokens": np.asarray(tokens), "median": np.median(curves, 0), "low": curves.min(0),
            "high": curves.max(0)}


def cost_rows(payload: dict | None) -> list[dict]:
    """Per arm with runs: ``{"arm", "runs", "tokens_per_s", "minutes"}``, the median training tokens
    per second and the median wall minutes of a run (over all its runs, sweeps included)."""
    if not payload:
        return []
    out = []
    for arm in LM_ARMS:
        mine = [r for r in payload["runs"] if r["arm"] == arm]
        if mine:
            out.append({"arm": arm, "runs": len(mine),
                        "tokens_per_s": float(np.median([r["tokens_per_s"] for r in mine])),
                        "minutes": float(np.median([r["wall_time_s"] for r in mine])) / 60})
    return out


def samples(payload: dict | None, seed: int = 0) -> dict[str, list[dict]]:
    """Per arm, the texts its seed-``seed`` model wrote (``[{"prompt", "text"}]``), where that run exists."""
    return {arm: run["samples"] for arm in LM_ARMS if (run := seed_runs(payload, arm).get(seed)) is not None}

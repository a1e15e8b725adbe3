"""This code's grokking curve beside Nanda et al.'s: the landmarks of a run against their phases.

Nanda et al. (2023, "Progress measures for grokking via mechanistic interpretability", section 5)
split the training of their one-layer transformer on a + b mod 113 (30% of pairs, full batch, AdamW
lr 1e-3, weight decay 1) into three phases: memorisation to about epoch 1.4k, circuit formation to
about 9.4k and clean-up to about 13.3k, during which test accuracy jumps. :data:`NANDA_PHASES` holds
those boundaries; :func:`landmarks` reads the matching events off one stored history and
:func:`agreement_rows` sets them, per arm and seed, against the phase each should fall in.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from stiefel_mini.experiments.grokking.metrics import first_step

__all__ = ["NANDA_PHASES", "LANDMARKS", "landmarks", "agreement_rows"]

# (phase, first epoch, last epoch), Nanda et al. 2023, section 5.1 (epochs = full-batch steps)
NANDA_PHASES = (("memorisation", 0, 1_400), ("circuit formation", 1_400, 9_400), ("clean-up", 9_400, 13_300))

# landmark key: (what it is, the phase of NANDA_PHASES it falls in for Nanda et al.)
LANDMARKS = {
    "train99": ("training accuracy first >= 99%", "memorisation"),
    "test_loss_peak": ("test loss at its highest", "memorisation"),
    "test95": ("test accuracy first >= 95%", "clean-up"),
}


def landmarks(hist: dict) -> dict[str, int | None]:
    """The steps of :data:`LANDMARKS` in one run's history (``None``: not reached in the run).

    ``train99``: first evaluation with ``train_acc >= 0.99``; ``test95``: first with
    ``val_acc >= 0.95`` (the held-out pairs are Nanda et al.'s test set); ``test_loss_peak``: the
    evaluation with the largest ``val_loss`` (the first, on ties).
    """
    steps = hist["step"]
    losses = [np.nan if v is None else v for v in hist["val_loss"]]
    return {"train99": first_step(steps, hist["train_acc"], 0.99),
            "test_loss_peak": int(steps[int(np.nanargmax(losses))]),
            "test95": first_step(steps, hist["val_acc"], 0.95)}


def _placement(step: int | None, lo: int, hi: int) -> str:
    if step is None:
        return "never"
    return "earlier" if step < lo else "later" if step > hi else "within"


def agreement_rows(runs: Mapping[str, Mapping[int, dict]]) -> list[dict]:
    """Per arm and landmark: each seed's step and where it falls against Nanda et al.'s phase.

    ``runs`` maps arm -> seed -> run (with ``history``). One row per (arm, landmark) with ``arm``,
    ``landmark``, ``what``, ``phase``, ``window`` (``(lo, hi)`` epochs), ``seeds``, ``steps`` (per
    seed; ``None``: not reached), ``placement`` (per seed: ``"earlier"``, ``"within"``, ``"later"``
    than the window, or ``"never"``), ``within`` (how many seeds fall inside) and ``median`` (of the
    reached steps; ``None`` if none). Arms with no run give no row.
    """
    window = {name: (lo, hi) for name, lo, hi in NANDA_PHASES}
    rows = []
    for arm, by_seed in runs.items():
        seeds = sorted(by_seed)
        if not seeds:
            continue
        marks = [landmarks(by_seed[s]["history"]) for s in seeds]
        for key, (what, phase) in LANDMARKS.items():
            lo, hi = window[phase]
            steps = [m[key] for m in marks]
            place = [_placement(s, lo, hi) for s in steps]
            reached = [s for s in steps if s is not None]
            rows.append({"arm": arm, "landmark": key, "what": what, "phase": phase, "window": (lo, hi),
                         "seeds": seeds, "steps": steps, "placement": place,
                         "within": place.count("within"),
                         "median": float(np.median(reached)) if reached else None})
    return rows

"""What one run per arm can say: the paper's design replayed on every pair of stored runs.

The paper compares two arms by one run each at a fixed endpoint (97.0% against 61.1% at epoch
20,000). Given the stored curves of several paired seeds of both arms, :func:`one_run_gaps` replays
that design on every pair of runs and counts how often it gives a gap at least as large as the
paper's (35.9 points) and how often its sign disagrees with the paired mean over seeds;
:func:`below_best_pp` measures how far a run's endpoint sits below the best it had reached, the
dip a single endpoint can land in. Pure functions of the histories (``{"step": [...], key: [...]}``).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

__all__ = ["PAPER_GAP_PP", "common_step", "value_at", "below_best_pp", "one_run_gaps"]

PAPER_GAP_PP = 97.0 - 61.1  # the paper's one-run gap, points of validation accuracy


def common_step(hists: Sequence[dict]) -> int:
    """The last step every history in ``hists`` evaluated (the default endpoint)."""
    if not hists:
        raise ValueError("no histories: pass at least one run's history")
    common = set.intersection(*(set(h["step"]) for h in hists))
    if not common:
        raise ValueError("the histories share no evaluated step; pass runs of one sweep")
    return int(max(common))


def value_at(hist: dict, step: int, key: str = "val_acc") -> float:
    """``hist[key]`` at evaluated step ``step``; ``ValueError`` if that step was not evaluated."""
    try:
        i = list(hist["step"]).index(step)
    except ValueError:
        raise ValueError(f"step {step} is not among this history's evaluated steps "
                         f"({hist['step'][0]}..{hist['step'][-1]}); pick a step every run evaluated") from None
    return float(hist[key][i])


def below_best_pp(hist: dict, step: int | None = None, key: str = "val_acc") -> float:
    """The endpoint minus the best so far, in points: ``100 (v(step) - max_{t <= step} v(t))`` (<= 0).

    0 for a run at its best at ``step`` (default: its last evaluation); -30 for one that had reached
    95% and sits at 65% there.
    """
    step = hist["step"][-1] if step is None else step
    v = value_at(hist, step, key)
    best = max(float(x) for s, x in zip(hist["step"], hist[key]) if s <= step)
    return 100.0 * (v - best)


def _tally(gaps: np.ndarray, mean: float, gap_pp: float) -> dict:
    """Counts over one set of one-run gaps (points): large ones, and signs against the paired mean."""
    n = len(gaps)
    large = int(np.sum(np.abs(gaps) >= gap_pp))
    opposite = None if mean == 0 else int(np.sum(np.sign(gaps) == -np.sign(mean)))
    return {"n": n, "gaps_pp": gaps.tolist(), "large": large, "share_large": large / n if n else None,
            "large_up": int(np.sum(gaps >= gap_pp)), "large_down": int(np.sum(gaps <= -gap_pp)),
            "ties": int(np.sum(gaps == 0)), "opposite": opposite,
            "share_opposite": None if opposite is None or not n else opposite / n}


def one_run_gaps(baseline: Mapping[int, dict], arm: Mapping[int, dict], step: int | None = None,
                 key: str = "val_acc", gap_pp: float = PAPER_GAP_PP) -> dict:
    """Every one-run-per-arm comparison ``arm - baseline`` the stored runs allow, at one step.

    ``baseline`` and ``arm`` map seed -> history; only seeds both have (paired seeds, at least 2)
    are used. With ``v_a(s)`` the value (points) of arm ``a``'s run on seed ``s`` at ``step``
    (default: the last step all of them evaluated), the paired mean is
    ``mean_s (v_arm(s) - v_base(s))`` and the one-run gaps are

    * ``same_seed``: ``v_arm(s) - v_base(s)`` for each seed ``s`` (n comparisons: a run of each arm
      from the same start and split, as a paired study would make them);
    * ``cross_seed``: ``v_arm(i) - v_base(j)`` for every ``i != j`` (n (n - 1) comparisons: two
      independent runs, as a study that seeds each arm on its own would make them).

    Each holds ``n``, ``gaps_pp``, ``large`` (``|gap| >= gap_pp``, either direction) with
    ``share_large``, ``large_up`` / ``large_down`` (arm ahead / behind by that much), ``ties`` (gap 0)
    and ``opposite`` with ``share_opposite``: gaps whose sign is the opposite of the paired mean's
    (a tie is not opposite; ``None`` when the paired mean is 0). Also returned: ``step``, ``seeds``,
    ``paired_mean_pp``, ``gap_pp`` and ``below_best_pp`` (``{"baseline": [...], "arm": [...]}``, per
    seed, :func:`below_best_pp`).
    """
    seeds = sorted(set(baseline) & set(arm))
    if len(seeds) < 2:
        raise ValueError(f"one_run_gaps needs at least 2 paired seeds; the arms share {seeds}")
    hists = [baseline[s] for s in seeds] + [arm[s] for s in seeds]
    step = common_step(hists) if step is None else step
    base = np.array([100.0 * value_at(baseline[s], step, key) for s in seeds])  # (n,)
    other = np.array([100.0 * value_at(arm[s], step, key) for s in seeds])  # (n,)
    mean = float(np.mean(other - base))
    cross = (other[:, None] - base[None, :])[~np.eye(len(seeds), dtype=bool)]  # (n, n) -> (n (n - 1),)
    return {"step": step, "seeds": seeds, "paired_mean_pp": mean, "gap_pp": gap_pp,
            "same_seed": _tally(other - base, mean, gap_pp), "cross_seed": _tally(cross, mean, gap_pp),
            "below_best_pp": {"baseline": [below_best_pp(baseline[s], step, key) for s in seeds],
                              "arm": [below_best_pp(arm[s], step, key) for s in seeds]}}

"""The figures of the experiment chapters that show a study's runs, each arm in its optimizer's colour.

- :func:`peer_curve_figure` -- grokking curves beside a reference's phases (the peer curve).
- :func:`one_run_figure` -- the one-run-per-arm gaps and each run's endpoint below its best.
- :func:`temperature_figure` -- attention entropy and accuracy along training, fixed against learned
  logit scale: why orthonormal frames grok sooner only while their attention is flat.

Layout and colours are :mod:`stiefel_mini.plots`' (:func:`~stiefel_mini.plots.panels`,
:func:`~stiefel_mini.plots.optimizer_color`).
"""

from __future__ import annotations

from typing import Sequence

from stiefel_mini.plots import COLUMN_WIDTH_IN, NARROW_WIDTH_IN, legend_outside, optimizer_color, panels

__all__ = ["peer_curve_figure", "one_run_figure", "temperature_figure"]


def peer_curve_figure(runs: dict, phases: Sequence[tuple[str, int, int]], names: dict[str, str] | None = None,
                      narrow: bool = False):
    """Accuracy and loss (train dashed, test solid) of every run beside a reference's phases.

    ``runs``: arm -> seed -> run (with ``history``: ``step``, ``train_acc``, ``val_acc``,
    ``train_loss``, ``val_loss``); ``phases``: ``(name, first step, last step)`` shaded in both
    panels (Nanda et al.'s, :data:`stiefel_mini.experiments.grokking.peer_curve.NANDA_PHASES`); ``names``:
    legend names of the arms. One line per seed, each arm in its optimizer's colour
    (:func:`~stiefel_mini.plots.optimizer_color`); a :data:`~stiefel_mini.plots.NARROW_WIDTH_IN` figure
    when ``narrow``. Returns ``(fig, axes)``.
    """
    fig, axes = panels(2, ncols=1, row_height=2.2 if narrow else 2.4, width=NARROW_WIDTH_IN if narrow else COLUMN_WIDTH_IN,
                       sharex=True)
    shades = ("0.93", "0.86", "0.79")
    for ax in axes:
        for (name, lo, hi), shade in zip(phases, shades):
            ax.axvspan(lo, hi, color=shade, lw=0, zorder=0)
        for _, _, hi in phases:
            ax.axvline(hi, color="0.5", lw=0.6, zorder=0)
    for name, lo, hi in phases:
        axes[0].text((lo + hi) / 2, 1.04, name, ha="center", va="bottom", fontsize=9,
                     transform=axes[0].get_xaxis_transform())
    for arm, by_seed in runs.items():
        label, color = (names or {}).get(arm, arm), optimizer_color(arm)
        for i, (seed, r) in enumerate(sorted(by_seed.items())):
            h = r["history"]
            tag = {} if i else {"label": label}
            axes[0].plot(h["step"], h["val_acc"], color=color, lw=1, **tag)
            axes[0].plot(h["step"], h["train_acc"], "--", color=color, lw=0.8)
            axes[1].plot(h["step"], h["val_loss"], color=color, lw=1)
            axes[1].plot(h["step"], h["train_loss"], "--", color=color, lw=0.8)
    axes[0].set(ylabel="accuracy", ylim=(0, 1.02))
    axes[1].set(ylabel="loss (log)", yscale="log", xlabel="step (= epoch)")
    axes[0].plot([], [], "k-", lw=1, label="test (solid)")
    axes[0].plot([], [], "k--", lw=0.8, label="train (dashed)")
    legend_outside(fig, ncol=2 if narrow else 4)
    return fig, axes


def one_run_figure(result: dict, names: tuple[str, str], narrow: bool = False):
    """What one run per arm can say: the one-run gaps and each arm's endpoint below its best.

    ``result``: :func:`stiefel_mini.experiments.grokking.one_run.one_run_gaps`; ``names``: (baseline, arm)
    as the reader calls them (or their codes). Left: every same-seed and cross-seed gap (arm - baseline,
    points) with the paired mean (solid) and the paper's gap in both directions (dashed); right: per arm,
    each seed's endpoint minus its best so far, in the arm's colour. Side by side, or stacked in a
    :data:`~stiefel_mini.plots.NARROW_WIDTH_IN` figure when ``narrow``. Returns ``(fig, axes)``.
    """
    import numpy as np

    fig, (ax_gap, ax_dip) = panels(2, ncols=1 if narrow else 2, row_height=2.2 if narrow else 2.6,
                                   width=NARROW_WIDTH_IN if narrow else COLUMN_WIDTH_IN)
    jitter = np.random.default_rng(0)  # fixed: the figure is the same at every build
    for y, key, label in ((1, "same_seed", "same seed"), (0, "cross_seed", "other seeds")):
        gaps = np.asarray(result[key]["gaps_pp"])
        ax_gap.scatter(gaps, y + jitter.uniform(-0.15, 0.15, gaps.size), s=10, color="0.3", alpha=0.7)
    g = result["gap_pp"]
    for x in (-g, g):
        ax_gap.axvline(x, color="0.45", lw=0.8, ls="--")
    ax_gap.axvline(result["paired_mean_pp"], color="k", lw=1)
    ax_gap.set(yticks=[0, 1], yticklabels=["other seeds", "same seed"], ylim=(-0.5, 1.5),
               xlabel=f"{names[1]} − {names[0]} (points)",
               title=f"one-run gaps (dashed: ±{g:.1f})")
    dips = result["below_best_pp"]
    for y, side in ((1, "arm"), (0, "baseline")):
        vals = np.asarray(dips[side])
        ax_dip.scatter(vals, y + jitter.uniform(-0.15, 0.15, vals.size), s=12, color=optimizer_color(names[y]))
    ax_dip.set(yticks=[0, 1], yticklabels=[names[0], names[1]], ylim=(-0.5, 1.5),
               xlabel="endpoint − best so far (points)", title="how far below its best")
    ax_dip.axvline(0, color="0.5", lw=0.6)
    return fig, (ax_gap, ax_dip)


def temperature_figure(curves: Sequence[dict], uniform: float, threshold: float = 0.95, narrow: bool = False):
    """Attention entropy and validation accuracy along training, median over seeds with the quartiles
    shaded, one line per arm: solid where its logit scale is learned, dashed where it is fixed.

    ``curves``: ``{"arm", "label", "fixed", "entropy", "val_acc"}``, the last two bands of
    :func:`stiefel_mini.experiments.grokking.metrics.curve_bands` (``step``, ``median``, ``q25``,
    ``q75``); ``uniform``: the entropy of uniform attention (grey line); ``threshold``: the accuracy
    marked (grey line). Each arm in its optimizer's colour. Two panels side by side, or stacked in a
    :data:`~stiefel_mini.plots.NARROW_WIDTH_IN` figure when ``narrow``. Returns ``(fig, axes)``.
    """
    fig, axes = panels(2, ncols=1 if narrow else 2, row_height=2.3 if narrow else 2.9,
                       width=NARROW_WIDTH_IN if narrow else COLUMN_WIDTH_IN, sharex=True)
    for c in curves:
        style = {"color": optimizer_color(c["arm"]), "ls": "--" if c["fixed"] else "-"}
        for ax, key in zip(axes, ("entropy", "val_acc")):
            b = c[key]
            ax.fill_between(b["step"], b["q25"], b["q75"], color=style["color"], alpha=0.12, lw=0)
            ax.plot(b["step"], b["median"], label=c["label"], **style)
    axes[0].axhline(uniform, color="0.5", lw=0.7)
    axes[1].axhline(threshold, color="0.5", lw=0.7)
    axes[0].set(ylabel="nats", title=f"attention entropy (grey: uniform, {uniform:.2f})")
    axes[1].set(ylabel="accuracy", ylim=(0, 1.02), title=f"validation accuracy (grey: {threshold:.0%})")
    for ax in axes[1:] if narrow else axes:
        ax.set_xlabel("step")
    legend_outside(fig, ncol=1 if narrow else 2)
    return fig, axes


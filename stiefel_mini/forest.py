"""The intro's one-glance figure: each claim's primary effect with its 95% interval beside the paper's
number, and a panel for the language model: each Stiefel arm in its best configuration and the weaker.

:func:`forest` draws it, wide for a desktop column or narrow for a phone's (labels above the rows
instead of beside them); :func:`language_model_rows` picks the language model's rows from the reader's
questions (:func:`stiefel_mini.evidence.cards.configurations`). The chapter shows both variants through
:func:`stiefel_mini.plots.responsive`.
"""

from __future__ import annotations

from typing import Any, Sequence

from stiefel_mini.plots import NARROW_WIDTH_IN

__all__ = ["FOREST_FONT_PT", "NARROW_FONT_PT", "UNIT_TITLES", "language_model_rows", "forest"]

FOREST_FONT_PT = 11.5
"""The wide figure's font size: at its width (6.2 inches), shown at 400 px it still renders text of
about 10 px (the phone shows the narrow variant anyway)."""
NARROW_FONT_PT = 9.5
"""The narrow figure's font size: :data:`~stiefel_mini.plots.NARROW_WIDTH_IN` wide, a phone's column
shows it at about natural size, so its text is about 12 px."""
UNIT_TITLES = {"pp": "difference, percentage points", "steps": "difference, steps", "x": "ratio (log scale)",
               "bpb": "difference, test bits per byte"}
"""Each panel's axis title, by the unit of its rows."""


def language_model_rows(qs: Sequence[dict]) -> list[tuple[str, dict]]:
    """``(label, row)`` of each Stiefel arm of the language-model studies against the better arm of its
    family, its best configuration first and the weaker after it: ``("StiefelAdam, own scale lr −
    AdamW", row)``; empty without a paired seed."""
    from stiefel_mini.evidence.cards import SHORT_SETTINGS, configurations
    from stiefel_mini.evidence.words import side_names

    return [(f"{c['arm']}, {SHORT_SETTINGS.get(r['arm'], r['arm'])} − {side_names(r)[1].replace(' with ', '+')}", r)
            for c in configurations(list(qs)) for r in (c["best"], *c["weaker"])]


def _claim_rows(vs: Sequence[dict]) -> list[tuple[str, dict, Any]]:
    from stiefel_mini.evidence import claim as claim_of
    from stiefel_mini.evidence.sentences import FIGURE_NAMES, figure_name

    out = []
    for v in vs:
        c = claim_of(v["key"])
        for r in v["primary"]:
            if not r["n"] or (not r.get("ratio") and r["mean"] is None):
                continue
            label = figure_name(c.short or c.claim)  # a family's rows: a ratio's regime, else the variant
            if len(v["primary"]) > 1:
                label += f": {r['label'].split(', ', 1)[-1]}" if r.get("ratio") else f": vs {FIGURE_NAMES[r['baseline']]}"
            out.append((label, r, c))
    return out


def forest(vs: Sequence[dict], lm: Sequence[tuple[str, dict]] = (), narrow: bool = False, width: float = 6.2):
    """Each claim's primary effect with its 95% t interval, beside the paper's number, one panel a unit.

    ``vs``: the verdicts of :func:`stiefel_mini.evidence.verdicts`. One row per primary comparison
    with paired seeds (a family: one row per member): a dot at the mean and a bar over the 95% t
    interval, arms by name, a diamond at the paper's value where the paper gives one (a claimed range, for
    the step ratio: a band); the panels are points (pp), steps, ratios (log scale) and, with ``lm``
    (:func:`language_model_rows`), test bits per byte. A censored row without a mean is left out.
    ``narrow``: :data:`~stiefel_mini.plots.NARROW_WIDTH_IN` wide, each label above its row. Returns the
    figure.
    """
    import matplotlib.pyplot as plt
    from matplotlib.transforms import blended_transform_factory

    units: dict[str, list[tuple[str, dict, Any]]] = {u: [] for u in UNIT_TITLES}
    for label, r, c in _claim_rows(vs):
        units["x" if r.get("ratio") else r["unit"]].append((label, r, c))
    for label, r in lm:
        if r["mean"] is not None:
            units[r["unit"]].append((label, r, None))
    units = {u: rows for u, rows in units.items() if rows}
    font = NARROW_FONT_PT if narrow else FOREST_FONT_PT
    per_row = 0.62 if narrow else 0.42
    with plt.rc_context({"font.size": font, "axes.labelsize": font, "xtick.labelsize": font - 1,
                         "ytick.labelsize": font - 1}):
        heights = [0.9 + per_row * len(rows) for rows in units.values()]
        fig, axes = plt.subplots(len(units), 1, figsize=(NARROW_WIDTH_IN if narrow else width, sum(heights)),
                                 squeeze=False, layout="constrained", gridspec_kw={"height_ratios": heights})
        for ax, (unit, rows) in zip(axes[:, 0], units.items()):
            ys = list(range(len(rows)))[::-1]
            for y, (label, r, c) in zip(ys, rows):
                mid = r["gmean"] if unit == "x" else r["mean"]
                lo, hi = r["ci"] if r.get("ci") else (mid, mid)
                ax.plot([lo, hi], [y, y], color="black", lw=2)
                ax.plot([mid], [y], "o", color="black", ms=5)
                if c is not None and c.paper_range and unit == "x":
                    ax.fill_betweenx([y - 0.3, y + 0.3], *c.paper_range, color="tab:red", alpha=0.25, lw=0)
                elif c is not None and c.paper_value is not None:
                    ax.plot([c.paper_value], [y], "D", color="tab:red", ms=6)
            ax.axvline(1.0 if unit == "x" else 0.0, color="grey", lw=0.8, ls="--")
            if unit == "x":
                ax.set_xscale("log")
            if narrow:  # each label above its row, across the panel: a phone has no room beside it
                at = blended_transform_factory(ax.transAxes, ax.transData)
                for y, (label, _, _) in zip(ys, rows):
                    ax.text(0.02, y + 0.22, label, transform=at, fontsize=font - 1, va="bottom", ha="left")
                ax.set_yticks([])
                ax.set_ylim(-0.5, len(rows) - 0.05)
            else:
                ax.set_yticks(ys, [label for label, _, _ in rows])
                ax.set_ylim(-0.7, len(rows) - 0.3)
            ax.set_xlabel(UNIT_TITLES[unit])
    return fig

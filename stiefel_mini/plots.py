"""Figure layout helpers for the book: at most two panels a row, legends outside the data.

The style itself (font sizes, figure size, SVG ids) is ``book/matplotlibrc``, which matplotlib
reads because every chapter runs with ``book/`` as its working directory. These helpers keep the
chapters' plotting code short and the figures readable at the width of the book's column
(about 7 inches shown at natural size):

- :func:`panels` -- a grid of ``n`` axes, two a row, with unused cells removed.
- :func:`legend_outside` -- a legend to the right of (or below) the axes, never over the data.
- :func:`arm_colors` -- one fixed colour per arm name, the same in every figure of a chapter.
"""

from __future__ import annotations

from typing import Any, Sequence

__all__ = ["panels", "legend_outside", "arm_colors"]

COLUMN_WIDTH_IN = 6.8  # inches: the column of the book's pages shows a figure this wide at natural size


def panels(n: int, *, ncols: int = 2, row_height: float = 2.8, width: float = COLUMN_WIDTH_IN,
           **subplots_kw: Any):
    """A figure with ``n`` axes laid out at most ``ncols`` (<= 2) a row, row-major.

    Args:
        n: number of panels, ``>= 1``.
        ncols: panels per row, 1 or 2 (more would make each too small to read on the page).
        row_height: height of one row in inches.
        width: figure width in inches.
        **subplots_kw: passed to ``plt.subplots`` (e.g. ``sharey=True``).

    Returns:
        ``(fig, axes)`` with ``axes`` a list of the ``n`` axes (cells beyond ``n`` are removed).
    """
    import matplotlib.pyplot as plt

    if n < 1:
        raise ValueError(f"panels needs n >= 1, got {n}")
    if ncols not in (1, 2):
        raise ValueError(f"ncols must be 1 or 2 (at most two panels a row), got {ncols}")
    cols = min(ncols, n)
    rows = -(-n // cols)  # ceil(n / cols)
    fig, grid = plt.subplots(rows, cols, figsize=(width, row_height * rows), squeeze=False,
                             layout="constrained", **subplots_kw)
    axes = [ax for row in grid for ax in row]
    for ax in axes[n:]:
        ax.remove()
    return fig, axes[:n]


def legend_outside(ax: Any, where: str = "right", **legend_kw: Any):
    """Put ``ax``'s legend outside the data: to the right of the axes, or below them.

    Args:
        ax: a matplotlib ``Axes`` (its labelled artists make the legend) or a ``Figure`` (a single
            legend for the figure's axes, placed below them).
        where: ``"right"`` or ``"below"``.
        **legend_kw: passed to ``legend`` (e.g. ``ncol=3``, ``title="arm"``).

    Returns:
        The ``Legend``.
    """
    from matplotlib.figure import Figure

    if where not in ("right", "below"):
        raise ValueError(f"where must be 'right' or 'below', got {where!r}")
    if isinstance(ax, Figure):  # one legend under all the figure's axes (needs a constrained layout)
        handles, labels = {}, []
        for a in ax.axes:
            for h, lab in zip(*a.get_legend_handles_labels()):
                if lab not in handles:
                    handles[lab] = h
                    labels.append(lab)
        kw = {"loc": "outside lower center", "ncol": min(len(labels), 4)} | legend_kw
        return ax.legend([handles[lab] for lab in labels], labels, **kw)
    if where == "right":
        kw = {"loc": "upper left", "bbox_to_anchor": (1.02, 1.0), "borderaxespad": 0.0} | legend_kw
    else:
        kw = {"loc": "upper center", "bbox_to_anchor": (0.5, -0.22), "ncol": 3} | legend_kw
    return ax.legend(**kw)


def arm_colors(arms: Sequence[str]) -> dict[str, str]:
    """A fixed colour (``"C0"``, ``"C1"``, ...) per arm, in the order given."""
    return {arm: f"C{i % 10}" for i, arm in enumerate(arms)}


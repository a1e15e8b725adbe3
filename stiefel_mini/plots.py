"""Figure layout helpers for the book: at most two panels a row, legends outside the data.

The style itself (font sizes, figure size, SVG ids) is ``book/matplotlibrc``, which matplotlib
reads because every chapter runs with ``book/`` as its working directory. These helpers keep the
chapters' plotting code short and the figures readable at the width of the book's column
(about 7 inches shown at natural size):

- :func:`panels` -- a grid of ``n`` axes, two a row, with unused cells removed.
- :func:`legend_outside` -- a legend to the right of (or below) the axes, never over the data.
- :data:`OPTIMIZER_COLORS`, :func:`optimizer_color` -- one colour per optimizer, in every figure of the book.
- :func:`attention_head_diagram` -- where the frames W_Q, W_K sit in one attention head.
- :func:`step_pipeline_diagram` -- the stages of one StiefelAdam step on a frame.
- :func:`responsive` -- a wide figure and its narrow variant; the page shows the one that fits.
- :func:`logit_growth_figure` -- the largest attention logit and the accuracy against each arm's lr.
"""

from __future__ import annotations

from typing import Any, Sequence

__all__ = ["panels", "legend_outside", "OPTIMIZER_COLORS", "optimizer_color", "attention_head_diagram",
           "step_pipeline_diagram", "responsive", "NARROW_WIDTH_IN", "logit_growth_figure"]

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


OPTIMIZER_COLORS = {
    "AdamW": "#1f77b4", "StiefelAdam": "#ff7f0e", "QK-norm": "#2ca02c", "frozen frames": "#d62728",
    "Muon": "#9467bd", "StiefelMuon": "#8c564b", "Muon with QK-norm": "#e377c2", "uniform attention": "#7f7f7f",
    "StiefelAdam on Q/K with Muon": "#17becf", "AdamW followed by the polar projection": "#bcbd22",
    "StiefelMuon on every hidden matrix": "#393b79",
}
"""One colour per optimizer (and per control: frozen frames, uniform attention), by its name for a
reader, in every figure of the book. An arm that varies one of them takes its colour
(:func:`optimizer_color`)."""

_OPTIMIZER_OF = {"AdamW with QK-norm": "QK-norm", "adamw_nodecay_qk": "AdamW", "adamw_scaled_qk": "AdamW",
                 "uniform": "uniform attention", "A0'": "AdamW", "A4": "AdamW", "adamw_family": "AdamW",
                 "muon_family": "Muon"}
"""Arms whose name does not start with their optimizer's, and the grokking controls the evidence does not name."""


def optimizer_color(arm: str) -> str:
    """The colour of ``arm`` (a code, ``"A1"``, ``"stiefel_learned"``, or a reader's name): that of its
    optimizer in :data:`OPTIMIZER_COLORS`, the longest name its reader's name starts with (StiefelAdam's
    variants, "StiefelAdam (own scale lr)", take StiefelAdam's). Raises ``ValueError`` for an arm of no
    optimizer there."""
    from stiefel_mini.evidence.words import arm_name

    name = _OPTIMIZER_OF.get(arm) or _OPTIMIZER_OF.get(arm_name(arm)) or arm_name(arm)
    if name in OPTIMIZER_COLORS:
        return OPTIMIZER_COLORS[name]
    known = [k for k in sorted(OPTIMIZER_COLORS, key=len, reverse=True) if name.startswith(k)]
    if not known:
        raise ValueError(f"no colour for arm {arm!r} ({name}); add its optimizer to OPTIMIZER_COLORS")
    return OPTIMIZER_COLORS[known[0]]


FRAME_COLOR = "C0"  # boxes that hold or act on a Stiefel frame, in both diagrams
PLAIN_COLOR = "0.55"


def _flow(ax: Any, boxes: Sequence[tuple[float, float, str, str, bool]],
          arrows: Sequence[tuple[int, int]], size: tuple[float, float]) -> list[tuple[tuple[float, float], ...]]:
    """Draw labelled boxes ``(x, y, title, detail, is_frame)`` (centres in data units) and arrows.

    An arrow ``(i, j)`` joins box ``i`` to box ``j``, edge to edge; frame boxes are filled. Returns
    each arrow's ``(start, end)`` in data units, in the order of ``arrows``.
    """
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    w, h = size
    ends = []
    for x, y, title, detail, is_frame in boxes:
        color = FRAME_COLOR if is_frame else PLAIN_COLOR
        ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h,
                                    boxstyle="round,pad=0.02,rounding_size=0.08",
                                    facecolor=color if is_frame else "white", edgecolor=color,
                                    alpha=0.9 if is_frame else 1.0, lw=1.4))
        ink = "white" if is_frame else "black"
        ax.text(x, y + (0.13 * h if detail else 0), title, ha="center", va="center", color=ink,
                fontsize=10, fontweight="bold")
        if detail:
            ax.text(x, y - 0.22 * h, detail, ha="center", va="center", color=ink, fontsize=9)
    for i, j in arrows:
        (x0, y0), (x1, y1) = boxes[i][:2], boxes[j][:2]
        dx, dy = x1 - x0, y1 - y0
        # leave each box through the side facing the other box
        sx = (w / 2) * (1 if dx > 0 else -1) if abs(dx) * h >= abs(dy) * w else 0.0
        sy = 0.0 if sx else (h / 2) * (1 if dy > 0 else -1)
        ends.append(((x0 + sx, y0 + sy), (x1 - sx, y1 - sy)))
        ax.add_patch(FancyArrowPatch(*ends[-1], arrowstyle="-|>", mutation_scale=12, color="0.25", lw=1.2,
                                     shrinkA=2, shrinkB=2))
    ax.set_aspect("equal")
    ax.axis("off")
    return ends


NARROW_WIDTH_IN = 3.6
"""inches: the narrow variant of a diagram. A phone's column (about 360 px at 400 px wide) shows it
at about natural size, so its 9-10 pt text stays at 12 px or more."""


def attention_head_diagram(width: float | None = None, narrow: bool = False):
    r"""Where the Stiefel frames sit in one attention head: a block diagram (matplotlib).

    Tokens ``x`` (T x n, n = d_model) go through the query and key projections ``W_Q^h``,
    ``W_K^h`` (frames in St(n, p), filled boxes) to the logits
    :math:`\ell_{ij} = s_h\, x_i^\top W_Q^h W_K^{h\top} x_j`, the softmax, the values ``W_V^h``
    and the output projection ``W_O`` (ordinary weights, open boxes).

    Args:
        width: figure width in inches (default :data:`COLUMN_WIDTH_IN`, or :data:`NARROW_WIDTH_IN`
            for the narrow variant).
        narrow: the same boxes and arrows stacked top to bottom in two columns, for a phone's column
            (:func:`responsive` shows it in place of the wide one there).

    Returns:
        The ``Figure`` (one axes, no data).
    """
    import matplotlib.pyplot as plt

    frame = r"frame in St$(n, p)$"
    if narrow:  # flow top to bottom; W_V reads the same tokens x (named in its box, not by a long arrow)
        boxes = [
            (1.3, 0.0, "tokens", r"$x$: $T \times n$", False),                    # 0
            (0.0, -1.4, r"$W_Q^h$", frame, True),                                 # 1
            (2.6, -1.4, r"$W_K^h$", frame, True),                                 # 2
            (2.6, -4.2, r"$W_V^h$", r"on $x$; $n \times p$, free", False),         # 3
            (1.3, -2.8, "logits", r"$s_h\, x W_Q^h (x W_K^h)^\top$", False),      # 4
            (0.0, -4.2, "softmax", "rows sum to 1", False),                      # 5
            (1.3, -5.6, "mix values", r"$T \times p$ per head", False),          # 6
            (1.3, -7.0, r"$W_O$", r"heads $\to n$, free", False),                # 7
        ]
        arrows = [(0, 1), (0, 2), (1, 4), (2, 4), (4, 5), (5, 6), (3, 6), (6, 7)]
        width, size, limits = width or NARROW_WIDTH_IN, (2.4, 0.95), ((-1.3, 3.9), (-7.6, 0.6))
        title = "one attention head\n(filled: the frames, the query\nand key projections)"
    else:
        boxes = [
            (0.0, 1.6, "tokens", r"$x$: $T \times n$", False),                     # 0
            (2.4, 2.9, r"$W_Q^h$", frame, True),                                  # 1
            (2.4, 1.6, r"$W_K^h$", frame, True),                                  # 2
            (2.4, 0.3, r"$W_V^h$", r"$n \times p$, free", False),                 # 3
            (4.8, 2.25, "logits", r"$s_h\, x W_Q^h (x W_K^h)^\top$", False),     # 4
            (7.2, 2.25, "softmax", "rows sum to 1", False),                        # 5
            (7.2, 0.3, "mix values", r"$T \times p$ per head", False),            # 6
            (9.6, 0.3, r"$W_O$", r"heads $\to n$, free", False),                  # 7
        ]
        arrows = [(0, 1), (0, 2), (0, 3), (1, 4), (2, 4), (4, 5), (5, 6), (3, 6), (6, 7)]
        width, size, limits = width or COLUMN_WIDTH_IN, (2.0, 1.0), ((-1.1, 10.7), (-0.3, 3.5))
        title = "one attention head: the frames (filled) are the query and key projections"
    return _diagram(boxes, arrows, size, limits, title, width)[0]


def step_pipeline_diagram(width: float | None = None, narrow: bool = False):
    r"""The stages of one ``StiefelAdam`` step on a frame ``W_t``: a block diagram (matplotlib).

    Gradient ``G_t`` -> projection :math:`\xi_t = P_{W_t}(G_t)` -> moments ``m_t`` and one scalar
    ``v_t`` -> Adam direction ``D_t`` -> trust cap (length at most ``delta = max_step``) -> retraction
    :math:`W_{t+1} = R_{W_t}(S_t)` -> transport of ``m_t`` to the tangent space at ``W_{t+1}``, which
    the next step's moments use (the arrow labelled "next step").

    Args:
        width: figure width in inches (default :data:`COLUMN_WIDTH_IN`, or :data:`NARROW_WIDTH_IN`
            for the narrow variant).
        narrow: the stages in two columns read top to bottom, then bottom to top, for a phone's
            column (:func:`responsive` shows it in place of the wide one there).

    Returns:
        The ``Figure`` (one axes, no data).
    """
    if narrow:  # down the left column, up the right one, back into the moments
        boxes = [
            (0.0, 0.0, "gradient", r"$G_t$ at $W_t$", False),                      # 0
            (0.0, -1.8, "project", r"$\xi_t = P_{W_t}(G_t)$", True),               # 1
            (0.0, -3.6, "moments", r"$m_t$; one scalar $v_t$", False),             # 2
            (0.0, -5.4, "direction", r"$D_t$, $\|D_t\|_F \approx 1$", False),      # 3
            (2.7, -5.4, "cap the step", r"$\|S_t\|_F \leq \delta$", False),        # 4
            (2.7, -3.6, "retract", r"$W_{t+1} = R_{W_t}(S_t)$", True),             # 5
            (2.7, -1.8, "transport", r"$m_t$ to $T_{W_{t+1}}$", True),             # 6
        ]
        width, size, limits = width or NARROW_WIDTH_IN, (2.4, 0.95), ((-1.3, 4.0), (-6.0, 0.6))
        title = "one StiefelAdam step on a frame\n(filled: uses the manifold's geometry)"
    else:
        boxes = [
            (0.0, 1.75, "gradient", r"$G_t$ at $W_t$", False),                      # 0
            (2.4, 1.75, "project", r"$\xi_t = P_{W_t}(G_t)$", True),                # 1
            (4.8, 1.75, "moments", r"$m_t$; one scalar $v_t$", False),              # 2
            (7.2, 1.75, "direction", r"$D_t$, $\|D_t\|_F \approx 1$", False),       # 3
            (7.2, 0.0, "cap the step", r"$\|S_t\|_F \leq \delta$", False),         # 4
            (4.8, 0.0, "retract", r"$W_{t+1} = R_{W_t}(S_t)$", True),               # 5
            (2.4, 0.0, "transport", r"$m_t$ to $T_{W_{t+1}}$", True),               # 6
        ]
        width, size, limits = width or COLUMN_WIDTH_IN, (2.0, 1.0), ((-1.1, 8.3), (-0.6, 2.35))
        title = "one StiefelAdam step on a frame (filled: uses the manifold's geometry)"
    arrows = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 6), (6, 2)]
    fig, ends = _diagram(boxes, arrows, size, limits, title, width)
    # the last arrow, transport -> moments, on its side away from the box it passes closest to
    _label_arrow(fig.axes[0], ends[-1], "next step", side="left")
    return fig


def _diagram(boxes, arrows, size, limits, title, width):
    """A figure of :func:`_flow`'s boxes and arrows in the data ``limits`` ``((x0, x1), (y0, y1))``,
    as tall as the limits' aspect asks at ``width`` inches (equal aspect, so boxes keep their shape).
    Returns ``(fig, ends)``, ``ends`` as :func:`_flow` returns them."""
    import matplotlib.pyplot as plt

    (x0, x1), (y0, y1) = limits
    title_in = 0.2 * (title.count("\n") + 1) + 0.15
    fig, ax = plt.subplots(figsize=(width, width * (y1 - y0) / (x1 - x0) + title_in), layout="constrained")
    ends = _flow(ax, boxes, arrows, size)
    ax.set_xlim(x0, x1)
    ax.set_ylim(y0, y1)
    ax.set_title(title)
    return fig, ends


def _label_arrow(ax: Any, ends: tuple[tuple[float, float], ...], text: str, side: str) -> None:
    """Write ``text`` beside the middle of the arrow from ``ends[0]`` to ``ends[1]`` (data units), on
    the ``side`` (``"left"`` or ``"right"`` of the direction of travel), anchored at the text's corner
    nearest the line so that the text clears it."""
    import numpy as np

    (xa, ya), (xb, yb) = ends
    mid, d = np.array([(xa + xb) / 2, (ya + yb) / 2]), np.array([xb - xa, yb - ya])
    normal = np.array([-d[1], d[0]] if side == "left" else [d[1], -d[0]]) / np.hypot(*d)
    x, y = mid + 0.12 * normal
    ax.text(x, y, text, fontsize=9, color="0.25", ha="left" if normal[0] >= 0 else "right",
            va="bottom" if normal[1] >= 0 else "top")


def responsive(wide: Any, narrow: Any, alt: str, breakpoint_px: int = 520):
    """Show figure ``wide`` where its column is wider than ``breakpoint_px``, ``narrow`` below that.

    Both are drawn now as SVG into one HTML output (no kernel needed to switch) with a CSS container
    query on the output's width: the page shows one, and the other takes no space. ``alt`` describes
    the figure for screen readers. Both figures are closed. Returns an ``IPython.display.HTML``.
    """
    import base64
    import io

    import matplotlib.pyplot as plt
    from IPython.display import HTML

    def _svg(fig) -> str:
        buf = io.BytesIO()
        fig.savefig(buf, format="svg")
        plt.close(fig)
        return base64.b64encode(buf.getvalue()).decode()

    style = ("<style>.sm-responsive{container-type:inline-size}.sm-responsive img{max-width:100%;height:auto}"
             ".sm-narrow{display:none}"
             f"@container (max-width:{breakpoint_px}px){{.sm-wide{{display:none}}.sm-narrow{{display:block}}}}</style>")
    imgs = "".join(f'<img class="sm-{kind}" alt="{alt}" src="data:image/svg+xml;base64,{_svg(fig)}">'
                   for kind, fig in (("wide", wide), ("narrow", narrow)))
    return HTML(f'{style}<div class="sm-responsive">{imgs}</div>')


def logit_growth_figure(curves: Sequence[dict], names: dict[str, str], narrow: bool = False):
    """The largest attention logit (log scale) and the test accuracy against each arm's swept lr.

    ``curves``: rows of :func:`stiefel_mini.evidence.runs.lr_curves` (one train fraction), each with
    ``arm``, ``swept`` and ``points`` (``value``, ``max_logit``, ``acc_mean``: seed means); ``names``:
    arm -> legend name, in drawing order (an arm left out is not drawn). One line per arm against its
    own swept value (``lr``, or ``frame_lr`` for an arm with frames, a step length). Two panels side
    by side, or stacked in a :data:`NARROW_WIDTH_IN` figure when ``narrow``. Returns ``(fig, axes)``.
    """
    by_arm = {c["arm"]: c for c in curves}
    missing = [a for a in names if a not in by_arm]
    if missing:
        raise ValueError(f"no lr curve for arms {missing}; the curves hold {sorted(by_arm)}")
    fig, axes = panels(2, ncols=1 if narrow else 2, row_height=2.5 if narrow else 2.9,
                       width=NARROW_WIDTH_IN if narrow else COLUMN_WIDTH_IN, sharex=True)
    for arm, label in names.items():
        pts = [p for p in by_arm[arm]["points"] if p["max_logit"] is not None]
        x = [p["value"] for p in pts]
        axes[0].plot(x, [p["max_logit"] for p in pts], "o-", color=optimizer_color(arm), ms=4,
                     label=f"{label} ({'frame lr' if by_arm[arm]['swept'] == 'frame_lr' else 'lr'})")
        axes[1].plot(x, [100 * p["acc_mean"] for p in pts], "o-", color=optimizer_color(arm), ms=4)
    axes[0].set(xscale="log", yscale="log", ylabel="largest logit", title="largest attention logit")
    axes[1].set(xscale="log", ylabel="test accuracy (%)", title="test accuracy")
    for ax in axes[1:] if narrow else axes:
        ax.set_xlabel("learning rate swept")
    legend_outside(fig, ncol=1 if narrow else 3)
    return fig, axes

"""Widgets that respond in a static HTML page with no kernel, and live in Jupyter.

Every widget here is a slider ``jslink``-ed to an ipywidgets ``Stack`` of pre-rendered frames. The
frames (PNG images or HTML snippets) are computed once, in Python, when the notebook runs; the link
between the slider and the stack lives in the browser. So the widget keeps working in the built book
(where the ipywidgets HTML manager replays the saved widget state) and in Jupyter, Binder or Colab
(where the same link runs in the front end) — no kernel round trip is needed to move the slider.

Functions:

- :func:`frame_player` — one slider over a list of frames.
- :func:`frame_grid_player` — two sliders over a 2-D grid of frames (row slider x column slider).
- :func:`figure_to_png` — render a matplotlib figure to PNG bytes (and close it).
- :func:`markdown_table` / :func:`show_table` — rows of cells as a Markdown table (text / displayed).
"""

from __future__ import annotations

import io
from typing import Any, Sequence

__all__ = ["figure_to_png", "frame_player", "frame_grid_player", "markdown_table", "show_table"]


def figure_to_png(fig: Any, *, dpi: int = 80, close: bool = True) -> bytes:
    """Render a matplotlib figure to PNG bytes.

    Args:
        fig: a ``matplotlib.figure.Figure``.
        dpi: resolution of the PNG; frames are embedded in the page, so keep it modest.
        close: close the figure afterwards so it is not also displayed as a static output.

    Returns:
        The PNG file contents.
    """
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    if close:
        import matplotlib.pyplot as plt

        plt.close(fig)
    return buf.getvalue()


def _frame_widget(frame: Any, *, dpi: int, width: str | None):
    """Turn one frame (PNG bytes, matplotlib figure or HTML string) into a display widget."""
    import ipywidgets as w

    if isinstance(frame, str):
        return w.HTML(value=frame)
    if isinstance(frame, (bytes, bytearray, memoryview)):
        png = bytes(frame)
    elif hasattr(frame, "savefig"):
        png = figure_to_png(frame, dpi=dpi)
    else:
        raise TypeError(
            f"a frame must be PNG bytes, a matplotlib Figure or an HTML string, got {type(frame).__name__}"
        )
    if not png.startswith(b"\x89PNG"):
        raise ValueError("bytes frames must be PNG file contents")
    layout = w.Layout(width=width) if width else w.Layout()
    return w.Image(value=png, format="png", layout=layout)


def _labels(labels: Sequence[Any] | None, n: int, what: str) -> list[str]:
    if labels is None:
        return [str(i) for i in range(n)]
    out = [str(x) for x in labels]
    if len(out) != n:
        raise ValueError(f"{what}: got {len(out)} labels for {n} frames")
    if len(set(out)) != n:
        raise ValueError(f"{what}: labels must be distinct, got {out}")
    return out


def _slider(labels: list[str], description: str, index: int):
    import ipywidgets as w

    return w.SelectionSlider(
        options=labels,
        index=index,
        description=description,
        continuous_update=True,
        style={"description_width": "initial"},
        layout=w.Layout(width="min(36rem, 95%)"),
    )


def frame_player(
    frames: Sequence[Any],
    labels: Sequence[Any] | None = None,
    description: str = "frame",
    *,
    index: int = 0,
    dpi: int = 80,
    width: str | None = None,
):
    """One slider that flips through pre-rendered frames, with no kernel needed.

    Builds a ``SelectionSlider`` over ``labels`` whose ``index`` is ``jslink``-ed to the
    ``selected_index`` of a ``Stack`` holding one widget per frame, and returns them in a ``VBox``
    (slider on top). Display the result as the last expression of a cell.

    Args:
        frames: list of ``n >= 1`` frames; each is PNG bytes, a matplotlib ``Figure`` (rendered at
            ``dpi`` and closed) or an HTML string.
        labels: ``n`` distinct labels shown by the slider (default ``"0" .. "n-1"``).
        description: text in front of the slider.
        index: frame shown first.
        dpi: resolution for matplotlib frames.
        width: optional CSS width of image frames (e.g. ``"480px"``).

    Returns:
        ``ipywidgets.VBox([slider, stack])``; ``.slider`` and ``.stack`` attributes are set on it.
    """
    import ipywidgets as w

    frames = list(frames)
    if not frames:
        raise ValueError("frame_player needs at least one frame")
    names = _labels(labels, len(frames), "frame_player")
    if not 0 <= index < len(frames):
        raise ValueError(f"index {index} out of range for {len(frames)} frames")
    children = [_frame_widget(f, dpi=dpi, width=width) for f in frames]
    stack = w.Stack(children=children, selected_index=index)
    slider = _slider(names, description, index)
    link = w.jslink((slider, "index"), (stack, "selected_index"))
    box = w.VBox([slider, stack])
    box.slider, box.stack, box.links = slider, stack, [link]
    return box


def frame_grid_player(
    frames: Sequence[Sequence[Any]],
    row_labels: Sequence[Any] | None = None,
    col_labels: Sequence[Any] | None = None,
    row_description: str = "row",
    col_description: str = "column",
    *,
    dpi: int = 80,
    width: str | None = None,
):
    """Two sliders over a grid of pre-rendered frames, with no kernel needed.

    ``frames[i][j]`` is shown when the first slider is at ``row_labels[i]`` and the second at
    ``col_labels[j]``. Implemented as an outer ``Stack`` (one child per row, linked to the first
    slider) of inner ``Stack`` s (one child per column, each linked to the second slider), so both
    links are plain ``jslink`` s that run in the browser.

    Args:
        frames: an ``m x n`` nested list (``m, n >= 1``) of PNG bytes, matplotlib figures or HTML strings.
        row_labels, col_labels: ``m`` and ``n`` distinct labels (default ``"0"..``).
        row_description, col_description: text in front of each slider.
        dpi: resolution for matplotlib frames.
        width: optional CSS width of image frames.

    Returns:
        ``ipywidgets.VBox([row_slider, col_slider, outer_stack])`` with ``.sliders`` and ``.stack`` set.
    """
    import ipywidgets as w

    grid = [list(row) for row in frames]
    if not grid or not grid[0]:
        raise ValueError("frame_grid_player needs at least one row and one column")
    n = len(grid[0])
    if any(len(row) != n for row in grid):
        raise ValueError("frame_grid_player: every row must have the same number of frames")
    rows = _labels(row_labels, len(grid), "frame_grid_player rows")
    cols = _labels(col_labels, n, "frame_grid_player columns")
    row_slider = _slider(rows, row_description, 0)
    col_slider = _slider(cols, col_description, 0)
    inner = [
        w.Stack(children=[_frame_widget(f, dpi=dpi, width=width) for f in row], selected_index=0)
        for row in grid
    ]
    outer = w.Stack(children=inner, selected_index=0)
    links = [w.jslink((row_slider, "index"), (outer, "selected_index"))]
    links += [w.jslink((col_slider, "index"), (s, "selected_index")) for s in inner]
    box = w.VBox([row_slider, col_slider, outer])
    box.sliders, box.stack, box.links = (row_slider, col_slider), outer, links
    return box


def markdown_table(header: Sequence[Any], body: Sequence[Sequence[Any]]) -> str:
    """The Markdown text of a table: ``header`` cells, then one line per row of ``body`` (cells via ``str``).

    Raises ``ValueError`` when a row's length differs from the header's.
    """
    for i, row in enumerate(body):
        if len(row) != len(header):
            raise ValueError(f"row {i} has {len(row)} cells, the header {len(header)}")
    lines = ["| " + " | ".join(str(c) for c in header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in body]
    return "\n".join(lines)


def show_table(header: Sequence[Any], body: Sequence[Sequence[Any]]) -> None:
    """Display :func:`markdown_table` of ``header`` and ``body`` in the notebook (IPython Markdown)."""
    from IPython.display import Markdown, display

    display(Markdown(markdown_table(header, body)))

"""Widgets that respond in a static HTML page with no kernel, and live in Jupyter.

Every widget here is a slider (or a row of toggle buttons) ``jslink``-ed to an ipywidgets ``Stack`` of pre-rendered frames. The
frames (PNG images or HTML snippets) are computed once, in Python, when the notebook runs; the link
between the slider and the stack lives in the browser. So the widget keeps working in the built book
(where the ipywidgets HTML manager replays the saved widget state) and in Jupyter, Binder or Colab
(where the same link runs in the front end) — no kernel round trip is needed to move the slider.

Functions:

- :func:`frame_player` — one slider over a list of frames.
- :func:`frame_grid_player` — two sliders over a 2-D grid of frames (row slider x column slider).
- :func:`frame_explorer` — one row of toggle buttons per dimension of an n-D grid of frames (for
  categories such as arm, seed, metric, where a slider would suggest an order).
- :func:`figure_to_png` — render a matplotlib figure to PNG bytes (and close it).
- :func:`markdown_table` / :func:`show_table` — rows of cells as a Markdown table (text / displayed).
- :func:`weight_decay_widget` — the weight-decay chapter's two-slider view of a sweep, with
  :func:`weight_decay_frame_html` for one frame.
"""

from __future__ import annotations

import base64
import html
import io
from typing import Any, Sequence

import torch

__all__ = ["figure_to_png", "frame_player", "frame_grid_player", "frame_explorer", "markdown_table",
           "show_table", "weight_decay_frame_html", "weight_decay_widget"]


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


def _control(labels: list[str], description: str, index: int, control: str = "slider"):
    """A control over ``labels``: a slider (ordered values) or toggle buttons (categories)."""
    import ipywidgets as w

    if control == "toggle":
        return w.ToggleButtons(options=labels, index=index, description=description,
                               style={"description_width": "initial", "button_width": "auto"})
    if control != "slider":
        raise ValueError(f"control must be 'slider' or 'toggle', got {control!r}")
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
    control: str = "slider",
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
        control: ``"slider"`` for ordered labels (a step, a learning rate), ``"toggle"`` for
            categories (toggle buttons: no order is implied).

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
    slider = _control(names, description, index, control)
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
    row_control: str = "slider",
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
        row_control: ``"slider"``, or ``"toggle"`` when the rows are categories (toggle buttons).

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
    row_slider = _control(rows, row_description, 0, row_control)
    col_slider = _control(cols, col_description, 0)
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

    A ``|`` inside a cell (a norm, ``||W||``) is escaped, so that it does not end the cell. Raises
    ``ValueError`` when a row's length differs from the header's.
    """
    for i, row in enumerate(body):
        if len(row) != len(header):
            raise ValueError(f"row {i} has {len(row)} cells, the header {len(header)}")

    def line(cells: Sequence[Any]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    return "\n".join([line(header), "|" + " --- |" * len(header), *(line(row) for row in body)])


def show_table(header: Sequence[Any], body: Sequence[Sequence[Any]]) -> None:
    """Display :func:`markdown_table` of ``header`` and ``body`` in the notebook (IPython Markdown)."""
    from IPython.display import Markdown, display

    display(Markdown(markdown_table(header, body)))


# ----------------------------------------------------------------------------------------------------
# The weight-decay chapter's widget: frames rendered here from a sweep, sliders linked in the browser
# ----------------------------------------------------------------------------------------------------

ARM_TITLES = {"adamw": "AdamW", "stiefel": "StiefelAdam", "qknorm": "AdamW + QK-norm"}


# The frames sit two abreast in the book's column (about 680 px), so each is shown about 330 px wide:
# a 4.4-inch figure at 80 dpi (352 px) is barely scaled down, and 11 pt text there is >= 10 px.
WD_FIGSIZE = (4.4, 2.9)  # inches
WD_FONT_PT = 11


def _weight_decay_png(history: dict[str, Any], arm: str, i_wd: int, i_snap: int, dpi: int) -> bytes:
    """One arm's picture for :func:`weight_decay_widget`: head 0's attention map and ``||W_Q^h||_F`` over steps.

    All text is ``WD_FONT_PT`` points and the legend sits below the axes, outside the data."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    with plt.rc_context({"font.size": WD_FONT_PT, "axes.titlesize": WD_FONT_PT,
                         "axes.labelsize": WD_FONT_PT, "xtick.labelsize": WD_FONT_PT,
                         "ytick.labelsize": WD_FONT_PT, "legend.fontsize": WD_FONT_PT}):
        return _weight_decay_figure_png(history, arm, i_wd, i_snap, dpi)


def _weight_decay_figure_png(history: dict[str, Any], arm: str, i_wd: int, i_snap: int, dpi: int) -> bytes:
    """The figure of :func:`_weight_decay_png`, drawn under its font settings."""
    import matplotlib.pyplot as plt

    from stiefel_mini.plots import legend_outside, optimizer_color

    cfg = history["config"]
    recs = history["runs"][arm]
    r = recs[i_wd]
    s = r["snapshots"]
    attn = s["attn"][i_snap].numpy()
    slot = history["show_batch"]["slot"].numpy()
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=WD_FIGSIZE, layout="constrained",
                                   gridspec_kw={"width_ratios": [1.1, 1]})
    ax0.imshow(attn, vmin=0, vmax=1, cmap="viridis", aspect="auto")
    ax0.scatter(slot, range(len(slot)), marker="s", s=46, facecolors="none", edgecolors="red", lw=1.2)
    ax0.set_xticks(range(attn.shape[1]), [*map(str, range(1, attn.shape[1])), "q"])
    ax0.set_yticks([])
    ax0.set_xlabel("token (red: queried pair)")
    ax0.set_ylabel("8 examples")
    ax0.set_title("head 0 attention")
    steps = r["step"]
    # No label names the decay: StiefelAdam's picture must be the same for every decay.
    ax1.plot(steps, recs[0]["norm_q"], color="0.6", ls="--", lw=1, label=f"decay {cfg.weight_decays[0]:g}")
    ax1.plot(steps, r["norm_q"], color=optimizer_color(arm), lw=1.6, label="this decay")
    step = s["step"][i_snap]
    ax1.plot([step], [torch.linalg.matrix_norm(s["w_q"][i_snap]).mean().item()], "ko", ms=4)
    top = max(max(rr["norm_q"]) for rrs in history["runs"].values() for rr in rrs)
    ax1.set_ylim(0, 1.08 * top)
    ax1.set_xlabel("step")
    ax1.set_title(r"mean $\|W_Q^h\|_F$")
    legend_outside(fig, ncol=2)  # one row under both panels, outside the data
    fig.suptitle(ARM_TITLES.get(arm, arm), fontsize=WD_FONT_PT + 1)
    return figure_to_png(fig, dpi=dpi)


def weight_decay_frame_html(history: dict[str, Any], i_wd: int, i_snap: int,
                            pngs: dict[str, bytes] | None = None,
                            arms: Sequence[str] = ("adamw", "stiefel")) -> str:
    """HTML of one widget frame: per arm, its image (if ``pngs``) and a readout whose numbers are
    :func:`~stiefel_mini.experiments.weight_decay.readouts.widget_readouts`. Each readout is a
    ``<div class="wd-readout" data-arm=...>`` with one ``<span data-key=...>`` per number, so a test
    can read them back."""
    from stiefel_mini.experiments.weight_decay.readouts import widget_readouts

    cfg = history["config"]
    nums = widget_readouts(history, i_wd, i_snap)
    step = history["runs"][arms[0]][i_wd]["snapshots"]["step"][i_snap]
    cols = []
    for arm in arms:
        n = nums[arm]
        img = ""
        if pngs is not None:
            b64 = base64.b64encode(pngs[arm]).decode("ascii")
            img = f'<img class="wd-image" data-arm="{arm}" src="data:image/png;base64,{b64}" style="max-width:100%">'
        change = "0 (bitwise equal)" if n["max_change"] == 0.0 else f"{n['max_change']:.4e}"
        cols.append(
            f'<div style="flex:1 1 0;min-width:15rem">{img}'
            f'<div class="wd-readout" data-arm="{arm}" style="font-family:monospace;font-size:0.85em">'
            f"<b>{html.escape(ARM_TITLES.get(arm, arm))}</b>, wd = {cfg.weight_decays[i_wd]:g}, step {step}<br>"
            f'mean ||W_Q^h||_F = <span data-key="norm_q">{n["norm_q"]:.6f}</span><br>'
            f'max |W(wd) - W(wd={cfg.weight_decays[0]:g})| = <span data-key="max_change" '
            f'data-value="{n["max_change"]!r}">{change}</span><br>'
            f'head-0 attention entropy = <span data-key="entropy">{n["entropy"]:.6f}</span> nats<br>'
            f'bits of W_Q, W_K: <span data-key="fingerprint">{n["fingerprint"]}</span>'
            f"</div></div>"
        )
    return (f'<div class="wd-frame" data-wd="{cfg.weight_decays[i_wd]!r}" data-step="{step}" '
            f'style="display:flex;flex-wrap:wrap;gap:1rem">{"".join(cols)}</div>')


def weight_decay_widget(history: dict[str, Any], *, arms: Sequence[str] = ("adamw", "stiefel"), dpi: int = 80):
    """The weight-decay chapter's widget: a weight-decay slider and a training-step slider over frames
    rendered from a :func:`~stiefel_mini.experiments.weight_decay.experiment.sweep` ``history`` (AdamW beside
    StiefelAdam) at the snapshot steps after step 0. Works in static HTML with no kernel
    (:func:`frame_grid_player`); both sliders open at their first position. The box carries the CSS
    class ``wd-widget``. Identical images (StiefelAdam's across decays) are rendered once."""
    from stiefel_mini.experiments.weight_decay.readouts import fingerprint

    cfg = history["config"]
    snap_steps = history["runs"][arms[0]][0]["snapshots"]["step"]
    # Step 0 is left out: before the first step no decay has acted, and the widget opens on its first
    # column, which should already show what the decay does.
    cols = [i for i, step in enumerate(snap_steps) if step > 0] or list(range(len(snap_steps)))
    cache: dict[str, bytes] = {}
    grid = []
    for i_wd in range(len(cfg.weight_decays)):
        row = []
        for i_snap in cols:
            pngs = {}
            for arm in arms:
                r = history["runs"][arm]
                key = arm + fingerprint(r[i_wd]["snapshots"]["attn"][i_snap],
                                        torch.tensor(r[i_wd]["norm_q"]), torch.tensor(r[0]["norm_q"]),
                                        torch.tensor([i_snap, i_wd if r[i_wd]["norm_q"] != r[0]["norm_q"] else 0]))
                if key not in cache:
                    cache[key] = _weight_decay_png(history, arm, i_wd, i_snap, dpi)
                pngs[arm] = cache[key]
            row.append(weight_decay_frame_html(history, i_wd, i_snap, pngs, arms=arms))
        grid.append(row)
    box = frame_grid_player(grid, row_labels=[f"{wd:g}" for wd in cfg.weight_decays],
                            col_labels=[str(snap_steps[i]) for i in cols],
                            row_description="weight decay", col_description="training step")
    box.add_class("wd-widget")
    return box


def frame_explorer(
    frames: Sequence[Any],
    dims: Sequence[tuple[str, Sequence[Any]]],
    *,
    dpi: int = 80,
    width: str | None = None,
):
    """Toggle buttons over an n-dimensional grid of pre-rendered frames, with no kernel needed.

    ``frames[i_0][i_1]...[i_{n-1}]`` is shown when the k-th row of buttons is at ``dims[k][1][i_k]``.
    Built as nested ``Stack`` s: level k holds one child per label of dimension k, and every stack of
    level k is ``jslink``-ed to the k-th ``ToggleButtons``, so the page needs no kernel. A grid of
    sizes ``m_0 x ... x m_{n-1}`` holds ``prod(m_k)`` frames and ``1 + m_0 + m_0 m_1 + ...`` links.

    Args:
        frames: nested lists, ``n = len(dims)`` deep, of PNG bytes, matplotlib figures or HTML strings.
        dims: ``(description, labels)`` per dimension, outermost first, e.g.
            ``[("metric", ["val acc", "entropy"]), ("seed", [0, 1, 2])]``.
        dpi: resolution for matplotlib frames.
        width: optional CSS width of image frames.

    Returns:
        ``ipywidgets.VBox([*toggles, stack])`` with ``.controls``, ``.stack`` and ``.links`` set.
    """
    import ipywidgets as w

    if not dims:
        raise ValueError("frame_explorer needs at least one dimension")
    names = [_labels(labels, len(labels), f"frame_explorer dimension {d!r}") for d, labels in dims]
    controls = [_control(lab, d, 0, "toggle") for (d, _), lab in zip(dims, names)]
    links = []

    def build(node: Any, level: int, where: str):
        node = list(node)
        if len(node) != len(names[level]):
            raise ValueError(f"frame_explorer: {where} has {len(node)} entries for the {len(names[level])} "
                             f"labels of dimension {dims[level][0]!r}")
        if level == len(dims) - 1:
            children = [_frame_widget(f, dpi=dpi, width=width) for f in node]
        else:
            children = [build(sub, level + 1, f"{where}[{i}]") for i, sub in enumerate(node)]
        stack = w.Stack(children=children, selected_index=0)
        links.append(w.jslink((controls[level], "index"), (stack, "selected_index")))
        return stack

    stack = build(frames, 0, "frames")
    box = w.VBox([*controls, stack])
    box.controls, box.stack, box.links = controls, stack, links
    return box

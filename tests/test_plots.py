"""The book's overview diagrams: they draw, name the right stages, and mark the frames."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.colors import to_rgba  # noqa: E402
from matplotlib.patches import FancyBboxPatch  # noqa: E402

from stiefel_mini import plots  # noqa: E402
from stiefel_mini.plots import FRAME_COLOR, attention_head_diagram, step_pipeline_diagram  # noqa: E402


def _texts(fig):
    return [t.get_text() for t in fig.axes[0].texts]


def _filled_titles(fig):
    """Titles of the boxes drawn filled with the frame colour (the title is the text at the box centre)."""
    ax = fig.axes[0]
    boxes = [p for p in ax.patches if isinstance(p, FancyBboxPatch)]
    filled = [p for p in boxes if p.get_facecolor()[:3] == to_rgba(FRAME_COLOR)[:3]]
    titles = []
    for p in filled:
        x0, y0, w, h = p.get_x(), p.get_y(), p.get_width(), p.get_height()
        inside = [t.get_text() for t in ax.texts
                  if x0 <= t.get_position()[0] <= x0 + w and y0 + h / 2 <= t.get_position()[1] <= y0 + h]
        titles.extend(inside)
    return sorted(titles)


def test_attention_diagram_marks_only_the_query_and_key_projections_as_frames():
    fig = attention_head_diagram()
    fig.canvas.draw()  # mathtext parses
    assert r"$W_O$" in _texts(fig) and "softmax" in _texts(fig)
    assert _filled_titles(fig) == sorted([r"$W_K^h$", r"$W_Q^h$"])
    plt.close(fig)


def test_step_pipeline_has_the_five_stages_in_order_and_the_geometric_ones_filled():
    fig = step_pipeline_diagram()
    fig.canvas.draw()
    texts = _texts(fig)
    stages = ["project", "moments", "cap the step", "retract", "transport"]
    assert [s for s in texts if s in stages] == stages
    assert _filled_titles(fig) == sorted(["project", "retract", "transport"])
    arrows = [p for p in fig.axes[0].patches if not isinstance(p, FancyBboxPatch)]
    assert len(arrows) == 7  # the six stages chained, and the transport feeding the next moments
    plt.close(fig)


def test_forest_has_a_panel_per_unit_and_a_row_per_primary():
    import matplotlib

    matplotlib.use("Agg")
    from stiefel_mini import evidence, plots

    vs = evidence.verdicts()
    fig = plots.forest(vs)
    units = {("x" if r.get("ratio") else r["unit"]) for v in vs for r in v["primary"]
             if r["n"] and (r.get("ratio") or r["mean"] is not None)}
    assert len(fig.axes) == len(units)
    rows = sum(1 for v in vs for r in v["primary"] if r["n"] and (r.get("ratio") or r["mean"] is not None))
    assert sum(len(ax.get_yticks()) for ax in fig.axes) == rows
    # legible at 400 px: the font, scaled from the figure's width to 400 px, stays >= 9 px
    assert plots.FOREST_FONT_PT * 96 / 72 * 400 / (fig.get_figwidth() * 96) >= 9.0

def _hist(shift):
    steps = [0, 500, 1000, 5000, 12000, 20000]
    return {"history": {"step": steps, "train_acc": [0, 0.5, 1, 1, 1, 1], "val_acc": [0, 0, 0, 0.2, 0.96 - shift, 1],
                        "train_loss": [5, 1, 0.1, 0.05, 0.01, 0.01], "val_loss": [5, 8, 9, 6, 0.5, 0.1]}}


def test_peer_curve_figure_draws_four_lines_per_run_and_every_phase():
    from stiefel_mini.experiments.peer_curve import NANDA_PHASES

    runs = {"adamw": {0: _hist(0), 1: _hist(0.1)}, "stiefel_learned": {0: _hist(0.2)}}
    fig, axes = plots.peer_curve_figure(runs, NANDA_PHASES, {"adamw": "C0", "stiefel_learned": "C1"})
    n_runs = 3
    assert len(axes[0].lines) == 2 * n_runs + len(NANDA_PHASES) + 2  # test, train per run; phase ends; legend keys
    assert len(axes[1].lines) == 2 * n_runs + len(NANDA_PHASES)
    assert [t.get_text() for t in axes[0].texts] == [name for name, _, _ in NANDA_PHASES]
    plt.close(fig)


def test_one_run_figure_shows_every_gap_and_every_dip():
    from stiefel_mini.experiments.one_run import one_run_gaps

    base = {s: _hist(0)["history"] for s in range(3)}
    arm = {s: _hist(0.5 * s)["history"] for s in range(3)}
    res = one_run_gaps(base, arm, step=12000)
    fig, (ax_gap, ax_dip) = plots.one_run_figure(res, ("AdamW", "Stiefel"))
    assert [len(c.get_offsets()) for c in ax_gap.collections] == [3, 6]
    assert [len(c.get_offsets()) for c in ax_dip.collections] == [3, 3]
    plt.close(fig)

"""The book's overview diagrams: they draw, name the right stages, and mark the frames."""

import matplotlib
import pytest

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



DIAGRAMS = [attention_head_diagram, step_pipeline_diagram]
PHONE_COLUMN_PX = 368  # the article column at a 400 px wide screen (measured in the built book)


def _boxes_and_texts(fig):
    """Display-space boxes of the diagram's rounded boxes and of every text (the title aside)."""
    fig.canvas.draw()
    ax = fig.axes[0]
    boxes = [p.get_window_extent() for p in ax.patches if isinstance(p, FancyBboxPatch)]
    texts = [(t.get_text(), t.get_window_extent(), t.get_fontsize()) for t in ax.texts]
    return ax, boxes, texts


@pytest.mark.parametrize("narrow", [False, True])
@pytest.mark.parametrize("draw", DIAGRAMS)
def test_diagram_text_sits_in_its_box_and_clear_of_every_arrow(draw, narrow):
    from matplotlib.patches import FancyArrowPatch

    fig = draw(narrow=narrow)
    ax, boxes, texts = _boxes_and_texts(fig)
    from matplotlib.path import Path

    # each arrow's shaft and head as polylines in display space (get_path gives them in data units)
    arrows = [Path(poly) for p in ax.patches if isinstance(p, FancyArrowPatch)
              for poly in p.get_transform().transform_path(p.get_path()).to_polygons(closed_only=False)]
    for text, bb, size in texts:
        assert size >= 9, f"{text!r}: {size} pt"
        inside = [b for b in boxes if b.contains(*bb.p0) and b.contains(*bb.p1)]
        overlaps = [b for b in boxes if b.overlaps(bb)]
        # a box's title and detail lie wholly inside it; a free label touches no box at all
        assert len(inside) == 1 or not overlaps, f"{text!r} spills over a box edge"
        for path in arrows:
            assert not path.intersects_bbox(bb, filled=False), f"{text!r} is drawn over an arrow"
    plt.close(fig)


@pytest.mark.parametrize("draw", DIAGRAMS)
def test_narrow_diagram_fits_a_phone_column_at_natural_size(draw):
    """The narrow variant's width in CSS px (96 per inch, as an SVG is shown) fits the phone column,
    so its >= 9 pt text shows at >= 12 px; the wide one would show there below 0.6 of its size."""
    narrow, wide = draw(narrow=True), draw()
    assert narrow.get_figwidth() == plots.NARROW_WIDTH_IN
    assert narrow.get_figwidth() * 96 <= PHONE_COLUMN_PX
    assert PHONE_COLUMN_PX / (wide.get_figwidth() * 96) < 0.6
    plt.close(narrow)
    plt.close(wide)


def test_responsive_holds_both_variants_and_switches_on_the_column_width():
    import base64
    import re

    before = set(plt.get_fignums())
    html = plots.responsive(step_pipeline_diagram(), step_pipeline_diagram(narrow=True), alt="the step").data
    imgs = re.findall(r'<img class="sm-(wide|narrow)" alt="the step" src="data:image/svg\+xml;base64,([^"]+)"', html)
    assert [kind for kind, _ in imgs] == ["wide", "narrow"]
    widths = [float(re.search(rb'width="([\d.]+)pt"', base64.b64decode(b64)).group(1)) / 72 for _, b64 in imgs]
    assert widths == pytest.approx([plots.COLUMN_WIDTH_IN, plots.NARROW_WIDTH_IN], abs=0.01)
    assert "container-type:inline-size" in html and "@container (max-width:520px)" in html
    assert set(plt.get_fignums()) == before  # both drawn and closed


def test_book_style_keeps_text_at_9_pt_or_more_and_figures_at_most_a_column_wide():
    """book/matplotlibrc: every font size >= 9 pt and the default figure no wider than the column,
    so that on a phone (figures kept at >= 510 px by book.css) text shows at >= 9 px."""
    from pathlib import Path

    rc = dict(line.split(":", 1) for line in (Path(plots.__file__).parents[1] / "book" / "matplotlibrc")
              .read_text().splitlines() if line.strip() and not line.startswith("#"))
    rc = {k.strip(): v.strip() for k, v in rc.items()}
    sizes = {k: float(v) for k, v in rc.items() if k.endswith("size") and k != "figure.figsize"}
    assert sizes and min(sizes.values()) >= 9, sizes
    width = float(rc["figure.figsize"].split(",")[0])
    assert width <= plots.COLUMN_WIDTH_IN
    assert 9 * 96 / 72 * 510 / (plots.COLUMN_WIDTH_IN * 96) >= 9.0


def _curve(arm, swept, pts):
    return {"arm": arm, "swept": swept, "train_fraction": 0.3,
            "points": [{"value": v, "max_logit": m, "acc_mean": a} for v, m, a in pts]}


@pytest.mark.parametrize("narrow", [False, True])
def test_logit_growth_figure_draws_each_arms_seed_means_against_its_own_lr(narrow):
    curves = [_curve("A0", "lr", [(1e-3, 10.0, 0.5), (1e-2, 200.0, 0.4)]),
              _curve("A1", "frame_lr", [(0.01, 8.0, 0.51), (1.0, 13.0, 0.52), (10.0, None, 0.5)]),
              _curve("qknorm", "lr", [(1e-3, 5.0, 0.5)])]
    fig, axes = plots.logit_growth_figure(curves, {"A0": "AdamW", "A1": "StiefelAdam"}, narrow=narrow)
    logits, accs = axes[0].get_lines(), axes[1].get_lines()
    assert len(logits) == len(accs) == 2  # an arm left out of ``names`` is not drawn
    assert list(logits[0].get_xdata()) == [1e-3, 1e-2] and list(logits[0].get_ydata()) == [10.0, 200.0]
    assert list(logits[1].get_xdata()) == [0.01, 1.0]  # a point without a logit is left out
    assert list(accs[1].get_ydata()) == pytest.approx([51.0, 52.0])
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["AdamW (lr)", "StiefelAdam (frame lr)"]
    assert axes[0].get_yscale() == "log" and axes[0].get_xscale() == "log"
    assert fig.get_figwidth() == (plots.NARROW_WIDTH_IN if narrow else plots.COLUMN_WIDTH_IN)
    with pytest.raises(ValueError, match="no lr curve for arms"):
        plots.logit_growth_figure(curves, {"A5": "frozen"})
    plt.close("all")


def test_every_arm_of_every_study_has_its_optimizers_colour_and_optimizers_never_share_one():
    from stiefel_mini.evidence.words import ARM_NAMES
    from stiefel_mini.experiments.cifar.config import ALL_ARMS
    from stiefel_mini.experiments.grokking.config import SWEEPS
    from stiefel_mini.experiments.lm.studies import ROUND2, ROUND3

    assert len(set(plots.OPTIMIZER_COLORS.values())) == len(plots.OPTIMIZER_COLORS)
    arms = {*ARM_NAMES, *ALL_ARMS, *(a for study in (ROUND2, ROUND3) for a, _ in study.arms), *(a for s in SWEEPS.values() for a in s.arms), "adamw_nodecay_qk"}
    colour = {a: plots.optimizer_color(a) for a in arms}  # raises for an arm of no known optimizer
    same = {"AdamW": ("A0", "adamw", "A0'", "A4", "adamw_nodecay_qk", "adamw_scaled_qk", "adamw_family"),
            "StiefelAdam": ("A1", "stiefel", "stiefel_learned", "stiefel_scale", "A7", "stiefel_nocap"),
            "StiefelMuon": ("stiefel_muon", "stiefel_muon_scale"), "QK-norm": ("qknorm", "adamw_qknorm"),
            "frozen frames": ("A3", "frozen", "frozen_learned"), "Muon": ("muon", "muon_family")}
    for optimizer, members in same.items():
        assert {colour[a] for a in members} == {plots.OPTIMIZER_COLORS[optimizer]}, optimizer
    assert plots.optimizer_color("StiefelAdam") == colour["A1"] != colour["A0"] != colour["muon"]
    with pytest.raises(ValueError, match="no colour for arm"):
        plots.optimizer_color("sgd")


def test_the_lr_figure_draws_each_arm_in_its_optimizers_colour():
    curves = [_curve("A0", "lr", [(1e-3, 10.0, 0.5)]), _curve("A1", "frame_lr", [(0.01, 8.0, 0.51)])]
    fig, axes = plots.logit_growth_figure(curves, {"A1": "StiefelAdam", "A0": "AdamW"})
    assert [line.get_color() for line in axes[0].get_lines()] == [plots.optimizer_color("A1"),
                                                                  plots.optimizer_color("A0")]
    plt.close(fig)

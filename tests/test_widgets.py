"""stiefel_mini.widgets: sliders jslink-ed to stacks of pre-rendered frames."""

import matplotlib

matplotlib.use("Agg")

import ipywidgets as w  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from stiefel_mini.widgets import figure_to_png, frame_explorer, frame_grid_player, frame_player  # noqa: E402


def _fig(k):
    fig, ax = plt.subplots(figsize=(1.5, 1))
    ax.plot([0, 1], [0, k])
    return fig


def test_figure_to_png_returns_png_and_closes():
    fig = _fig(1)
    png = figure_to_png(fig)
    assert png.startswith(b"\x89PNG")
    assert not plt.fignum_exists(fig.number)


def test_frame_player_links_slider_to_stack():
    box = frame_player([_fig(k) for k in range(3)], labels=[0.1, 0.2, 0.3], description="t")
    assert isinstance(box, w.VBox)
    slider, stack = box.slider, box.stack
    assert isinstance(slider, w.SelectionSlider) and isinstance(stack, w.Stack)
    assert slider.options == ("0.1", "0.2", "0.3")
    assert len(stack.children) == 3 and all(isinstance(c, w.Image) for c in stack.children)
    assert len({c.value for c in stack.children}) == 3  # distinct frames
    (link,) = box.links
    assert isinstance(link, w.widgets.widget_link.Link)  # a browser-side link (jslink): no kernel needed
    assert link.source == (slider, "index") and link.target == (stack, "selected_index")
    assert stack.selected_index == slider.index == 0


def test_frame_player_accepts_png_bytes_and_html():
    png = figure_to_png(_fig(0))
    box = frame_player([png, "<b>text</b>"], index=1)
    assert isinstance(box.stack.children[0], w.Image)
    assert isinstance(box.stack.children[1], w.HTML)
    assert box.stack.selected_index == 1 and box.slider.index == 1
    assert box.slider.options == ("0", "1")


@pytest.mark.parametrize(
    "frames, kwargs, err",
    [
        ([], {}, ValueError),
        (["a", "b"], {"labels": ["x"]}, ValueError),
        (["a", "b"], {"labels": ["x", "x"]}, ValueError),
        (["a"], {"index": 1}, ValueError),
        ([b"not a png"], {}, ValueError),
        ([42], {}, TypeError),
    ],
)
def test_frame_player_rejects_bad_input(frames, kwargs, err):
    with pytest.raises(err):
        frame_player(frames, **kwargs)


def test_frame_grid_player_nests_stacks():
    grid = [[f"<p>{i},{j}</p>" for j in range(3)] for i in range(2)]
    box = frame_grid_player(grid, ["a", "b"], ["x", "y", "z"], "row", "col")
    rows, cols = box.sliders
    assert rows.options == ("a", "b") and cols.options == ("x", "y", "z")
    assert len(box.stack.children) == 2
    assert all(len(s.children) == 3 for s in box.stack.children)
    assert box.stack.children[1].children[2].value == "<p>1,2</p>"
    assert len(box.links) == 1 + 2  # row link + one column link per row
    assert box.links[0].source == (rows, "index")
    assert all(link.source == (cols, "index") for link in box.links[1:])


def test_frame_grid_player_rejects_ragged_grid():
    with pytest.raises(ValueError):
        frame_grid_player([["a", "b"], ["c"]])


def test_markdown_table_text_and_row_check():
    from stiefel_mini.widgets import markdown_table

    assert markdown_table(["a", "b"], [[1, 2.5], ["x", None]]) == (
        "| a | b |\n| --- | --- |\n| 1 | 2.5 |\n| x | None |")
    with pytest.raises(ValueError, match="row 0 has 1 cells"):
        markdown_table(["a", "b"], [[1]])


def test_markdown_table_escapes_a_bar_inside_a_cell():
    from markdown_it import MarkdownIt

    from stiefel_mini.widgets import markdown_table

    text = markdown_table(["optimizer", "||W W^T - U U^T||_F"], [["StiefelMuon", "3.8e-05"]])
    html = MarkdownIt("commonmark").enable("table").render(text)
    assert html.count("<th>") == 2 and html.count("<td>") == 2, html  # 4 columns without the escape
    assert "||W W^T - U U^T||_F" in html


# ---------------------------------------------------------------------------------------------------
# The weight-decay widget: what it displays is what the library computes
# ---------------------------------------------------------------------------------------------------

import re  # noqa: E402

from stiefel_mini.experiments.config import replace  # noqa: E402
from stiefel_mini.experiments.weight_decay import config as wd_config
from stiefel_mini.experiments.weight_decay import experiment as wd_experiment
from stiefel_mini.experiments.weight_decay import readouts as wd_readouts
from stiefel_mini.widgets import weight_decay_frame_html as widget_frame_html  # noqa: E402
from stiefel_mini.widgets import weight_decay_widget  # noqa: E402

TINY = replace(wd_config.WeightDecaySweep(), steps=30, weight_decays=(0.0, 1.0, 10.0), snapshot_steps=(0, 10, 30),
               log_every=5, eval_size=64, batch_size=32, arms=("adamw", "stiefel"))


@pytest.fixture(scope="module")
def history():
    return wd_experiment.sweep(TINY)


SPAN = re.compile(r'<div class="wd-readout" data-arm="(\w+)".*?</div>', re.S)
VALUE = re.compile(r'<span data-key="(\w+)"(?: data-value="([^"]*)")?>([^<]*)</span>')


def parse_readouts(frame_html: str) -> dict[str, dict[str, str]]:
    """``{arm: {key: displayed text}}`` (``max_change`` also as ``max_change_value``: the exact float)."""
    out = {}
    for m in SPAN.finditer(frame_html):
        vals = {}
        for key, exact, text in VALUE.findall(m.group(0)):
            vals[key] = text
            if exact:
                vals[key + "_value"] = exact
        out[m.group(1)] = vals
    return out


def test_widget_numbers_agree_with_the_library(history):
    cfg = history["config"]
    for i_wd, wd in enumerate(cfg.weight_decays):
        for i_snap, step in enumerate(cfg.run.snapshot_steps):
            shown = parse_readouts(widget_frame_html(history, i_wd, i_snap))
            assert set(shown) == {"adamw", "stiefel"}
            for arm in ("adamw", "stiefel"):
                snap = history["runs"][arm][i_wd]["snapshots"]
                ref = history["runs"][arm][0]["snapshots"]
                W_q, W_k = snap["w_q"][i_snap], snap["w_k"][i_snap]
                # Recomputed here with plain torch, not with the module's helpers.
                norm = sum(W_q[h].flatten().norm().item() for h in range(W_q.shape[0])) / W_q.shape[0]
                change = max((W_q - ref["w_q"][i_snap]).abs().max().item(),
                             (W_k - ref["w_k"][i_snap]).abs().max().item())
                p = snap["attn"][i_snap]
                entropy = (-(p * p.clamp_min(1e-30).log()).sum(-1)).mean().item()
                assert float(shown[arm]["norm_q"]) == pytest.approx(norm, abs=2e-6)
                assert float(shown[arm]["max_change_value"]) == change
                assert float(shown[arm]["entropy"]) == pytest.approx(entropy, abs=2e-6)
                assert shown[arm]["fingerprint"] == wd_readouts.fingerprint(W_q, W_k)
            if step > 0 and wd > 0:
                assert shown["stiefel"]["max_change"] == "0 (bitwise equal)"
                assert shown["adamw"]["max_change"] != "0 (bitwise equal)"


def test_widget_stiefel_readout_does_not_depend_on_decay(history):
    cfg = history["config"]
    for i_snap in range(len(cfg.run.snapshot_steps)):
        frames = [parse_readouts(widget_frame_html(history, i, i_snap))
                  for i in range(len(cfg.weight_decays))]
        assert all(f["stiefel"] == frames[0]["stiefel"] for f in frames)
        if cfg.run.snapshot_steps[i_snap] > 0:
            assert frames[-1]["adamw"]["norm_q"] != frames[0]["adamw"]["norm_q"]


def test_widget_builds_a_static_grid(history):
    box = weight_decay_widget(history, dpi=30)
    assert "wd-widget" in box._dom_classes
    wd_slider, step_slider = box.sliders
    assert list(wd_slider.options) == ["0", "1", "10"]
    assert list(step_slider.options) == ["10", "30"]  # step 0 is left out
    assert step_slider.index == 0 and all(s.selected_index == 0 for s in box.stack.children)
    html_00 = box.stack.children[0].children[0].value
    html_20 = box.stack.children[2].children[0].value
    assert 'data-step="10"' in html_00
    img = re.compile(r'<img class="wd-image" data-arm="(\w+)" src="([^"]+)"')
    imgs_00, imgs_20 = dict(img.findall(html_00)), dict(img.findall(html_20))
    assert imgs_00["stiefel"] == imgs_20["stiefel"]  # the same bits draw the same picture
    assert imgs_00["adamw"] != imgs_20["adamw"]


def test_frame_player_toggle_control_for_categories():
    box = frame_player(["<i>a</i>", "<i>b</i>"], labels=["frame", "column"], control="toggle")
    assert isinstance(box.slider, w.ToggleButtons) and box.slider.options == ("frame", "column")
    (link,) = box.links
    assert link.source == (box.slider, "index") and link.target == (box.stack, "selected_index")
    with pytest.raises(ValueError, match="control must be"):
        frame_player(["a"], control="dial")


def test_frame_explorer_nests_stacks_one_toggle_per_dimension():
    frames = [[f"<p>{m} seed {s}</p>" for s in range(3)] for m in ("acc", "entropy")]
    box = frame_explorer(frames, [("metric", ["acc", "entropy"]), ("seed", [0, 1, 2])])
    metric, seed = box.controls
    assert isinstance(metric, w.ToggleButtons) and seed.options == ("0", "1", "2")
    outer = box.stack
    assert len(outer.children) == 2 and all(len(s.children) == 3 for s in outer.children)
    assert outer.children[1].children[2].value == "<p>entropy seed 2</p>"
    # 1 link for the outer stack, one per inner stack: all browser-side (no kernel)
    assert len(box.links) == 3
    assert {ln.source[0] for ln in box.links} == {metric, seed}
    assert all(isinstance(ln, w.widgets.widget_link.Link) for ln in box.links)
    with pytest.raises(ValueError, match="has 2 entries for the 3 labels"):
        frame_explorer([["a", "b"]], [("m", ["x"]), ("s", [0, 1, 2])])
    with pytest.raises(ValueError, match="at least one dimension"):
        frame_explorer([], [])


def test_frame_grid_player_toggle_rows():
    box = frame_grid_player([["a", "b"], ["c", "d"]], row_labels=["x", "y"], row_control="toggle")
    rows, cols = box.sliders
    assert isinstance(rows, w.ToggleButtons) and isinstance(cols, w.SelectionSlider)
    assert box.links[0].source == (rows, "index") and box.links[0].target == (box.stack, "selected_index")

"""stiefel_mini.widgets: sliders jslink-ed to stacks of pre-rendered frames."""

import matplotlib

matplotlib.use("Agg")

import ipywidgets as w  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from stiefel_mini.widgets import figure_to_png, frame_grid_player, frame_player  # noqa: E402


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

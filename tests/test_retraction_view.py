"""The 3-D picture of one step on the sphere: its numbers are the retractions' known answers on St(3, 1)."""

import math

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from stiefel_mini.retraction_view import RETRACTIONS, sphere_step, sphere_step_figure, sphere_step_widget  # noqa: E402

W = [0.0, 0.0, 1.0]
G = [-0.7, -0.3, 0.6]


@pytest.mark.parametrize("t", [0.1, 0.8, 2.0, 3.0])
def test_each_retraction_lands_at_its_known_angle_along_the_step(t):
    s = sphere_step(W, G, t)
    # on the sphere every retraction stays on the great circle through w along the step, at the
    # angle its formula gives: exp t, polar and QR arctan t, Cayley 2 arctan(t / 2)
    known = {"exp": t, "polar": math.atan(t), "qr": math.atan(t), "cayley": 2 * math.atan(t / 2)}
    assert s["angle"] == pytest.approx(known, abs=1e-12)
    direction = s["step"] / t
    for m in RETRACTIONS:
        x = s["landing"][m]
        assert x.norm().item() == pytest.approx(1.0, abs=1e-12)
        expected = math.cos(known[m]) * s["w"] + math.sin(known[m]) * direction
        torch.testing.assert_close(x, expected, atol=1e-12, rtol=0)


def test_the_step_is_the_descent_direction_of_the_tangent_part():
    s = sphere_step(W, G, 0.7)
    torch.testing.assert_close(s["tangent"], torch.tensor([-0.7, -0.3, 0.0], dtype=torch.float64))
    torch.testing.assert_close(s["normal"], torch.tensor([0.0, 0.0, 0.6], dtype=torch.float64))
    assert s["step"].norm().item() == pytest.approx(0.7)
    assert (s["step"] @ s["tangent"]).item() < 0 and abs((s["step"] @ s["w"]).item()) < 1e-15
    torch.testing.assert_close(s["off"], s["w"] + s["step"])
    assert s["off"].norm().item() > 1.0  # the step leaves the sphere


def test_bad_input_is_refused_with_the_problem_named():
    with pytest.raises(ValueError, match="unit vector"):
        sphere_step([0.0, 0.0, 2.0], G, 1.0)
    with pytest.raises(ValueError, match="parallel to w"):
        sphere_step(W, [0.0, 0.0, 3.0], 1.0)
    with pytest.raises(ValueError, match="t must be > 0"):
        sphere_step(W, G, 0.0)
    with pytest.raises(ValueError, match="at least one step"):
        sphere_step_widget(W, G, [])


def test_figure_marks_every_landing_and_names_its_angle():
    fig = sphere_step_figure(W, G, 1.0)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "polar: 0.79 rad" in labels and "exponential: 1.00 rad" in labels and "Cayley: 0.93 rad" in labels
    plt.close(fig)


def test_widget_has_one_frame_per_step_and_no_kernel_link():
    box = sphere_step_widget(W, G, [0.5, 1.0, 2.0], dpi=20)
    assert list(box.slider.options) == ["0.5", "1", "2"]
    assert len(box.stack.children) == 3 and "sphere-step-widget" in box._dom_classes
    pngs = [bytes(c.value) for c in box.stack.children]
    assert all(p.startswith(b"\x89PNG") for p in pngs) and len(set(pngs)) == 3
    assert box.links[0].source == (box.slider, "index") and box.links[0].target == (box.stack, "selected_index")

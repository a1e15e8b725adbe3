"""Manifold Muon and Riemannian Adam on the sphere: known step lengths, the same answer, the widget."""

import math

import matplotlib
import pytest

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from stiefel_mini.muon_view import RULES, sphere_paths, sphere_paths_figure, sphere_paths_widget  # noqa: E402


def test_muon_steps_have_length_arctan_lr_and_adam_steps_are_at_most_that():
    paths = sphere_paths(steps=30, lr=0.08, noise=1.5)
    muon, adam = paths["length"]["manifold Muon"], paths["length"]["Riemannian Adam"]
    # a tangent step of length lr, retracted by the polar map, turns the point by arctan(lr)
    assert muon.sub(math.atan(0.08)).abs().max() < 1e-7  # the ridge shortens it by 5e-7 of lr
    assert adam.max() <= math.atan(0.08) + 1e-6 and adam.mean() < 0.8 * muon.mean()
    for rule in RULES:
        assert paths["path"][rule].norm(dim=1).sub(1).abs().max() < 1e-12  # on the sphere


def test_without_noise_both_reach_the_answer():
    paths = sphere_paths(steps=80, lr=0.08, noise=0.0)
    for rule in RULES:
        assert abs(paths["path"][rule][-1] @ paths["answer"]) > 0.99  # within about lr: no lr decay here


def test_figure_and_widget():
    paths = sphere_paths(steps=4)
    fig = sphere_paths_figure(paths, 4)
    assert "step 4" in fig.axes[0].get_title()
    plt.close(fig)
    box = sphere_paths_widget(paths, [0, 4], dpi=30, size=2.0)
    assert len(box.stack.children) == 2 and "sphere-paths-widget" in box._dom_classes
    with pytest.raises(ValueError, match="at least one"):
        sphere_paths_widget(paths, [])

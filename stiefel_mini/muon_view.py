"""Manifold Muon beside Riemannian Adam on the sphere St(3, 1), drawn in 3-D: two paths to the same answer.

One column in R^3 (a point of the unit sphere) climbs ``w^T C w`` for a symmetric ``C`` under noisy
gradients, once with :class:`~stiefel_mini.muon.StiefelMuon` (manifold Muon) and once with
:class:`~stiefel_mini.optim.StiefelAdam` (Riemannian Adam), from the same start with the same noise.
For one column the spectral norm is the Euclidean norm, so both rules step along their momentum;
they differ in length: manifold Muon's step is always ``lr``, Adam's shrinks where the noisy
gradients disagree (its momentum is short against the root of its second moment).

- :func:`sphere_paths` -- the two paths (no drawing).
- :func:`sphere_paths_figure` -- both paths up to a step, in 3-D (matplotlib).
- :func:`sphere_paths_widget` -- a step slider over pre-rendered frames, with no kernel needed.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch
from torch import nn

from stiefel_mini.groups import mark_frame
from stiefel_mini.muon import StiefelMuon
from stiefel_mini.optim import StiefelAdam
from stiefel_mini.plots import OPTIMIZER_COLORS

__all__ = ["RULES", "sphere_paths", "sphere_paths_figure", "sphere_paths_widget"]

RULES = {"manifold Muon": OPTIMIZER_COLORS["StiefelMuon"], "Riemannian Adam": OPTIMIZER_COLORS["StiefelAdam"]}
"""The two rules drawn, and their colours: those of the optimizers that run them on frames."""

_C = torch.diag(torch.tensor([3.0, 1.0, 0.0], dtype=torch.float64))  # the answer: w = +-e1


def sphere_paths(steps: int = 60, lr: float = 0.08, noise: float = 1.5, seed: int = 0) -> dict[str, Any]:
    r"""Both rules maximising ``w^T C w`` on the sphere, ``C = diag(3, 1, 0)``, for ``steps`` steps.

    The loss is :math:`-w^\top C w` plus a noise term :math:`\epsilon_t^\top w` with
    :math:`\epsilon_t \sim N(0, \text{noise}^2 I)` (the same draws for both rules), from the start
    :math:`w_0 \propto (0.2, 1, 0.6)`. Returns ``path`` (per rule a float64 tensor ``(steps + 1, 3)``),
    ``length`` (per rule each step's arc length, radians, ``(steps,)``) and ``answer`` (``e_1``).
    """
    if steps < 1 or not lr > 0 or noise < 0:
        raise ValueError(f"need steps >= 1, lr > 0 and noise >= 0; got {steps}, {lr}, {noise}")
    w0 = torch.tensor([[0.2], [1.0], [0.6]], dtype=torch.float64)
    w0 = w0 / w0.norm()
    g = torch.Generator().manual_seed(seed)
    eps = noise * torch.randn(steps, 3, 1, generator=g, dtype=torch.float64)
    path, length = {}, {}
    for rule in RULES:
        w = nn.Parameter(w0.clone())
        mark_frame(w)
        opt = (StiefelMuon([w], frame_lr=lr, momentum=0.9) if rule == "manifold Muon"
               else StiefelAdam([w], lr=lr, betas=(0.9, 0.99), max_step=None))
        points = [w0[:, 0].clone()]
        for t in range(steps):
            opt.zero_grad()
            (-(w.T @ _C @ w).squeeze() + (eps[t].T @ w).squeeze()).backward()
            opt.step()
            points.append(w.detach()[:, 0].clone())
        path[rule] = torch.stack(points)
        cos = (path[rule][1:] * path[rule][:-1]).sum(-1).clamp(-1.0, 1.0)
        length[rule] = torch.arccos(cos)
    return {"path": path, "length": length, "answer": torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)}


def sphere_paths_figure(paths: dict[str, Any], upto: int, *, size: float = 5.6):
    """The two paths of :func:`sphere_paths` up to step ``upto`` on the sphere, the answer ``+-e_1``
    (black crosses), each rule's current point; the legend gives each rule's last step length and its
    mean so far. Returns the ``Figure`` (``size`` inches wide)."""
    import matplotlib.pyplot as plt
    import numpy as np

    fig = plt.figure(figsize=(size, size), layout="constrained")
    ax = fig.add_subplot(projection="3d")
    u, v = np.meshgrid(np.linspace(0, 2 * np.pi, 36), np.linspace(0, np.pi, 18))
    ax.plot_wireframe(np.cos(u) * np.sin(v), np.sin(u) * np.sin(v), np.cos(v), color="0.6", alpha=0.18, lw=0.5)
    for sign in (1, -1):
        ax.plot(*(sign * paths["answer"].numpy())[:, None], "kx", ms=9, mew=2,
                label=r"answer $\pm e_1$" if sign == 1 else None)
    for rule, color in RULES.items():
        p = paths["path"][rule][: upto + 1].numpy()
        lengths = paths["length"][rule][:upto].numpy()
        label = (f"{rule}: last step {lengths[-1]:.3f}, mean {lengths.mean():.3f} rad" if upto
                 else f"{rule}: start")
        ax.plot(*p.T, color=color, lw=1.8, label=label)
        ax.plot(*p[-1][:, None], "o", color=color, ms=7)
    ax.set_box_aspect((1, 1, 1), zoom=1.3)
    ax.set_axis_off()
    ax.view_init(elev=20, azim=35)
    ax.set_title(f"step {upto}")
    fig.legend(loc="outside lower center", ncol=1, fontsize=9)
    return fig


def sphere_paths_widget(paths: dict[str, Any], shown: Sequence[int], *, dpi: int = 90, size: float = 5.6):
    """A step slider over :func:`sphere_paths_figure` at each step of ``shown``, rendered now and
    flipped in the browser (:func:`stiefel_mini.widgets.frame_player`): no kernel needed."""
    from stiefel_mini.widgets import figure_to_png, frame_player

    if not shown:
        raise ValueError("sphere_paths_widget needs at least one step to show")
    frames = [figure_to_png(sphere_paths_figure(paths, t, size=size), dpi=dpi) for t in shown]
    box = frame_player(frames, labels=[str(t) for t in shown], description="step")
    box.add_class("sphere-paths-widget")
    return box

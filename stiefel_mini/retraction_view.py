"""One Riemannian step on the sphere St(3, 1), drawn in 3-D: where each retraction lands.

The pieces of a step that Part I defines one at a time, in one picture: a point ``w`` of the unit
sphere, its tangent plane, a Euclidean gradient ``g`` and its tangent part :math:`\\xi = P_w(g)`, the
descent step :math:`S = -t\\, \\xi / \\lVert \\xi \\rVert` that leaves the sphere, and the point
:math:`R_w(S)` where each retraction of :mod:`stiefel_mini.geometry` brings it back. Every point is
computed by the library's own functions.

- :func:`sphere_step` -- the numbers of one step (no drawing).
- :func:`sphere_step_figure` -- the step drawn in 3-D (matplotlib).
- :func:`sphere_step_widget` -- a step-length slider over pre-rendered frames that needs no kernel
  (:func:`stiefel_mini.widgets.frame_player`).

Reference: Absil, Mahony, Sepulchre (2008), "Optimization Algorithms on Matrix Manifolds", ch. 4.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

from stiefel_mini import geometry as geo

__all__ = ["RETRACTIONS", "sphere_step", "sphere_step_figure", "sphere_step_widget"]

RETRACTIONS = ("polar", "qr", "cayley", "exp")
"""The retractions drawn, in the order of :func:`stiefel_mini.geometry.retract`'s methods."""

_STYLE = {"polar": ("C0", "o", 9), "qr": ("C1", "s", 4), "cayley": ("C2", "^", 8), "exp": ("C3", "D", 7)}
_NAMES = {"polar": "polar", "qr": "QR", "cayley": "Cayley", "exp": "exponential"}


def sphere_step(w: Sequence[float], g: Sequence[float], t: float) -> dict[str, Any]:
    r"""The pieces of one descent step of length ``t`` from ``w`` on the sphere St(3, 1).

    :math:`\xi = P_w(g) = g - w (w^\top g)` (``tangent``), :math:`g - \xi` (``normal``), the step
    :math:`S = -t\, \xi / \lVert \xi \rVert_F` (``step``), the point :math:`w + S` off the sphere
    (``off``), and per retraction ``m`` of :data:`RETRACTIONS` the frame :math:`R_w(S)`
    (``landing[m]``) and its angle from ``w`` along the sphere (``angle[m]``, radians: the exponential
    map's is ``t``, polar's and QR's :math:`\arctan t`, Cayley's :math:`2 \arctan(t/2)`).

    Args:
        w: a unit vector of length 3 (a point of St(3, 1)).
        g: a Euclidean gradient at ``w``, length 3, not parallel to ``w``.
        t: the step length, ``> 0``.

    Returns:
        A dict of float64 tensors of shape ``(3,)`` (``w``, ``g``, ``tangent``, ``normal``, ``step``,
        ``off``; ``landing`` a dict of them) and ``angle``, a dict of floats.
    """
    w_col = torch.as_tensor(w, dtype=torch.float64).reshape(3, 1)  # (3,) -> a 3 x 1 frame
    g_col = torch.as_tensor(g, dtype=torch.float64).reshape(3, 1)
    if abs(w_col.norm().item() - 1.0) > 1e-9:
        raise ValueError(f"w must be a unit vector (a point of St(3, 1)), got norm {w_col.norm().item():.6g}")
    if not t > 0:
        raise ValueError(f"the step length t must be > 0, got {t}")
    tangent = geo.project_tangent(w_col, g_col)
    if tangent.norm() < 1e-9 * max(g_col.norm().item(), 1.0):
        raise ValueError("g is parallel to w: its tangent part is zero, so there is no step to draw")
    step = -t * tangent / tangent.norm()
    landing = {m: geo.retract(w_col, step, m)[:, 0] for m in RETRACTIONS}
    angle = {m: math.acos(max(-1.0, min(1.0, float(w_col[:, 0] @ x)))) for m, x in landing.items()}
    return {"w": w_col[:, 0], "g": g_col[:, 0], "tangent": tangent[:, 0],
            "normal": geo.normal_component(w_col, g_col)[:, 0], "step": step[:, 0],
            "off": (w_col + step)[:, 0], "landing": landing, "angle": angle}


def sphere_step_figure(w: Sequence[float], g: Sequence[float], t: float, *, size: float = 5.6,
                       t_max: float | None = None):
    """:func:`sphere_step` drawn in 3-D, with the geodesic through ``w`` along the step.

    The sphere (wireframe), the tangent plane at ``w`` (shaded), ``g`` (black), its tangent part
    (green) and normal part (red, dashed), the step ``S`` (orange) to the point ``w + S`` off the
    sphere (open circle), a dotted line from there to each landing point, and one marker per
    retraction; the legend (below the axes) gives each landing's angle from ``w``. The axes hold the
    sphere, ``w + g`` and the point ``w + S`` of a step of length ``t_max`` (default ``t``; give every
    frame of a slider the largest step so that the sphere keeps its size). Returns the ``Figure``
    (``size`` inches wide).
    """
    import matplotlib.pyplot as plt
    import numpy as np

    s = sphere_step(w, g, t)
    wv, xi_hat = s["w"].numpy(), (-s["step"] / t).numpy()
    fig = plt.figure(figsize=(size, size), layout="constrained")
    ax = fig.add_subplot(projection="3d")
    u, v = np.meshgrid(np.linspace(0, 2 * np.pi, 36), np.linspace(0, np.pi, 18))
    ax.plot_wireframe(np.cos(u) * np.sin(v), np.sin(u) * np.sin(v), np.cos(v), color="0.6", alpha=0.18, lw=0.5)
    # the tangent plane at w: w + a e1 + b e2 with e1, e2 an orthonormal basis of it
    e1 = xi_hat
    e2 = np.cross(wv, e1)
    a, b = np.meshgrid(np.linspace(-0.7, 0.7, 2), np.linspace(-0.7, 0.7, 2))
    plane = wv[:, None, None] + e1[:, None, None] * a + e2[:, None, None] * b  # (3, 2, 2)
    ax.plot_surface(*plane, color="C2", alpha=0.1)
    arc = np.linspace(0, 2 * np.pi, 200)  # the great circle through w in the step's direction
    great = np.outer(wv, np.cos(arc)) - np.outer(xi_hat, np.sin(arc))
    ax.plot(*great, color="C3", lw=0.8, alpha=0.6)
    for vec, color, style, label in ((s["g"], "k", "-", "gradient $g$"), (s["tangent"], "C2", "-", r"tangent part $P_w(g)$"),
                                     (s["normal"], "C3", "--", "normal part"), (s["step"], "C1", "-", "step $S$")):
        ax.quiver(*wv, *vec.numpy(), color=color, linestyle=style, arrow_length_ratio=0.12, lw=2, label=label)
    off = s["off"].numpy()
    ax.scatter(*off, s=40, facecolors="white", edgecolors="C1", depthshade=False, label="$w + S$ (off the sphere)")
    for m in RETRACTIONS:
        color, marker, ms = _STYLE[m]
        p = s["landing"][m].numpy()
        ax.plot(*np.stack([off, p], axis=1), color=color, lw=0.8, ls=":")
        ax.plot(*p[:, None], marker, color=color, ms=ms, label=f"{_NAMES[m]}: {s['angle'][m]:.2f} rad")
    ax.scatter(*wv, color="k", s=20, depthshade=False)
    ax.text(*(wv * 1.08), "$w$", fontsize=11)
    far = sphere_step(w, g, max(t, t_max or t))
    pts = np.stack([np.ones(3), -np.ones(3), far["off"].numpy(), wv + s["g"].numpy()])  # (4, 3)
    mid, half = (pts.max(0) + pts.min(0)) / 2, (pts.max(0) - pts.min(0)).max() / 2
    for setlim, c in zip((ax.set_xlim, ax.set_ylim, ax.set_zlim), mid):
        setlim(c - half, c + half)
    ax.set_box_aspect((1, 1, 1), zoom=1.4)
    ax.set_axis_off()
    ax.view_init(elev=22, azim=-35)
    ax.set_title(f"step length t = {t:g}")
    fig.legend(loc="outside lower center", ncol=2, fontsize=9)
    return fig


def sphere_step_widget(w: Sequence[float], g: Sequence[float], steps: Sequence[float], *, dpi: int = 90,
                       size: float = 5.6):
    """A step-length slider over :func:`sphere_step_figure` at each of ``steps``, with no kernel needed.

    The frames are rendered now (PNG at ``dpi``) and the slider is ``jslink``-ed to them in the
    browser (:func:`stiefel_mini.widgets.frame_player`). Returns the widget box, which carries the
    CSS class ``sphere-step-widget``.
    """
    from stiefel_mini.widgets import figure_to_png, frame_player

    if not steps:
        raise ValueError("sphere_step_widget needs at least one step length")
    frames = [figure_to_png(sphere_step_figure(w, g, t, size=size, t_max=max(steps)), dpi=dpi) for t in steps]
    box = frame_player(frames, labels=[f"{t:g}" for t in steps], description="step length t")
    box.add_class("sphere-step-widget")
    return box

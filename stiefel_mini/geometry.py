"""Geometry of the Stiefel manifold St(n, p) = {W in R^{n x p} : W^T W = I_p}.

Every function is pure and batched: it takes tensors of shape ``(..., r, c)`` and treats the
leading dimensions as independent frames (for example one frame per attention head).

Orientation rule, used everywhere in ``stiefel_mini``: a frame of shape ``(..., r, c)`` has
orthonormal *columns* if ``r >= c`` and orthonormal *rows* otherwise. A wide frame is handled as
the transpose of a tall one, so an ``nn.Linear`` weight of shape ``(out, in)`` with ``out < in``
can be a frame as it is. Below, formulas are written for the tall case ``W`` of shape ``(n, p)``,
``n >= p``.

References:
    Edelman, Arias, Smith (1998), "The geometry of algorithms with orthogonality constraints".
    Absil, Mahony, Sepulchre (2008), "Optimization Algorithms on Matrix Manifolds", ch. 3-4.
    Wen, Yin (2013), "A feasible method for optimization with orthogonality constraints".
"""

from __future__ import annotations

import functools
from typing import Callable

import torch
from torch import Tensor

from ._numerics import polar_or_nan, positive_qr, refuse, retract_or_nan

__all__ = [
    "sym",
    "skew",
    "project_tangent",
    "canonical_gradient",
    "normal_component",
    "tangent_error",
    "polar_retraction",
    "qr_retraction",
    "cayley_retraction",
    "exp_retraction",
    "RETRACTIONS",
    "retract",
    "project",
    "random_stiefel",
    "orthogonality_error",
    "is_wide",
]


def is_wide(W: Tensor) -> bool:
    """Whether a frame of shape ``(..., r, c)`` is stored wide (``r < c``, orthonormal rows)."""
    if W.dim() < 2:
        raise ValueError(
            f"a frame needs at least 2 dimensions (..., r, c); got shape {tuple(W.shape)}"
        )
    return W.shape[-2] < W.shape[-1]


def _tall(fn: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """Run ``fn`` on tall views of every tensor argument and give the result back in the caller's
    orientation. The orientation is read off the first argument, the frame."""

    @functools.wraps(fn)
    def wrapper(W: Tensor, *args: Tensor, **kwargs) -> Tensor:
        if not is_wide(W):
            return fn(W, *args, **kwargs)
        args = tuple(a.mT if isinstance(a, Tensor) else a for a in args)
        return fn(W.mT, *args, **kwargs).mT

    return wrapper


def sym(A: Tensor, *, out: Tensor | None = None) -> Tensor:
    """Symmetric part ``sym(A) = (A + A^T) / 2`` of square matrices ``(..., k, k)``.

    ``out``: a tensor shaped as A, not A itself, to write the result into.
    """
    return torch.add(A, A.mT, out=out).mul_(0.5)


def skew(A: Tensor) -> Tensor:
    """Skew-symmetric part ``skew(A) = (A - A^T) / 2`` of square matrices ``(..., k, k)``."""
    return 0.5 * (A - A.mT)


@_tall
def project_tangent(W: Tensor, G: Tensor) -> Tensor:
    """Orthogonal projection onto the tangent space at W for the embedded (Euclidean) metric.

    ``P_W(G) = G - W sym(W^T G)``.  The tangent space is ``{V : W^T V + V^T W = 0}``; the removed
    part ``W sym(W^T G)`` lies in the normal space ``{W N : N = N^T}``. Applied to a Euclidean
    gradient it gives the Riemannian gradient for the metric ``<U, V> = tr(U^T V)``.

    Shapes: W, G ``(..., n, p)`` -> ``(..., n, p)``.
    Reference: Edelman et al. (1998), eq. (2.3); Absil et al. (2008), eq. (3.35).
    """
    return G - W @ sym(W.mT @ G)


@_tall
def canonical_gradient(W: Tensor, G: Tensor) -> Tensor:
    """Riemannian gradient for the canonical metric of St(n, p).

    ``grad_c f(W) = G - W G^T W``, with ``G`` the Euclidean gradient. The canonical metric
    ``<U, V>_W = tr(U^T (I - W W^T / 2) V)`` weighs the ``W``-component of a tangent vector by 1/2.

    Shapes: W, G ``(..., n, p)`` -> ``(..., n, p)``.
    Reference: Edelman et al. (1998), eq. (2.53).
    """
    return G - W @ (G.mT @ W)


@_tall
def normal_component(W: Tensor, G: Tensor) -> Tensor:
    """Normal part of G at W, ``N_W(G) = W sym(W^T G)``, so that ``G = P_W(G) + N_W(G)``.

    Shapes: W, G ``(..., n, p)`` -> ``(..., n, p)``.
    Reference: Edelman et al. (1998), section 2.2.1.
    """
    return W @ sym(W.mT @ G)


@_tall
def _tangent_residual(W: Tensor, V: Tensor) -> Tensor:
    return sym(W.mT @ V)


def tangent_error(W: Tensor, V: Tensor) -> Tensor:
    """How far V is from the tangent space at W: ``||sym(W^T V)||_F`` per frame.

    Zero exactly when ``W^T V`` is skew-symmetric, i.e. V is tangent at W.

    Shapes: W, V ``(..., n, p)`` -> ``(...)``.
    """
    return torch.linalg.matrix_norm(_tangent_residual(W, V))


@_tall
def polar_retraction(W: Tensor, V: Tensor) -> Tensor:
    """Polar retraction: the closest frame to ``W + V`` in Frobenius norm.

    ``R(W, V) = polar(W + V) = (W + V) ((W + V)^T (W + V))^{-1/2}``.  For tangent V and an exact
    frame W, ``(W + V)^T (W + V) = I + V^T V``, so only a p x p problem is solved. The Gram
    matrix is formed from ``W + V`` itself rather than assumed to be ``I + V^T V``, so the result
    is orthonormal to working precision even when W has drifted slightly. The inverse square root
    uses a binomial series summed to working precision where ``W + V``, or a multiple of it, is
    near a frame (matrix products only) and the SVD of ``W + V`` otherwise, chosen per frame, so
    any step, however large, lands on the manifold; a rank-deficient ``W + V`` raises
    ``ValueError``. Second order: ``R(W, tV) = W + tV + O(t^2)`` with a second-order term normal
    to the manifold.

    Shapes: W, V ``(..., n, p)`` -> ``(..., n, p)``.
    Reference: Absil et al. (2008), example 4.1.3; Absil & Malick (2012), "Projection-like
    retractions on matrix manifolds".
    """
    Y, ok = polar_or_nan(W + V)
    refuse("polar_retraction", ok, "W + V is (numerically) rank-deficient, its polar factor is not unique")
    return Y


@_tall
def qr_retraction(W: Tensor, V: Tensor) -> Tensor:
    """QR retraction: the Q factor of ``W + V`` with the sign fixed so that ``diag(R) > 0``.

    ``R(W, V) = qf(W + V)``.  First order: ``R(W, tV) = W + tV + O(t^2)``. Raises ``ValueError``
    if some ``W + V`` is (numerically) rank-deficient.

    Shapes: W, V ``(..., n, p)`` -> ``(..., n, p)``.
    Reference: Absil et al. (2008), example 4.1.3.
    """
    Y, ok = retract_or_nan(W, V, "qr")
    refuse("qr_retraction", ok, "W + V is (numerically) rank-deficient")
    return Y


@_tall
def cayley_retraction(W: Tensor, V: Tensor) -> Tensor:
    """Cayley retraction, solved in its low-rank form with a 2p x 2p system.

    Raises ``ValueError`` for a step it cannot take to working precision (checked per frame).

    With ``U = V - W (W^T V) / 2`` the skew matrix ``A = U W^T - W U^T`` satisfies ``A W = V`` for
    tangent V, and ``R(W, V) = (I - A/2)^{-1} (I + A/2) W``. Writing ``A = L Z^T`` with
    ``L = [U, W]``, ``Z = [W, -U]`` (n x 2p), the Sherman-Morrison-Woodbury identity gives

    ``R(W, V) = W + L (I_{2p} - Z^T L / 2)^{-1} Z^T W``,

    so no n x n matrix is formed. It is a first-order retraction; it matches the geodesic of the
    canonical metric (not of the embedded one, :func:`exp_retraction`) to second order. The map
    applies an orthogonal matrix to W, so it keeps whatever error W already has and its rounding
    errors would add up over many float32 steps (polar and QR re-orthonormalise at every step);
    a result whose ``||R^T R - I||_F`` exceeds ``64 u`` (3.8e-6 in float32) is therefore replaced
    by its polar factor, which keeps the error below that over any number of steps.

    Shapes: W, V ``(..., n, p)`` -> ``(..., n, p)``.
    Reference: Wen & Yin (2013), lemma 4.1 and eq. (2.7).
    """
    Y, ok = retract_or_nan(W, V, "cayley")
    refuse("cayley_retraction", ok, "the step is too large for the Cayley map to stay on the manifold")
    return Y


@_tall
def exp_retraction(W: Tensor, V: Tensor) -> Tensor:
    """Riemannian exponential map of the embedded (Euclidean) metric.

    Raises ``ValueError`` for a step it cannot take to working precision (checked per frame).

    With ``A = W^T V`` (skew for tangent V) and ``C = V^T V``,

    ``Exp_W(V) = [W, V] expm([[A, -C], [I, A]]) [[expm(-A)], [0]]``,

    which follows the geodesic from W with initial velocity V for unit time. Defined for tangent
    V; a non-tangent V should be projected first. Like the Cayley map it applies an orthogonal map
    to W, so it is re-orthonormalised the same way: a result whose ``||R^T R - I||_F`` exceeds
    ``64 u`` (3.8e-6 in float32) is replaced by its polar factor.

    Shapes: W, V ``(..., n, p)`` -> ``(..., n, p)``.
    Reference: Edelman et al. (1998), eq. (2.45); Zimmermann (2017), eq. (10).
    """
    Y, ok = retract_or_nan(W, V, "exp")
    refuse("exp_retraction", ok, "the step is too large for the exponential map to stay on the manifold")
    return Y


RETRACTIONS: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "polar": polar_retraction,
    "qr": qr_retraction,
    "cayley": cayley_retraction,
    "exp": exp_retraction,
}


def retract(W: Tensor, V: Tensor, method: str = "polar") -> Tensor:
    """Move from frame W along tangent vector V and land back on the manifold.

    ``method`` is one of ``RETRACTIONS``: ``"polar"`` (closest point), ``"qr"``, ``"cayley"``,
    ``"exp"`` (geodesic). Shapes: W, V ``(..., n, p)`` -> ``(..., n, p)``.
    """
    try:
        fn = RETRACTIONS[method]
    except KeyError:
        raise ValueError(
            f"unknown retraction {method!r}; choose one of {sorted(RETRACTIONS)}"
        ) from None
    return fn(W, V)


def project(A: Tensor, *, rtol: float | None = None) -> Tensor:
    """Closest frame to a full-rank matrix: the orthogonal polar factor ``U V^T`` of ``A = U Sigma V^T``.

    ``project(A) = argmin_{W in St} ||W - A||_F = A (A^T A)^{-1/2}``.  Raises ``ValueError`` if some
    matrix is (numerically) rank-deficient, because its closest frame is then not unique.

    A matrix is refused when ``s_min <= rtol s_max`` (default ``rtol = max(r, c) eps``). The
    factor is taken as in :func:`polar_retraction` (the binomial series for a matrix whose singular
    values are clustered, the SVD otherwise), so an already-orthonormal frame is no hazard to the SVD.
    bf16 / fp16 matrices are handled in float32 and the result cast back.

    Shapes: ``(..., r, c)`` -> ``(..., r, c)``, orientation rule as everywhere.
    Reference: Higham (2008), "Functions of Matrices", theorem 8.4.
    """
    if A.dim() < 2:
        raise ValueError(f"project expects (..., r, c) matrices; got shape {tuple(A.shape)}")
    if A.numel() == 0:
        raise ValueError(f"project needs non-empty matrices; got shape {tuple(A.shape)}")
    work = torch.promote_types(A.dtype, torch.float32)  # the SVD has no bf16 / fp16 kernels
    tall = A.shape[-2] >= A.shape[-1]
    M = A.to(work) if tall else A.to(work).mT  # (..., max(r, c), min(r, c))
    if not bool(torch.isfinite(M).all()):
        raise ValueError("project needs finite matrices; some entry is NaN or inf")
    Y, ok = polar_or_nan(M, rtol=rtol)
    if not bool(ok.all()):
        raise ValueError(
            "project needs full-rank matrices: some matrix has a (numerically) zero singular "
            "value, so its closest frame is not unique; perturb it or start from random_stiefel"
        )
    return (Y if tall else Y.mT.contiguous()).to(A.dtype)


def random_stiefel(
    *shape: int,
    generator: torch.Generator | None = None,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """A Haar-distributed random frame of shape ``(..., r, c)``.

    ``W = qf(X)`` for Gaussian X with the sign of ``diag(R)`` fixed, which makes the law
    invariant under ``W -> Q W`` for every orthogonal Q. bf16 / fp16 frames are drawn in float32
    and rounded.

    Reference: Mezzadri (2007), "How to generate random matrices from the classical compact groups".
    """
    if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)):
        shape = tuple(shape[0])
    if len(shape) < 2:
        raise ValueError(f"random_stiefel needs a shape (..., r, c); got {shape}")
    r, c = shape[-2:]
    tall = (*shape[:-2], max(r, c), min(r, c))
    dtype = torch.get_default_dtype() if dtype is None else dtype
    work = torch.promote_types(dtype, torch.float32)  # QR has no bf16 / fp16 kernels
    X = torch.randn(tall, generator=generator, dtype=work, device=device)
    W, _ = positive_qr(torch.zeros_like(X), X)
    W = W.to(dtype)
    return W.mT.contiguous() if r < c else W


def orthogonality_error(W: Tensor) -> Tensor:
    """Distance from the manifold: ``||W^T W - I||_F`` per frame (``||W W^T - I||_F`` if wide).

    Shapes: ``(..., r, c)`` -> ``(...)``.
    """
    Wt = W.mT if is_wide(W) else W
    gram = Wt.mT @ Wt
    eye = torch.eye(gram.shape[-1], dtype=W.dtype, device=W.device)
    return torch.linalg.matrix_norm(gram - eye)

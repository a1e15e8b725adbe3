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

__all__ = [
    "sym",
    "skew",
    "project_tangent",
    "canonical_gradient",
    "normal_component",
    "tangent_error",
    "polar_retraction",
    "polar_factor",
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


def series_degree(bound: float, dtype: torch.dtype) -> int:
    """Degree ``d`` at which the binomial series of ``(I + E)^{-1/2}`` is accurate to the unit
    roundoff ``u`` of ``dtype`` for every ``||E||_F <= bound < 1``: the remainder is at most
    ``bound^(d+1) / (1 - bound)``. Decided on the host from a bound, never from data.
    """
    if not 0.0 <= bound < 1.0:
        raise ValueError(f"the binomial series needs a bound in [0, 1); got {bound}")
    unit_roundoff = torch.finfo(dtype).eps / 2
    degree = 1
    while bound ** (degree + 1) > unit_roundoff * (1 - bound):
        degree += 1
    return degree


def _inv_sqrt_series(E: Tensor, degree: int, work: tuple[Tensor, Tensor] | None = None) -> Tensor:
    """``(I + E)^{-1/2}`` by the binomial series of fixed ``degree``, for symmetric ``(..., p, p)`` E.

    ``(I + E)^{-1/2} = sum_k binom(-1/2, k) E^k = I - E/2 + 3E^2/8 - 5E^3/16 + ...``, summed by
    Horner's rule: ``degree - 1`` matrix products, no data-dependent branch, no host
    synchronisation. Accurate when ``||E||_F`` is below the bound the degree was chosen for (see
    :func:`series_degree`).

    ``work``: two tensors shaped as E (neither E) that the partial sums are written into in turn;
    the result is one of them.

    Reference: Higham (2008), "Functions of Matrices", section 5.3 and chapter 6.
    """
    coeffs = [1.0]
    for k in range(1, degree + 1):
        coeffs.append(coeffs[-1] * -(2 * k - 1) / (2 * k))
    bufs = work or (None, None)
    Z = torch.mul(E, coeffs[degree], out=bufs[0])
    for i, c in enumerate(reversed(coeffs[1:degree])):
        _diagonal(Z).add_(c)  # Z + c I, touching only the diagonal
        Z = torch.matmul(E, Z, out=bufs[(i + 1) % 2])
    _diagonal(Z).add_(1.0)
    return Z


def _diagonal(A: Tensor) -> Tensor:
    """The diagonals of a batch of square matrices ``(..., p, p)`` as a writable view ``(..., p)``."""
    return A.diagonal(dim1=-2, dim2=-1)


# The series is used where ||M^T M - I||_F <= 1/4 (when no tighter bound is known).
SERIES_BOUND = 0.25


def polar_factor_checked(
    M: Tensor,
    bound: float | None = None,
    precision: torch.dtype | None = None,
    *,
    out: Tensor | None = None,
    work: tuple[Tensor, Tensor, Tensor] | None = None,
) -> tuple[Tensor, Tensor]:
    """Orthogonal polar factor of tall ``(..., n, p)`` M and, per frame, whether it could be taken.

    ``polar(M) = M (M^T M)^{-1/2}``. Per frame, with ``E = M^T M - I`` and ``delta = ||E||_F``:

    * ``bound`` given (the caller knows ``delta <= bound``, e.g. a capped step from a frame): the
      binomial series of the degree :func:`series_degree` gives for ``bound``; a frame with
      ``delta > bound`` is refused (``ok`` False, its result NaN) instead of being returned wrong.
    * ``bound=None``: the series (degree for ``delta <= 1/4``) where ``delta <= 1/4``, and the
      polar factor ``U V^T`` of the SVD ``M = U Sigma V^T`` elsewhere. The Gram route squares the
      condition number of M; the SVD does not, so any full-rank M is handled to working
      precision. Both are computed for every frame and chosen per frame with ``torch.where``.
      A numerically rank-deficient frame (``s_min <= n u s_max``) is refused.

    ``precision``: the dtype whose unit roundoff the series is summed to (default: M's; a frame
    that will be rounded to bf16 needs fewer terms). Each frame's result depends on that frame
    alone, and nothing is synchronised with the host, so the function compiles with
    ``torch.compile(fullgraph=True)``. ``out``: a tensor shaped as M (not M) to write the factor
    into when ``bound`` is given (a preallocated buffer; ignored otherwise); ``work``: three
    ``(..., p, p)`` tensors in M's dtype for the p x p intermediates, likewise.

    Shapes: M ``(..., n, p)``, ``n >= p`` -> ``((..., n, p), (...))``.
    Reference: Higham (2008), "Functions of Matrices", theorem 8.4 and chapter 6.
    """
    work = work if bound is not None and work is not None else (None, None, None)
    E = torch.matmul(M.mT, M, out=work[0])
    _diagonal(E).sub_(1.0)  # M^T M - I
    delta = torch.linalg.matrix_norm(E)  # (...)
    if bound is not None:
        ok = delta <= bound
        Z = _inv_sqrt_series(E, series_degree(bound, precision or M.dtype), work[1:])
        # A refused frame is NaN: never a silently wrong frame.
        Z.mul_(torch.where(ok, 1.0, torch.nan).to(M.dtype)[..., None, None])
        return torch.matmul(M, Z, out=out), ok
    near = delta <= SERIES_BOUND
    Z = _inv_sqrt_series(torch.where(near[..., None, None], E, 0.0), series_degree(SERIES_BOUND, precision or M.dtype))
    finite = torch.isfinite(M).flatten(-2).all(dim=-1)
    # The SVD raises on NaN / inf (on the host); such frames are refused below anyway.
    U, s, Vh = torch.linalg.svd(torch.where(finite[..., None, None], M, 0.0), full_matrices=False)
    far = U @ Vh
    smax = s.amax(dim=-1)
    full_rank = s.amin(dim=-1) > M.shape[-2] * torch.finfo(M.dtype).eps * smax
    Y = torch.where(near[..., None, None], M @ Z, far)
    ok = (near | full_rank) & torch.isfinite(delta) & finite
    return torch.where(ok[..., None, None], Y, torch.nan), ok


def _refuse(name: str, ok: Tensor, what: str) -> None:
    """Raise ``ValueError`` if some frame was refused (this synchronises with the host)."""
    if not bool(ok.all()):
        bad = [tuple(i) for i in (~ok).nonzero().tolist()]
        raise ValueError(f"{name}: {what} (frames at batch index {bad}); use a smaller step, or "
                         "map the matrix to the manifold with stiefel_mini.geometry.project")


@_tall
def polar_retraction(W: Tensor, V: Tensor) -> Tensor:
    """Polar retraction: the closest frame to ``W + V`` in Frobenius norm.

    ``R(W, V) = polar(W + V) = (W + V) ((W + V)^T (W + V))^{-1/2}``.  For tangent V and an exact
    frame W, ``(W + V)^T (W + V) = I + V^T V``, so only a p x p problem is solved. The Gram
    matrix is formed from ``W + V`` itself rather than assumed to be ``I + V^T V``, so the result
    is orthonormal to working precision even when W has drifted slightly. The inverse square root
    uses a binomial series summed to working precision near the identity (matrix products only)
    and the SVD of ``W + V`` otherwise (see ``polar_factor_checked``), so any step, however
    large, lands on the manifold; a rank-deficient ``W + V`` raises ``ValueError``. Second order:
    ``R(W, tV) = W + tV + O(t^2)`` with a second-order term normal to the manifold.

    Shapes: W, V ``(..., n, p)`` -> ``(..., n, p)``.
    Reference: Absil et al. (2008), example 4.1.3; Absil & Malick (2012), "Projection-like
    retractions on matrix manifolds".
    """
    return polar_factor(W + V)


@_tall
def polar_factor(M: Tensor) -> Tensor:
    """Orthogonal polar factor of a full-rank ``M``: ``M (M^T M)^{-1/2}``, the closest frame to M.

    Cheap near a frame (``M^T M`` close to ``I``), through the SVD elsewhere (see
    ``polar_factor_checked``, which is this function without the check). Raises
    ``ValueError`` if some M is numerically rank-deficient (this check synchronises with the host).

    Shapes: ``(..., n, p)`` -> ``(..., n, p)``.
    Reference: Higham (2008), "Functions of Matrices", theorem 8.4.
    """
    Y, ok = polar_factor_checked(M)
    _refuse("polar_factor", ok, "the matrix is (numerically) rank-deficient, its polar factor is not unique")
    return Y


@_tall
def qr_retraction(W: Tensor, V: Tensor) -> Tensor:
    """QR retraction: the Q factor of ``W + V`` with the sign fixed so that ``diag(R) > 0``.

    ``R(W, V) = qf(W + V)``.  First order: ``R(W, tV) = W + tV + O(t^2)``. Raises ``ValueError``
    if some ``W + V`` is (numerically) rank-deficient.

    Shapes: W, V ``(..., n, p)`` -> ``(..., n, p)``.
    Reference: Absil et al. (2008), example 4.1.3.
    """
    Y, ok = retract_checked(W, V, "qr")
    _refuse("qr_retraction", ok, "W + V is (numerically) rank-deficient")
    return Y


def _qr(W: Tensor, V: Tensor) -> tuple[Tensor, Tensor]:
    """``qf(W + V)`` with ``diag(R) > 0`` for tall inputs, and per frame whether ``W + V`` has full rank."""
    M = W + V
    Q, R = torch.linalg.qr(M)
    diag = torch.diagonal(R, dim1=-2, dim2=-1)
    signs = torch.sign(diag)
    # sign(0) = 0 would zero a column; a zero diagonal only occurs for rank-deficient input.
    signs = torch.where(signs == 0, torch.ones_like(signs), signs)
    size = diag.abs()
    ok = size.amin(dim=-1) > M.shape[-2] * torch.finfo(M.dtype).eps * size.amax(dim=-1)
    return Q * signs.unsqueeze(-2), ok


@_tall
def cayley_retraction(W: Tensor, V: Tensor) -> Tensor:
    """Cayley retraction, solved in its low-rank form with a 2p x 2p system.

    Raises ``ValueError`` for a step it cannot take to working precision (checked per frame).

    With ``U = V - W (W^T V) / 2`` the skew matrix ``A = U W^T - W U^T`` satisfies ``A W = V`` for
    tangent V, and ``R(W, V) = (I - A/2)^{-1} (I + A/2) W``. Writing ``A = L Z^T`` with
    ``L = [U, W]``, ``Z = [W, -U]`` (n x 2p), the Sherman-Morrison-Woodbury identity gives

    ``R(W, V) = W + L (I_{2p} - Z^T L / 2)^{-1} Z^T W``,

    so no n x n matrix is formed. It is a first-order retraction; it matches the geodesic of the
    canonical metric (not of the embedded one, :func:`exp_retraction`) to second order. The map applies an orthogonal matrix
    to W, so it keeps whatever error W already has: over many float32 steps the rounding errors
    add up, where polar and QR re-orthonormalize at every step.

    Shapes: W, V ``(..., n, p)`` -> ``(..., n, p)``.
    Reference: Wen & Yin (2013), lemma 4.1 and eq. (2.7).
    """
    Y, ok = retract_checked(W, V, "cayley")
    _refuse("cayley_retraction", ok, "the step is too large for the Cayley map to stay on the manifold")
    return Y


def _cayley(W: Tensor, V: Tensor) -> Tensor:
    """The Cayley map of :func:`cayley_retraction`, without the check."""
    p = W.shape[-1]
    U = V - 0.5 * (W @ (W.mT @ V))
    L = torch.cat([U, W], dim=-1)  # (..., n, 2p)
    Z = torch.cat([W, -U], dim=-1)  # (..., n, 2p)
    eye = torch.eye(2 * p, dtype=W.dtype, device=W.device)
    return W + L @ _solve(eye - 0.5 * (Z.mT @ L), Z.mT @ W)


def _solve(A: Tensor, B: Tensor) -> Tensor:
    """``A^{-1} B`` for ``(..., k, k)`` systems.

    The CPU build of torch 2.14.1 with more than one thread returns wrong answers (or fails in
    ``lu_solve``) for batched solves of systems larger than about 128 x 128, so those are solved one
    system at a time.
    """
    if A.shape[-1] <= 128 or A.dim() == 2 or A.device.type != "cpu":
        return torch.linalg.solve(A, B)
    batch = A.shape[:-2]
    A2, B2 = A.reshape(-1, *A.shape[-2:]), B.expand(*batch, *B.shape[-2:]).reshape(-1, *B.shape[-2:])
    return torch.stack([torch.linalg.solve(a, b) for a, b in zip(A2, B2)]).reshape(*batch, *B.shape[-2:])


@_tall
def exp_retraction(W: Tensor, V: Tensor) -> Tensor:
    """Riemannian exponential map of the embedded (Euclidean) metric.

    Raises ``ValueError`` for a step it cannot take to working precision (checked per frame).

    With ``A = W^T V`` (skew for tangent V) and ``C = V^T V``,

    ``Exp_W(V) = [W, V] expm([[A, -C], [I, A]]) [[expm(-A)], [0]]``,

    which follows the geodesic from W with initial velocity V for unit time. Defined for tangent
    V; a non-tangent V should be projected first. Like the Cayley map it does not pull a drifted W
    back onto the manifold, so float32 rounding errors add up over many steps.

    Shapes: W, V ``(..., n, p)`` -> ``(..., n, p)``.
    Reference: Edelman et al. (1998), eq. (2.45); Zimmermann (2017), eq. (10).
    """
    Y, ok = retract_checked(W, V, "exp")
    _refuse("exp_retraction", ok, "the step is too large for the exponential map to stay on the manifold")
    return Y


def _exp(W: Tensor, V: Tensor) -> Tensor:
    """The exponential map of :func:`exp_retraction`, without the check."""
    p = W.shape[-1]
    A = W.mT @ V
    S = V.mT @ V
    eye = torch.eye(p, dtype=W.dtype, device=W.device).expand_as(A)
    block = torch.cat([torch.cat([A, -S], dim=-1), torch.cat([eye, A], dim=-1)], dim=-2)  # (..., 2p, 2p)
    E = torch.linalg.matrix_exp(block)[..., :, :p] @ torch.linalg.matrix_exp(-A)  # (..., 2p, p)
    return torch.cat([W, V], dim=-1) @ E


def retract_checked(W: Tensor, V: Tensor, method: str, bound: float | None = None) -> tuple[Tensor, Tensor]:
    """Retract tall frames and say per frame whether the step could be taken; no host sync.

    Returns ``(R(W, V), ok)`` with ``ok`` of shape ``(...)``; a refused frame's result is NaN.

    * ``"polar"``: ``polar_factor_checked`` of ``W + V`` (``bound`` is passed on); refused
      only if ``W + V`` is rank-deficient (or exceeds a given bound).
    * ``"qr"``: refused if ``W + V`` is rank-deficient.
    * ``"cayley"``, ``"exp"``: these apply an orthogonal map to W, so they keep the error W has
      and do not repair a frame that was moved off the manifold. A step that adds more than
      ``sqrt(u)`` to ``||W^T W - I||_F`` (``u`` the unit roundoff: 2.4e-4 in float32, 1e-8 in
      float64; a huge step, where the 2p x 2p solve or the matrix exponential loses accuracy) is
      refused.

    Shapes: W, V ``(..., n, p)``, ``n >= p`` -> ``((..., n, p), (...))``.
    """
    if method == "polar":
        return polar_factor_checked(W + V, bound)
    if method == "qr":
        Y, ok = _qr(W, V)
    elif method in ("cayley", "exp"):
        Y = _cayley(W, V) if method == "cayley" else _exp(W, V)
        u = torch.finfo(W.dtype).eps / 2
        before, after = _orthogonality_error_tall(W), _orthogonality_error_tall(Y)
        ok = after <= before + u**0.5
    else:
        raise ValueError(f"unknown retraction {method!r}; choose one of {sorted(RETRACTIONS)}")
    ok = ok & torch.isfinite(Y).flatten(-2).all(dim=-1)
    return torch.where(ok[..., None, None], Y, torch.nan), ok


def _orthogonality_error_tall(W: Tensor) -> Tensor:
    eye = torch.eye(W.shape[-1], dtype=W.dtype, device=W.device)
    return torch.linalg.matrix_norm(W.mT @ W - eye)


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

    bf16 / fp16 matrices are handled in float32 and the result cast back.

    Shapes: ``(..., r, c)`` -> ``(..., r, c)``, orientation rule as everywhere.
    Reference: Higham (2008), "Functions of Matrices", theorem 8.4.
    """
    if A.dim() < 2:
        raise ValueError(f"project expects (..., r, c) matrices; got shape {tuple(A.shape)}")
    if A.numel() == 0:
        raise ValueError(f"project needs non-empty matrices; got shape {tuple(A.shape)}")
    work = torch.promote_types(A.dtype, torch.float32)  # the SVD has no bf16 / fp16 kernels
    U, s, Vh = torch.linalg.svd(A.to(work), full_matrices=False)
    if rtol is None:
        rtol = max(A.shape[-2:]) * torch.finfo(s.dtype).eps
    smax = s.amax(dim=-1, keepdim=True)
    if bool((s <= rtol * smax).any()) or bool((smax == 0).any()):
        raise ValueError(
            "project needs full-rank matrices: some matrix has a (numerically) zero singular "
            "value, so its closest frame is not unique; perturb it or start from random_stiefel"
        )
    return (U @ Vh).to(A.dtype)


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
    W, _ = _qr(torch.zeros_like(X), X)
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

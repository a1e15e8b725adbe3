"""The batched kernels behind :mod:`stiefel_mini.geometry`'s polar factor and retractions.

Each kernel returns its frames together with ``ok``, per frame, whether the map could be taken to
working precision; a refused frame is NaN, never a silently wrong frame. None raises on data or
synchronises with the host, so the optimizer can check a whole step at once and compile the rule.
The public maps in :mod:`stiefel_mini.geometry` call these and raise where a frame was refused.
All inputs are tall, ``(..., n, p)`` with ``n >= p``.
"""

from __future__ import annotations

import torch
from torch import Tensor

METHODS = ("polar", "qr", "cayley", "exp")


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


def inv_sqrt_series(E: Tensor, degree: int, work: tuple[Tensor, ...] | None = None) -> Tensor:
    """``(I + E)^{-1/2}`` by the binomial series of fixed ``degree``, for symmetric ``(..., p, p)`` E.

    ``(I + E)^{-1/2} = sum_k a_k E^k`` with ``a_k = binom(-1/2, k)`` (``I - E/2 + 3E^2/8 - ...``),
    summed by the Paterson-Stockmeyer scheme: with the powers ``E, ..., E^s`` and the chunks
    ``C_j = sum_{i<s} a_{js+i} E^i`` (``E^0 = I``), the sum is ``C_0 + E^s (C_1 + E^s (C_2 + ...))``.
    That takes :func:`series_products` matrix products (2 at degree 4, where Horner's rule takes 3;
    ``s`` is chosen to make them fewest), no data-dependent branch and no host synchronisation.
    Accurate when ``||E||_F`` is below the bound the degree was chosen for (see :func:`series_degree`).

    ``work``: tensors shaped as E (none of them E) for the partial sums and the powers; the result
    is one of them. Two partial sums and ``s - 1`` powers are needed: those ``work`` lacks are allocated.

    Reference: Higham (2008), "Functions of Matrices", sections 4.2 and 5.3 and chapter 6;
    Paterson & Stockmeyer (1973), SIAM J. Comput. 2(1), "On the number of nonscalar multiplications
    necessary to evaluate polynomials".
    """
    a = [1.0]
    for k in range(1, degree + 1):
        a.append(a[-1] * -(2 * k - 1) / (2 * k))
    s = _block_size(degree)
    shape = E.shape
    E = E.reshape(-1, *shape[-2:])  # (B, p, p): the batched products want one batch dimension
    # Without work, fresh tensors (None: no out=), so that autograd can differentiate through the sum.
    bufs = [w.view(E.shape) for w in (work or ()) if w is not None]
    bufs += [None] * (s + 1 - len(bufs))
    sums, spare = bufs[:2], bufs[2:]
    powers = [E]  # E^1, ..., E^s
    for i in range(1, s):
        powers.append(torch.bmm(powers[-1], E, out=spare[i - 1]))

    def chunk(j: int, out: Tensor | None) -> Tensor:
        """``C_j``, written into ``out`` if given (terms beyond the degree are zero)."""
        if s > 1 and j * s + 1 <= degree:
            C = torch.mul(E, a[j * s + 1], out=out)
        else:
            C = torch.zeros_like(E) if out is None else out.zero_()
        for i in range(2, s):
            if j * s + i <= degree:
                C.add_(powers[i - 1], alpha=a[j * s + i])
        _diagonal(C).add_(a[j * s])
        return C

    q = degree // s
    # The last chunk: C_q, or, when it is the scalar a_{qs}, C_{q-1} + a_{qs} E^s (no product).
    if degree % s == 0:
        q -= 1
        Z = chunk(q, sums[0]).add_(powers[-1], alpha=a[(q + 1) * s])
    else:
        Z = chunk(q, sums[0])
    for j in range(q - 1, -1, -1):
        Z, sums = chunk(j, sums[1]).baddbmm_(powers[-1], Z), sums[::-1]
    return Z.view(shape)


def _block_size(degree: int) -> int:
    """The number of powers ``s`` with which the Paterson-Stockmeyer sum takes fewest products (ties:
    the smaller ``s``, fewer buffers)."""
    return min(range(1, degree + 1), key=lambda s: (series_products(degree, s), s))


def series_products(degree: int, s: int | None = None) -> int:
    """Matrix products :func:`inv_sqrt_series` takes at ``degree`` with ``s`` powers (default: its choice):
    ``s - 1`` for the powers and one per chunk below the last, less one when the last chunk is a scalar."""
    if s is None:
        s = _block_size(degree)
    return (s - 1) + degree // s - (1 if degree % s == 0 else 0)


def _diagonal(A: Tensor) -> Tensor:
    """The diagonals of a batch of square matrices ``(..., p, p)`` as a writable view ``(..., p)``."""
    return A.diagonal(dim1=-2, dim2=-1)


# The series is used where ||M^T M - I||_F <= 1/4 (when no tighter bound is known).
SERIES_BOUND = 0.25


def polar_or_nan(
    M: Tensor,
    bound: float | None = None,
    precision: torch.dtype | None = None,
    *,
    rtol: float | None = None,
    out: Tensor | None = None,
    work: tuple[Tensor, ...] | None = None,
) -> tuple[Tensor, Tensor]:
    """Orthogonal polar factor of tall ``(..., n, p)`` M and, per frame, whether it could be taken.

    ``polar(M) = M (M^T M)^{-1/2}``. Per frame, with ``E = M^T M - I`` and ``delta = ||E||_F``:

    * ``bound`` given (the caller knows ``delta <= bound``, e.g. a capped step from a frame): the
      binomial series of the degree :func:`series_degree` gives for ``bound``; a frame with
      ``delta > bound`` is refused (``ok`` False, its result NaN) instead of being returned wrong.
    * ``bound=None``: the series (degree for ``delta <= 1/4``) where ``delta <= 1/4``; else, since
      ``polar(M) = polar(M / c)``, the series on ``M / c`` where that frame is within 1/4 of
      orthonormal, ``c^2 = tr(M^T M) / p`` (the mean squared singular value); and the polar factor
      ``U V^T`` of the SVD ``M = U Sigma V^T`` for the frames left. The Gram route squares the
      condition number of M; the SVD does not, so any full-rank M is handled to working
      precision. Every route is computed for every frame and chosen per frame with ``torch.where``;
      the SVD sees a fixed well-separated matrix in place of the frames the series serves, because
      LAPACK's divide-and-conquer SVD (MKL's ``sgesdd``) can fail to converge, and raise, on
      singular values clustered as tightly as a near-orthonormal frame's.
      A numerically rank-deficient frame (``s_min <= rtol s_max``, ``rtol`` by default ``n eps``)
      is refused.

    ``precision``: the dtype whose unit roundoff the series is summed to (default: M's; a frame
    that will be rounded to bf16 needs fewer terms). Each frame's result depends on that frame
    alone, and nothing is synchronised with the host, so the function compiles with
    ``torch.compile(fullgraph=True)``. ``out``: a tensor shaped as M (not M) to write the factor
    into when ``bound`` is given (a preallocated buffer; ignored otherwise); ``work``: four
    ``(..., p, p)`` tensors in M's dtype for the p x p intermediates (``M^T M - I`` and the
    series' ``work``), likewise.

    Shapes: M ``(..., n, p)``, ``n >= p`` -> ``((..., n, p), (...))``.
    Reference: Higham (2008), "Functions of Matrices", theorem 8.4 and chapter 6.
    """
    work = work if bound is not None and work is not None else (None,)
    E = torch.matmul(M.mT, M, out=work[0])
    _diagonal(E).sub_(1.0)  # M^T M - I
    delta = torch.linalg.matrix_norm(E)  # (...)
    if bound is not None:
        ok = delta <= bound
        Z = inv_sqrt_series(E, series_degree(bound, precision or M.dtype), work[1:])
        # A refused frame is NaN: never a silently wrong frame.
        Z.mul_(torch.where(ok, 1.0, torch.nan).to(M.dtype)[..., None, None])
        return torch.matmul(M, Z, out=out), ok
    n, p = M.shape[-2:]
    near = delta <= SERIES_BOUND
    c_sq = _diagonal(E).sum(dim=-1) / p + 1.0  # tr(M^T M) / p: (...)
    E_c = E / c_sq[..., None, None]
    _diagonal(E_c).add_((1.0 / c_sq - 1.0)[..., None])  # M^T M / c^2 - I
    scaled = ~near & (torch.linalg.matrix_norm(E_c) <= SERIES_BOUND)
    E_series = torch.where(near[..., None, None], E, torch.where(scaled[..., None, None], E_c, 0.0))
    Z = inv_sqrt_series(E_series, series_degree(SERIES_BOUND, precision or M.dtype))
    series = (M @ Z) * torch.where(scaled, c_sq.rsqrt(), 1.0)[..., None, None]
    finite = torch.isfinite(M).flatten(-2).all(dim=-1)
    # The SVD raises on NaN / inf (on the host) and may on clustered singular values: it sees only
    # the finite frames the series does not serve, diag(1, ..., p) in place of the others.
    stand_in = torch.eye(n, p, dtype=M.dtype, device=M.device) * torch.arange(1, p + 1, dtype=M.dtype, device=M.device)
    by_svd = finite & ~near & ~scaled
    U, s, Vh = torch.linalg.svd(torch.where(by_svd[..., None, None], M, stand_in), full_matrices=False)
    rtol = n * torch.finfo(M.dtype).eps if rtol is None else rtol
    full_rank = s.amin(dim=-1) > rtol * s.amax(dim=-1)
    Y = torch.where((near | scaled)[..., None, None], series, U @ Vh)
    ok = (near | scaled | full_rank) & torch.isfinite(delta) & finite
    return torch.where(ok[..., None, None], Y, torch.nan), ok


def positive_qr(W: Tensor, V: Tensor) -> tuple[Tensor, Tensor]:
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


def _cayley(W: Tensor, V: Tensor) -> Tensor:
    """The Cayley map of :func:`stiefel_mini.geometry.cayley_retraction`, without the check."""
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


def _exp(W: Tensor, V: Tensor) -> Tensor:
    """The exponential map of :func:`stiefel_mini.geometry.exp_retraction`, without the check."""
    p = W.shape[-1]
    A = W.mT @ V
    S = V.mT @ V
    eye = torch.eye(p, dtype=W.dtype, device=W.device).expand_as(A)
    block = torch.cat([torch.cat([A, -S], dim=-1), torch.cat([eye, A], dim=-1)], dim=-2)  # (..., 2p, 2p)
    E = torch.linalg.matrix_exp(block)[..., :, :p] @ torch.linalg.matrix_exp(-A)  # (..., 2p, p)
    return torch.cat([W, V], dim=-1) @ E


# Cayley and exp results further than this many unit roundoffs from the manifold are re-orthonormalised.
REORTHONORMALISE_AT = 64


def retract_or_nan(W: Tensor, V: Tensor, method: str, bound: float | None = None) -> tuple[Tensor, Tensor]:
    """Retract tall frames and say per frame whether the step could be taken; no host sync.

    Returns ``(R(W, V), ok)`` with ``ok`` of shape ``(...)``; a refused frame's result is NaN.

    * ``"polar"``: :func:`polar_or_nan` of ``W + V`` (``bound`` is passed on); refused
      only if ``W + V`` is rank-deficient (or exceeds a given bound).
    * ``"qr"``: refused if ``W + V`` is rank-deficient.
    * ``"cayley"``, ``"exp"``: these apply an orthogonal map to W, so they keep the error W has,
      and their rounding errors add up over many steps. A step that adds more than ``sqrt(u)`` to
      ``||W^T W - I||_F`` (``u`` the unit roundoff: 2.4e-4 in float32, 1e-8 in float64; a huge
      step, where the 2p x 2p solve or the matrix exponential loses accuracy) is refused. A result
      whose ``||R^T R - I||_F`` exceeds ``REORTHONORMALISE_AT`` ``= 64 u`` (3.8e-6 in float32) is
      re-orthonormalised, replaced by its polar factor (:func:`polar_or_nan` with the series bound
      1/4; a result further off is left as it is), so the error stays below that tolerance over any
      number of steps; below it the result is the map's own, bit for bit.

    Shapes: W, V ``(..., n, p)``, ``n >= p`` -> ``((..., n, p), (...))``.
    """
    if method == "polar":
        return polar_or_nan(W + V, bound)
    if method == "qr":
        Y, ok = positive_qr(W, V)
    elif method in ("cayley", "exp"):
        Y = _cayley(W, V) if method == "cayley" else _exp(W, V)
        u = torch.finfo(W.dtype).eps / 2
        before, after = _orthogonality_error_tall(W), _orthogonality_error_tall(Y)
        ok = after <= before + u**0.5
        # Computed for every frame and chosen per frame, so that nothing waits on the host.
        polar, near = polar_or_nan(Y, SERIES_BOUND)
        repair = (after > REORTHONORMALISE_AT * u) & near
        Y = torch.where(repair[..., None, None], polar, Y)
    else:
        raise ValueError(f"unknown retraction {method!r}; choose one of {sorted(METHODS)}")
    ok = ok & torch.isfinite(Y).flatten(-2).all(dim=-1)
    return torch.where(ok[..., None, None], Y, torch.nan), ok


def _orthogonality_error_tall(W: Tensor) -> Tensor:
    eye = torch.eye(W.shape[-1], dtype=W.dtype, device=W.device)
    return torch.linalg.matrix_norm(W.mT @ W - eye)


def refuse(name: str, ok: Tensor, what: str) -> None:
    """Raise ``ValueError`` if some frame was refused (this synchronises with the host)."""
    if not bool(ok.all()):
        bad = [tuple(i) for i in (~ok).nonzero().tolist()]
        raise ValueError(f"{name}: {what} (frames at batch index {bad}); use a smaller step, or "
                         "map the matrix to the manifold with stiefel_mini.geometry.project")

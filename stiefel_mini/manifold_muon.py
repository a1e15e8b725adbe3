r"""Manifold Muon: the steepest tangent step under the spectral norm on the Stiefel manifold.

:func:`manifold_muon_update` is the frame rule of :class:`~stiefel_mini.muon.StiefelMuon`, a pure
batched function: it solves for each frame the problem Muon solves for a matrix, with the step kept
in the frame's tangent space. :func:`polar_gram` is the retraction it is paired with.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

__all__ = ["ManifoldMuonStep", "manifold_muon_update", "polar_gram"]

# Tikhonov term of the Gram matrix, relative to the tangent gradient's mean squared singular value:
# it gives a rank-deficient gradient unit singular values in its null directions, which the
# multiplier can then make tangent (msign alone leaves them 0, and no multiplier then makes the
# step tangent); it moves <G, A> by about 1e-6 of its value (measured on random frames).
RIDGE = 1e-6


class ManifoldMuonStep(NamedTuple):
    """What :func:`manifold_muon_update` returns: the step ``A`` ``(..., r, c)``, the multiplier
    ``Sigma`` ``(..., p, p)`` (float64, to warm-start the next call) and the iterations it took."""

    step: Tensor
    multiplier: Tensor
    iterations: int


def _inv_sqrt(K: Tensor, rel: float) -> tuple[Tensor, Tensor, Tensor]:
    """``(Q, q, V)``: ``Q = K^{+1/2}`` (the pseudo-inverse square root of symmetric PSD ``(..., p, p)``
    K, eigenvalues below ``rel`` times the largest treated as 0), its eigenvalues ``q`` and vectors ``V``."""
    e, V = torch.linalg.eigh(K)
    keep = e > rel * e.amax(dim=-1, keepdim=True).clamp_min(0.0)
    q = torch.where(keep, e.clamp_min(torch.finfo(e.dtype).tiny).rsqrt(), 0.0)
    return (V * q.unsqueeze(-2)) @ V.mT, q, V


def manifold_muon_update(
    W: Tensor,
    G: Tensor,
    lr: float,
    *,
    multiplier: Tensor | None = None,
    tol: float = 1e-3,
    max_iter: int = 20,
) -> ManifoldMuonStep:
    r"""The tangent step of spectral norm ``lr`` that decreases ``<G, A>`` the most, per frame.

    For a frame ``W`` (tall, ``n x p``, ``W^T W = I``) and a gradient (or momentum) ``G``:

    .. math::
        A^\star &= \arg\min_A \ \langle G, A \rangle \quad \text{s.t.} \quad
            \lVert A \rVert_2 \le \eta, \quad W^\top A + A^\top W = 0 \\
        A^\star &= -\eta\, \operatorname{msign}(G + 2 W \Lambda^\star), \qquad
            \operatorname{msign}(X) = X (X^\top X)^{-1/2} \\
        \Lambda^\star &: \ \operatorname{sym}\!\big(W^\top \operatorname{msign}(G + 2 W \Lambda^\star)\big) = 0,
            \quad \Lambda^\star = \Lambda^{\star\top}

    with ``eta = lr``. The first line is manifold Muon's problem; for each symmetric multiplier
    ``Lambda`` of the tangent constraint the Lagrangian is minimised by the Muon step of
    ``G + 2 W Lambda`` (second line), and the dual optimum is the ``Lambda`` at which that step is
    tangent (third line). It is found in the frame's ``p x p`` Gram space: with ``s = ||G||_F /
    sqrt(p)``, ``B = W^T G / s``, ``S = skew(B)``, ``D = G^T G / s^2 - B^T B`` and ``Z = S + Sigma``
    (``Sigma = sym(B) + 2 Lambda / s``), ``X^T X = s^2 (Z^T Z + D)`` and ``W^T msign(X) = Z Q`` with
    ``Q = (Z^T Z + D)^{-1/2}``; tangency ``sym(Z Q) = 0`` reads ``Sigma Q + Q Sigma = Q S - S Q``, a
    Lyapunov equation in ``Sigma`` for fixed ``Q``. The iteration solves it with ``Q`` from the last
    ``Sigma`` (in ``Q``'s eigenbasis: ``Sigma~_ij = S~_ij (q_i - q_j) / (q_i + q_j)``), from
    ``Sigma = 0`` (the Muon step of the Riemannian gradient ``G - W sym(W^T G)``) or from
    ``multiplier`` (the previous step's, a warm start), until ``||sym(Z Q)||_F <= tol sqrt(p)``
    for every frame or ``max_iter`` updates. Each iteration is one ``p x p`` eigendecomposition in
    float64; only ``W^T G``, ``G^T G`` and the final ``msign`` touch the ``n x p`` matrices.

    ``D`` carries a ridge ``rho I`` (``rho = 1e-6``): a singular value ``sigma`` of ``X / s`` becomes
    ``lr sigma / sqrt(sigma^2 + rho)`` instead of ``lr``, so ``||A||_2 = lr (1 - 5e-7)`` for a typical
    gradient, and a rank-deficient gradient still has a tangent answer. Once converged
    ``||W^T A + A^T W||_F <= 2 tol sqrt(p) lr``; a zero gradient gives ``A = 0``, a non-finite one NaN. ``p = 1`` (the sphere) reduces to ``A = -lr P_W G /
    ||P_W G||`` and ``n = p`` (the orthogonal group) to ``A = -lr W msign(skew(W^T G))``.

    Args:
        W: frames ``(..., r, c)`` on the manifold (orthonormal columns if ``r >= c``, rows otherwise).
        G: Euclidean gradients shaped as ``W``.
        lr: the spectral norm ``eta`` of the step.
        multiplier: ``(..., p, p)`` float64, the ``multiplier`` of the previous call on these frames.
        tol: the tangency tolerance, relative to ``sqrt(p)`` (``||msign||_F`` at full rank).
        max_iter: the most multiplier updates.

    Returns:
        :class:`ManifoldMuonStep` ``(step, multiplier, iterations)``: ``A`` shaped and oriented as
        ``W`` in W's dtype, ``Sigma`` ``(..., p, p)`` float64, the updates taken.

    Reference: Bernstein (2025), "Modular Manifolds" (Thinking Machines) and the Modula docs,
    "Stiefel manifold" (the dual problem); Su (2025), "Steepest descent on manifolds 3: Muon +
    Stiefel" (the fixed point for the multiplier); Jordan et al. (2024), "Muon".
    """
    if W.shape != G.shape or W.dim() < 2:
        raise ValueError(f"W and G must be frames of one shape (..., r, c); got {tuple(W.shape)} and {tuple(G.shape)}")
    if not (lr >= 0 and math.isfinite(lr)) or tol <= 0 or max_iter < 0:
        raise ValueError(f"need lr >= 0 (finite), tol > 0 and max_iter >= 0; got lr={lr}, tol={tol}, "
                         f"max_iter={max_iter}")
    wide = W.shape[-2] < W.shape[-1]
    if wide:
        W, G = W.mT, G.mT
    store, dtype = W.dtype, torch.promote_types(W.dtype, torch.float32)
    W, G = W.to(dtype), G.to(dtype)
    p = W.shape[-1]
    finite = torch.isfinite(G).flatten(-2).all(dim=-1)[..., None, None]  # (..., 1, 1); eigh refuses NaN
    G = torch.where(finite, G, 0.0)
    B = W.mT @ G  # (..., p, p)
    C = G - W @ B  # (I - W W^T) G, (..., n, p): D from it is PSD even where W^T W = I to rounding only
    C = C.to(torch.float64)
    B, CtC = B.to(torch.float64), C.mT @ C  # C^T C in float64: PSD, its small eigenvalues kept
    # s^2: the mean squared singular value of the Riemannian gradient, (||C||^2 + ||skew(B)||^2) / p.
    s2 = (CtC.diagonal(dim1=-2, dim2=-1).sum(-1) + (0.5 * (B - B.mT)).square().sum((-2, -1))) / p
    s = torch.where(s2 > 0, s2, 1.0).sqrt()[..., None, None]  # (..., 1, 1)
    B = B / s
    D = CtC / s**2 + RIDGE * torch.eye(p, dtype=B.dtype, device=B.device)
    S = 0.5 * (B - B.mT)
    Sigma = torch.zeros_like(S) if multiplier is None else multiplier.to(S)
    if multiplier is not None and multiplier.shape != S.shape:
        raise ValueError(f"multiplier has shape {tuple(multiplier.shape)}; these frames need {tuple(S.shape)}")
    iterations = 0
    while True:
        Z = S + Sigma
        Q, q, V = _inv_sqrt(Z.mT @ Z + D, 0.0)
        T = Z @ Q  # W^T msign(X): tangent when skew
        residual = torch.linalg.matrix_norm(T + T.mT) / (2 * math.sqrt(p))
        if iterations == max_iter or not bool((residual > tol).any()):
            break
        S_eig = V.mT @ S @ V  # (..., p, p), S in Q's eigenbasis
        qi, qj = q.unsqueeze(-1), q.unsqueeze(-2)
        denom = qi + qj
        Sigma = V @ torch.where(denom > 0, S_eig * (qi - qj) / torch.where(denom > 0, denom, 1.0), 0.0) @ V.mT
        iterations += 1
    # msign(X) = X Q / s with X / s = G / s + W (Z - B): two n x p x p products.
    M = (G @ (Q / s).to(dtype)) + W @ ((Z - B) @ Q).to(dtype)
    A = torch.where(finite, -lr * M, torch.nan).to(store)
    return ManifoldMuonStep(A.mT if wide else A, Sigma, iterations)


def polar_gram(P: Tensor) -> Tensor:
    r"""The orthogonal polar factor ``P (P^T P)^{-1/2}`` of full-rank frames, through their Gram matrix.

    ``(P^T P)^{-1/2}`` from a float64 eigendecomposition of the ``p x p`` Gram matrix: for
    ``P = W + A`` with ``A`` tangent, ``P^T P = I + A^T A`` has condition number at most
    ``1 + ||A||_2^2``, so the Gram route loses nothing. The manifold Muon retraction is
    ``W_{t+1} = polar(W_t + A_t)``.

    Shapes: ``(..., r, c)`` -> ``(..., r, c)`` (wide frames: orthonormal rows).
    Reference: Higham (2008), "Functions of Matrices", theorem 8.4.
    """
    wide = P.shape[-2] < P.shape[-1]
    X = P.mT if wide else P
    dtype = torch.promote_types(X.dtype, torch.float32)
    X = X.to(dtype)
    Q, _, _ = _inv_sqrt((X.mT @ X).to(torch.float64), 0.0)
    Y = (X @ Q.to(dtype)).to(P.dtype)
    return Y.mT if wide else Y

"""manifold_muon_update against known answers: the sphere and the orthogonal group in closed form,
a certified solve on small frames, and no feasible direction that descends more."""

import math

import pytest
import torch

from stiefel_mini.manifold_muon import RIDGE, manifold_muon_update, polar_gram


def _frames(b, n, p, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return torch.linalg.qr(torch.randn(b, n, p, generator=g, dtype=dtype))[0]


def _msign(X):
    U, _, Vh = torch.linalg.svd(X, full_matrices=False)
    return U @ Vh


def _tangency(W, A):
    return torch.linalg.matrix_norm(W.mT @ A + A.mT @ W)


def _objective(G, A):
    return (G * A).sum(dim=(-2, -1))


def _reference(W, G, lr, iters=4000):
    """Dual ascent with exact SVD msign (the references' method) run long, and its certificate:
    ``(A feasible, lower bound)``; any feasible A has <G, A> >= the dual value -lr ||G + 2 W Lam||_*."""
    Lam = -0.5 * (W.mT @ G + G.mT @ W) / 2
    scale = torch.linalg.matrix_norm(G, keepdim=True)
    best_dual = torch.full(G.shape[:-2], -math.inf, dtype=G.dtype)
    for k in range(iters):
        X = G + 2 * W @ Lam
        best_dual = torch.maximum(best_dual, -lr * torch.linalg.matrix_norm(X, ord="nuc"))
        M = _msign(X)
        H = W.mT @ M + M.mT @ W
        Lam = Lam - 0.05 * scale * (1 - k / iters) * H
    A = -lr * _msign(G + 2 * W @ Lam)
    A = A - W @ (0.5 * (W.mT @ A + A.mT @ W))  # tangent
    A = lr * A / torch.linalg.matrix_norm(A, ord=2, keepdim=True)  # spectral norm lr
    return A, best_dual


def test_sphere_closed_form():
    W = _frames(6, 9, 1)
    G = torch.randn(6, 9, 1, dtype=torch.float64)
    A, _, _ = manifold_muon_update(W, G, 0.3)
    PG = G - W @ (W.mT @ G)
    torch.testing.assert_close(A, -0.3 * PG / torch.linalg.vector_norm(PG, dim=(-2, -1), keepdim=True),
                               rtol=1e-5, atol=1e-6)


def test_orthogonal_group_closed_form():
    W = _frames(4, 6, 6, seed=1)
    G = torch.randn(4, 6, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    A, _, _ = manifold_muon_update(W, G, 0.2)
    B = W.mT @ G
    S = 0.5 * (B - B.mT)
    # The ridge turns a singular value sigma of S / s into sigma / sqrt(sigma^2 + RIDGE): exactly that,
    # whatever the draw (s^2 = ||S||_F^2 / p, the mean squared singular value).
    Sn = S / (S.square().sum((-2, -1), keepdim=True) / 6).sqrt()
    e, V = torch.linalg.eigh(Sn.mT @ Sn + RIDGE * torch.eye(6, dtype=torch.float64))
    torch.testing.assert_close(A, -0.2 * W @ Sn @ (V * e.rsqrt().unsqueeze(-2)) @ V.mT, rtol=1e-9, atol=1e-9)
    # and the closed form -lr W msign(skew(W^T G)) where no singular value is near the ridge's scale (a
    # random draw can have one: 1 in 4 draws of this shape had one below 0.01 and missed 1e-4)
    assert torch.linalg.svdvals(S).min() > 0.1
    torch.testing.assert_close(A, -0.2 * W @ _msign(S), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n, p", [(7, 3), (10, 4), (12, 2)])
def test_matches_a_certified_solve(n, p):
    W = _frames(3, n, p, seed=n)
    G = torch.randn(3, n, p, dtype=torch.float64, generator=torch.Generator().manual_seed(p))
    A, _, _ = manifold_muon_update(W, G, 0.1, tol=1e-6, max_iter=200)
    A_ref, dual = _reference(W, G, 0.1)
    primal = _objective(G, A_ref)
    assert ((primal - dual) / dual.abs() < 2e-3).all(), "the reference solve is not certified"
    assert (_tangency(W, A) < 1e-5).all()
    torch.testing.assert_close(torch.linalg.matrix_norm(A, ord=2), torch.full((3,), 0.1, dtype=torch.float64),
                               rtol=1e-3, atol=0)
    # Ours is feasible and at least as good as the certified solve, within its gap.
    assert (_objective(G, A) <= primal + 1e-3 * dual.abs()).all()
    assert (_objective(G, A) >= dual - 1e-3 * dual.abs()).all()


def test_no_feasible_direction_descends_more():
    W = _frames(2, 24, 6, seed=3, dtype=torch.float32)
    G = torch.randn(2, 24, 6)
    lr = 0.05
    A, _, _ = manifold_muon_update(W, G, lr)
    ours = _objective(G, A)
    # Muon's step of the Riemannian gradient, made feasible: the heuristic the solve improves on.
    heuristic = _msign(G - W @ (0.5 * (W.mT @ G + G.mT @ W)))
    candidates = [heuristic] + [torch.randn(2, 24, 6, generator=torch.Generator().manual_seed(s)) for s in range(200)]
    for V in candidates:
        V = V - W @ (0.5 * (W.mT @ V + V.mT @ W))
        V = lr * V / torch.linalg.matrix_norm(V, ord=2, keepdim=True)
        assert (ours <= _objective(G, V) + 1e-4 * ours.abs()).all()
    assert (ours < _objective(G, lr * heuristic / torch.linalg.matrix_norm(heuristic, ord=2, keepdim=True))).all()


def test_large_frames_converge_and_are_tangent():
    W = _frames(4, 96, 16, seed=5, dtype=torch.float32)
    G = torch.randn(4, 96, 16) + 3 * W @ torch.randn(4, 16, 16)  # a large normal part
    A, mult, it = manifold_muon_update(W, G, 0.1)
    assert it < 20
    assert (_tangency(W, A) / (0.1 * 4) < 2e-3).all()
    # Warm-started on the same problem it is already converged.
    _, _, again = manifold_muon_update(W, G, 0.1, multiplier=mult)
    assert again == 0


def test_rank_deficient_gradient_still_tangent():
    # Rank-one gradients: the ridge keeps the answer tangent, though a few need more than the default
    # 20 updates to reach the tolerance (here one of the 16).
    W = _frames(16, 40, 8, seed=6)
    g = torch.Generator().manual_seed(9)
    u = torch.randn(16, 40, 1, generator=g, dtype=torch.float64)  # G = u v^T, (16, 40, 8)
    G = u @ torch.randn(16, 1, 8, generator=g, dtype=torch.float64)
    A, _, iterations = manifold_muon_update(W, G, 0.1, max_iter=100)
    assert iterations < 100
    assert (_tangency(W, A) < 0.1 * 8 ** 0.5 * 2e-3).all()
    assert (_objective(G, A) < 0).all()


def test_scale_free_and_zero_and_nonfinite():
    W = _frames(2, 20, 5, seed=7)
    G = torch.randn(2, 20, 5, dtype=torch.float64)
    A1, _, _ = manifold_muon_update(W, G, 0.1)
    A2, _, _ = manifold_muon_update(W, 1e6 * G, 0.1)
    torch.testing.assert_close(A1, A2)
    assert manifold_muon_update(W, torch.zeros_like(G), 0.1).step.abs().max() == 0
    G[0, 0, 0] = float("nan")
    A, _, _ = manifold_muon_update(W, G, 0.1)
    assert A[0].isnan().all() and A[1].isfinite().all()


def test_wide_frames_are_transposed_tall_ones():
    W = _frames(2, 15, 4, seed=8)
    G = torch.randn(2, 15, 4, dtype=torch.float64)
    tall, _, _ = manifold_muon_update(W, G, 0.1)
    wide, _, _ = manifold_muon_update(W.mT, G.mT, 0.1)
    torch.testing.assert_close(wide, tall.mT)


def test_polar_gram_is_the_polar_factor():
    P = torch.randn(3, 12, 4, dtype=torch.float64)
    torch.testing.assert_close(polar_gram(P), _msign(P))
    torch.testing.assert_close(polar_gram(P.mT), _msign(P).mT)


def test_bad_input_raises():
    W = _frames(1, 5, 2)
    with pytest.raises(ValueError, match="one shape"):
        manifold_muon_update(W, torch.zeros(1, 5, 3, dtype=torch.float64), 0.1)
    with pytest.raises(ValueError, match="lr"):
        manifold_muon_update(W, W, -1.0)
    with pytest.raises(ValueError, match="multiplier"):
        manifold_muon_update(W, W, 0.1, multiplier=torch.zeros(1, 3, 3, dtype=torch.float64))

"""Geometry checked against references that share no code or formula with it.

* ``exp_retraction`` for p > 1 against the embedded-metric geodesic integrated from its ODE
  ``Y'' + Y (Y'^T Y') = 0`` (Edelman, Arias & Smith 1998, eq. 2.7) by RK4 in float64; the library
  uses the closed form (their eq. 2.45) with a matrix exponential instead.
* ``random_stiefel`` is Haar: exact moments of the entries, and for n = 3 the exact law of every
  entry of Q W R (uniform on [-1, 1], Archimedes) for fixed rotations Q, R.

The statistical tests use fixed seeds and tolerances of 5 standard errors (or a Kolmogorov-Smirnov
bound at level 1e-6), so they pass for any seed with overwhelming probability and fail for a
sampler that is off by a few per cent.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from np_reference import geodesic, polar, tangent_projection
from stiefel_mini.geometry import exp_retraction, random_stiefel

pytestmark = pytest.mark.usefixtures("one_thread")


# --------------------------------------------------------------------------------------------------
# exponential map


def _tangent(rng, n, p, length):
    W = np.linalg.qr(rng.standard_normal((n, p)))[0]
    V = tangent_projection(W, rng.standard_normal((n, p)))
    return W, V * (length / np.linalg.norm(V))


def test_the_ode_reference_is_the_great_circle_for_p_1():
    """For p = 1 the geodesic is the great circle cos(|v|) w + sin(|v|) v / |v|: the RK4 reference
    itself is right (and conserves W^T W = I) before it judges the library."""
    rng = np.random.default_rng(0)
    for length in (0.3, 2.0):
        w, v = _tangent(rng, 5, 1, length)
        circle = math.cos(length) * w + math.sin(length) * v / length
        Y = geodesic(w, v, substeps=int(1000 * length))
        np.testing.assert_allclose(Y, circle, rtol=0, atol=1e-12)
    W, V = _tangent(rng, 7, 3, 2.0)
    Y = geodesic(W, V, substeps=2000)
    np.testing.assert_allclose(Y.T @ Y, np.eye(3), rtol=0, atol=1e-13)


@pytest.mark.parametrize("n,p", [(5, 2), (7, 3), (12, 4), (4, 4)])
@pytest.mark.parametrize("length", [0.05, 0.5, 2.0])
def test_exp_retraction_follows_the_geodesic_ode(n, p, length):
    """Measured largest difference: 2e-11 (4 x 4, length 0.05): the library's float64
    torch.linalg.matrix_exp is accurate to ~1e-11 rather than to the unit roundoff. A retraction
    that is not the geodesic (polar, second order) is off by more than 0.01 length^3 (measured:
    7e-6 at length 0.05), so the comparison can fail."""
    rng = np.random.default_rng(10 * n + p)
    W, V = _tangent(rng, n, p, length)
    Y = geodesic(W, V, substeps=max(100, int(1000 * length)))
    E = exp_retraction(torch.tensor(W), torch.tensor(V)).numpy()
    np.testing.assert_allclose(E, Y, rtol=0, atol=1e-9)
    assert np.abs(polar(W, V) - Y).max() > 0.01 * length**3


def test_exp_retraction_batched_and_wide_follow_the_geodesic():
    """A batch of tall frames and a wide frame (the transpose of a tall one), frame by frame."""
    rng = np.random.default_rng(1)
    pairs = [_tangent(rng, 6, 3, L) for L in (0.1, 0.7, 1.5)]
    W = torch.tensor(np.stack([w for w, _ in pairs]))  # (3, 6, 3)
    V = torch.tensor(np.stack([v for _, v in pairs]))
    E = exp_retraction(W, V).numpy()
    Ewide = exp_retraction(W.mT, V.mT).numpy()  # (3, 3, 6)
    for b, (w, v) in enumerate(pairs):
        Y = geodesic(w, v, substeps=1500)
        np.testing.assert_allclose(E[b], Y, rtol=0, atol=1e-9)
        np.testing.assert_allclose(Ewide[b].T, Y, rtol=0, atol=1e-9)


# --------------------------------------------------------------------------------------------------
# random_stiefel is Haar


N_SAMPLES = 20_000


def _samples(*shape, seed):
    g = torch.Generator().manual_seed(seed)
    return random_stiefel(N_SAMPLES, *shape, generator=g, dtype=torch.float64).numpy()


def _assert_mean(x, expected, what):
    """The sample mean of x equals ``expected`` within 5 standard errors."""
    se = x.std(axis=0, ddof=1) / math.sqrt(x.shape[0])
    z = np.abs(x.mean(axis=0) - expected) / se
    assert (z < 5).all(), f"{what}: {z.max():.1f} standard errors from {expected}"


@pytest.mark.parametrize("shape", [(6, 3), (3, 6)], ids=["tall", "wide"])
def test_random_stiefel_entry_moments_are_haar(shape):
    """Every column of a Haar frame is uniform on the unit sphere S^{n-1}, and so is every row's
    part of a Haar orthogonal matrix: E[W_ij] = 0, E[W_ij^2] = 1/n, E[W_ij^4] = 3 / (n (n + 2)),
    E[W_i1^2 W_i2^2] = 1 / (n (n + 2)) (same row), E[W_1j W_2j] = 0 (same column)."""
    W = _samples(*shape, seed=0)
    if shape[0] < shape[1]:
        W = W.transpose(0, 2, 1)  # wide: orthonormal rows, compare their transposes
    n = W.shape[1]
    _assert_mean(W, 0.0, "E[W_ij]")
    _assert_mean(W**2, 1 / n, "E[W_ij^2]")
    _assert_mean(W**4, 3 / (n * (n + 2)), "E[W_ij^4]")
    _assert_mean(W[:, :, 0] ** 2 * W[:, :, 1] ** 2, 1 / (n * (n + 2)), "E[W_i1^2 W_i2^2]")
    _assert_mean(W[:, 0, :] * W[:, 1, :], 0.0, "E[W_1j W_2j]")


def _ks_uniform(x):
    """Kolmogorov-Smirnov distance between the sample x and the uniform law on [-1, 1]."""
    x = np.sort(x)
    cdf = (x + 1) / 2
    k = np.arange(1, len(x) + 1) / len(x)
    return max(np.abs(k - cdf).max(), np.abs(k - 1 / len(x) - cdf).max())


def test_random_stiefel_is_invariant_under_fixed_rotations():
    """For n = 3 each entry of a uniform unit vector is uniform on [-1, 1] (Archimedes), so for a
    Haar W in St(3, 2) and fixed orthogonal Q (3 x 3), R (2 x 2) every entry of W and of Q W R is
    uniform on [-1, 1]. Kolmogorov-Smirnov at level 1e-6: distance below sqrt(ln(2e6) / 2) / sqrt(N)
    (0.019 for N = 20,000; a QR without its sign fix gives 0.5)."""
    W = _samples(3, 2, seed=1)
    rng = np.random.default_rng(2)
    Q = np.linalg.qr(rng.standard_normal((3, 3)))[0]
    R = np.linalg.qr(rng.standard_normal((2, 2)))[0]
    bound = math.sqrt(math.log(2e6) / 2) / math.sqrt(N_SAMPLES)
    for name, X in (("W", W), ("Q W R", Q @ W @ R)):
        for i in range(3):
            for j in range(2):
                d = _ks_uniform(X[:, i, j])
                assert d < bound, f"({name})_{i}{j}: KS distance {d:.3f} >= {bound:.3f}"


def test_the_haar_checks_reject_a_biased_sampler():
    """Q factors of Gaussian matrices without the sign fix (LAPACK makes diag(R) of one sign) are
    not Haar; the checks above must say so."""
    X = torch.randn(N_SAMPLES, 3, 2, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    W = torch.linalg.qr(X)[0].numpy()
    assert max(_ks_uniform(W[:, i, j]) for i in range(3) for j in range(2)) > 0.1
    with pytest.raises(AssertionError):
        _assert_mean(W, 0.0, "E[W_ij]")

"""Tests of stiefel_mini._numerics: the checked kernels behind the polar factor and the retractions.

* the binomial series of ``(I + E)^{-1/2}`` is the truncated series and converges at the degree chosen;
* the checked polar factor refuses, as NaN, exactly the frames beyond its bound, and agrees with the SVD;
  a frame whose singular values are clustered (near orthonormal, or a multiple of one) never reaches
  the SVD, which can fail on it (a stored frame on which MKL's ``sgesdd`` does);
* the checked retractions return NaN and ``ok`` False where they refuse, and name the known methods.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from torch.utils._python_dispatch import TorchDispatchMode

from stiefel_mini._numerics import inv_sqrt_series, polar_or_nan, retract_or_nan, series_degree, series_products
from stiefel_mini.geometry import random_stiefel


@pytest.mark.parametrize("degree", range(1, 9))
def testinv_sqrt_series_is_the_truncated_binomial_series(degree):
    """The series evaluation equals sum_{k<=d} binom(-1/2, k) E^k, term by term."""
    g = torch.Generator().manual_seed(degree)
    A = torch.randn(3, 7, 7, generator=g, dtype=torch.float64)
    E = 0.2 * (A + A.mT)
    coeff, ref = 1.0, torch.eye(7, dtype=torch.float64).expand(3, 7, 7).clone()
    for k in range(1, degree + 1):
        coeff *= -(2 * k - 1) / (2 * k)
        ref += coeff * torch.linalg.matrix_power(E, k)
    torch.testing.assert_close(inv_sqrt_series(E, degree), ref, rtol=0, atol=1e-13)


def testinv_sqrt_series_converges_to_the_inverse_square_root():
    """At the degree series_degree picks for a bound, the series is (I + E)^{-1/2} to working precision."""
    g = torch.Generator().manual_seed(0)
    A = torch.randn(4, 6, 6, generator=g, dtype=torch.float64)
    E = (A + A.mT) / torch.linalg.matrix_norm(A + A.mT)[:, None, None] * 0.25  # ||E||_F = 0.25
    ev, V = torch.linalg.eigh(torch.eye(6, dtype=torch.float64) + E)
    exact = V @ torch.diag_embed(ev.rsqrt()) @ V.mT
    assert (inv_sqrt_series(E, series_degree(0.25, torch.float64)) - exact).abs().max() < 1e-14


class _Products(TorchDispatchMode):
    """Counts the matrix products (and the allocations) the code under it dispatches."""

    PRODUCTS = {torch.ops.aten.bmm.default, torch.ops.aten.bmm.out, torch.ops.aten.baddbmm.default,
                torch.ops.aten.baddbmm_.default, torch.ops.aten.mm.default, torch.ops.aten.addmm.default}

    def __init__(self):
        super().__init__()
        self.products, self.allocations = 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.products += func in self.PRODUCTS
        self.allocations += func in (torch.ops.aten.empty_like.default, torch.ops.aten.empty.memory_format)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("degree", range(1, 14))
@pytest.mark.parametrize("shape", [(5, 5), (2, 3, 5, 5)])
def test_inv_sqrt_series_takes_the_paterson_stockmeyer_count_of_products(degree, shape):
    """series_products(d) products, fewer than Horner's d - 1 from degree 4 on (2 at degree 4), for
    unbatched and twice-batched E, the same values as term by term; with work, nothing allocated."""
    g = torch.Generator().manual_seed(degree)
    A = torch.randn(shape, generator=g, dtype=torch.float64)
    E = 0.05 * (A + A.mT)
    with _Products() as counted:
        Z = inv_sqrt_series(E, degree)
    assert counted.products == series_products(degree)
    assert series_products(degree) <= max(degree - 1, 0)
    assert series_products(degree) < degree - 1 or degree < 4
    assert series_products(4) == 2
    ref = torch.eye(5, dtype=torch.float64).expand(shape).clone()
    coeff, power = 1.0, torch.eye(5, dtype=torch.float64).expand(shape)
    for k in range(1, degree + 1):
        coeff *= -(2 * k - 1) / (2 * k)
        power = power @ E
        ref += coeff * power
    torch.testing.assert_close(Z, ref, rtol=0, atol=1e-15)
    # Differentiable without work: the gradient of the sum is the term-by-term series' gradient.
    leaf, leaf_ref = E.clone().requires_grad_(), E.clone().requires_grad_()
    inv_sqrt_series(leaf, degree).sum().backward()
    coeff, power, total = 1.0, torch.eye(5, dtype=torch.float64).expand(shape), 0.0
    for k in range(1, degree + 1):
        coeff *= -(2 * k - 1) / (2 * k)
        power = power @ leaf_ref
        total = total + coeff * power.sum()
    total.backward()
    torch.testing.assert_close(leaf.grad, leaf_ref.grad, rtol=1e-12, atol=1e-14)
    if degree <= 6:  # two partial sums and one power: what StiefelAdam's buckets give it
        work = tuple(torch.empty_like(E) for _ in range(3))
        with _Products() as counted:
            Zw = inv_sqrt_series(E, degree, work)
        assert counted.allocations == 0
        assert any(Zw.data_ptr() == w.data_ptr() for w in work)
        assert torch.equal(Zw, Z)


def test_polar_with_a_bound_refuses_exactly_the_frames_beyond_it():
    g = torch.Generator().manual_seed(1)
    W = random_stiefel(4, 9, 3, generator=g, dtype=torch.float64)
    V = torch.randn(4, 9, 3, generator=g, dtype=torch.float64)
    V = V / torch.linalg.matrix_norm(V)[:, None, None] * torch.tensor([0.01, 0.1, 0.5, 2.0], dtype=torch.float64)[:, None, None]
    M = W + V
    E = M.mT @ M - torch.eye(3, dtype=torch.float64)
    bound = 0.3
    Y, ok = polar_or_nan(M, bound)
    assert torch.equal(ok, torch.linalg.matrix_norm(E) <= bound)
    assert ok[:2].all() and not ok[3]  # the sizes make both outcomes occur
    assert Y[~ok].isnan().all() and not Y[ok].isnan().any()
    U, _, Vh = torch.linalg.svd(M[ok], full_matrices=False)
    torch.testing.assert_close(Y[ok], U @ Vh, rtol=0, atol=1e-13)


def test_polar_without_a_bound_handles_far_frames_and_refuses_rank_deficient_ones():
    g = torch.Generator().manual_seed(2)
    M = torch.randn(3, 8, 4, generator=g, dtype=torch.float64) * 10.0
    M[2, :, 3] = M[2, :, 0]  # rank-deficient
    Y, ok = polar_or_nan(M)
    assert ok.tolist() == [True, True, False]
    U, _, Vh = torch.linalg.svd(M[:2], full_matrices=False)
    torch.testing.assert_close(Y[:2], U @ Vh, rtol=0, atol=1e-12)
    assert Y[2].isnan().all()


CLUSTERED = Path(__file__).parent / "data" / "clustered_frame.npy"
"""``W + S`` of one StiefelAdam step in a 256 x 64 float32 study run (singular values in [1, 1.0017]),
on which MKL's ``sgesdd`` fails to converge at one thread and ``torch.linalg.svd`` raises."""


@pytest.mark.parametrize("c", [1.0, 0.5, 2.0])
def test_polar_without_a_bound_takes_a_clustered_frame_without_the_svd(c):
    """The stored frame (near orthonormal) and 0.5x and 2x it (far from orthonormal, singular values
    as clustered): the series serves all three, to float32 precision of the float64 SVD's answer."""
    M = c * torch.from_numpy(np.load(CLUSTERED))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        Y, ok = polar_or_nan(M)
    finally:
        torch.set_num_threads(threads)
    assert ok.item()
    U, _, Vh = torch.linalg.svd(M.double(), full_matrices=False)
    torch.testing.assert_close(Y.double(), U @ Vh, rtol=0, atol=1e-6)


def test_polar_without_a_bound_takes_a_multiple_of_a_near_frame_by_the_scaled_series():
    """polar(c M) = polar(M): a frame 3x a near-orthonormal one is served by the series on M / c,
    c^2 = tr(M^T M) / p, and agrees with the SVD to float64 precision; a frame the scale does not
    bring within 1/4 of orthonormal (columns of lengths 1 and 3) still agrees with it, by the SVD."""
    g = torch.Generator().manual_seed(4)
    W = random_stiefel(2, 12, 4, generator=g, dtype=torch.float64)
    M = W + 0.01 * torch.randn(2, 12, 4, generator=g, dtype=torch.float64)
    M[0] *= 3.0
    M[1, :, 2:] *= 3.0
    E = M.mT @ M - torch.eye(4, dtype=torch.float64)
    assert (torch.linalg.matrix_norm(E) > 0.25).all()  # neither is near orthonormal unscaled
    Y, ok = polar_or_nan(M)
    assert ok.all()
    U, _, Vh = torch.linalg.svd(M, full_matrices=False)
    torch.testing.assert_close(Y, U @ Vh, rtol=0, atol=1e-13)


@pytest.mark.parametrize("method", ["polar", "qr", "cayley", "exp"])
def test_retract_or_nan_is_nan_where_it_refuses(method):
    g = torch.Generator().manual_seed(3)
    W = random_stiefel(2, 10, 3, generator=g, dtype=torch.float64)
    V = torch.randn(2, 10, 3, generator=g, dtype=torch.float64)
    V = V - W @ (0.5 * (W.mT @ V + V.mT @ W))  # tangent
    V[1] = torch.nan  # a non-finite step is always refused
    Y, ok = retract_or_nan(W, 0.1 * V, method)
    assert ok.tolist() == [True, False]
    assert Y[1].isnan().all()
    eye = torch.eye(3, dtype=torch.float64)
    assert torch.linalg.matrix_norm(Y[0].mT @ Y[0] - eye) < 1e-12


def test_retract_or_nan_names_the_methods_for_an_unknown_one():
    W = random_stiefel(5, 2, generator=torch.Generator().manual_seed(4))
    with pytest.raises(ValueError, match="'cayley', 'exp', 'polar', 'qr'"):
        retract_or_nan(W, torch.zeros_like(W), "cholesky")

"""Tests of stiefel_mini.geometry: tangent projections, retractions, projection onto the manifold.

Frames are drawn by hypothesis over shapes (tall and wide, with 0-2 leading batch dimensions,
p <= 8, n <= 24) and dtypes (float32, float64). Reference quantities are computed here from their
definitions, in float64 and on tall views, rather than through the functions under test.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from stiefel_mini import geometry as geo

DTYPES = (torch.float32, torch.float64)
# Absolute tolerances for quantities of order 1 (entries of frames and of unit-size tangents).
ATOL = {torch.float32: 2e-5, torch.float64: 1e-11}
METHODS = ("polar", "qr", "cayley", "exp")


# --------------------------------------------------------------------------------------------------
# helpers (independent of the code under test)


def tall(X: torch.Tensor, wide: bool) -> torch.Tensor:
    return X.mT if wide else X


def haar(shape, dtype, gen, wide) -> torch.Tensor:
    """A random frame built here from torch.linalg.qr in float64 (not with random_stiefel)."""
    *batch, r, c = shape
    n, p = (c, r) if wide else (r, c)
    X = torch.randn(*batch, n, p, generator=gen, dtype=torch.float64)
    Q, R = torch.linalg.qr(X)
    Q = Q * torch.sign(torch.diagonal(R, dim1=-2, dim2=-1)).unsqueeze(-2)
    return tall(Q, wide).to(dtype).contiguous()


def gram_error(W: torch.Tensor, wide: bool) -> torch.Tensor:
    """max |W^T W - I| (tall view), computed in float64."""
    Wt = tall(W.double(), wide)
    eye = torch.eye(Wt.shape[-1], dtype=torch.float64)
    return (Wt.mT @ Wt - eye).abs().amax(dim=(-2, -1))


def sym_residual(W: torch.Tensor, V: torch.Tensor, wide: bool) -> torch.Tensor:
    """max |sym(W^T V)| per frame (tall views), float64: zero exactly for tangent V."""
    Wt, Vt = tall(W.double(), wide), tall(V.double(), wide)
    A = Wt.mT @ Vt
    return (0.5 * (A + A.mT)).abs().amax(dim=(-2, -1))


def fro(X: torch.Tensor) -> torch.Tensor:
    return torch.linalg.matrix_norm(X.double())


@dataclasses.dataclass
class Case:
    shape: tuple
    dtype: torch.dtype
    wide: bool
    seed: int

    def __post_init__(self):
        self.gen = torch.Generator().manual_seed(self.seed)

    @property
    def n(self) -> int:
        return max(self.shape[-2:])

    @property
    def p(self) -> int:
        return min(self.shape[-2:])

    @property
    def atol(self) -> float:
        return ATOL[self.dtype]

    def frame(self) -> torch.Tensor:
        return haar(self.shape, self.dtype, self.gen, self.wide)

    def randn(self) -> torch.Tensor:
        return torch.randn(self.shape, generator=self.gen, dtype=torch.float64).to(self.dtype)

    def unit_tangent(self, W: torch.Tensor) -> torch.Tensor:
        """A tangent vector at W with Frobenius norm 1 per frame (built here, in float64).

        Needs n >= 2: the tangent space of St(1, 1) = {-1, 1} is {0}."""
        assert self.n >= 2
        Wt = tall(W.double(), self.wide)
        G = tall(torch.randn(self.shape, generator=self.gen, dtype=torch.float64), self.wide)
        A = Wt.mT @ G
        V = G - Wt @ (0.5 * (A + A.mT))
        V = V / torch.linalg.matrix_norm(V, keepdim=True)
        return tall(V, self.wide).to(self.dtype)


@st.composite
def cases(draw, min_n: int = 1, max_n: int = 24, max_p: int = 8, batch: bool | None = None):
    if batch is None:
        lead = draw(st.lists(st.integers(1, 3), min_size=0, max_size=2))
    elif batch:
        lead = draw(st.lists(st.integers(1, 3), min_size=1, max_size=2))
        lead[0] = max(lead[0], 2)
    else:
        lead = []
    p = draw(st.integers(1, max_p))
    n = draw(st.integers(max(p, min_n), max_n))
    wide = n > p and draw(st.booleans())
    dtype = draw(st.sampled_from(DTYPES))
    seed = draw(st.integers(0, 2**31 - 1))
    shape = (*lead, p, n) if wide else (*lead, n, p)
    return Case(tuple(shape), dtype, wide, seed)


def close(a: torch.Tensor, b: torch.Tensor, atol: float) -> None:
    assert a.shape == b.shape, (a.shape, b.shape)
    err = (a.double() - b.double()).abs().max().item() if a.numel() else 0.0
    assert err <= atol, f"max abs error {err:.3e} > {atol:.1e}"


# --------------------------------------------------------------------------------------------------
# tangent space, normal space, gradients


@given(cases())
def test_projection_is_idempotent_and_tangent(case):
    W, G = case.frame(), case.randn()
    V = geo.project_tangent(W, G)
    assert V.shape == G.shape and V.dtype == case.dtype
    close(geo.project_tangent(W, V), V, 4 * case.atol)
    assert sym_residual(W, V, case.wide).max() <= 4 * case.atol
    te = geo.tangent_error(W, V)
    assert te.shape == case.shape[:-2]
    assert te.max() <= 4 * case.atol
    # tangent_error is not trivially zero: W itself is normal, sym(W^T W) = I.
    close(geo.tangent_error(W, W), torch.full(case.shape[:-2], math.sqrt(case.p), dtype=case.dtype), 1e-4)


@given(cases(), st.floats(-10, 10, allow_nan=False))
def test_projection_kills_the_normal_direction(case, lam):
    W = case.frame()
    P = geo.project_tangent(W, lam * W)
    close(P, torch.zeros_like(P), (1 + abs(lam)) * case.atol)


@given(cases(min_n=2))
def test_canonical_gradient_is_tangent_and_represents_the_differential(case):
    W, G = case.frame(), case.randn()
    C = geo.canonical_gradient(W, G)
    assert C.shape == G.shape
    assert sym_residual(W, C, case.wide).max() <= 4 * case.atol
    # Defining property: <grad_c, V>_c = tr(grad_c^T (I - W W^T / 2) V) = tr(G^T V) for tangent V.
    V = case.unit_tangent(W)
    Wt, Ct, Vt, Gt = (tall(X.double(), case.wide) for X in (W, C, V, G))
    lhs = (Ct * Vt).sum((-2, -1)) - 0.5 * ((Wt.mT @ Ct) * (Wt.mT @ Vt)).sum((-2, -1))
    rhs = (Gt * Vt).sum((-2, -1))
    close(lhs, rhs, 10 * case.atol * math.sqrt(case.n * case.p))


@given(cases())
def test_normal_plus_tangent_is_the_gradient(case):
    W, G = case.frame(), case.randn()
    N = geo.normal_component(W, G)
    T = geo.project_tangent(W, G)
    close(N + T, G, 2 * case.atol)
    # N = W S with S symmetric: W^T N is symmetric and N = W (W^T N).
    Wt, Nt = tall(W.double(), case.wide), tall(N.double(), case.wide)
    S = Wt.mT @ Nt
    close(S, S.mT, 10 * case.atol * math.sqrt(case.n))
    close(Wt @ S, Nt, 10 * case.atol * math.sqrt(case.n))
    # and the two parts are orthogonal in the Frobenius inner product
    close((N.double() * T.double()).sum((-2, -1)), torch.zeros(case.shape[:-2], dtype=torch.float64),
          10 * case.atol * case.n)


# --------------------------------------------------------------------------------------------------
# retractions


@pytest.mark.parametrize("method", METHODS)
@given(case=cases())
def test_retraction_of_zero_is_the_identity(method, case):
    W = case.frame()
    R = geo.retract(W, torch.zeros_like(W), method)
    assert R.shape == W.shape and R.dtype == W.dtype
    close(R, W, 4 * case.atol)


@pytest.mark.parametrize("method", METHODS)
@given(case=cases(min_n=2))
def test_retraction_is_first_order(method, case):
    """||R(W, tV) - W - tV|| = C t^2: halving t divides the error by 4 (slope 2 in log-log)."""
    W = case.frame()
    V = case.unit_tangent(W)
    t = 0.1 if case.dtype == torch.float32 else 0.02
    errs = [fro(geo.retract(W, s * V, method).double() - W.double() - s * V.double()) for s in (t, t / 2)]
    ratio = errs[0] / errs[1]
    assert ((ratio > 3.3) & (ratio < 4.7)).all(), f"ratios {ratio.flatten().tolist()}, errors {errs}"
    # the constant is of order ||V||^2 = 1: the error is genuinely O(t^2), not O(t)
    assert (errs[0] < 2 * t**2).all(), errs[0]


@given(case=cases(min_n=2))
def test_polar_retraction_is_second_order(case):
    """||polar(W, tV) - Exp_W(tV)|| = C t^3: halving t divides the difference by 8."""
    W = case.frame()
    V = case.unit_tangent(W)
    t = 0.2 if case.dtype == torch.float32 else 0.04
    diffs = [
        fro(geo.polar_retraction(W, s * V).double() - geo.exp_retraction(W, s * V).double())
        for s in (t, t / 2)
    ]
    ratio = diffs[0] / diffs[1]
    assert ((ratio > 6.5) & (ratio < 9.5)).all(), f"ratios {ratio.flatten().tolist()}, diffs {diffs}"


def test_exp_retraction_follows_a_great_circle_on_the_sphere():
    """St(n, 1) is the unit sphere, where Exp_w(t v) = cos(t) w + sin(t) v for unit tangent v."""
    w = torch.tensor([[1.0], [0.0], [0.0]], dtype=torch.float64)
    v = torch.tensor([[0.0], [0.6], [0.8]], dtype=torch.float64)
    for t in (0.3, 1.0, 2.5):
        close(geo.exp_retraction(w, t * v), math.cos(t) * w + math.sin(t) * v, 1e-12)
    # and polar is the radial projection (w + t v) / sqrt(1 + t^2)
    close(geo.polar_retraction(w, 2.0 * v), (w + 2.0 * v) / math.sqrt(5.0), 1e-12)


@pytest.mark.parametrize("method", METHODS)
@given(case=cases(min_n=2), scale=st.floats(0.0, 3.0))
def test_retractions_land_on_the_manifold(method, case, scale):
    """Orthonormal to working precision: max |R^T R - I| <= 40 eps sqrt(p) (exp: 160 eps sqrt(p)).

    Measured over 300 random float32 cases with steps up to 3: 9e-7 sqrt(p) polar, 5e-7 qr,
    4e-7 cayley, 2.4e-6 exp (eps = 1.2e-7).

    exp in float64 is limited by torch.linalg.matrix_exp, which in torch 2.14.1 (CPU) loses accuracy
    for small arguments: expm([[0, a], [-a, 0]]) is off by 1.3e-11 at a = 0.0277 and 8e-14 at
    a = 0.01 (exact to 1e-16 at a = 0.05 or 1.0), so exp gets 1e-10 there."""
    W = case.frame()
    R = geo.retract(W, scale * case.unit_tangent(W), method)
    eps = torch.finfo(case.dtype).eps
    tol = (160 if method == "exp" else 40) * eps * math.sqrt(case.p)
    if method == "exp" and case.dtype == torch.float64:
        tol = 1e-10
    err = gram_error(R, case.wide).max().item()
    assert err <= tol, f"max |R^T R - I| = {err:.2e} > {tol:.1e}"
    close(geo.orthogonality_error(R), torch.zeros(case.shape[:-2], dtype=case.dtype), 4 * tol * math.sqrt(case.p))


def _indices(lead):
    return [tuple(i) for i in torch.cartesian_prod(*[torch.arange(k) for k in lead]).reshape(-1, len(lead)).tolist()]


@pytest.mark.parametrize("method", METHODS)
@given(case=cases(min_n=2, batch=True))
def test_batched_retraction_equals_looped(method, case):
    W = case.frame()
    V = case.unit_tangent(W)
    got = geo.retract(W, V, method)
    for idx in _indices(case.shape[:-2]):
        close(got[idx], geo.retract(W[idx], V[idx], method), 10 * case.atol)


@given(case=cases(min_n=2, batch=True))
def test_batched_projections_equal_looped(case):
    W, G = case.frame(), case.randn()
    fns = {
        "project_tangent": lambda W, G: geo.project_tangent(W, G),
        "canonical_gradient": lambda W, G: geo.canonical_gradient(W, G),
        "normal_component": lambda W, G: geo.normal_component(W, G),
        "tangent_error": lambda W, G: geo.tangent_error(W, G),
        "orthogonality_error": lambda W, G: geo.orthogonality_error(W + 0.1 * G),
        "project": lambda W, G: geo.project(W + 0.1 * G),
    }
    for name, fn in fns.items():
        got = fn(W, G)
        for idx in _indices(case.shape[:-2]):
            close(got[idx], fn(W[idx], G[idx]), 10 * case.atol)


@given(case=cases(min_n=2), scale=st.floats(0.0, 0.5), tangent=st.booleans())
def test_polar_retraction_is_the_svd_closest_point(case, scale, tangent):
    """polar(W, V) = project(W + V) = U V^T of svd(W + V); here ||V||_F <= 0.5 so W + V has full rank."""
    W = case.frame()
    if tangent:
        V = scale * case.unit_tangent(W)
    else:
        G = case.randn()
        V = scale * G / torch.linalg.matrix_norm(G, keepdim=True)
    R = geo.polar_retraction(W, V)
    close(R, geo.project(W + V), 10 * case.atol)
    U, _, Vh = torch.linalg.svd((W + V).double(), full_matrices=False)
    close(R, U @ Vh, 10 * case.atol)


@given(case=cases(), a=st.floats(1e-2, 1e2))
def test_polar_of_a_positive_multiple_is_the_frame(case, a):
    W = case.frame()
    close(geo.retract(W, (a - 1.0) * W, "polar"), W, 8 * case.atol)
    close(geo.project(a * W), W, 8 * case.atol)


# --------------------------------------------------------------------------------------------------
# larger batched frames against a float64 per-frame loop
#
# torch 2.14.1's CPU build is reported to return wrong results for batched linalg.solve / inv on
# matrices larger than about 160 x 160 with 2 threads. The retractions must keep their dense solves
# small (2p x 2p for Cayley, p x p for polar); this checks a batch of (256, 64) frames, where the
# Cayley system is 128 x 128, and of (256, 128) frames, where it is 256 x 256 and the library must
# solve frame by frame, against a float64 loop over the frames.


@pytest.mark.parametrize("p", [64, 128])
@pytest.mark.parametrize(
    "method,wide",
    [("polar", False), ("cayley", False), ("qr", False), ("exp", False), ("polar", True), ("cayley", True)],
)
def test_large_batched_retraction_matches_float64_loop(method, wide, p, two_threads):
    gen = torch.Generator().manual_seed(1234)
    shape = (8, p, 256) if wide else (8, 256, p)
    W = haar(shape, torch.float32, gen, wide)
    case = Case(shape, torch.float32, wide, 99)
    V = 0.5 * case.unit_tangent(W)  # a step of Frobenius length 0.5 per frame
    R = geo.retract(W, V, method)
    ref = torch.stack([geo.retract(W[i].double(), V[i].double(), method) for i in range(shape[0])])
    err = (R.double() - ref).abs().max().item()
    assert err < 2e-5, f"batched {method} differs from the float64 loop by {err:.3e}"
    assert gram_error(R, wide).max() < 5e-5


# --------------------------------------------------------------------------------------------------
# random_stiefel, project, retract's registry


@given(
    lead=st.lists(st.integers(1, 3), max_size=2),
    r=st.integers(1, 24),
    c=st.integers(1, 24),
    dtype=st.sampled_from(DTYPES),
    seed=st.integers(0, 2**31 - 1),
)
def test_random_stiefel_is_orthonormal_in_the_right_orientation(lead, r, c, dtype, seed):
    W = geo.random_stiefel(*lead, r, c, generator=torch.Generator().manual_seed(seed), dtype=dtype)
    assert W.shape == (*lead, r, c) and W.dtype == dtype
    k = min(r, c)
    # columns orthonormal when r >= c, rows orthonormal otherwise
    gram = W.mT @ W if r >= c else W @ W.mT
    close(gram, torch.eye(k, dtype=dtype).expand(*lead, k, k), 4 * ATOL[dtype] * math.sqrt(max(r, c)))
    assert geo.is_wide(W) == (r < c)
    # reproducible with a generator, and the tuple form of the shape works
    W2 = geo.random_stiefel((*lead, r, c), generator=torch.Generator().manual_seed(seed), dtype=dtype)
    assert torch.equal(W, W2)


def test_random_stiefel_rejects_a_vector_shape():
    with pytest.raises(ValueError):
        geo.random_stiefel(5)


@pytest.mark.parametrize(
    "A",
    [
        torch.zeros(4, 3),
        torch.outer(torch.arange(1.0, 6.0), torch.tensor([1.0, -2.0])),  # rank 1, tall (5, 2)
        torch.outer(torch.tensor([1.0, 2.0]), torch.arange(1.0, 6.0)),  # rank 1, wide (2, 5)
        torch.tensor([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]], dtype=torch.float64),  # equal columns
        torch.stack([torch.eye(4, 2), torch.zeros(4, 2)]),  # batched: one good frame, one zero
    ],
    ids=["zero", "rank1-tall", "rank1-wide", "equal-columns", "batch-one-deficient"],
)
def test_project_raises_on_rank_deficient_input(A):
    with pytest.raises(ValueError, match="full-rank"):
        geo.project(A)


def test_project_rejects_non_finite_input():
    A = torch.eye(4, 2)
    A[1, 1] = torch.nan
    with pytest.raises(ValueError, match="finite"):
        geo.project(A)


@pytest.mark.parametrize("wide", [False, True])
def test_project_of_a_frame_the_svd_fails_on(wide):
    """A near-orthonormal 256 x 64 frame on which MKL's SVD raises at one thread (stored from a
    study run): project returns its polar factor, tall or wide, contiguous as the input."""
    M = torch.from_numpy(np.load(Path(__file__).parent / "data" / "clustered_frame.npy"))
    A = M.mT.contiguous() if wide else M
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        W = geo.project(A)
    finally:
        torch.set_num_threads(threads)
    U, _, Vh = torch.linalg.svd(A.double(), full_matrices=False)
    torch.testing.assert_close(W.double(), U @ Vh, rtol=0, atol=1e-6)
    assert W.is_contiguous()


def test_project_rejects_a_vector():
    with pytest.raises(ValueError):
        geo.project(torch.ones(3))


def test_retract_unknown_method_lists_the_choices():
    W = geo.random_stiefel(5, 2)
    with pytest.raises(ValueError) as info:
        geo.retract(W, torch.zeros_like(W), "cayly")
    msg = str(info.value)
    assert "cayly" in msg
    for name in METHODS:
        assert name in msg
    assert set(geo.RETRACTIONS) == set(METHODS)


def test_is_wide_rejects_vectors():
    with pytest.raises(ValueError):
        geo.is_wide(torch.ones(3))


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("method", ["polar", "qr", "cayley", "exp"])
def test_no_retraction_drifts_off_the_manifold_over_10000_uncapped_float32_steps(method):
    """Steps of Frobenius length 0.1 (an uncapped ``lr = 0.1``) down a quadratic, from 4 small frames.

    Cayley and exp apply an orthogonal map, so their rounding errors add up unless they are
    re-orthonormalised past 64 u (without it, exp leaves the manifold so far within these steps that
    it refuses one); measured at most 3.7e-6 (Cayley, exp), 6e-7 (QR), 2e-7 (polar).
    """
    g = torch.Generator().manual_seed(1)
    W = geo.random_stiefel(4, 5, 2, generator=g)
    A = torch.randn(5, 5, generator=g)
    A = A + A.T
    C = torch.randn(4, 5, 2, generator=g)
    W0, worst = W.clone(), 0.0
    for i in range(10_000):
        xi = geo.project_tangent(W, A @ W + C)  # the Riemannian gradient of tr(W^T A W)/2 + tr(C^T W)
        W = geo.retract(W, xi * (-0.1 / torch.linalg.matrix_norm(xi, keepdim=True)), method)
        if i % 500 == 499:
            worst = max(worst, geo.orthogonality_error(W).max().item())
    assert W.dtype == torch.float32 and worst < 1e-5, worst
    assert torch.linalg.matrix_norm(W - W0).min().item() > 0.5  # the frames really moved

"""Tests of stiefel_mini._frame_kernel: the buffered kernel is the reference rule bit for bit, and the
pieces both are written with have their documented values.

The kernel is what StiefelAdam runs for the default second moment and projector; the reference is
``stiefel_adam_frame_update``. They must agree with ``torch.equal`` (not to a tolerance) on the new
frames and both moments, over dtypes, caps, retractions, shapes, gradient scales, step counts and
non-zero starting moments, with the results landing in the buffers and no input changed.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from stiefel_mini import random_stiefel, stiefel_adam_frame_update
from stiefel_mini._frame_kernel import (
    adam_coefficient,
    cap_factor,
    compute_dtype,
    default_frame_update,
    floor,
    frobenius_sq,
    polar_bound,
    second_moment_sample,
)

pytestmark = pytest.mark.usefixtures("one_thread")

F64 = torch.float64


def _buffers(W: torch.Tensor) -> dict:
    """Buffers as a bucket holds them, filled with garbage so that a value not written shows."""
    dtype = compute_dtype(W.dtype)
    B, n, k = W.shape
    full = lambda *shape, dt=dtype: torch.full(shape, 7.0, dtype=dt)  # noqa: E731
    return {"exp_avg": full(B, n, k), "exp_avg_sq": full(B, 1, 1, dt=F64), "scratch": full(B, n, k),
            "frame": full(B, n, k) if dtype == W.dtype else None,
            "pp": tuple(full(B, k, k) for _ in range(3)), "pp64": full(B, k, k, dt=F64)}


SETTINGS = [
    s for s in itertools.product(
        (torch.float32, F64, torch.bfloat16),  # dtype
        (0.1, None, 0.45, 0.6),  # max_step: binding, none, a bound near the series' edge, beyond it
        ("polar", "qr", "cayley", "exp"),
        ((5, 12, 4), (3, 6, 6), (2, 9, 1)),  # frames (B, n, p): tall, square, a single column
    )
    if s[0] != torch.bfloat16 or s[2] == "polar"  # 16-bit frames: the polar retraction, as in training
]


@pytest.mark.parametrize("dtype, max_step, retraction, shape", SETTINGS,
                         ids=[f"{str(d)[6:]}-cap{c}-{r}-{'x'.join(map(str, s))}" for d, c, r, s in SETTINGS])
def test_kernel_is_the_reference_rule_bit_for_bit(dtype, max_step, retraction, shape):
    g = torch.Generator().manual_seed(SETTINGS.index((dtype, max_step, retraction, shape)))
    compute = compute_dtype(dtype)
    W = random_stiefel(*shape, generator=g, dtype=F64).to(dtype)
    m = 0.1 * torch.randn(shape, generator=g, dtype=F64).to(compute)  # not tangent: the transport matters
    v = torch.rand(shape[0], 1, 1, generator=g, dtype=F64)
    options = dict(lr=0.2, beta1=0.9, beta2=0.99, eps=1e-8, max_step=max_step, retraction=retraction)
    for t in range(1, 5):
        G = (torch.randn(shape, generator=g, dtype=F64) * 10.0 ** (12 * t - 30)).to(dtype)  # 1e-18 .. 1e18
        step = t if t != 3 else torch.tensor([3.0, 7.0, 2.0, 5.0, 4.0][: shape[0]], dtype=F64).view(-1, 1, 1)
        inputs = (W, G, m, v)
        copies = [x.clone() for x in inputs]
        bufs = _buffers(W)
        ref = stiefel_adam_frame_update(W, G, m, v, step, **options)
        new = default_frame_update(W, G, m, v, step, **options, buffers=bufs)
        for a, b in zip(ref, new):
            assert a.dtype == b.dtype and a.shape == b.shape
            assert torch.equal(a, b)
        assert new[1] is bufs["exp_avg"] and new[2] is bufs["exp_avg_sq"]  # written in place
        assert torch.equal(new[3], new[0].isfinite().flatten(1).all(1))  # ok: the retraction took the step
        for x, c in zip(inputs, copies):
            assert torch.equal(x, c)  # neither changes an input
        W, m, v = ref
        assert not W.isnan().any()  # every step was taken: the comparison is not of NaN with NaN


@pytest.mark.parametrize("retraction", ["polar", "qr", "cayley", "exp"])
@pytest.mark.parametrize("max_step", [0.1, None])
def test_kernel_and_reference_refuse_the_same_frames_as_nan(retraction, max_step):
    g = torch.Generator().manual_seed(5)
    W = random_stiefel(4, 10, 4, generator=g)
    W[3] *= 1.5  # moved off the manifold: the capped polar series refuses it
    G = torch.randn(4, 10, 4, generator=g)
    G[1, 2, 3] = float("inf")
    m, v = torch.zeros_like(W), torch.zeros(4, 1, 1, dtype=F64)
    options = dict(lr=0.05, beta1=0.9, beta2=0.999, eps=1e-8, max_step=max_step, retraction=retraction)
    ref = stiefel_adam_frame_update(W, G, m, v, 1, **options)
    new = default_frame_update(W, G, m, v, 1, **options, buffers=_buffers(W))
    assert ref[0][1].isnan().all() and new[0][1].isnan().all()
    assert torch.equal(ref[0][[0, 2]], new[0][[0, 2]])
    refused = retraction == "polar" and max_step is not None  # the others take W[3]'s step and repair it
    assert new[3].tolist() == [True, False, True, not refused]
    assert torch.equal(new[3], new[0].isfinite().flatten(1).all(1))


def test_second_moment_sample_in_each_mode():
    xi = torch.arange(1.0, 7.0).view(1, 3, 2)  # n = 3, p = 2
    sq = xi.double() ** 2
    torch.testing.assert_close(second_moment_sample(xi, "frame"), sq.sum().view(1, 1, 1), rtol=0, atol=0)
    torch.testing.assert_close(second_moment_sample(xi, "column"), 2 * sq.sum(dim=1, keepdim=True), rtol=0, atol=0)
    torch.testing.assert_close(second_moment_sample(xi, "element"), 6 * sq, rtol=0, atol=0)
    assert second_moment_sample(xi, "frame").dtype == F64


@pytest.mark.parametrize("scale", [1e-30, 1e-20, 1.0, 1e20, 1e30])
def test_frobenius_sq_is_exact_at_any_float32_scale(scale):
    G = (torch.randn(4, 7, 3, generator=torch.Generator().manual_seed(1), dtype=F64) * scale).float()
    want = G.double().square().sum(dim=(-2, -1), keepdim=True)
    got = frobenius_sq(G)
    assert got.dtype == F64 and torch.isfinite(got).all() and (got > 0).all()
    torch.testing.assert_close(got, want, rtol=1e-6, atol=0)  # float32 norm, float64 square


def test_frobenius_sq_of_zero_and_non_finite_frames():
    G = torch.ones(4, 3, 2)
    G[0] = 0.0
    G[1, 2, 1] = float("inf")
    G[2, 0, 0] = float("nan")
    got = frobenius_sq(G).view(-1)
    assert got[0] == 0.0 and got[1] == float("inf") and got[2].isnan()
    assert got[3].item() == pytest.approx(6.0, rel=1e-6)  # a float32 norm, squared in float64


def test_adam_coefficient_known_answer_and_tensor_steps():
    # t = 1: -lr / ((1 - beta1) (sqrt(v / (1 - beta2)) + eps)) = -0.1 / (0.1 * sqrt(4000)) with eps = 0
    v = torch.full((2, 1, 1), 4.0, dtype=F64)
    got = adam_coefficient(v, 1, lr=0.1, beta1=0.9, beta2=0.999, eps=0.0)
    torch.testing.assert_close(got, torch.full_like(v, -(4000.0**-0.5)), rtol=1e-14, atol=0)
    # eps adds to the bias-corrected root, and a tensor of step counts gives each frame its own
    steps = torch.tensor([1.0, 10.0], dtype=F64).view(2, 1, 1)
    want = [-0.1 / ((1 - 0.9**t) * ((4.0 / (1 - 0.999**t)) ** 0.5 + 1e-3)) for t in (1, 10)]
    got = adam_coefficient(v, steps, lr=0.1, beta1=0.9, beta2=0.999, eps=1e-3)
    torch.testing.assert_close(got.view(-1), torch.tensor(want, dtype=F64), rtol=1e-14, atol=0)
    assert torch.equal(adam_coefficient(v, 10, lr=0.1, beta1=0.9, beta2=0.999, eps=1e-3)[1], got[1])
    assert v.eq(4.0).all()  # not written in place


def test_cap_factor_floor_and_polar_bound():
    lengths = torch.tensor([0.05, 0.1, 0.4])
    torch.testing.assert_close(cap_factor(lengths, 0.1), torch.tensor([1.0, 1.0, 0.25]))
    assert floor(torch.float32) == 64 * 2.0**-24 and floor(F64) == 64 * 2.0**-53
    assert polar_bound(None, "euclidean", torch.float32, torch.float32) is None
    assert polar_bound(0.1, "euclidean", torch.float32, torch.float32) == pytest.approx(0.03)
    assert polar_bound(0.1, "none", torch.float32, torch.float32) == pytest.approx(0.23)  # 2 delta + delta^2
    assert polar_bound(0.1, "euclidean", torch.float32, torch.bfloat16) == 0.25  # 16-bit frames: widest
    assert polar_bound(0.6, "euclidean", torch.float32, torch.float32) is None  # beyond the series

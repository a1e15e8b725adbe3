"""StiefelAdam's frame rule against an independent float64 NumPy reference, over many steps.

The reference (:class:`ReferenceAdam`) is written here from the formulas of ``StiefelAdam``'s
docstring, one tall frame at a time, with the textbook retractions of ``np_reference`` (SVD polar
factor, sign-fixed QR, dense Cayley solve, RK4 geodesic): projection (``euclidean`` /
``canonical`` / ``none``), transport of the first moment by re-projection, both moments with bias
correction, ``eps``, the trust cap ``max_step`` and the retraction. The optimizer is observed only
through its public API: the parameters and ``state_dict()["state"]``.

Why several steps: at step 1 bias correction makes ``m_hat = xi`` and ``v_hat = sample`` whatever
``beta1``, ``beta2`` and the transport do, so one-step tests cannot see them. The gradients below
come from a fixed Procrustes objective scaled by a schedule that makes the trust cap bind on some
steps and not on others (asserted), and every second-moment mode x projector x retraction that
``StiefelAdam`` accepts is compared.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from np_reference import RETRACTIONS, canonical_gradient, polar, tangent_projection
from stiefel_mini import StiefelAdam
from stiefel_mini.optim import PROJECTORS, SECOND_MOMENTS

pytestmark = pytest.mark.usefixtures("one_thread")

LR, MAX_STEP, BETAS, EPS = 0.2, 0.16, (0.5, 0.95), 1e-2
# Gradient scale per step: a drop makes the Adam direction shorter than 1, a rise (with beta1 <
# beta2) longer, so that the cap 0.8 lr binds on some steps only (measured: lengths 0.56-1.24 lr).
SCALES = (1.0, 1.0, 0.3, 0.3, 3.0, 3.0, 1.0, 1.0)
# Frames of one group: tall, wide (an nn.Linear-like weight), a batch of two, and a second shape.
SHAPES = ((7, 3), (3, 7), (2, 7, 3), (5, 2))


class ReferenceAdam:
    """Riemannian Adam on one tall ``(n, p)`` frame in float64, from StiefelAdam's docstring.

    ``capped`` records, per step, whether the trust cap bound.
    """

    def __init__(self, W, *, lr, betas, eps, max_step, second_moment, projector, retraction):
        n, p = W.shape
        self.W, self.m, self.t = W.copy(), np.zeros((n, p)), 0
        self.v = np.zeros({"frame": (1, 1), "column": (1, p), "element": (n, p)}[second_moment])
        self.lr, (self.beta1, self.beta2), self.eps, self.max_step = lr, betas, eps, max_step
        self.mode, self.projector, self.retract = second_moment, projector, RETRACTIONS[retraction]
        self.capped: list[bool] = []

    def step(self, G: np.ndarray) -> None:
        W, (n, p) = self.W, self.W.shape
        self.t += 1
        if self.projector == "none":  # Adam on the raw gradient; no transport
            xi, m_prev = G, self.m
        else:
            xi = tangent_projection(W, G) if self.projector == "euclidean" else canonical_gradient(W, G)
            m_prev = tangent_projection(W, self.m)  # transport of m from the previous point
        self.m = self.beta1 * m_prev + (1 - self.beta1) * xi
        sample = {
            "frame": np.sum(xi**2).reshape(1, 1),
            "column": p * np.sum(xi**2, axis=0, keepdims=True),
            "element": n * p * xi**2,
        }[self.mode]
        self.v = self.beta2 * self.v + (1 - self.beta2) * sample
        m_hat = self.m / (1 - self.beta1**self.t)
        v_hat = self.v / (1 - self.beta2**self.t)
        D = m_hat / (np.sqrt(v_hat) + self.eps)
        if self.mode != "frame" and self.projector != "none":
            D = tangent_projection(W, D)  # uneven rescaling left the tangent space
        S = -self.lr * D
        length = np.linalg.norm(S)
        self.capped.append(self.max_step is not None and length > self.max_step)
        if self.capped[-1]:
            S = S * (self.max_step / length)
        self.W = self.retract(W, S)


def _problem(seed: int):
    """Start frames (as parameters) and, per tall frame, the Procrustes data (A, B) of
    f(W) = ||A W - B||_F^2 / 2, whose gradient A^T (A W - B) changes from step to step."""
    rng = np.random.default_rng(seed)
    params, data = [], []
    for shape in SHAPES:
        *lead, r, c = shape
        n, p = max(r, c), min(r, c)
        tall = [np.linalg.qr(rng.standard_normal((n, p)))[0] for _ in range(int(np.prod(lead)))]
        data += [(rng.standard_normal((10, n)), rng.standard_normal((10, p))) for _ in tall]
        stacked = np.stack([T if r >= c else T.T for T in tall]).reshape(shape)
        params.append(nn.Parameter(torch.tensor(stacked, dtype=torch.float64)))
    return params, data


def _is_wide(P: torch.Tensor) -> bool:
    return P.shape[-2] < P.shape[-1]


def _tall_views(x: torch.Tensor, wide: bool) -> list[np.ndarray]:
    """A parameter or its state (laid out like a parameter that is ``wide`` or not) as its list of
    tall NumPy matrices: ``(n, p)`` frames, or the ``(1, 1)``, ``(1, p)``, ``(n, p)`` moments."""
    t = x.detach().reshape(-1, *x.shape[-2:])
    return [a.T if wide else a for a in t.numpy()]


def _from_tall(frames: list[np.ndarray], like: torch.Tensor) -> torch.Tensor:
    return torch.tensor(np.stack([f.T if _is_wide(like) else f for f in frames])).reshape(like.shape)


def _grad(A, B, W, scale):
    return scale * A.T @ (A @ W - B)


# Largest difference relative to the largest entry, measured over all steps and frames: 1.1e-14
# with polar, QR, Cayley; 6.6e-10 with exp, because torch.linalg.matrix_exp (inside the library's
# closed form) is accurate to ~1e-11 in float64 (see test_geometry_reference.py).
TOL = {"polar": 1e-12, "qr": 1e-12, "cayley": 1e-12, "exp": 1e-8}

OPTIONS = [
    (mode, projector, retraction)
    for mode in SECOND_MOMENTS
    for projector in PROJECTORS
    for retraction in RETRACTIONS
]


@pytest.mark.parametrize("mode,projector,retraction", OPTIONS, ids=["-".join(o) for o in OPTIONS])
def test_steps_match_the_float64_reference(mode, projector, retraction):
    kw = dict(lr=LR, betas=BETAS, eps=EPS, max_step=MAX_STEP, second_moment=mode, projector=projector,
              retraction=retraction)
    params, data = _problem(seed=0)
    if projector == "none" and retraction == "exp":
        # the exponential map needs a tangent step; the combination is refused, as documented
        with pytest.raises(ValueError, match="projector='none' cannot be combined with retraction='exp'"):
            StiefelAdam(params, stiefel=True, **kw)
        with pytest.raises(ValueError, match="projector='none'"):
            StiefelAdam([{"params": params, "stiefel": True, **kw}])
        return
    opt = StiefelAdam(params, stiefel=True, weight_decay=0.1, **kw)  # decay: a no-op on frames
    refs = [ReferenceAdam(W, **kw) for P in params for W in _tall_views(P, _is_wide(P))]
    for step, scale in enumerate(SCALES, start=1):
        i = 0
        for P in params:
            frames = _tall_views(P, _is_wide(P))
            P.grad = _from_tall([_grad(*data[i + j], W, scale) for j, W in enumerate(frames)], P)
            i += len(frames)
        opt.step()
        for ref, (A, B) in zip(refs, data):
            ref.step(_grad(A, B, ref.W, scale))
        state = opt.state_dict()["state"]
        i = 0
        for k, P in enumerate(params):
            frames = _tall_views(P, _is_wide(P))
            got = {
                "W": frames,
                "exp_avg": _tall_views(state[k]["exp_avg"], _is_wide(P)),
                "exp_avg_sq": _tall_views(state[k]["exp_avg_sq"], _is_wide(P)),
            }
            assert float(state[k]["step"]) == step
            for j in range(len(frames)):
                ref = refs[i + j]
                want = {"W": ref.W, "exp_avg": ref.m, "exp_avg_sq": ref.v}
                for key in want:
                    np.testing.assert_allclose(
                        got[key][j], want[key], rtol=0, atol=TOL[retraction] * np.abs(want[key]).max(),
                        err_msg=f"{key} of frame {i + j} (shape {tuple(P.shape)}) after step {step}",
                    )
            i += len(frames)
    # the run exercised the cap both ways, and the frames went somewhere
    capped = np.array([ref.capped for ref in refs])  # (frames, steps)
    assert capped.any(axis=1).all() and (~capped).any(axis=1).all(), capped
    start = [W for P in _problem(seed=0)[0] for W in _tall_views(P, _is_wide(P))]
    assert min(np.linalg.norm(ref.W - W0) for ref, W0 in zip(refs, start)) > 0.3


# --------------------------------------------------------------------------------------------------
# the trust cap and the step length, observed on the frames themselves


def _skew(A):
    return 0.5 * (A - A.T)


def _polar_step_multiple(W0, W1, D):
    """The scalar a with W1 = polar(W0 - a D), from the polar decomposition W0 - a D = W1 H
    (H symmetric): skew(W1^T W0) = a skew(W1^T D), solved by least squares. Also returns the
    relative residual, which is ~1e-15 only if the step really was a multiple of D."""
    x, y = _skew(W1.T @ D), _skew(W1.T @ W0)
    a = np.sum(x * y) / np.sum(x * x)
    return a, np.linalg.norm(y - a * x) / np.linalg.norm(y)


MODE_PROJECTOR = [(mode, projector) for mode in SECOND_MOMENTS for projector in PROJECTORS]


@pytest.mark.parametrize("mode,projector", MODE_PROJECTOR, ids=["-".join(o) for o in MODE_PROJECTOR])
def test_cap_sets_the_step_length_exactly_when_it_binds(mode, projector):
    """At every step the frame moves by polar(W - a D), D the Adam direction of the docstring (from
    the public state after the step). The step length a ||D||_F is max_step when lr ||D||_F
    exceeds it, and lr ||D||_F (the step unchanged, a = lr) otherwise."""
    params, data = _problem(seed=1)
    P = params[0]  # one tall 7 x 3 frame
    A, B = data[0]
    beta1, beta2 = BETAS
    opt = StiefelAdam([P], lr=LR, betas=BETAS, eps=EPS, max_step=MAX_STEP, stiefel=True,
                      second_moment=mode, projector=projector)
    bound = []
    for t, scale in enumerate(SCALES, start=1):
        W0 = P.detach().numpy().copy()
        P.grad = torch.tensor(_grad(A, B, W0, scale))
        opt.step()
        W1 = P.detach().numpy()
        s = opt.state_dict()["state"][0]
        m, v = s["exp_avg"].numpy(), s["exp_avg_sq"].numpy()
        D = (m / (1 - beta1**t)) / (np.sqrt(v / (1 - beta2**t)) + EPS)
        if mode != "frame" and projector != "none":
            D = tangent_projection(W0, D)
        a, residual = _polar_step_multiple(W0, W1, D)
        assert residual < 1e-10, f"step {t}: the step is not a multiple of the Adam direction"
        uncapped = LR * np.linalg.norm(D)
        bound.append(uncapped > MAX_STEP)
        if bound[-1]:
            assert a * np.linalg.norm(D) == pytest.approx(MAX_STEP, rel=1e-9), f"step {t}"
        else:
            assert a == pytest.approx(LR, rel=1e-9), f"step {t}"
    assert any(bound) and not all(bound), bound


@pytest.mark.parametrize("mode,projector", MODE_PROJECTOR, ids=["-".join(o) for o in MODE_PROJECTOR])
def test_each_frame_moves_about_lr_at_the_first_step(mode, projector):
    """The docstring's promise, per frame, whatever the scale of the loss: the first step (eps = 0,
    no cap) has Frobenius length lr before any tangent re-projection, so each frame moves by at most
    lr: exactly lr (to O(lr^3)) with the per-frame moment and a projector, a little less where the
    column / element direction is re-projected (measured: 0.86-1.0 lr), and only the tangent part of
    the raw gradient's direction with projector="none", whose normal part the retraction removes
    (measured: 0.69-0.96 lr for these Gaussian gradients)."""
    lr = 1e-2
    rng = np.random.default_rng(2)
    W0 = np.stack([np.linalg.qr(rng.standard_normal((9, 4)))[0] for _ in range(16)])  # (16, 9, 4)
    G = rng.standard_normal((16, 9, 4))
    moved = []
    for scale in (1.0, 1e-3, 1e3):
        P = nn.Parameter(torch.tensor(W0))
        P.grad = torch.tensor(scale * G)
        StiefelAdam([P], lr=lr, eps=0.0, max_step=None, stiefel=True, second_moment=mode,
                    projector=projector).step()
        moved.append(np.linalg.norm(P.detach().numpy() - W0, axis=(-2, -1)) / lr)  # (16,)
    np.testing.assert_allclose(moved[1], moved[0], rtol=1e-9)  # scale-free
    np.testing.assert_allclose(moved[2], moved[0], rtol=1e-9)
    assert moved[0].max() <= 1 + 1e-6, moved[0]
    if mode == "frame" and projector != "none":
        np.testing.assert_allclose(moved[0], 1.0, rtol=1e-4)
    assert moved[0].min() >= (0.6 if projector == "none" else 0.8), moved[0]


def test_polar_step_multiple_finds_a_known_step():
    """The helper above recovers a known non-tangent step exactly (so the cap test can fail)."""
    rng = np.random.default_rng(3)
    W0 = np.linalg.qr(rng.standard_normal((7, 3)))[0]
    D = rng.standard_normal((7, 3))
    a, residual = _polar_step_multiple(W0, polar(W0, -0.37 * D), D)
    assert a == pytest.approx(0.37, rel=1e-12) and residual < 1e-12
    _, residual = _polar_step_multiple(W0, polar(W0, -0.37 * rng.standard_normal((7, 3))), D)
    assert residual > 1e-3


def test_the_reference_covers_every_retraction_of_the_library():
    from stiefel_mini import RETRACTIONS as LIBRARY_RETRACTIONS

    assert sorted(RETRACTIONS) == sorted(LIBRARY_RETRACTIONS)

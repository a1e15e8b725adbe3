"""Tests of stiefel_mini.optim.StiefelAdam.

* non-frame groups are torch.optim.AdamW;
* known-answer problems (top-k eigenspace, orthogonal Procrustes) reach their closed-form answers;
* the frames stay on the manifold, the per-frame step has the documented length and symmetry;
* state_dict round trips, closures, mixed precision, batching; every bad input raises.

Gradients are mostly computed in closed form and assigned to ``.grad``, which keeps the many steps
below cheap and makes "the same gradients" exact when two runs are compared.
"""

from __future__ import annotations

import copy
import io
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from stiefel_mini import StiefelAdam, orthogonality_error, project, random_stiefel
from stiefel_mini.optim import PROJECTORS, SECOND_MOMENTS

RETRACTIONS = ("polar", "qr", "cayley", "exp")
F64 = torch.float64


pytestmark = pytest.mark.usefixtures("one_thread")


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def frame(*shape, seed=0, dtype=torch.float32) -> nn.Parameter:
    W = random_stiefel(*shape, generator=gen(seed), dtype=torch.float64)
    return nn.Parameter(W.to(dtype).contiguous())


def tall(W: torch.Tensor) -> torch.Tensor:
    return W.mT if W.shape[-2] < W.shape[-1] else W


def tangent(W: torch.Tensor, G: torch.Tensor) -> torch.Tensor:
    """P_W(G) for a tall frame, written out here."""
    A = W.mT @ G
    return G - W @ (0.5 * (A + A.mT))


# --------------------------------------------------------------------------------------------------
# non-frame groups are AdamW


def _mlp(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))


@pytest.mark.parametrize(
    "kw",
    [
        {},  # both optimizers' defaults (including weight_decay=1e-2)
        dict(lr=3e-3, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1),
        dict(lr=1e-2, betas=(0.0, 0.9), eps=1e-8, weight_decay=0.5, foreach=True),
        dict(lr=5e-4, betas=(0.95, 0.9999), eps=1e-10, weight_decay=0.0, foreach=False),
    ],
    ids=["defaults", "wd0.1", "beta1=0-foreach", "no-wd"],
)
def test_non_frame_groups_match_adamw(kw):
    a, b = _mlp(0), _mlp(0)
    groups = lambda m: [  # noqa: E731
        {"params": [m[0].weight, m[0].bias]},
        {"params": [m[2].weight], "lr": 2e-3, "weight_decay": 0.3},
        {"params": [m[2].bias], "weight_decay": 0.0},
    ]
    W = frame(6, 2, seed=1)  # a frame group alongside must not change the other groups
    opt_a = StiefelAdam(groups(a) + [{"params": [W], "stiefel": True}], **kw)
    opt_b = torch.optim.AdamW(groups(b), **kw)
    g = gen(2)
    for _ in range(100):
        x = torch.randn(16, 5, generator=g)
        opt_a.zero_grad()
        a(x).pow(2).sum().backward()
        W.grad = torch.randn(6, 2, generator=g)
        for pa, pb in zip(a.parameters(), b.parameters()):
            pb.grad = pa.grad.clone()  # the same gradients
        opt_a.step()
        opt_b.step()
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert (pa - pb).abs().max().item() <= 1e-6
        sa, sb = opt_a.state[pa], opt_b.state[pb]
        assert float(sa["step"]) == float(sb["step"]) == 100
        assert (sa["exp_avg"] - sb["exp_avg"]).abs().max().item() <= 1e-6
        assert (sa["exp_avg_sq"] - sb["exp_avg_sq"]).abs().max().item() <= 1e-6
    # and the parameters really moved (the comparison is not vacuous)
    assert (a[0].weight - _mlp(0)[0].weight).abs().max() > 1e-2


# --------------------------------------------------------------------------------------------------
# known-answer problems


def _run(W: nn.Parameter, grad_fn, steps: int, lr: float, **opt_kw) -> torch.Tensor:
    """``steps`` StiefelAdam steps with a cosine learning rate from lr to lr / 1000."""
    opt = StiefelAdam([W], lr=lr, stiefel=True, **opt_kw)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps, eta_min=lr * 1e-3)
    for _ in range(steps):
        W.grad = grad_fn(W.detach())
        opt.step()
        sched.step()
    return W.detach()


@pytest.mark.parametrize("second_moment", SECOND_MOMENTS)
@pytest.mark.parametrize("retraction", RETRACTIONS)
def test_top_k_eigenspace(retraction, second_moment):
    """max tr(W^T A W) over St(10, 3) is attained on the top-3 eigenspace of A (Ky Fan).

    One tall (10, 3) frame and one wide (3, 10) frame, in the same group (hence one batched call).
    """
    n, k = 10, 3
    Q, _ = torch.linalg.qr(torch.randn(n, n, generator=gen(3), dtype=F64))
    spectrum = torch.tensor([10.0, 9.0, 8.0] + [1.0 - 0.1 * i for i in range(n - k)], dtype=F64)
    A = (Q * spectrum) @ Q.T  # gap 7 between the 3rd and 4th eigenvalue
    tall_W, wide_W = frame(n, k, seed=4, dtype=F64), frame(k, n, seed=5, dtype=F64)
    steps, lr = 400, 0.1
    opt = StiefelAdam([tall_W, wide_W], lr=lr, stiefel=True, retraction=retraction, second_moment=second_moment)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps, eta_min=lr * 1e-3)
    for _ in range(steps):
        # gradients of -tr(W^T A W) (tall) and -tr(W A W^T) (wide)
        tall_W.grad = -2 * A @ tall_W.detach()
        wide_W.grad = -2 * wide_W.detach() @ A
        opt.step()
        sched.step()
    evals, evecs = torch.linalg.eigh(A)
    U = evecs[:, -k:]
    for W in (tall_W.detach(), wide_W.detach()):
        Wt = tall(W)
        err = (Wt @ Wt.T - U @ U.T).abs().max().item()
        assert err < 1e-6, f"{tuple(W.shape)}: projector error {err:.2e}"
        assert orthogonality_error(W).item() < 1e-12
        assert torch.trace(Wt.T @ A @ Wt).item() == pytest.approx(evals[-k:].sum().item(), abs=1e-9)


@pytest.mark.parametrize("second_moment", SECOND_MOMENTS)
def test_top_k_eigenspace_in_float32(second_moment):
    """The same problem in float32 with a shifted A (gradient mostly normal to the manifold, the
    hard case for the second moment's ||G||^2 - ||sym(W^T G)||^2 shortcut). Measured: projector
    error 1e-7 to 8e-7."""
    n, k = 10, 3
    Q, _ = torch.linalg.qr(torch.randn(n, n, generator=gen(3), dtype=F64))
    spectrum = torch.tensor([10.0, 9.0, 8.0] + [1.0 - 0.1 * i for i in range(n - k)], dtype=F64)
    A = ((Q * spectrum) @ Q.T + 100 * torch.eye(n, dtype=F64)).float()
    W = frame(n, k, seed=4)
    steps, lr = 400, 0.1
    opt = StiefelAdam([W], lr=lr, stiefel=True, second_moment=second_moment)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps, eta_min=lr * 1e-3)
    for _ in range(steps):
        W.grad = -2 * A @ W.detach()
        opt.step()
        sched.step()
    U = Q[:, :k]
    Wd = W.detach().double()
    err = (Wd @ Wd.T - U @ U.T).abs().max().item()
    assert err < 1e-5, f"projector error {err:.2e}"
    assert orthogonality_error(W.detach()).item() < 1e-6


@pytest.mark.parametrize("projector", PROJECTORS)
def test_top_k_eigenspace_with_each_projector(projector):
    """The projector ablations (Euclidean, canonical, raw gradient) reach the same eigenspace."""
    n, k = 9, 2
    Q, _ = torch.linalg.qr(torch.randn(n, n, generator=gen(41), dtype=F64))
    A = (Q * torch.tensor([5.0, 4.0] + [0.5] * (n - k), dtype=F64)) @ Q.T
    W = frame(n, k, seed=42, dtype=F64)
    # Without a projector the normal part of the gradient inflates the second moment and shrinks the
    # tangential step, so the raw-gradient ablation needs more steps (measured: 5e-5 after 400).
    steps, lr = (1000 if projector == "none" else 400), 0.1
    opt = StiefelAdam([W], lr=lr, stiefel=True, projector=projector)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps, eta_min=lr * 1e-3)
    for _ in range(steps):
        W.grad = -2 * A @ W.detach()
        opt.step()
        sched.step()
    U = torch.linalg.eigh(A)[1][:, -k:]
    Wd = W.detach()
    err = (Wd @ Wd.T - U @ U.T).abs().max().item()
    assert err < 1e-6, f"projector error {err:.2e}"
    assert orthogonality_error(Wd).item() < 1e-12


@pytest.mark.parametrize("second_moment", ["frame", "element"])
@pytest.mark.parametrize("retraction", RETRACTIONS)
def test_every_projector_and_retraction_stays_on_the_manifold(retraction, second_moment):
    """projector="none" hands the retraction a step that is not tangent; the docstring promises that
    polar, QR and Cayley pull the result back on the manifold, and that "none" with the exponential
    map (defined for tangent steps only) is refused. The gradients are those of tr(C^T W) plus
    noise, so the frames must also move and lower tr(C^T W) (an optimizer that never moves fails)."""
    g = gen(45)
    C = torch.randn(8, 3, generator=gen(47), dtype=F64)
    for projector in PROJECTORS:
        W = frame(8, 3, seed=46, dtype=F64)
        W0 = W.detach().clone()
        if projector == "none" and retraction == "exp":
            with pytest.raises(ValueError, match="tangent step"):
                StiefelAdam([W], lr=0.05, stiefel=True, projector=projector, retraction=retraction)
            continue
        opt = StiefelAdam(
            [W], lr=0.05, stiefel=True, projector=projector, retraction=retraction, second_moment=second_moment
        )
        for _ in range(20):
            W.grad = C + 0.5 * torch.randn(8, 3, generator=g, dtype=F64)
            opt.step()
        err = orthogonality_error(W.detach()).item()
        assert err < 1e-12, f"projector={projector!r}: ||W^T W - I||_F = {err:.2e} after 20 steps"
        # 20 steps of length about lr = 0.05, mostly downhill (measured: moved 0.65-0.87, fell 2.2-3.2)
        assert torch.linalg.matrix_norm(W.detach() - W0).item() > 0.5, projector
        assert (C * W.detach()).sum().item() < (C * W0).sum().item() - 1.5, projector


@pytest.mark.parametrize("retraction", ["polar", "cayley"])
@pytest.mark.parametrize("case", ["square", "tall"])
def test_orthogonal_procrustes(case, retraction):
    """min ||A W - B||_F over frames W: the polar factor U V^T of A^T B = U S V^T.

    For square W (the orthogonal group) this holds for any A; for tall W it holds when
    A^T A = c I, since ||A W||_F is then constant on the manifold.
    """
    g = gen(5)
    if case == "square":
        n = p = 5
        A = torch.randn(8, n, generator=g, dtype=F64)
    else:
        n, p = 8, 3
        A = 2.0 * random_stiefel(12, n, generator=g, dtype=F64)
    W_true = random_stiefel(n, p, generator=g, dtype=F64)
    B = A @ W_true + 0.3 * torch.randn(A.shape[0], p, generator=g, dtype=F64)
    U, _, Vh = torch.linalg.svd(A.T @ B, full_matrices=False)
    W_star = U @ Vh

    W0 = frame(n, p, seed=6, dtype=F64)
    if n == p and torch.linalg.det(W0) * torch.linalg.det(W_star) < 0:
        # O(n) has two components and a retraction never leaves its own: start in W_star's one.
        with torch.no_grad():
            W0[:, 0].neg_()
    W = _run(W0, lambda W: A.T @ (A @ W - B), 500, 0.1, retraction=retraction)
    err = (W - W_star).abs().max().item()
    assert err < 1e-5, f"distance to the SVD solution {err:.2e}"  # measured: 1.2e-6 square, 4e-12 tall


def test_stays_on_the_manifold_for_10000_float32_steps():
    """||W^T W - I||_F after 10,000 float32 steps on a 6 x 2 frame.

    Measured when written: at most 2.5e-07 over the run (checked every 100 steps), 1.3e-07 at the end;
    float32 eps is 1.2e-07, so the error does not accumulate.
    """
    g = gen(7)
    W = frame(6, 2, seed=8)
    A = torch.randn(6, 6, generator=g)
    A = A + A.T
    C = torch.randn(6, 2, generator=g)
    opt = StiefelAdam([W], lr=1e-2, stiefel=True)
    W0 = W.detach().clone()
    f = lambda W: (0.5 * (W * (A @ W)).sum() + (C * W).sum()).item()  # noqa: E731
    worst = 0.0
    for i in range(10_000):
        W.grad = A @ W.detach() + C  # gradient of tr(W^T A W) / 2 + tr(C^T W)
        opt.step()
        if i % 100 == 99:
            worst = max(worst, orthogonality_error(W.detach()).item())
    assert W.dtype == torch.float32
    # the run really optimizes: the frame moved and f fell (measured: f 0.95 -> -7.43)
    assert torch.linalg.matrix_norm(W.detach() - W0).item() > 0.1
    assert f(W.detach()) < f(W0) - 7.0
    assert worst < 1e-5
    assert orthogonality_error(W.detach()).item() < 1e-5


# --------------------------------------------------------------------------------------------------
# state_dict, closure


def _make_state_dict_setup(dtype):
    frames_a = [frame(6, 3, seed=10, dtype=dtype), frame(2, 7, seed=11, dtype=dtype), frame(3, 5, 2, seed=12, dtype=dtype)]
    frames_b = [frame(5, 2, seed=13, dtype=dtype)]
    lin = nn.Linear(4, 3)
    params = frames_a + frames_b + list(lin.parameters())

    def build(ps):
        fa, fb, rest = ps[:3], ps[3:4], ps[4:]
        return StiefelAdam(
            [
                {"params": fa, "stiefel": True, "second_moment": "column"},
                {"params": fb, "stiefel": True, "second_moment": "element", "retraction": "qr", "max_step": None},
                {"params": rest, "weight_decay": 0.1},
            ],
            lr=0.05,
        )

    return params, build


def _grads(params, steps, seed):
    g = gen(seed)
    return [[torch.randn(p.shape, generator=g).to(p.dtype) for p in params] for _ in range(steps)]


def _steps(opt, params, grads):
    for gs in grads:
        for p, gr in zip(params, gs):
            p.grad = gr.clone()
        opt.step()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_state_dict_round_trip_continues_bit_for_bit(dtype):
    params, build = _make_state_dict_setup(dtype)
    grads = _grads(params, 20, seed=14)

    ref = [nn.Parameter(p.detach().clone()) for p in params]
    ref_opt = build(ref)
    _steps(ref_opt, ref, grads)  # 20 uninterrupted steps

    first = [nn.Parameter(p.detach().clone()) for p in params]
    opt = build(first)
    _steps(opt, first, grads[:10])
    buf = io.BytesIO()
    torch.save({"params": [p.detach() for p in first], "opt": opt.state_dict()}, buf)
    buf.seek(0)
    saved = torch.load(buf)
    resumed = [nn.Parameter(t.clone()) for t in saved["params"]]
    opt2 = build(resumed)
    opt2.load_state_dict(saved["opt"])
    for p in resumed[:4]:  # frame state: m in float32 (or better) whatever the frame's dtype, v in float64
        assert opt2.state[p]["exp_avg"].dtype == torch.promote_types(dtype, torch.float32)
        assert opt2.state[p]["exp_avg_sq"].dtype == torch.float64
    _steps(opt2, resumed, grads[10:])

    for p, q in zip(ref, resumed):
        assert p.dtype == q.dtype
        assert torch.equal(p, q)
    for p, p0 in zip(ref, params):  # and the 20 steps moved every parameter
        assert (p.float() - p0.float()).abs().max() > 0.05
    for p, q in zip(ref, resumed):
        s, t = ref_opt.state[p], opt2.state[q]
        assert s.keys() == t.keys()
        for key in s:
            assert s[key].dtype == t[key].dtype, key
            assert torch.equal(s[key], t[key]), key


def test_closure_gives_the_same_step_and_returns_the_loss():
    A = torch.randn(7, 7, generator=gen(15))
    W1, W2 = frame(7, 3, seed=16), frame(7, 3, seed=16)
    b1, b2 = nn.Parameter(torch.ones(3)), nn.Parameter(torch.ones(3))

    def loss_fn(W, b):
        return ((A @ W) * W).sum() + (W.sum(0) * b).sum() + b.pow(2).sum()

    opt1 = StiefelAdam([{"params": [W1], "stiefel": True}, {"params": [b1]}], lr=0.02)
    opt2 = StiefelAdam([{"params": [W2], "stiefel": True}, {"params": [b2]}], lr=0.02)
    for _ in range(5):

        def closure():
            opt1.zero_grad()
            loss = loss_fn(W1, b1)
            loss.backward()
            return loss

        out = opt1.step(closure)
        opt2.zero_grad()
        expected = loss_fn(W2, b2)
        expected.backward()
        opt2.step()
        assert torch.is_tensor(out) and torch.equal(out.detach(), expected.detach())
    assert torch.equal(W1, W2) and torch.equal(b1, b2)
    assert (W1 - frame(7, 3, seed=16)).abs().max() > 0.02  # five steps of lr 0.02 moved the frame
    assert opt1.step() is None  # no closure: returns None


# --------------------------------------------------------------------------------------------------
# bad input


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(lr=-1e-3), "learning rate"),
        (dict(eps=-1e-8), "epsilon"),
        (dict(weight_decay=-0.1), "weight_decay"),
        (dict(betas=(1.0, 0.999)), "beta"),
        (dict(betas=(-0.1, 0.999)), "beta"),
        (dict(betas=(0.9, 1.0)), "beta"),
        (dict(betas=(0.9, -1e-3)), "beta"),
        (dict(max_step=0.0), "max_step"),
        (dict(max_step=-0.1), "max_step"),
        (dict(max_step=math.inf), "max_step"),
        (dict(max_step=math.nan), "max_step"),
        (dict(max_step="0.1"), "max_step"),
    ],
)
def test_bad_hyperparameters_raise(kw, match):
    W = frame(5, 2)
    with pytest.raises(ValueError, match=match):
        StiefelAdam([W], stiefel=True, **kw)
    # the same value inside a param group is checked too
    with pytest.raises(ValueError, match=match):
        StiefelAdam([{"params": [W], "stiefel": True, **kw}])
    opt = StiefelAdam([{"params": [W], "stiefel": True}])
    with pytest.raises(ValueError, match=match):
        opt.add_param_group({"params": [nn.Parameter(torch.zeros(3))], **kw})


@pytest.mark.parametrize(
    "option,value,choices",
    [
        ("second_moment", "row", SECOND_MOMENTS),
        ("retraction", "svd", RETRACTIONS),
        ("projector", "riemannian", PROJECTORS),
    ],
)
def test_unknown_choice_raises_and_names_the_choices(option, value, choices):
    W = frame(5, 2)
    for make in (
        lambda: StiefelAdam([W], stiefel=True, **{option: value}),
        lambda: StiefelAdam([{"params": [W], "stiefel": True, option: value}]),
    ):
        with pytest.raises(ValueError) as info:
            make()
        msg = str(info.value)
        assert value in msg
        for c in choices:
            assert c in msg, (c, msg)


def test_stiefel_group_with_a_vector_raises():
    with pytest.raises(ValueError, match="2 dimensions"):
        StiefelAdam([{"params": [frame(5, 2), nn.Parameter(torch.ones(4))], "stiefel": True}])
    with pytest.raises(ValueError, match="2 dimensions"):
        StiefelAdam([nn.Parameter(torch.tensor(1.0))], stiefel=True)


def test_stiefel_group_with_a_complex_or_integer_tensor_raises():
    Z = nn.Parameter(torch.eye(4, 2, dtype=torch.complex64))
    with pytest.raises(ValueError, match="complex"):
        StiefelAdam([Z], stiefel=True)
    with pytest.raises(ValueError):
        StiefelAdam([torch.eye(4, 2, dtype=torch.int64)], stiefel=True)


@pytest.mark.parametrize("shape", [(6, 2), (2, 6), (3, 4, 2)], ids=["tall", "wide", "batched"])
def test_frame_off_the_manifold_raises_at_the_first_step(shape):
    W = frame(*shape, seed=17)
    with torch.no_grad():
        W[(-1,) * (W.dim() - 2) + (0, 0)] += 0.05  # one entry of the last frame off by 0.05
    opt = StiefelAdam([W], stiefel=True)
    W.grad = torch.randn(shape, generator=gen(18))
    before = W.detach().clone()
    with pytest.raises(ValueError, match="not on the Stiefel manifold"):
        opt.step()
    assert torch.equal(W, before)
    # a scaled frame is off the manifold too, even though its polar factor is the frame
    W2 = nn.Parameter(1.01 * frame(*shape, seed=19).detach())
    W2.grad = torch.randn(shape, generator=gen(20))
    with pytest.raises(ValueError, match="not on the Stiefel manifold"):
        StiefelAdam([W2], stiefel=True).step()
    # while a projected one is accepted
    W3 = nn.Parameter(project(W2.detach()))
    W3.grad = W2.grad
    StiefelAdam([W3], stiefel=True).step()


def test_sparse_gradient_raises():
    emb = nn.Embedding(6, 2, sparse=True)
    with torch.no_grad():
        emb.weight.copy_(random_stiefel(6, 2, generator=gen(21)))
    emb(torch.tensor([1, 3])).sum().backward()
    assert emb.weight.grad.is_sparse
    with pytest.raises(RuntimeError, match="sparse"):
        StiefelAdam([emb.weight], stiefel=True).step()
    with pytest.raises(RuntimeError, match="sparse"):
        StiefelAdam([emb.weight]).step()


# --------------------------------------------------------------------------------------------------
# the frame rule


def test_weight_decay_is_a_no_op_on_frames():
    results = []
    for wd in (0.0, 0.01, 0.3, 0.9):
        Ws = [frame(7, 3, seed=22), frame(2, 5, seed=23)]
        opt = StiefelAdam(Ws, lr=0.05, weight_decay=wd, stiefel=True)
        _steps(opt, Ws, _grads(Ws, 15, seed=24))
        results.append([W.detach().clone() for W in Ws])
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert torch.equal(a, b)
    assert not torch.equal(results[0][0], frame(7, 3, seed=22))  # the frames did move


def _tangent_step(W0: torch.Tensor, W1: torch.Tensor) -> torch.Tensor:
    """The tangent step S with polar(W0 + S) = W1, up to O(||S||^3): P_{W0}(W1 - W0).

    polar(W0 + S) = W0 + S - W0 S^T S / 2 + O(||S||^3), and the second-order term is normal at W0.
    """
    return tangent(W0, W1 - W0)


@pytest.mark.parametrize("projector", PROJECTORS)
def test_per_frame_first_step_has_length_lr_and_is_scale_free(projector):
    """First Adam step, per-frame second moment: m_hat / sqrt(v_hat) = xi / ||xi||_F exactly, so in
    float64 the step is -lr xi / ||xi||_F to float64 accuracy (up to the O(lr^3) of the polar map),
    with xi = P_W(G) (euclidean), G - W G^T W (canonical) or G (none; then only its tangent part
    survives the retraction to first order)."""
    W0 = random_stiefel(9, 4, generator=gen(25), dtype=F64)
    G = torch.randn(9, 4, generator=gen(26), dtype=F64)
    xi = {"euclidean": tangent(W0, G), "canonical": G - W0 @ G.T @ W0, "none": G}[projector]
    lr = 1e-5
    expected = tangent(W0, -lr * xi / torch.linalg.matrix_norm(xi))
    for scale in (1.0, 1e-3, 1e3):
        W = nn.Parameter(W0.clone())
        W.grad = scale * G
        StiefelAdam([W], lr=lr, eps=0.0, stiefel=True, max_step=0.1, projector=projector).step()
        S = _tangent_step(W0, W.detach())
        if projector != "none":
            assert torch.linalg.matrix_norm(S).item() == pytest.approx(lr, rel=1e-9)
        # (for "none" the normal part of the step meets the tangent part at second order: O(lr^2))
        torch.testing.assert_close(S, expected, rtol=0, atol=1e-14 if projector != "none" else 1e-9)


@given(
    lead=st.lists(st.integers(1, 3), max_size=2),
    p=st.integers(1, 6),
    extra=st.integers(0, 10),
    wide=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
def test_first_step_per_frame_for_any_shape(lead, p, extra, wide, seed):
    """Every frame of a batched, tall or wide parameter takes its own first step -lr xi / ||xi||_F."""
    n = p + extra + 1
    shape = (*lead, p, n) if wide else (*lead, n, p)
    W0 = random_stiefel(*shape, generator=gen(seed), dtype=F64)
    G = torch.randn(shape, generator=gen(seed + 1), dtype=F64)
    lr = 1e-5
    W = nn.Parameter(W0.clone())
    W.grad = G.clone()
    StiefelAdam([W], lr=lr, eps=0.0, stiefel=True).step()
    W0t, W1t, Gt = (X.mT if wide else X for X in (W0, W.detach(), G))
    xi = tangent(W0t, Gt)
    expected = -lr * xi / torch.linalg.matrix_norm(xi, keepdim=True)
    torch.testing.assert_close(_tangent_step(W0t, W1t), expected, rtol=0, atol=1e-14)


@pytest.mark.parametrize("second_moment", ["column", "element"])
def test_column_and_element_first_step(second_moment):
    """First step of the ablations: m_hat / sqrt(v_hat) is xi_j / (sqrt(p) ||xi_j||) per column, or
    sign(xi) / sqrt(n p) per element, then projected back on the tangent space."""
    n, p = 9, 4
    W0 = random_stiefel(n, p, generator=gen(43), dtype=F64)
    G = torch.randn(n, p, generator=gen(44), dtype=F64)
    xi = tangent(W0, G)
    if second_moment == "column":
        D = xi / (math.sqrt(p) * xi.norm(dim=0, keepdim=True))
    else:
        D = torch.sign(xi) / math.sqrt(n * p)
    lr = 1e-5
    W = nn.Parameter(W0.clone())
    W.grad = G.clone()
    StiefelAdam([W], lr=lr, eps=0.0, stiefel=True, second_moment=second_moment).step()
    torch.testing.assert_close(_tangent_step(W0, W.detach()), -lr * tangent(W0, D), rtol=0, atol=1e-14)


def test_trust_cap_clamps_the_step_to_max_step():
    W0 = random_stiefel(9, 4, generator=gen(27), dtype=F64)
    G = torch.randn(9, 4, generator=gen(28), dtype=F64)
    lengths = {}
    for max_step in (0.01, None):
        W = nn.Parameter(W0.clone())
        W.grad = G.clone()
        StiefelAdam([W], lr=0.5, stiefel=True, max_step=max_step).step()
        lengths[max_step] = torch.linalg.matrix_norm(_tangent_step(W0, W.detach())).item()
    assert lengths[0.01] == pytest.approx(0.01, rel=1e-3)
    assert lengths[None] > 0.3  # uncapped: a step of Frobenius length 0.5, shrunk only at third order


def _rotation_run(W0, A, B, C, second_moment, steps=25):
    """StiefelAdam on f(W) = tr(W^T A W B) + tr(C^T W) from W0 (float64)."""
    W = nn.Parameter(W0.clone())
    opt = StiefelAdam([W], lr=0.05, stiefel=True, second_moment=second_moment)
    for _ in range(steps):
        Wd = W.detach()
        W.grad = A @ Wd @ B + A.T @ Wd @ B.T + C
        opt.step()
    return W.detach()


@pytest.mark.parametrize("second_moment", SECOND_MOMENTS)
def test_rotation_equivariance(second_moment):
    """Optimizing Q W R with the loss rotated to match gives Q W_t R exactly when the rule is
    equivariant: left rotations Q in O(n) (of the embedding space) leave "frame" and "column"
    equivariant (column norms are invariant under Q); right rotations R in O(p) only "frame";
    "element" is neither."""
    n, p = 7, 3
    g = gen(29)
    W0 = random_stiefel(n, p, generator=g, dtype=F64)
    A = torch.randn(n, n, generator=g, dtype=F64)
    B = torch.randn(p, p, generator=g, dtype=F64)
    C = torch.randn(n, p, generator=g, dtype=F64)
    Q = project(torch.randn(n, n, generator=g, dtype=F64))
    R = project(torch.randn(p, p, generator=g, dtype=F64))
    W_t = _rotation_run(W0, A, B, C, second_moment)
    # f'(W') = f(Q^T W') has A' = Q A Q^T, C' = Q C
    left = _rotation_run(Q @ W0, Q @ A @ Q.T, B, Q @ C, second_moment)
    # f'(W') = f(W' R^T) has B' = R^T B R, C' = C R
    right = _rotation_run(W0 @ R, A, R.T @ B @ R, C @ R, second_moment)
    assert (W_t - W0).abs().max() > 0.1  # 25 steps of lr 0.05 moved the frame
    left_err = (left - Q @ W_t).abs().max().item()
    right_err = (right - W_t @ R).abs().max().item()
    if second_moment in ("frame", "column"):
        assert left_err < 1e-12
    else:
        assert left_err > 1e-3
    if second_moment == "frame":
        assert right_err < 1e-12
    else:
        assert right_err > 1e-3


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
def test_half_precision_frames_are_updated_in_float32(dtype):
    shapes = [(16, 4), (3, 12), (2, 8, 3)]
    low = [frame(*s, seed=30 + i, dtype=dtype) for i, s in enumerate(shapes)]
    # float32 emulation: same start, same gradients, rounded to the low precision after each step
    emu = [nn.Parameter(p.detach().float()) for p in low]
    opt_low = StiefelAdam(low, lr=0.05, stiefel=True, second_moment="column")
    opt_emu = StiefelAdam(emu, lr=0.05, stiefel=True, second_moment="column")
    # The emulation's frames are rounded, hence off the manifold by more than the float32 check at
    # the first step allows; give it the initial state directly (zeros, as the optimizer would).
    for q in emu:
        v_shape = (*q.shape[:-2], 1, q.shape[-1]) if q.shape[-2] >= q.shape[-1] else (*q.shape[:-2], q.shape[-2], 1)
        opt_emu.state[q] = {
            "step": torch.tensor(0.0),
            "exp_avg": torch.zeros_like(q),
            "exp_avg_sq": torch.zeros(v_shape, dtype=F64),
        }
    g = gen(33)
    for _ in range(30):
        for p, q in zip(low, emu):
            gr = torch.randn(p.shape, generator=g).to(dtype)
            p.grad, q.grad = gr, gr.float()
        opt_low.step()
        opt_emu.step()
        with torch.no_grad():
            for q in emu:
                q.copy_(q.to(dtype).float())
    for i, (p, q) in enumerate(zip(low, emu)):
        assert p.dtype == dtype
        assert torch.equal(p.float(), q)
        moved = torch.linalg.matrix_norm(p.float() - frame(*shapes[i], seed=30 + i, dtype=dtype).float())
        assert moved.min() > 0.1, moved  # 30 steps of lr 0.05 along random gradients
        state = opt_low.state[p]
        assert state["exp_avg"].dtype == torch.float32 and state["exp_avg_sq"].dtype == F64
        assert torch.equal(state["exp_avg"], opt_emu.state[q]["exp_avg"])
        # on the manifold to the precision of the storage format (unit roundoff 2^-8 or 2^-11)
        unit = torch.finfo(dtype).eps / 2
        assert orthogonality_error(p.detach().float()).max().item() < 4 * unit * math.sqrt(max(p.shape[-2:]))


def test_batched_frame_parameter_equals_separate_parameters():
    """One (n_heads, n, p) parameter, a wide frame and a tall frame in one group, against one
    optimizer per frame (and the wide frame against its transpose)."""
    heads = frame(3, 8, 2, seed=34, dtype=F64)
    wide = frame(2, 8, seed=35, dtype=F64)
    tall_ = frame(8, 2, seed=36, dtype=F64)
    kw = dict(lr=0.05, stiefel=True, second_moment="column")
    opt = StiefelAdam([heads, wide, tall_], **kw)
    sep = [nn.Parameter(heads[h].detach().clone()) for h in range(3)]
    sep_opts = [StiefelAdam([p], **kw) for p in sep]
    wide_t = nn.Parameter(wide.detach().mT.clone())  # the wide frame, optimized as a tall one
    opt_wt = StiefelAdam([wide_t], **kw)
    g = gen(37)
    for _ in range(20):
        Gh = torch.randn(3, 8, 2, generator=g, dtype=F64)
        Gw = torch.randn(2, 8, generator=g, dtype=F64)
        heads.grad, wide.grad, tall_.grad = Gh, Gw, torch.randn(8, 2, generator=g, dtype=F64)
        opt.step()
        for h in range(3):
            sep[h].grad = Gh[h].clone()
            sep_opts[h].step()
        wide_t.grad = Gw.mT.clone()
        opt_wt.step()
    for h in range(3):
        torch.testing.assert_close(heads[h].detach(), sep[h].detach(), rtol=0, atol=1e-13)
        torch.testing.assert_close(opt.state[heads]["exp_avg_sq"][h], sep_opts[h].state[sep[h]]["exp_avg_sq"], rtol=0, atol=1e-13)
    torch.testing.assert_close(wide.detach(), wide_t.detach().mT, rtol=0, atol=1e-13)
    assert torch.linalg.matrix_norm(heads - frame(3, 8, 2, seed=34, dtype=F64)).min() > 0.1  # all moved
    # state layout follows the parameter: column second moment is (1, p) tall, (p, 1) wide
    assert opt.state[heads]["exp_avg_sq"].shape == (3, 1, 2)
    assert opt.state[wide]["exp_avg_sq"].shape == (2, 1)
    assert opt.state[tall_]["exp_avg_sq"].shape == (1, 2)
    assert opt.state[heads]["exp_avg"].shape == heads.shape


def test_parameters_without_gradients_are_left_alone():
    W, U = frame(6, 2, seed=38), frame(6, 2, seed=39)
    before = U.detach().clone()
    opt = StiefelAdam([W, U], stiefel=True)
    W.grad = torch.randn(6, 2, generator=gen(40))
    opt.step()
    assert torch.equal(U, before) and len(opt.state[U]) == 0
    assert not torch.equal(W, frame(6, 2, seed=38))


# --------------------------------------------------------------------------------------------------
# the frame rule as one pure function; param-group keys


@pytest.mark.parametrize("second_moment", SECOND_MOMENTS)
@pytest.mark.parametrize("projector", PROJECTORS)
def test_pure_frame_update_is_the_optimizer_step_and_changes_no_input(second_moment, projector):
    from stiefel_mini import stiefel_adam_frame_update

    retraction = "polar" if projector == "none" else "exp"
    W = frame(3, 12, 4, seed=1, dtype=F64)
    opt = StiefelAdam([W], stiefel=True, lr=0.05, second_moment=second_moment, projector=projector,
                      retraction=retraction)
    Wf = W.detach().clone()
    m = torch.zeros_like(Wf)
    v = torch.zeros({"frame": (3, 1, 1), "column": (3, 1, 4), "element": (3, 12, 4)}[second_moment], dtype=F64)
    for t in range(1, 4):
        G = torch.randn(3, 12, 4, generator=gen(10 + t), dtype=F64)
        W.grad = G.clone()
        opt.step()
        inputs = [Wf, G, m, v]
        copies = [x.clone() for x in inputs]
        Wf, m, v = stiefel_adam_frame_update(
            Wf, G, m, v, t, lr=0.05, second_moment=second_moment, projector=projector,
            retraction=retraction,
        )
        for x, c in zip(inputs, copies):
            assert torch.equal(x, c)  # pure: no argument is changed
        torch.testing.assert_close(Wf, W.detach(), rtol=0, atol=1e-12)
        torch.testing.assert_close(m, opt.state[W]["exp_avg"], rtol=0, atol=1e-12)
        torch.testing.assert_close(v, opt.state[W]["exp_avg_sq"], rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("max_step", [0.1, None])
def test_default_rule_with_the_optimizers_buffers_is_the_pure_function_bit_for_bit(dtype, max_step):
    # StiefelAdam writes every intermediate of the default rule into persistent buffers (moments,
    # scratch, new frames, the p x p work); the result must be the unbuffered function's, exactly.
    from stiefel_mini import stiefel_adam_frame_update

    W = frame(6, 40, 8, seed=3, dtype=dtype)
    opt = StiefelAdam([W], stiefel=True, lr=0.3, max_step=max_step)
    Wf = W.detach().clone()
    m, v = torch.zeros_like(Wf), torch.zeros(6, 1, 1, dtype=F64)
    for t in range(1, 6):
        G = torch.randn(6, 40, 8, generator=gen(40 + t), dtype=dtype) * 10.0 ** (3 * t - 9)
        W.grad = G.clone()
        opt.step()
        Wf, m, v = stiefel_adam_frame_update(Wf, G, m, v, t, lr=0.3, max_step=max_step)
        assert torch.equal(Wf, W.detach())
        assert torch.equal(m, opt.state[W]["exp_avg"]) and torch.equal(v, opt.state[W]["exp_avg_sq"])


@pytest.mark.parametrize("typo", ["max_stpe", "weight_decy", "stifel"])
def test_unknown_param_group_key_raises_and_lists_the_known_keys(typo):
    W = frame(5, 2)
    with pytest.raises(ValueError, match=typo) as info:
        StiefelAdam([{"params": [W], "stiefel": True, typo: 0.1}])
    assert "max_step" in str(info.value) and "retraction" in str(info.value)
    opt = StiefelAdam([{"params": [W], "stiefel": True}])
    with pytest.raises(ValueError, match=typo):
        opt.add_param_group({"params": [nn.Parameter(torch.zeros(3))], typo: 1})
    assert len(opt.param_groups) == 1
    # what LR schedulers and torch add to groups is accepted
    StiefelAdam([{"params": [frame(5, 2)], "stiefel": True, "initial_lr": 0.1}])


def test_rejected_param_group_is_not_added():
    W = frame(5, 2)
    opt = StiefelAdam([{"params": [W], "stiefel": True}])
    for bad in (
        {"params": [nn.Parameter(torch.zeros(3))], "lr": -1.0},
        {"params": [nn.Parameter(torch.zeros(3))], "stiefel": True},
        {"params": (p for p in [frame(4, 2, seed=3)]), "max_step": 0.0},
    ):
        with pytest.raises(ValueError):
            opt.add_param_group(bad)
        assert len(opt.param_groups) == 1
    opt.add_param_group({"params": (p for p in [frame(4, 2, seed=3)]), "stiefel": True})
    assert len(opt.param_groups[1]["params"]) == 1


def test_state_edits_reloads_and_changing_buckets_reach_the_step():
    """The frames' state lives in persistent batches (views): edits of a state tensor, a reload of
    the state and a change of which frames have gradients must all reach the next step exactly
    as they would for one optimizer per frame."""
    shapes = [(2, 9, 3), (9, 3), (3, 9)]  # a batch of frames, a tall and a wide frame: one bucket

    def setup():
        ps = [nn.Parameter(frame(*s[-2:], seed=30 + i) if len(s) == 2 else
                           torch.stack([frame(9, 3, seed=40 + j) for j in range(2)]))
              for i, s in enumerate(shapes)]
        ps[2] = nn.Parameter(frame(9, 3, seed=32).mT.contiguous())
        return ps

    joint = setup()
    single = setup()
    opt = StiefelAdam(joint, stiefel=True, lr=0.05)
    opts = [StiefelAdam([p], stiefel=True, lr=0.05) for p in single]
    g = gen(33)
    for t in range(8):
        grads = [torch.randn(p.shape, generator=g) for p in joint]
        for i, (p, q, gr) in enumerate(zip(joint, single, grads)):
            skip = t == 3 and i == 1  # frame 1 has no gradient at step 3: the bucket changes
            p.grad = None if skip else gr.clone()
            q.grad = None if skip else gr.clone()
        opt.step()
        for o in opts:
            o.step()
        if t == 4:  # an in-place edit of one frame's state
            opt.state[joint[0]]["exp_avg"].mul_(0.5)
            opts[0].state[single[0]]["exp_avg"].mul_(0.5)
        if t == 2:
            saved = [copy.deepcopy(o.state_dict()) for o in [opt, *opts]]
        if t == 5:  # an earlier state (from step 3) reloaded: into the same optimizer, and into
            opt.load_state_dict(saved[0])  # fresh ones for the reference
            opts = [StiefelAdam([q], stiefel=True, lr=0.05) for q in single]
            for o, sd in zip(opts, saved[1:]):
                o.load_state_dict(sd)
    for p, q, o in zip(joint, single, opts):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-6)
        for key in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(opt.state[p][key], o.state[q][key], rtol=1e-5, atol=1e-7)
        assert opt.state[p]["step"] == 5  # 3 at the saved point, then 2 after the reload
    assert (joint[0] - setup()[0]).abs().max() > 0.05  # and the frames moved

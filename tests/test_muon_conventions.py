"""StiefelMuon under torch's conventions: zero_grad, add_param_group, LR schedulers, and tensors
refused with a clear ValueError when their group is added (not at the first step)."""

import copy

import pytest
import torch
from torch import nn

from stiefel_mini import StiefelMuon, muon_update
from stiefel_mini.geometry import orthogonality_error, random_stiefel
from stiefel_mini.groups import mark_frame
from stiefel_mini.manifold_muon import manifold_muon_update, polar_gram


def _params(seed=0):
    """A frame (2 heads of 10 x 3), a Muon matrix (8 x 6) and a vector, with gradients."""
    g = torch.Generator().manual_seed(seed)
    frame = nn.Parameter(random_stiefel(2, 10, 3, generator=g))
    mark_frame(frame)
    matrix, vector = nn.Parameter(torch.randn(8, 6, generator=g)), nn.Parameter(torch.randn(5, generator=g))
    return frame, matrix, vector


def _set_grads(params, seed):
    g = torch.Generator().manual_seed(seed)
    for p in params:
        p.grad = torch.randn(p.shape, generator=g)


def _spectral_length(before, after):
    return torch.linalg.matrix_norm(after - before, ord=2)


def _frame_step(W, U, lr, multiplier=None):
    """The frame rule's step written out: manifold Muon's tangent step of U, then the polar retraction."""
    return polar_gram(W + manifold_muon_update(W, U, lr, multiplier=multiplier).step)


@pytest.mark.parametrize(
    "group, match",
    [
        ({"params": [nn.Parameter(torch.randn(5))], "role": "muon"}, "role='muon' needs a matrix"),
        ({"params": [nn.Parameter(torch.randn(10, 4))], "heads": 3}, "3 equal blocks"),
        ({"params": [nn.Parameter(torch.randn(2, 6, 4))], "heads": 2}, "2 equal blocks"),
        ({"params": [nn.Parameter(torch.randn(4, 12))], "heads": 2, "projections": 3}, "in_out=False"),
        ({"params": [nn.Parameter(torch.randn(3, 3))], "eps": -1.0}, "eps"),
        ({"params": [nn.Parameter(torch.randn(3, 3))], "frame_lr": "0.1"}, "frame_lr"),
    ],
)
def test_a_tensor_muon_cannot_step_is_refused_when_its_group_is_added(group, match):
    opt = StiefelMuon([nn.Parameter(torch.randn(4, 4))], lr=0.01)
    before = [[id(p) for p in g["params"]] for g in opt.param_groups]
    frame, *_ = _params()
    with pytest.raises(ValueError, match=match):
        opt.add_param_group({**group, "params": [frame, *group["params"]]})
    # Nothing was added, not even the frame's group that a valid tensor in the same call would make.
    assert [[id(p) for p in g["params"]] for g in opt.param_groups] == before
    # the same layout stored (in, out) splits the last dimension: 12 = 3 x 2 x 2 blocks
    StiefelMuon([nn.Parameter(torch.randn(4, 12))], heads=2, projections=3, in_out=True)


def test_zero_grad_none_skips_every_role_and_zero_gradients_coast_on_momentum():
    frame, matrix, vector = _params()
    # float32 Newton-Schulz, as the reference: "auto" is bfloat16 on a CPU with AVX512-BF16
    opt = StiefelMuon([frame, matrix, vector], lr=0.1, frame_lr=0.05, adamw_lr=0.01, momentum=0.9,
                      ns_dtype="float32")
    _set_grads([frame, matrix, vector], seed=1)
    G, Gf = matrix.grad.clone(), frame.grad.clone()
    opt.step()
    opt.zero_grad()  # set_to_none=True, torch's default
    assert all(p.grad is None for p in (frame, matrix, vector))
    snapshot = [p.detach().clone() for p in (frame, matrix, vector)]
    state = copy.deepcopy(opt.state_dict()["state"])
    opt.step()  # no gradient: no parameter and no state changes
    assert all(torch.equal(p.detach(), s) for p, s in zip((frame, matrix, vector), snapshot))
    after = opt.state_dict()["state"]
    assert all(torch.equal(a, b) for k in state for a, b in zip(state[k].values(), after[k].values()))

    _set_grads([frame, matrix, vector], seed=2)
    opt.zero_grad(set_to_none=False)  # zero gradients: Muon's buffer decays and still moves the weight
    assert all(torch.equal(p.grad, torch.zeros_like(p)) for p in (frame, matrix, vector))
    buf = torch.zeros_like(G).lerp(G, 0.1).lerp(torch.zeros_like(G), 0.1)  # after G, then a zero gradient
    expected = matrix.detach() + muon_update(torch.zeros_like(G).lerp(buf, 0.9), 0.1)
    # the frame's direction is a multiple of its first gradient, and the frame rule ignores the scale
    expected_frame = _frame_step(frame.detach(), Gf, 0.05, opt.state[frame]["multiplier"])
    opt.step()
    torch.testing.assert_close(matrix.detach(), expected)
    torch.testing.assert_close(frame.detach(), expected_frame)
    assert not torch.equal(vector.detach(), snapshot[2])  # AdamW's moments keep moving it too, as torch's do
    assert orthogonality_error(frame.detach()).max() < 1e-5


def test_lambda_lr_scales_the_step_each_role_takes():
    frame, matrix, vector = _params()
    # float32 Newton-Schulz, as the reference: "auto" is bfloat16 on a CPU with AVX512-BF16
    opt = StiefelMuon([frame, matrix, vector], lr=0.1, frame_lr=0.04, adamw_lr=0.01, momentum=0.0,
                      ns_dtype="float32")
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 0.5 ** step)
    assert [g["initial_lr"] for g in opt.param_groups] == [0.1]  # one group: its lead role's (Muon's) lr
    for step in range(3):
        _set_grads([frame, matrix, vector], seed=step)
        G = matrix.grad.clone()
        W0, M0 = frame.detach().clone(), matrix.detach().clone()
        opt.step()
        lr = 0.5**step
        # momentum 0: the frame's step has spectral length frame_lr x the schedule, the matrix's is Muon's at lr
        torch.testing.assert_close(_spectral_length(W0, frame.detach()), torch.full((2,), 0.04 * lr), rtol=1e-2, atol=0)
        torch.testing.assert_close(matrix.detach(), M0 + muon_update(G, 0.1 * lr))
        sched.step()
    assert [r["lr"] for r in opt.roles()] == pytest.approx([0.04 / 8, 0.1 / 8, 0.01 / 8])


def test_one_cycle_lr_follows_torchs_schedule_in_every_role():
    frame, matrix, vector = _params()
    opt = StiefelMuon([frame, matrix, vector], lr=0.1, frame_lr=0.04, adamw_lr=0.01)
    # the same schedule on torch's AdamW with the one group given
    ref = torch.optim.AdamW([nn.Parameter(torch.zeros(1))], lr=0.1)
    scheds = [torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.1, total_steps=6) for o in (opt, ref)]
    for step in range(5):
        factor = ref.param_groups[0]["lr"] / 0.1
        # every role moves in proportion: each peaks at its own lr
        assert [r["lr"] for r in opt.roles()] == pytest.approx([0.04 * factor, 0.1 * factor, 0.01 * factor])
        # OneCycleLR cycles beta1 when the defaults have betas (AdamW's and StiefelMuon's do): Muon's
        # momentum stays fixed; pass cycle_momentum=False to leave AdamW's beta1 fixed too
        assert opt.param_groups[0]["betas"][0] == pytest.approx(ref.param_groups[0]["betas"][0])
        assert all(g["momentum"] == 0.95 for g in opt.param_groups)
        _set_grads([frame, matrix, vector], seed=step)
        opt.step()
        ref.step()  # no gradients: it only keeps the scheduler's order check quiet
        for s in scheds:
            s.step()
    assert orthogonality_error(frame.detach()).max() < 1e-5


def test_a_group_added_after_construction_steps_and_round_trips():
    frame, matrix, vector = _params()
    twin = [nn.Parameter(p.detach().clone()) for p in (frame, matrix, vector)]
    mark_frame(twin[0])

    def build(f, m, v):
        opt = StiefelMuon([m], lr=0.05)
        opt.add_param_group({"params": [f, v], "frame_lr": 0.2, "adamw_lr": 0.01})
        return opt

    opt, opt2 = build(frame, matrix, vector), build(*twin)
    assert [(r["group"], r["role"], r["lr"]) for r in opt.roles()] == [(0, "muon", 0.05), (1, "frame", 0.2),
                                                                      (1, "adamw", 0.01)]
    _set_grads([frame, matrix, vector], seed=3)
    expected = _frame_step(frame.detach(), frame.grad, 0.2)
    opt.step()
    torch.testing.assert_close(frame.detach(), expected)  # the added group's frame_lr, not the lr of the first
    for a, b in zip((frame, matrix, vector), twin):
        b.data.copy_(a.detach())
    opt2.load_state_dict(copy.deepcopy(opt.state_dict()))
    assert opt2.state[twin[0]]["multiplier"].dtype == torch.float64
    for o, ps in ((opt, (frame, matrix, vector)), (opt2, twin)):
        _set_grads(ps, seed=4)
        o.step()
    for a, b in zip((frame, matrix, vector), twin):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def _adamw_twin(p: nn.Parameter, **kw) -> tuple[nn.Parameter, torch.optim.AdamW]:
    twin = nn.Parameter(p.detach().clone())
    return twin, torch.optim.AdamW([twin], eps=1e-8, **kw)


def test_a_groups_own_lr_weight_decay_and_betas_win_over_the_role_defaults():
    frame, matrix, vector = _params()
    # float32 Newton-Schulz, as the reference: "auto" is bfloat16 on a CPU with AVX512-BF16
    opt = StiefelMuon([{"params": [vector], "lr": 1e-3, "weight_decay": 0.2, "betas": (0.8, 0.9)},
                       {"params": [frame], "lr": 0.05}, {"params": [matrix]}], lr=0.1, frame_lr=0.01, adamw_lr=3e-4,
                      weight_decay=0.0, momentum=0.0, ns_dtype="float32")
    twin, ref = _adamw_twin(vector, lr=1e-3, weight_decay=0.2, betas=(0.8, 0.9))
    for step in range(3):
        _set_grads([frame, matrix, vector], seed=step)
        twin.grad = vector.grad.clone()
        W0, M0, G = frame.detach().clone(), matrix.detach().clone(), matrix.grad.clone()
        opt.step()
        ref.step()
        torch.testing.assert_close(vector.detach(), twin.detach())  # at the group's lr, decay and betas
        torch.testing.assert_close(_spectral_length(W0, frame.detach()), torch.full((2,), 0.05), rtol=1e-2, atol=0)
        torch.testing.assert_close(matrix.detach(), M0 + muon_update(G, 0.1))  # a group without lr: the role's
    assert [g["lr"] for g in opt.param_groups] == [1e-3, 0.05, 0.1]


def test_a_schedulers_per_group_list_counts_the_groups_given_and_one_lr_moves_every_role_in_proportion():
    frame, matrix, vector = _params()
    opt = StiefelMuon([{"params": [frame]}, {"params": [matrix]}, {"params": [vector]}], lr=0.02, frame_lr=0.03,
                      adamw_lr=1e-3)
    assert len(opt.param_groups) == 3  # as given, not split by role
    torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=[0.03, 0.02, 1e-3], total_steps=4)
    model = StiefelMuon([frame, matrix, vector], lr=0.02, frame_lr=0.03, adamw_lr=1e-3)  # one group, three roles
    sched = torch.optim.lr_scheduler.OneCycleLR(model, max_lr=0.02, total_steps=10, pct_start=0.5)
    for _ in range(4):  # to the peak, at step pct_start * total_steps - 1
        model.step()
        sched.step()
    lrs = {r["role"]: r["lr"] for r in model.roles()}
    assert lrs == pytest.approx({"frame": 0.03, "muon": 0.02, "adamw": 1e-3})  # each role at its own peak


def test_gains_biases_and_scales_are_not_decayed_unless_their_group_asks():
    frame, matrix, vector = _params()
    log_scale = nn.Parameter(torch.zeros(2))
    opt = StiefelMuon([matrix, vector], lr=0.1, weight_decay=0.5, adamw_lr=1e-2)
    opt.add_param_group({"params": [log_scale]})
    asked = nn.Parameter(torch.ones(3))
    opt.add_param_group({"params": [asked], "weight_decay": 0.5})
    for p in (matrix, vector, log_scale, asked):
        p.grad = torch.zeros_like(p)  # AdamW moves a zero-gradient parameter by its decay alone
    before = [p.detach().clone() for p in (vector, log_scale, asked)]
    opt.step()
    assert torch.equal(vector.detach(), before[0]) and torch.equal(log_scale.detach(), before[1])
    torch.testing.assert_close(asked.detach(), before[2] * (1 - 1e-2 * 0.5))
    assert [r["weight_decay"] for r in opt.roles()] == [0.5, 0.0, 0.0, 0.5]


@pytest.mark.parametrize("bad", [dict(lr=float("inf")), dict(lr=float("nan")), dict(frame_lr=float("inf")),
                                 dict(adamw_lr=float("inf")), dict(weight_decay=float("nan")), dict(fused=True),
                                 dict(differentiable=True), dict(maximize="yes"), dict(foreach="no")])
def test_non_finite_lrs_and_unavailable_implementations_raise(bad):
    with pytest.raises(ValueError, match=f"StiefelMuon: {next(iter(bad))}="):
        StiefelMuon([nn.Parameter(torch.randn(3, 3))], **bad)


def test_a_tensor_lr_works_as_the_same_float():
    runs = []
    for lr in (0.1, torch.tensor(0.1)):
        frame, matrix, vector = _params()
        opt = StiefelMuon([frame, matrix, vector], lr=lr, frame_lr=0.05)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 0.5 ** step)
        for step in range(2):
            _set_grads([frame, matrix, vector], seed=step)
            opt.step()
            sched.step()
        runs.append([p.detach().clone() for p in (frame, matrix, vector)])
    for a, b in zip(*runs):
        torch.testing.assert_close(a, b)  # float32's 0.1 is not float64's: equal to rounding


def test_maximize_steps_up_every_role_and_foreach_is_adamws_choice():
    results = []
    for maximize, foreach in ((False, None), (True, True)):
        frame, matrix, vector = _params()
        opt = StiefelMuon([frame, matrix, vector], frame_lr=0.05, maximize=maximize, foreach=foreach)
        for step in range(2):
            _set_grads([frame, matrix, vector], seed=step)
            if maximize:  # maximising f steps as minimising -f
                for p in (frame, matrix, vector):
                    p.grad.neg_()
            opt.step()
        results.append([p.detach().clone() for p in (frame, matrix, vector)])
    for a, b in zip(*results):
        torch.testing.assert_close(a, b)


def test_the_scale_group_trains_its_scales_with_adamw_at_its_own_lr_without_decay():
    scale = nn.Parameter(torch.zeros(4))
    frame, matrix, _ = _params()
    opt = StiefelMuon([{"params": [frame, matrix]}, {"name": "scale", "params": [scale], "lr": 0.3,
                                                     "weight_decay": 0.0}], lr=0.02, adamw_lr=1e-3, weight_decay=0.1)
    twin, ref = _adamw_twin(scale, lr=0.3, weight_decay=0.0, betas=(0.9, 0.95))
    for step in range(3):
        _set_grads([frame, matrix, scale], seed=step)
        twin.grad = scale.grad.clone()
        opt.step()
        ref.step()
    torch.testing.assert_close(scale.detach(), twin.detach())
    row = opt.roles()[-1]
    assert (row["role"], row["kind"], row["lr"], row["weight_decay"]) == ("adamw", "scale", 0.3, 0.0)

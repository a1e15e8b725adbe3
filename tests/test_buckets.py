"""Tests of stiefel_mini._buckets: the tall layout, the state as views of a bucket's batches, and the
one check a step makes (a frame is refused exactly when its new value is not finite)."""

from __future__ import annotations

import pytest
import torch

from stiefel_mini import random_stiefel
from stiefel_mini._buckets import BucketUpdate, bucket_for, from_tall, init_frame_state, to_tall, v_state_shape

pytestmark = pytest.mark.usefixtures("one_thread")


def _frames():
    g = torch.Generator().manual_seed(0)
    tall = torch.nn.Parameter(random_stiefel(2, 7, 3, generator=g))  # two frames
    wide = torch.nn.Parameter(random_stiefel(3, 7, generator=g))  # one wide frame: (3, 7) holds W^T
    for p in (tall, wide):
        p.grad = torch.randn(p.shape, generator=g)
    states = [{}, {}]
    for p, s in zip((tall, wide), states):
        init_frame_state(s, p, "column")
    return [tall, wide], states


@pytest.mark.parametrize("shape", [(7, 3), (3, 7), (2, 4, 7, 3), (2, 3, 7)])
def test_to_tall_and_back(shape):
    t = torch.randn(shape)
    wide = shape[-2] < shape[-1]
    batch = to_tall(t, wide)
    assert batch.shape[-2:] == (7, 3)
    assert torch.equal(from_tall(batch, t.shape, wide), t)


@torch.no_grad()  # as in StiefelAdam.step
def test_state_is_a_view_of_the_bucket_and_a_replaced_state_rebuilds_it():
    ps, states = _frames()
    assert v_state_shape(ps[1], "column") == (3, 1)  # one per column of W, a row of the stored W^T
    cache = {}
    bucket = bucket_for(cache, ps, states)
    assert bucket.m[0].shape == (3, 7, 3) and bucket.v[0].shape == (3, 1, 3)
    states[1]["exp_avg"].fill_(2.0)  # an in-place edit of the state is an edit of the batch
    assert (bucket.m[0][2] == 2.0).all() and (bucket.m[0][:2] == 0.0).all()
    assert bucket_for(cache, ps, states) is bucket
    states[0]["exp_avg"] = torch.ones_like(states[0]["exp_avg"])  # replaced (as load_state_dict does)
    rebuilt = bucket_for(cache, ps, states)
    assert rebuilt is not bucket and list(cache) == [tuple(id(p) for p in ps)]
    assert (rebuilt.m[0][:2] == 1.0).all() and (rebuilt.m[0][2] == 2.0).all()


@torch.no_grad()
def test_update_is_refused_exactly_where_a_frame_is_not_finite_and_commit_swaps_the_state():
    ps, states = _frames()
    bucket = bucket_for({}, ps, states)
    W, G, m, v, step = bucket.inputs(ps, states)
    assert step == 1.0 and torch.equal(G[2], ps[1].grad.mT)
    W_new = W.clone()
    W_new[1, 4, 2] = float("nan")
    refused = BucketUpdate(0, ps, states, bucket, W_new, m + 1.0, v + 1.0)
    assert refused.ok.tolist() == [True, False, True]
    accepted = BucketUpdate(0, ps, states, bucket, W.flip(-2), m + 1.0, v + 2.0)
    assert accepted.ok.all()
    accepted.commit()  # the reference rule's moments are copied into the other pair, then swapped in
    assert bucket.current == 1
    assert torch.equal(ps[0].detach(), W[:2].flip(-2)) and torch.equal(ps[1].detach(), W[2].flip(-2).mT)
    assert (states[0]["exp_avg"] == 1.0).all() and (states[1]["exp_avg_sq"] == 2.0).all()
    assert states[0]["exp_avg"].data_ptr() == bucket.m[1].data_ptr()
    assert [float(s["step"]) for s in states] == [1.0, 1.0]

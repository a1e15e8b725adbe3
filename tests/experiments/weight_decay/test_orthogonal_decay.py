"""Weight decay under the other ways of keeping weights orthogonal (the behaviour the chapter shows)."""

from __future__ import annotations

import pytest

from stiefel_mini.experiments.weight_decay import orthogonal_decay as od


def test_torch_orthogonal_householder_weight_collapses_under_default_adamw_decay():
    r = od.torch_orthogonal_decay(64, 256, steps=3)
    assert r["map"] == "householder" and r["weight_decay"] == 0.01
    assert r["norm"][0] == pytest.approx(8.0, rel=1e-5)
    assert r["norm"][-1] == 0.0
    no_decay = od.torch_orthogonal_decay(64, 256, steps=3, weight_decay=0.0)
    assert no_decay["norm"][-1] == pytest.approx(8.0, rel=1e-5)


def test_geotorch_decay_pulls_toward_the_base_point():
    pytest.importorskip("geotorch")
    r = od.geotorch_decay(8, 24, steps=20, weight_decay=1.0)
    assert r["dist_to_base"][-1] < 0.9 * r["dist_to_base"][0]
    # Only the decay acted: the unconstrained matrix shrank by (1 - lr wd)^steps.
    assert r["x_norm"][-1] == pytest.approx(r["x_norm"][0] * (1 - r["lr"] * r["weight_decay"]) ** 20, rel=1e-4)
    assert max(r["orth"]) < 1e-4


def test_geoopt_projection_removes_decay_but_rewrites_grad():
    pytest.importorskip("geoopt")
    r = od.geoopt_decay(32, 8, weight_decay=0.1)
    assert r["grad_change"] > 1e-3
    assert r["grad_change_minus_wdW"] < 1e-12
    assert r["max_change_from_decay"] < 1e-12

"""Tests of stiefel_mini.experiments.records: provenance and atomic, strict-JSON results files."""

from __future__ import annotations

import json
import math
import socket
from dataclasses import dataclass

import numpy as np
import torch

from stiefel_mini.experiments import records


@dataclass
class Cfg:
    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.98)


def test_provenance_fields():
    prov = records.provenance(Cfg(), seeds=[0, 1], command=["python", "-m", "x", "--lr", "1"])
    assert prov["command"] == "python -m x --lr 1"
    assert set(prov["versions"]) == {"python", "torch", "numpy", "stiefel_mini"}
    assert prov["config"]["betas"] == [0.9, 0.98]
    assert prov["seeds"] == [0, 1]
    assert "git_commit" in prov and "git_dirty" in prov and prov["device"] == "cpu"
    assert socket.gethostname() not in json.dumps(prov)


def test_save_load_roundtrip(tmp_path):
    payload = {"a": (1, 2), "b": np.float32(0.5), "c": torch.tensor([1.0, 2.0]), "d": math.nan,
               "e": math.inf, "f": np.int64(3), "g": Cfg()}
    path = records.save_results(tmp_path / "sub" / "r.json", payload)
    assert records.load_results(path) == {"a": [1, 2], "b": 0.5, "c": [1.0, 2.0], "d": None,
                                          "e": None, "f": 3, "g": {"lr": 1e-3, "betas": [0.9, 0.98]}}
    assert not list(path.parent.glob(".*tmp*"))
    assert records.config_dict(Cfg()) == {"lr": 1e-3, "betas": [0.9, 0.98]}


def test_describe_file_covers_every_invocation_and_run():
    from stiefel_mini.experiments.records import describe_file

    inv = lambda cmd, t: {"command": cmd, "timestamp_utc": t, "git_commit": "c"}  # noqa: E731
    payload = {"provenance": inv("/a/python -m x --seeds 2", "2026-12-02T01:00:00+00:00"),
               "provenance_previous": [inv("/b/python -m x --seeds 0 1", "2026-12-01T01:00:00+00:00")],
               "runs": [{"arm": "A0", "seed": 1, "git_commit": "c", "git_dirty": False},
                        {"arm": "A1", "seed": 2, "git_commit": "d", "git_dirty": True,
                         "cpu": {"model": "M", "capability": "AVX2"}, "started_utc": "2026-12-02T01:00:05+00:00"}]}
    d = describe_file(payload)
    assert (d["runs"], d["arms"], d["seeds"], d["git_commits"], d["git_dirty"]) == (2, ["A0", "A1"], [1, 2],
                                                                                      ["c", "d"], True)
    assert d["invocations"] == 2 and d["interpreters"] == ["/a/python", "/b/python"]
    assert (d["first_utc"], d["last_utc"]) == ("2026-12-01T01:00:00+00:00", "2026-12-02T01:00:00+00:00")
    assert d["cpus"] == [{"capability": "AVX2", "model": "M"}]
    assert d["started_utc"] == ["2026-12-02T01:00:05+00:00"] * 2


def test_every_committed_cifar_file_describes_itself():
    from stiefel_mini.experiments.records import describe_file, load_results
    from stiefel_mini.resources import CHECKOUT_RESULTS

    for path in sorted((CHECKOUT_RESULTS / "cifar").glob("*.json")):
        payload = load_results(path)
        if isinstance(payload.get("runs"), list):
            assert payload["file"] == describe_file(payload), path.name

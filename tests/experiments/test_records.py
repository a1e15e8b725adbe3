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

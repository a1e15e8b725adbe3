"""Tests of the shared experiment machinery (stiefel_mini.experiments.common)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Literal, Optional

import numpy as np
import pytest
import torch

from stiefel_mini.experiments import common
from stiefel_mini.experiments.common import ConfigError, parse_config


@dataclass
class Cfg:
    lr: float = 1e-3
    steps: int = 10
    flag: bool = False
    name: str = "x"
    betas: tuple[float, float] = (0.9, 0.98)
    seeds: tuple[int, ...] = (0,)
    frame_lr: Optional[float] = None
    arm: Literal["a", "b"] = "a"


def test_parse_config_defaults_and_overrides():
    assert parse_config(Cfg, []) == Cfg()
    cfg = parse_config(Cfg, ["--lr", "3e-3", "--steps=7", "--flag", "yes", "--name", "run",
                             "--betas", "0.8", "0.9", "--seeds", "1,2,3", "--frame-lr", "0.5",
                             "--arm", "b"])
    assert cfg == Cfg(lr=3e-3, steps=7, flag=True, name="run", betas=(0.8, 0.9), seeds=(1, 2, 3),
                      frame_lr=0.5, arm="b")
    assert parse_config(Cfg, ["--frame_lr", "none"]).frame_lr is None
    assert parse_config(Cfg, ["--seeds", "4", "5"]).seeds == (4, 5)
    assert parse_config(Cfg, ["--flag", "0"], base=Cfg(steps=3)) == Cfg(steps=3, flag=False)


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--lrr", "1"], ["lrr", "fields", "lr"]),
        (["--steps", "1.5"], ["steps", "int"]),
        (["--lr", "fast"], ["lr", "float"]),
        (["--flag", "maybe"], ["flag", "bool"]),
        (["--betas", "0.9"], ["betas", "2 values"]),
        (["--arm", "c"], ["arm", "'a'", "'b'"]),
        (["--steps"], ["steps", "missing"]),
        (["steps", "1"], ["--field"]),
    ],
)
def test_parse_config_errors_name_field_and_type(argv, words):
    with pytest.raises(ConfigError) as err:
        parse_config(Cfg, argv)
    for w in words:
        assert w in str(err.value)


def test_parse_config_help_exits(capsys):
    with pytest.raises(SystemExit):
        parse_config(Cfg, ["--help"])
    assert "--betas" in capsys.readouterr().out


def test_provenance_fields():
    prov = common.provenance(Cfg(), seeds=[0, 1], command=["python", "-m", "x", "--lr", "1"])
    assert prov["command"] == "python -m x --lr 1"
    assert set(prov["versions"]) == {"python", "torch", "numpy", "stiefel_mini"}
    assert prov["config"]["betas"] == [0.9, 0.98]
    assert prov["seeds"] == [0, 1]
    assert "git_commit" in prov and "git_dirty" in prov and prov["device"] == "cpu"
    import socket

    assert socket.gethostname() not in json.dumps(prov)


def test_save_load_roundtrip(tmp_path):
    payload = {"a": (1, 2), "b": np.float32(0.5), "c": torch.tensor([1.0, 2.0]), "d": math.nan,
               "e": math.inf, "f": np.int64(3)}
    path = common.save_results(tmp_path / "sub" / "r.json", payload)
    assert common.load_results(path) == {"a": [1, 2], "b": 0.5, "c": [1.0, 2.0], "d": None,
                                         "e": None, "f": 3}
    assert not list(path.parent.glob(".*tmp*"))


def test_progress_can_be_disabled(monkeypatch):
    assert list(common.progress(range(3), enabled=False)) == [0, 1, 2]
    monkeypatch.setenv("STIEFEL_MINI_PROGRESS", "0")
    assert common.progress(range(3), enabled=True).disable


def test_summarize_with_censoring():
    s = common.summarize([1, 2, 3, 4, None], missing=math.inf)
    assert s["median"] == 3 and s["n_missing"] == 1 and s["min"] == 1 and math.isinf(s["max"])
    assert s["q25"] == 2 and s["q75"] == 4
    assert common.summarize([1, 2, 3, 4])["median"] == 2.5
    s = common.summarize([None, None, None, 1], missing=math.inf)
    assert math.isinf(s["median"])


def test_paired_differences_and_wins():
    a = [10, 20, None, 40]
    b = [5, 25, None, None]
    d = common.paired_differences(a, b, missing=math.inf)
    assert d[0] == -5 and d[1] == 5 and d[2] == 0 and math.isinf(d[3])
    w = common.wins(a, b, lower_is_better=True, missing=math.inf)
    assert w == {"wins": 1, "ties": 1, "losses": 2, "n": 4}
    w = common.wins([0.5, 0.7], [0.9, 0.7], lower_is_better=False)
    assert w == {"wins": 1, "ties": 1, "losses": 0, "n": 2}


def test_confidence_intervals():
    x = [1.0, 2.0, 3.0, 4.0, 5.0]
    lo, hi = common.t_ci(x)
    assert lo < 3 < hi and math.isclose((lo + hi) / 2, 3.0)
    assert math.isclose(hi - 3, 2.776 * np.std(x, ddof=1) / math.sqrt(5), rel_tol=1e-6)
    lo, hi = common.bootstrap_ci(x, seed=1)
    assert 1 <= lo <= 3 <= hi <= 5
    lo, hi = common.bootstrap_ci([1.0, math.inf, math.inf], seed=0)
    assert lo == 1.0 and math.isinf(hi)
    c = common.compare([1, 2, 3], [0, 1, 5])
    assert c["differences"] == [-1, -1, 2] and c["wins"]["wins"] == 2


def test_arm_spec():
    assert common.arm_spec("A1").name == "stiefel"
    with pytest.raises(ValueError, match="choices"):
        common.arm_spec("nope")


@dataclass
class OptCfg:
    lr: float = 1e-2
    betas: tuple[float, float] = (0.9, 0.98)
    weight_decay: float = 1.0


def _model(arm):
    attention = pytest.importorskip("stiefel_mini.attention")
    torch.manual_seed(0)
    return torch.nn.Sequential(
        attention.StiefelSelfAttention(16, 2, 4, stiefel=common.arm_spec(arm).stiefel_module),
        torch.nn.Linear(16, 16),
    )


@pytest.mark.parametrize("arm", sorted(common.ARMS))
def test_make_optimizer_arms(arm):
    geometry = pytest.importorskip("stiefel_mini.geometry")
    model = _model(arm)
    attn = model[0]
    q0 = attn.w_q.detach().clone()
    opt = common.make_optimizer(model, arm, OptCfg())
    x = torch.randn(3, 5, 16)
    for _ in range(3):
        opt.zero_grad()
        model(x).pow(2).sum().backward()
        opt.step()
    moved = not torch.equal(attn.w_q, q0)
    qk_rule = common.arm_spec(arm).qk
    assert moved == (qk_rule not in ("frozen", "none"))
    if common.arm_spec(arm).stiefel_module and qk_rule != "frozen":
        assert geometry.orthogonality_error(attn.w_q.detach()).max() < 1e-4
    names = {g["name"] for g in opt.param_groups}
    assert "decay" in names
    for g in opt.param_groups:
        if g["name"] in ("frames", "qk") and qk_rule in ("adamw_nodecay", "adamw_polar", "stiefel"):
            assert g["weight_decay"] == 0.0

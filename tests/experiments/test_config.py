"""Tests of stiefel_mini.experiments.config: typed --field value parsing and the shared CLI options."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional

import pytest

from stiefel_mini.experiments.config import (ConfigError, leaf_fields, leaf_values, parse_cli, parse_config, replace,
                                            split_argv)
from stiefel_mini.experiments.records import config_dict, config_from_dict


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


PRESETS = {"small": Cfg(steps=2), "big": Cfg(steps=1000, lr=0.1)}


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


def test_parse_cli_preset_out_and_overrides():
    cfg, out, name = parse_cli(Cfg, ["--preset", "big", "--out", "r.json", "--steps", "5"], presets=PRESETS)
    assert (cfg, out, name) == (Cfg(steps=5, lr=0.1), "r.json", "big")
    cfg, out, name = parse_cli(Cfg, ["--out=x.json"], presets=PRESETS, default_preset="small")
    assert (cfg, out, name) == (Cfg(steps=2), "x.json", "small")
    assert parse_cli(Cfg, []) == (Cfg(), None, None)
    with pytest.raises(ConfigError, match="expected one of"):
        parse_cli(Cfg, ["--preset", "huge"], presets=PRESETS)
    with pytest.raises(ConfigError, match="--out: missing value"):
        parse_cli(Cfg, ["--out"])
    with pytest.raises(ConfigError, match="unknown field --preset"):  # no presets: not an option
        parse_cli(Cfg, ["--preset", "big"])


def test_parse_cli_help_lists_presets(capsys):
    with pytest.raises(SystemExit):
        parse_cli(Cfg, ["-h"], presets=PRESETS, usage="usage: x")
    out = capsys.readouterr().out
    assert "usage: x" in out and "small|big" in out and "--out" in out and "--lr" in out


def test_split_argv():
    @dataclass
    class Other:
        seeds: tuple[int, ...] = (0,)

    mine, rest = split_argv(["--seeds", "1", "2", "--lr", "3", "--steps=4"], Other)
    assert mine == ["--seeds", "1", "2"] and rest == ["--lr", "3", "--steps=4"]


@dataclass
class Model:
    width: int = 8
    depth: int = 2


@dataclass
class Optim:
    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.98)


@dataclass
class Run:
    seed: int = 0
    model: Model = field(default_factory=Model)
    optim: Optim = field(default_factory=Optim)


def test_leaf_fields_walk_the_parts_and_refuse_a_shared_name():
    leaves = leaf_fields(Run)
    assert list(leaves) == ["seed", "width", "depth", "lr", "betas"]
    assert leaves["width"][0] == ("model", "width") and leaves["lr"][1] is float

    @dataclass
    class Clash:
        lr: float = 0.1
        optim: Optim = field(default_factory=Optim)

    with pytest.raises(TypeError, match=r"\['lr'\]"):
        leaf_fields(Clash)


def test_replace_reaches_into_the_parts_and_shares_the_rest():
    run = Run()
    new = replace(run, width=16, lr=0.5, seed=3)
    assert new == Run(seed=3, model=Model(width=16), optim=Optim(lr=0.5))
    assert run == Run() and new.optim is not run.optim
    assert replace(run, seed=1).model is run.model
    assert replace(run, model=Model(depth=5)).model.depth == 5
    with pytest.raises(TypeError, match="no field"):
        replace(run, widht=16)


def test_nested_configs_parse_print_and_store_flat(capsys):
    cfg = parse_config(Run, ["--width", "4", "--betas", "0.5,0.6", "--seed=2"])
    assert cfg == Run(seed=2, model=Model(width=4), optim=Optim(betas=(0.5, 0.6)))
    assert leaf_values(cfg) == {"seed": 2, "width": 4, "depth": 2, "lr": 1e-3, "betas": (0.5, 0.6)}
    stored = config_dict(cfg)
    assert stored == {"seed": 2, "width": 4, "depth": 2, "lr": 1e-3, "betas": [0.5, 0.6]}
    assert config_from_dict(Run, {**stored, "gone": 1}) == cfg
    assert config_from_dict(Run, {"depth": 7}) == Run(model=Model(depth=7))
    with pytest.raises(ConfigError, match="unknown field --model"):
        parse_config(Run, ["--model", "x"])
    with pytest.raises(SystemExit):
        parse_config(Run, ["--help"])
    text = capsys.readouterr().out
    assert "  model:" in text and "--width" in text and "optim:" in text
    assert split_argv(["--width", "3", "--other", "1"], Run) == (["--width", "3"], ["--other", "1"])

"""The shared runner: resuming a results file, the grid loop, and every stored command still parsing."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from stiefel_mini.experiments import runner
from stiefel_mini.experiments.cifar import experiment as cifar_experiment
from stiefel_mini.experiments.config import ConfigError
from stiefel_mini.experiments.grokking import experiment as grokking_experiment
from stiefel_mini.experiments.lm import experiment as lm_experiment
from stiefel_mini.experiments.lm import run_study
from stiefel_mini.experiments.records import save_results

REPO = Path(__file__).resolve().parents[2]


def _lm_parse(argv: list[str]):
    """The language-model command line's two parsers, chosen as its ``main`` chooses."""
    return (run_study.parse_args if run_study.is_study_command(argv) else lm_experiment.parse_args)(argv)


PARSERS = {"cifar": cifar_experiment.parse_args, "grokking": grokking_experiment.parse_args, "lm": _lm_parse}


def test_changed_fields_names_every_disagreeing_key():
    assert runner.changed_fields({"a": 1, "b": 2}, {"a": 1, "b": 3, "c": 0}) == ["b", "c"]
    assert runner.changed_fields(None, {"a": 1}) == ["a"]
    assert runner.changed_fields({"a": 1}, {"a": 1}) == []


def test_resume_reads_a_file_of_the_same_settings_and_refuses_another(tmp_path):
    path = tmp_path / "r.json"
    assert runner.resume(path, "settings", {"lr": 1}) is None and runner.resume(None, "settings", {}) is None
    save_results(path, {"settings": {"lr": 1, "steps": 5}, "runs": [1]})
    assert runner.resume(path, "settings", {"lr": 1, "steps": 5})["runs"] == [1]
    with pytest.raises(ValueError, match=r"other settings \(fields \['steps'\]\)"):
        runner.resume(path, "settings", {"lr": 1, "steps": 6})


def test_run_grid_skips_done_points_and_saves_after_each_run():
    ran, saves = [], []
    runner.run_grid([1, 2, 3, 4], lambda p: p % 2 == 0, ran.append, lambda: saves.append(list(ran)), enabled=False)
    assert ran == [1, 3] and saves == [[1], [1, 3]]


@dataclass
class _Sweep:
    seeds: tuple[int, ...] = (0,)
    preset: str = "a"
    out: str = "x.json"


@dataclass
class _Run:
    steps: int = 1
    lr: float = 0.1


def test_parse_sweep_cli_splits_fields_between_the_two_configs():
    plans = {"p": _Sweep(seeds=(1, 2), preset="b")}
    presets = {"a": _Run(), "b": _Run(steps=7)}
    scfg, base = runner.parse_sweep_cli(_Sweep, _Run, ["--plan", "p", "--lr", "0.5", "--seeds", "3"],
                                        plans=plans, presets=presets)
    assert scfg == _Sweep(seeds=(3,), preset="b") and base == _Run(steps=7, lr=0.5)
    assert runner.parse_sweep_cli(_Sweep, _Run, [], plans=plans, presets=presets) == (_Sweep(), _Run())
    with pytest.raises(ConfigError, match="--plan"):
        runner.parse_sweep_cli(_Sweep, _Run, ["--plan", "nope"], plans=plans, presets=presets)


def _stored_commands() -> list[tuple[str, str]]:
    """(experiment, arguments) of every command the results files and the results' READMEs record."""
    found = set()

    def walk(obj):
        if isinstance(obj, dict):
            for k, v in obj.items():
                if k == "command" and isinstance(v, str):
                    found.add(v)
                else:
                    walk(v)
        elif isinstance(obj, list):
            for v in obj:
                walk(v)

    for path in sorted((REPO / "results").rglob("*.json")):
        walk(json.loads(path.read_text()))
    for path in [REPO / "README.md", *sorted((REPO / "results").rglob("*.md"))]:
        # Fenced blocks hold one command a line; in the prose an inline code span may wrap across
        # lines, so it is read whole.
        text = path.read_text()
        blocks = re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.M | re.S)
        prose = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.M | re.S)
        for block in blocks:
            found |= set(re.findall(r"python -m stiefel_mini\.experiments\.\w+[^\n#]*", block))
        spans = re.findall(r"`!?(python -m stiefel_mini\.experiments\.\w+[^`]*)`", prose)
        found |= {" ".join(span.split()) for span in spans}
        bare = re.sub(r"`[^`]*`", "", prose)
        found |= set(re.findall(r"python -m stiefel_mini\.experiments\.\w+[^\n|#]*", bare))
    out = []
    for command in found:
        m = re.search(r"-m stiefel_mini\.experiments\.(\w+)(.*)", command)
        if m and m.group(1) in PARSERS and "recount" not in m.group(2):
            out.append((m.group(1), m.group(2).strip()))
    return sorted(out)


COMMANDS = _stored_commands()


def test_the_stored_commands_were_found():
    assert sum(name == "cifar" for name, _ in COMMANDS) >= 10
    assert sum(name == "grokking" for name, _ in COMMANDS) >= 8


# The READMEs' placeholders, for a value the reader picks.
PLACEHOLDERS = {"BEST": "1.0", "NAME": "r2_long"}


@pytest.mark.parametrize("name, args", COMMANDS)
def test_every_stored_command_still_parses(name, args):
    PARSERS[name]([PLACEHOLDERS.get(token, token) for token in shlex.split(args)])


def test_a_stored_command_gives_its_plan():
    argv = shlex.split("--preset r2_fitted --arms A1 --seeds 7 --lr 0.003 --frame_lr 1.0")
    cfg, preset = cifar_experiment.parse_args(argv)
    assert preset == "r2_fitted" and cfg.arms == ("A1",) and cfg.seeds == (7,) and cfg.run.optimizer.frame_lr == 1.0
    assert cfg.run.seeding == "streams" and cfg.out == "results/cifar/r2_fitted.json"
    assert cifar_experiment.parse_args(["--preset", "cpu"])[0].run.seeding == "v0"
    scfg, base = grokking_experiment.parse_args(shlex.split("sweep --plan r2_wd --threads 1"))
    assert scfg.weight_decays == (0.1, 0.3, 1.0, 3.0) and base.steps == 8000 and base.threads == 1

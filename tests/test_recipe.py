"""The "If you try it" card against the studies: every setting it prints is the one the study's runs ran at.

The settings are read here straight from the committed results files, without the functions the card uses
(the fourth language-model study's long runs once it has them, before that the third study's paired runs and
its sweep's best scale lr; the CIFAR-10 fitted study's
runs and its lr sweep's bests), and the printed code is run on a small model: its optimizer's groups must
carry those settings. A card that printed another number, or code that built another optimizer, fails.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import torch
from bs4 import BeautifulSoup
from torch import nn

from stiefel_mini import StiefelAdam, convert_attention, param_groups, recipe
from stiefel_mini.resources import CHECKOUT_RESULTS

RECIPES = recipe.recipes()
BY = {(r.task, r.optimizer): r for r in RECIPES}


def _runs(name: str) -> list[dict]:
    return json.loads((CHECKOUT_RESULTS / name).read_text())["runs"]


def _one(runs: list[dict], key: str):
    values = {r[key] for r in runs}
    assert len(values) == 1, f"{key}: the runs hold {values}"
    return values.pop()


def _best(runs: list[dict], key: str, score: str, lower: bool) -> float:
    """The value of ``key`` with the best mean ``score`` over its runs."""
    by = defaultdict(list)
    for r in runs:
        by[r[key]].append(r[score])
    means = {v: np.mean(s) for v, s in by.items()}
    return (min if lower else max)(means, key=means.get)


def compared_runs(root: Path, arm4: str, arm3: str) -> tuple[str, list[dict]]:
    """The file and the runs a language-model recipe must come from: the fourth study's long runs of
    ``arm4`` once there are any, else the third study's paired runs of ``arm3``."""
    def runs(name):
        path = root / name
        return json.loads(path.read_text())["runs"] if path.is_file() else []
    long = [r for r in runs("lm/round4.json") if r["arm"] == arm4 and r["phase"] == "long"]
    if long:
        return "lm/round4.json", long
    return "lm/round3.json", [r for r in runs("lm/round3.json") if r["arm"] == arm3 and r["phase"] == "paired"]


def check_language_model_recipe(r: recipe.Recipe, file: str, runs: list[dict]) -> None:
    """Every setting of ``r`` is the one ``runs`` (the compared runs of its arm) ran at."""
    assert len(runs) >= 8 and r.file == file, (r.file, file, len(runs))
    assert (r.lr, r.warmup, r.frame_lr, r.scale_lr) == tuple(
        _one(runs, k) for k in ("lr", "warmup_frac", "frame_lr", "scale_lr"))
    if r.optimizer == "StiefelAdam":
        assert r.max_step == _one(runs, "max_step") and r.muon_lr is None
    else:
        assert r.muon_lr == _one(runs, "muon_lr") and r.max_step is None


@pytest.mark.parametrize("arms, optimizer", [(("stiefel", "stiefel_scale"), "StiefelAdam"),
                                             (("stiefel_muon", "stiefel_muon_scale"), "StiefelMuon")])
def test_the_language_model_recipes_are_what_the_compared_runs_ran(arms, optimizer):
    file, runs = compared_runs(CHECKOUT_RESULTS, *arms)
    r = BY[("language model", optimizer)]
    check_language_model_recipe(r, file, runs)
    if file == "lm/round3.json":  # the third study's scale lr is its sweep's best
        sweep = [h for h in _runs(file) if h["arm"] == arms[1] and h["phase"] == "sweep"]
        assert r.scale_lr == _best(sweep, "scale_lr", "val_bpb", lower=True)


def test_the_vision_transformer_recipe_is_what_the_fitted_study_ran_at_the_lr_sweeps_bests():
    fitted = [h for h in _runs("cifar/r2_fitted.json") if h["arm"] == "A1"]
    sweep = _runs("cifar/r2_lr.json")
    r = BY[("vision transformer", "StiefelAdam")]
    assert r.frame_lr == _one(fitted, "frame_lr") == _best([h for h in sweep if h["arm"] == "A1"], "frame_lr",
                                                           "test_acc", lower=False)
    assert r.lr == _one(fitted, "lr") == _best([h for h in sweep if h["arm"] == "A0"], "lr", "test_acc", lower=False)
    settings = json.loads((CHECKOUT_RESULTS / "cifar/r2_fitted.json").read_text())["settings"]
    assert (r.max_step, r.scale_lr) == (settings["max_step"], None) and settings["logit_scale"] == "fixed"
    assert r.warmup == settings["warmup_epochs"] / settings["epochs"]


def test_the_card_prints_every_recipe_and_says_what_was_not_measured():
    soup = BeautifulSoup(recipe.card_html(RECIPES), "html.parser")
    rows = soup.select("table.recipe-card tbody tr")
    assert len(rows) == len(RECIPES) + len(recipe.NOT_MEASURED)
    for r, tr in zip(RECIPES, rows):
        text = " ".join(tr.get_text(" ").split())
        assert (tr["data-task"], tr["data-optimizer"]) == (r.task, r.optimizer)
        assert float(tr["data-lr"]) == r.lr and float(tr["data-frame-lr"]) == r.frame_lr
        assert f"frame lr {r.frame_lr!r}" in text and f"warm-up {r.warmup:.0%}" in text, text
        if r.scale_lr is None:
            assert "data-scale-lr" not in tr.attrs and "fixed logit scale" in text
        else:
            assert float(tr["data-scale-lr"]) == r.scale_lr and f"scale lr {r.scale_lr!r}" in text
    assert all("not measured" in tr.get_text() for tr in rows[len(RECIPES):])


def _model() -> nn.Module:
    """Two attention layers and a read-out, the layers ``convert_attention`` converts."""
    torch.manual_seed(0)
    return nn.ModuleDict({"a": nn.MultiheadAttention(16, 4, batch_first=True),
                          "b": nn.MultiheadAttention(16, 4, batch_first=True), "out": nn.Linear(16, 3)})


@pytest.mark.parametrize("key", [k for k in BY if k[1] == "StiefelAdam"], ids=lambda k: k[0].replace(" ", "_"))
def test_the_printed_code_builds_the_optimizer_of_the_recipe(key):
    r = BY[key]
    scope = {"model": _model(), "convert_attention": convert_attention, "param_groups": param_groups,
             "StiefelAdam": StiefelAdam}
    exec(r.code(), scope)  # noqa: S102 - the card's own code, as a reader would run it
    opt = scope["optimizer"]
    groups = {g["name"]: g for g in opt.param_groups}
    assert groups["frames"]["lr"] == r.frame_lr and groups["frames"]["max_step"] == r.max_step
    assert groups["decay"]["lr"] == r.lr and groups["decay"]["weight_decay"] == r.weight_decay
    assert opt.defaults["betas"] == tuple(r.betas)
    if r.scale_lr is None:
        assert "scale" not in groups
    else:
        assert groups["scale"]["lr"] == r.scale_lr and groups["scale"]["weight_decay"] == 0.0


def test_a_studied_optimizer_of_another_layout_gives_no_code():
    with pytest.raises(ValueError, match="layout"):
        BY[("language model", "StiefelMuon")].code()

"""Fixtures of the CIFAR-10 tests: a tiny CIFAR-shaped ImageFolder set (never the real data)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stiefel_mini.experiments.cifar import data as cifar_data
from stiefel_mini.experiments.cifar.config import PLANS, REPRO_TINY_SET, CifarConfig
from stiefel_mini.experiments.config import replace


@pytest.fixture(scope="module")
def tiny_root(tmp_path_factory) -> Path:
    return cifar_data.write_tiny_image_folder(tmp_path_factory.mktemp("cifar") / "tiny", **REPRO_TINY_SET)


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Keep decoded tiny sets out of the user's cache, and no data folder from the environment."""
    monkeypatch.setenv(cifar_data.ENV_CACHE_DIR, str(tmp_path / "cache"))
    monkeypatch.delenv(cifar_data.ENV_DATA_DIR, raising=False)


@pytest.fixture
def tiny_cfg():
    """``tiny_cfg(root, **changes)``: the ``repro`` plan's run on the tiny set at ``root``."""
    def make(root: Path, **kw) -> CifarConfig:
        return replace(PLANS["repro"].run, data_dir=str(root), **kw)
    return make

"""stiefel_mini.resources.results_path: committed results from any working directory.

Two routes: the repository checkout the package is imported from (clone, editable install), and
the copy that a wheel carries (``pip install git+URL``, as Colab's install cell does), which
``setup.py`` puts into ``stiefel_mini/_results/``.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from stiefel_mini.resources import CHECKOUT_RESULTS, PACKAGED_RESULTS, results_path

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = sorted(p.relative_to(ROOT / "results").as_posix() for p in (ROOT / "results").rglob("*.json"))


def test_committed_results_exist():
    assert {"grokking/cpu.json", "cifar/cpu.json"} <= set(COMMITTED)


@pytest.mark.parametrize("name", COMMITTED)
def test_checkout_route(name):
    assert results_path(name) == ROOT / "results" / name


@pytest.mark.parametrize("name", ["../pyproject.toml", "grokking/../../setup.py", str(ROOT / "results" / "x.json")])
def test_rejects_paths_outside_results(name):
    with pytest.raises(ValueError, match="relative to results/"):
        results_path(name)


def test_missing_file_names_both_places():
    with pytest.raises(FileNotFoundError) as err:
        results_path("grokking/no_such_run.json")
    assert str(CHECKOUT_RESULTS / "grokking" / "no_such_run.json") in str(err.value)
    assert str(PACKAGED_RESULTS / "grokking" / "no_such_run.json") in str(err.value)


def test_wheel_carries_results_and_resolves_them_without_a_checkout(tmp_path):
    """Build a wheel from a copy of the sources, install it into a bare folder, and resolve from an
    empty working directory with that folder first on the path (no repository anywhere near)."""
    pytest.importorskip("setuptools", minversion="64")
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "stiefel_mini", src / "stiefel_mini", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "results", src / "results")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"), str(src)],
                   check=True, cwd=src)
    (wheel,) = (tmp_path / "dist").glob("stiefel_mini-*.whl")
    site = tmp_path / "site"
    subprocess.run([*pip, "install", "--no-deps", "--target", str(site), str(wheel)], check=True)
    assert sorted(p.relative_to(site / "stiefel_mini" / "_results").as_posix()
                  for p in (site / "stiefel_mini" / "_results").rglob("*.json")) == COMMITTED

    empty = tmp_path / "empty"
    empty.mkdir()
    code = ("import json, stiefel_mini.resources as r; p = r.results_path('grokking/cpu.json'); "
            "print(json.dumps([str(p), str(r.CHECKOUT_RESULTS)]))")
    out = subprocess.run([sys.executable, "-c", code], cwd=empty, env={"PYTHONPATH": str(site), "PATH": ""},
                         capture_output=True, text=True, check=True).stdout
    path, checkout = json.loads(out.splitlines()[-1])
    assert Path(path) == site / "stiefel_mini" / "_results" / "grokking" / "cpu.json"
    assert not Path(checkout).exists()
    assert json.loads(Path(path).read_text()) == json.loads((ROOT / "results" / "grokking" / "cpu.json").read_text())


def test_results_override_is_read_first_and_never_falls_back(tmp_path, monkeypatch):
    from stiefel_mini import resources

    (tmp_path / "grokking").mkdir()
    (tmp_path / "grokking" / "cpu.json").write_text("{}")
    monkeypatch.setenv(resources.RESULTS_ENV, str(tmp_path))
    assert resources.results_path("grokking/cpu.json") == tmp_path / "grokking" / "cpu.json"
    with pytest.raises(FileNotFoundError, match="STIEFEL_MINI_RESULTS"):
        resources.results_path("cifar/r2_fitted.json")  # committed, but not in the override
    monkeypatch.setenv(resources.RESULTS_ENV, str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError, match="not a folder"):
        resources.results_path("grokking/cpu.json")

"""The book's sources: chapters committed without outputs, the toc consistent, no CDN assets.

These run with the unit tests (no build needed); the built HTML is checked by tests/browser.
"""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
NOTEBOOKS = sorted(BOOK.glob("*.ipynb"))


def _toc_files() -> list[str]:
    text = (ROOT / "_toc.yml").read_text()
    entries = re.findall(r"^\s*(?:root:|- file:)\s*(\S+)", text, flags=re.M)
    return entries


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_committed_without_outputs(path):
    nb = json.loads(path.read_text())
    with_outputs = [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code" and c.get("outputs")]
    counted = [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code" and c.get("execution_count")]
    assert not with_outputs, f"{path.name}: cells {with_outputs} have outputs; clear them before committing"
    assert not counted, f"{path.name}: cells {counted} have execution counts; clear them before committing"
    assert "widgets" not in nb.get("metadata", {}), f"{path.name}: saved widget state; clear it"


def test_every_toc_entry_exists():
    missing = []
    for entry in _toc_files():
        stem = ROOT / entry
        if not any(stem.with_suffix(s).is_file() for s in (".ipynb", ".md")):
            missing.append(entry)
    assert not missing, f"_toc.yml lists chapters that do not exist: {missing}"


def test_part_one_is_in_the_toc():
    entries = _toc_files()
    assert entries[0] == "book/intro"
    for chapter in ("book/stiefel_manifold", "book/retractions", "book/riemannian_adam"):
        assert chapter in entries


def test_assets_are_local_and_pinned():
    config = (ROOT / "_config.yml").read_text()
    assert "mathjax_path" in config and "offline/mathjax/" in config
    assert "offline/jupyter-widgets/embed.js" in config
    assert not re.search(r"(cdn\.|unpkg\.com|jsdelivr)", config), "_config.yml must not load assets from a CDN"
    package = json.loads((ROOT / "package.json").read_text())
    lock = json.loads((ROOT / "package-lock.json").read_text())
    for name, version in package["dependencies"].items():
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), f"{name} must be pinned exactly, got {version}"
        assert lock["packages"][f"node_modules/{name}"]["version"] == version


HIDDEN_INPUT_TAGS = {"hide-input", "remove-input", "remove-cell"}
MAX_CODE_LINE = 88


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_visible_code_lines_fit_the_page(path):
    """Code a reader sees (cells not tagged hide-input/remove-input) wraps at 88 characters."""
    nb = json.loads(path.read_text())
    long = [
        (i, j + 1, len(line))
        for i, c in enumerate(nb["cells"])
        if c["cell_type"] == "code"
        and not HIDDEN_INPUT_TAGS & set(c.get("metadata", {}).get("tags", []))
        for j, line in enumerate("".join(c["source"]).splitlines())
        if len(line) > MAX_CODE_LINE
    ]
    assert not long, (
        f"{path.name}: (cell, line, width) over {MAX_CODE_LINE} characters: {long}; "
        "rewrap them (PEP 8 continuation lines)"
    )

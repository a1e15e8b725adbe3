"""Parts I-II show the code a reader learns from: checks, printouts and plotting code sit in closed cells.

A code cell a reader sees open (no ``hide-input``, ``hide-cell``, ``remove-input`` or ``remove-cell``
tag) in a chapter of Parts I-II defines or computes; it prints nothing, asserts nothing and draws
nothing. The checks still run at every build, in the closed cells that follow.
"""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = ["stiefel_manifold", "retractions", "riemannian_adam", "manifold_muon", "stiefel_attention",
            "weight_decay"]
CLOSED = {"hide-input", "hide-cell", "remove-input", "remove-cell"}
# a printout, a check, or drawing: what belongs in a closed cell
SHOWN_ONLY_CLOSED = re.compile(r"\bprint\(|\bassert\b|assert_close|\bplt\.|\bax\.|\baxes\[|\bfig\b|show_table\(|"
                               r"display\(|_widget\(|frame_player\(|frame_grid_player\(|responsive\(")


def open_cells(name: str) -> list[tuple[int, str]]:
    cells = json.loads((ROOT / "book" / f"{name}.ipynb").read_text())["cells"]
    return [(i, "".join(c["source"])) for i, c in enumerate(cells)
            if c["cell_type"] == "code" and not CLOSED & set(c.get("metadata", {}).get("tags", []))]


def test_the_rule_catches_a_printout_a_check_and_a_plot():
    for line in ('print(f"{err:.1e}")', "assert err < 1e-12", "torch.testing.assert_close(a, b)",
                 "fig, ax = plt.subplots()", "ax.plot(x, y)", "show_table(h, rows)"):
        assert SHOWN_ONLY_CLOSED.search(line), line
    for line in ("W = geo.random_stiefel(8, 5, 3)", "axis = 0", "def proj(W, G):", "# print the table"):
        assert not SHOWN_ONLY_CLOSED.search(line.split("#")[0]), line


@pytest.mark.parametrize("name", CHAPTERS)
def test_open_cells_hold_no_printout_check_or_plotting_code(name):
    found = [(i, line.strip()) for i, src in open_cells(name) for line in src.splitlines()
             if SHOWN_ONLY_CLOSED.search(line.split("#")[0])]
    assert not found, (f"{name}: printouts, checks or plotting code in open cells (cell, line): {found}; "
                       "move them to a closed cell (tag hide-cell for a check, hide-input for a figure or table)")

"""Chapters run alone, as in Colab: the notebook copied into an empty directory, the package importable.

Colab opens a chapter without the repository around it (its first cell installs the package, and
does nothing here). Whatever the chapter reads must then come through the package: the committed
results through ``stiefel_mini.resources.results_path``, the images through ``cifar_data`` (here:
no data-set folder and no network, so the CIFAR chapter's live run uses the synthetic stand-in, and
no text corpus: the language-model chapter reads its numbers from the committed results).

The chapters that load committed results take up to half a minute each on two cores, so they carry
the ``standalone`` marker: CI runs them with everything else, and the quick tier (``-m quick``)
leaves them out.
"""

import shutil
from pathlib import Path

import pytest

import stiefel_mini

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.standalone
@pytest.mark.parametrize("chapter", ["stiefel_manifold", "manifold_muon", "grokking", "cifar", "language_model"])
def test_chapter_runs_alone_in_an_empty_directory(chapter, tmp_path, monkeypatch):
    work = tmp_path / "content"
    work.mkdir()
    shutil.copy(ROOT / "book" / f"{chapter}.ipynb", work)
    # The kernel imports the same stiefel_mini as this test, and nothing of the repository but it.
    package_parent = str(Path(stiefel_mini.__file__).resolve().parents[1])
    monkeypatch.setenv("PYTHONPATH", package_parent)
    monkeypatch.delenv("STIEFEL_MINI_CIFAR_DIR", raising=False)
    monkeypatch.setenv("STIEFEL_MINI_SOTU", str(tmp_path / "no-corpus"))  # Colab has no node_modules
    monkeypatch.setenv("STIEFEL_MINI_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("MPLBACKEND", "Agg")

    nb = nbformat.read(work / f"{chapter}.ipynb", as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(work)}})
    client.execute()  # raises CellExecutionError, with the cell and traceback, if any cell fails

    assert sorted(p.name for p in work.iterdir()) == [f"{chapter}.ipynb"], "the chapter wrote into its directory"
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors

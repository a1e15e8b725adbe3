"""Where the committed results files are, whatever the working directory.

The experiments write their results into ``results/`` at the repository root (for example
``--out results/grokking/cpu.json``), and the book's chapters read them back. A chapter may run with
any working directory: ``book/`` during the build, an empty folder in Colab. :func:`results_path`
finds a file in one of these places, in this order:

0. ``$STIEFEL_MINI_RESULTS/<name>`` where that environment variable names a folder: another set of
   results (the counterfactual test runs the chapters on a copy with the arms swapped); a file
   missing there is an error, never a silent fall-back to the committed one;
1. the repository checkout that this package is imported from (a clone, an editable install,
   ``PYTHONPATH``): ``<repository>/results/<name>``, so that a sweep just rerun there is what a
   chapter reads;
2. the copy shipped inside the package: a wheel built from the repository (``pip install
   git+URL``, which Colab's install cell runs) carries ``results/**/*.json`` as
   ``stiefel_mini/_results/`` (``setup.py`` copies them in when it builds the wheel).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["results_path", "RESULTS_ENV", "CHECKOUT_RESULTS", "PACKAGED_RESULTS"]

RESULTS_ENV = "STIEFEL_MINI_RESULTS"
"""The environment variable that points every reader of results at another folder."""
_PACKAGE = Path(__file__).resolve().parent
CHECKOUT_RESULTS = _PACKAGE.parent / "results"
"""``results/`` of the repository checkout that holds this package (absent in an installed wheel)."""
PACKAGED_RESULTS = _PACKAGE / "_results"
"""The copy of ``results/`` inside an installed wheel (absent in a checkout)."""


def results_path(name: str) -> Path:
    """The path of the committed results file ``name``, e.g. ``results_path("grokking/cpu.json")``.

    Args:
        name: path relative to the repository's ``results/`` folder, with ``/`` separators.

    Returns:
        ``$STIEFEL_MINI_RESULTS/<name>`` where the variable is set; else ``<checkout>/results/<name>``
        if that file exists, else the packaged copy.

    Raises:
        ValueError: ``name`` is absolute or climbs out of ``results/`` with ``..``.
        FileNotFoundError: neither place has the file; the message lists both.
    """
    rel = Path(name)
    if rel.is_absolute() or ".." in rel.parts:
        raise ValueError(
            f"results_path takes a path relative to results/, like 'grokking/cpu.json'; got {name!r}"
        )
    override = os.environ.get(RESULTS_ENV)
    if override:
        if not Path(override).is_dir():
            raise FileNotFoundError(f"{RESULTS_ENV}={override!r} is not a folder; point it at a copy of results/ "
                                    "or unset it")
        path = Path(override) / rel
        if not path.is_file():
            raise FileNotFoundError(f"results file {name!r} not found in {RESULTS_ENV}={override!r}; copy it "
                                    "there or unset the variable")
        return path
    tried = [CHECKOUT_RESULTS / rel, PACKAGED_RESULTS / rel]
    for path in tried:
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"results file {name!r} not found; looked in {tried[0]} (repository checkout) and {tried[1]} "
        "(installed package). Run the experiment that writes it (its command is in the chapter), or "
        "reinstall the package from a checkout that has it."
    )

"""Counterfactual copies of ``results/`` for the drift test: the same files with two arms' outcomes
exchanged, so that every verdict and every computed sentence about them must change direction.

:func:`swap_outcomes` copies every results file and, in the named experiments' files, exchanges what
two arms measured (accuracies, losses, steps, histories, metrics) between runs that are paired by seed
(and train fraction, weight decay); what identifies a run (arm, seed, its lrs and sizes, commit, start)
stays, so every selection of the evidence layer still finds its runs. ``seeds`` limits the exchange to
some seeds: exchanging half of them leaves the mean difference near zero and resolves nothing.

:func:`execute_chapters` runs chapters on such copies, several kernels at once.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Hashable, Iterable, Mapping

# What identifies a run rather than what it measured.
IDENTITY = {"arm", "arm_name", "seed", "train_fraction", "n_train", "n_test", "steps_total", "lr", "frame_lr",
            "weight_decay", "git_commit", "git_dirty", "started_utc", "cpu", "copied_from", "muon_lr", "phase",
            "steps", "warmup_frac", "threads", "qk_norm"}

PAIRS = {"cifar": ("A0", "A1"), "grokking": ("adamw", "stiefel_learned"), "lm": ("adamw", "stiefel")}
"""The arms exchanged in each experiment's files by default."""


def _group(run: dict) -> tuple:
    return (run["seed"], run.get("train_fraction"), run.get("weight_decay"))


def _swept(run: dict) -> tuple:
    return (run.get("lr") or 0.0, run.get("frame_lr") or 0.0, run.get("warmup_frac") or 0.0)


def swap_payload(payload: dict, a: str, b: str, seeds: Iterable[int] | None = None) -> int:
    """Exchange, in place, the measured fields of ``a``'s and ``b``'s runs paired by seed (and train
    fraction, weight decay); within a pair of lr sweeps, runs are matched in order of their lrs.
    Returns the number of pairs exchanged."""
    keep = None if seeds is None else set(seeds)
    groups: dict[tuple, dict[str, list]] = {}
    for r in payload.get("runs", []):
        if r.get("arm") in (a, b) and (keep is None or r["seed"] in keep):
            groups.setdefault(_group(r), {a: [], b: []})[r["arm"]].append(r)
    n = 0
    for arms in groups.values():
        for ra, rb in zip(sorted(arms[a], key=_swept), sorted(arms[b], key=_swept)):
            ma = {k: v for k, v in ra.items() if k not in IDENTITY}
            mb = {k: v for k, v in rb.items() if k not in IDENTITY}
            for k in ma:
                ra.pop(k)
            for k in mb:
                rb.pop(k)
            ra.update(mb)
            rb.update(ma)
            n += 1
    return n


def swap_outcomes(src: Path, dst: Path, pairs: Mapping[str, tuple[str, str]] = PAIRS,
                  seeds: Iterable[int] | None = None) -> dict[str, int]:
    """Copy the results folder ``src`` to ``dst`` with the outcomes of each experiment's arm pair
    exchanged (:func:`swap_payload`); returns ``{file: pairs exchanged}`` for the files it changed."""
    shutil.copytree(src, dst)
    from stiefel_mini.experiments.records import jsonable, load_results

    changed = {}
    seeds = None if seeds is None else list(seeds)
    for experiment, (a, b) in pairs.items():
        for path in sorted((dst / experiment).glob("*.json")):
            payload = load_results(path)
            n = swap_payload(payload, a, b, seeds)
            if n:
                # Histories stay unpacked (load_results reads them as they are): packing them again
                # (save_results' xz) took nine tenths of the copy's time and changes no value.
                path.write_text(json.dumps(jsonable(payload), indent=1, allow_nan=False) + "\n")
                changed[f"{experiment}/{path.name}"] = n
    return changed


def read(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def _cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


BUILT = Path(__file__).resolve().parents[1] / "_build" / "jupyter_execute" / "book"
"""Where the book build (``scripts/build_book.sh``) leaves each chapter as it executed it."""


def built_chapter(chapter: str, book: Path, built: Path = BUILT):
    """The book build's executed ``chapter``, when it is what executing it now would give, else None.

    The build executes every chapter on the committed results, as the "real" condition does; its copy
    counts only where it is that chapter as it is now (the same cells, in order) and was written after
    every file it reads could last have changed (the chapter, ``results/``, ``stiefel_mini/``), and no
    results folder is set in the environment. Otherwise the chapter is executed again."""
    import nbformat

    from stiefel_mini.resources import RESULTS_ENV

    path = built / f"{chapter}.ipynb"
    if os.environ.get(RESULTS_ENV) or not path.is_file():
        return None
    cells = lambda nb: [(c.cell_type, c.source) for c in nb.cells]  # noqa: E731
    nb, now = nbformat.read(path, 4), nbformat.read(book / f"{chapter}.ipynb", 4)
    if cells(nb) != cells(now):
        return None
    root = book.parent
    inputs = [book / f"{chapter}.ipynb", *(p for d in ("results", "stiefel_mini") for p in (root / d).rglob("*")
                                           if p.is_file() and "__pycache__" not in p.parts)]
    return nb if path.stat().st_mtime > max(p.stat().st_mtime for p in inputs) else None


def execute_chapters(jobs: Mapping[Hashable, tuple[str, Path | None]], book: Path, workers: int | None = None,
                     timeout: int = 1800) -> dict:
    """Execute ``book/<chapter>.ipynb`` (working directory ``book``) once per job ``{key: (chapter,
    results folder)}`` (``None``: the results the environment gives, the committed ones by default),
    ``workers`` kernels at a time (default: the CPUs this process may use), each kernel with
    ``OMP_NUM_THREADS`` = CPUs // workers so that together they use the CPUs without oversubscribing
    them. Returns ``{key: executed notebook}``; a failing cell raises RuntimeError naming the job, from
    nbclient's CellExecutionError (the cell and its traceback)."""
    import nbformat
    from nbclient import NotebookClient

    from stiefel_mini.resources import RESULTS_ENV

    workers = max(1, min(workers or _cpus(), len(jobs)))
    threads = str(max(1, _cpus() // workers))

    async def one(gate, key, chapter, results):
        env = dict(os.environ, OMP_NUM_THREADS=threads)
        if results is not None:
            env[RESULTS_ENV] = str(results)
        nb = nbformat.read(book / f"{chapter}.ipynb", 4)
        client = NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(book)}})
        async with gate:
            try:
                await client.async_execute(env=env)
            except Exception as exc:
                raise RuntimeError(f"{chapter}.ipynb on {results or 'the committed results'} failed") from exc
        return key, nb

    async def run_all():
        gate = asyncio.Semaphore(workers)
        return dict(await asyncio.gather(*(one(gate, key, *job) for key, job in jobs.items())))

    # In a thread of its own: in the same session the browser tests' Playwright holds this thread's event loop.
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, run_all()).result()

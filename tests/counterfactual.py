"""A counterfactual copy of ``results/``: two arms' names swapped in the named experiments' files.

Not a test: the helper the counterfactual test uses. A chapter executed with
``STIEFEL_MINI_RESULTS`` pointing at such a copy reads arm ``a``'s runs as arm ``b``'s and the
other way round, so every direction a results sentence states (who is ahead, who is faster) must
flip; a sentence that does not flip was not computed from the files.

:func:`swap_arms` copies every file of ``results/`` and, in each JSON file under
``results/<experiment>/`` for an experiment it is given, swaps the two arm names wherever a record
names an arm: the keys in :data:`ARM_KEYS` (a run's ``arm``, a ``repro`` record's or config's
``arm``, ``repro_arm``), the lists in :data:`ARM_LIST_KEYS` (a sweep's or config's ``arms``), and a
run's ``arm_name`` (the optimizer's name, e.g. ``adamw`` / ``stiefel``: swapped with the names the
file's runs give the two arms). Nothing else changes: each run keeps its measurements and its own
``lr`` / ``frame_lr``, so in the copy "A0" is the run that trained with StiefelAdam.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Mapping

__all__ = ["ARM_KEYS", "ARM_LIST_KEYS", "swap_arms", "swap_in"]

ARM_KEYS = ("arm", "repro_arm", "baseline")
"""Keys whose string value is one arm's name."""
ARM_LIST_KEYS = ("arms", "redo_arms")
"""Keys whose list value holds arm names."""


def _arm_names(node: Any, pair: tuple[str, str], found: dict[str, str]) -> None:
    """Collect ``{arm: arm_name}`` for the two arms from every record holding both keys."""
    if isinstance(node, dict):
        if node.get("arm") in pair and isinstance(node.get("arm_name"), str):
            found.setdefault(node["arm"], node["arm_name"])
        for v in node.values():
            _arm_names(v, pair, found)
    elif isinstance(node, list):
        for v in node:
            _arm_names(v, pair, found)


def swap_in(node: Any, pair: tuple[str, str]) -> Any:
    """``node`` (parsed JSON) with the two arm names of ``pair`` swapped wherever it names an arm."""
    a, b = pair
    swap = {a: b, b: a}
    names: dict[str, str] = {}
    _arm_names(node, pair, names)
    name_swap = {names[a]: names[b], names[b]: names[a]} if len(names) == 2 else {}

    def walk(x: Any) -> Any:
        if isinstance(x, dict):
            out = {}
            for k, v in x.items():
                if k in ARM_KEYS and isinstance(v, str):
                    out[k] = swap.get(v, v)
                elif k in ARM_LIST_KEYS and isinstance(v, list):
                    out[k] = [swap.get(e, e) if isinstance(e, str) else walk(e) for e in v]
                elif k == "arm_name" and isinstance(v, str):
                    out[k] = name_swap.get(v, v)
                else:
                    out[k] = walk(v)
            return out
        if isinstance(x, list):
            return [walk(v) for v in x]
        return x

    return walk(node)


def swap_arms(src: str | Path, dst: str | Path, swaps: Mapping[str, tuple[str, str]]) -> dict[str, int]:
    """Copy the results folder ``src`` to ``dst``, swapping two arms in each named experiment's files.

    Args:
        src: a ``results/`` folder (e.g. the repository's).
        dst: the copy's folder; it must not exist yet (a stale copy would mix old and new files).
        swaps: ``{experiment: (arm_a, arm_b)}``, the experiment being a subfolder of ``src``, e.g.
            ``{"cifar": ("A0", "A1"), "grokking": ("adamw", "stiefel_learned")}``.

    Returns:
        ``{experiment: number of JSON files rewritten}``.

    Raises:
        ValueError: ``src`` is not a folder, ``dst`` exists, an experiment has no folder in ``src``,
            or a pair does not name two different arms.
    """
    src, dst = Path(src), Path(dst)
    if not src.is_dir():
        raise ValueError(f"{src} is not a folder; give the results/ folder to copy")
    if dst.exists():
        raise ValueError(f"{dst} exists; give a new folder (remove the old copy first)")
    for exp, pair in swaps.items():
        if not (src / exp).is_dir():
            raise ValueError(f"no folder {exp!r} in {src}; experiments there: "
                             f"{sorted(p.name for p in src.iterdir() if p.is_dir())}")
        if len(pair) != 2 or pair[0] == pair[1]:
            raise ValueError(f"swaps[{exp!r}] must name two different arms, got {pair!r}")
    shutil.copytree(src, dst)
    counts = {}
    for exp, pair in swaps.items():
        counts[exp] = 0
        for path in sorted((dst / exp).rglob("*.json")):
            data = json.loads(path.read_text())
            path.write_text(json.dumps(swap_in(data, tuple(pair))))
            counts[exp] += 1
    return counts

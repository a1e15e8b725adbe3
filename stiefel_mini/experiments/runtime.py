"""How a run runs: its random streams, its thread count and its progress bar.

One seeding rule for every experiment: a run has one integer ``seed``, and every random thing it
draws (the data split, the initial weights, the batch order, ...) comes from its own named stream,
``generator(seed, name)``, seeded by ``crc32("{seed}/{name}")``. A stream does not depend on which
other streams were drawn first or how much, so adding a measurement never moves the numbers, and two
arms of one seed that draw the same streams start from the same point.
"""

from __future__ import annotations

import os
import zlib
from typing import Any, Iterable

import torch

__all__ = ["stream_seed", "generator", "set_threads", "progress"]


def stream_seed(seed: int, name: str) -> int:
    """The 31-bit seed of stream ``name`` of run ``seed``: ``crc32(f"{seed}/{name}") & 0x7FFFFFFF``."""
    return zlib.crc32(f"{int(seed)}/{name}".encode()) & 0x7FFFFFFF


def generator(seed: int, name: str, device: str | torch.device = "cpu") -> torch.Generator:
    """A fresh ``torch.Generator`` on ``device`` for stream ``name`` of run ``seed`` (see the module)."""
    return torch.Generator(device=device).manual_seed(stream_seed(seed, name))


def set_threads(n: int | None) -> None:
    """Pin torch's intra-op threads (``None`` or 0 leaves the default). Results are timed per thread."""
    if n:
        torch.set_num_threads(int(n))


def progress(
    iterable: Iterable | None = None,
    total: int | None = None,
    desc: str | None = None,
    enabled: bool = True,
    **kwargs: Any,
):
    """A tqdm progress bar, silent when ``enabled`` is false or ``STIEFEL_MINI_PROGRESS=0`` is set.

    Used as an iterator (``for step in progress(range(n), desc="train")``) or driven by hand
    (``bar = progress(total=n); bar.update(); bar.set_postfix(...)``). The environment switch lets the
    book build and CI silence every experiment without touching their configs.
    """
    from tqdm.auto import tqdm

    if os.environ.get("STIEFEL_MINI_PROGRESS", "1").lower() in {"false", "0", "no", "n", "off"}:
        enabled = False
    return tqdm(iterable, total=total, desc=desc, disable=not enabled, **kwargs)

"""How a run runs: its random streams, its thread count and its progress bar.

One seeding rule for every experiment: a run has one integer ``seed``, and every random thing it
draws (the data split, the initial weights, the batch order, ...) comes from its own named stream,
``generator(seed, name)``, seeded by ``crc32("{seed}/{name}")``. A stream does not depend on which
other streams were drawn first or how much, so adding a measurement never moves the numbers, and two
arms of one seed that draw the same streams start from the same point.
"""

from __future__ import annotations

import contextlib
import os
import zlib
from typing import Any, Iterable, Iterator

import torch

__all__ = ["stream_seed", "generator", "set_threads", "subnormals_flushed", "progress"]


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


@contextlib.contextmanager
def subnormals_flushed() -> Iterator[None]:
    """Within the block, CPU arithmetic treats subnormal floats (float32 below 1.2e-38) as zero.

    Late in a long grokking run, after the training loss has all but vanished, gradients and
    Adam's moments shrink into the subnormal range, where x86 arithmetic is tens of times slower
    (Adam's moment update 71x, ``benchmarks/subnormals.py``), and a step took about 6x as long.
    Numbers that small move no float32 weight of ordinary size, so the runs do not change: an
    8,000-step ``long`` run (``adamw``, seed 4) gave a bitwise identical history with and without.
    The flag (``torch.set_flush_denormal``) is process-wide, so the previous setting is restored
    on exit; where the CPU cannot flush, nothing changes.
    """
    was = (torch.tensor(1e-20) * 1e-19).item() == 0.0  # torch has no getter: is 1e-39 flushed now?
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(was)


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

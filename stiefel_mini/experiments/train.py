"""The short training loop the chapters' examples call: random minibatches, one optimizer, a watched frame.

:func:`train` is the loop of an example, not of an experiment (each experiment's ``run`` measures
more along the way). It draws every minibatch from the generator it is given, so two calls with
generators of the same seed see the same batches, which is what a resumed run must reproduce.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["train"]


def train(model: nn.Module, optimizer: torch.optim.Optimizer, x: Tensor, y: Tensor, *, steps: int,
          batch_size: int, generator: torch.Generator, loss_fn: Callable[[Tensor, Tensor], Tensor] = F.cross_entropy,
          autocast: torch.dtype | None = None, watch: Tensor | None = None) -> dict[str, list[float]]:
    """Train ``model`` for ``steps`` optimizer steps on minibatches of ``(x, y)``.

    Each step draws ``batch_size`` row indices uniformly with replacement from ``generator``
    (``torch.randint(0, len(x), (batch_size,))``), computes ``loss_fn(model(x[idx]), y[idx])`` (under
    ``torch.autocast`` to ``autocast`` when given, on ``x``'s device type), then ``zero_grad``,
    ``backward`` and ``optimizer.step()``. The model is put in training mode first and left there.

    Shapes: ``x`` ``(N, ...)``, ``y`` ``(N, ...)``; ``watch``: a parameter ``(..., n, p)`` whose step
    length is recorded.

    Returns:
        ``{"loss": [...], "step_norm": [...]}``: the loss of each step and, with ``watch``, the largest
        Frobenius norm over its leading dimensions of the change ``||W_{t+1} - W_t||_F`` (else ``[]``).
    """
    losses: list[float] = []
    moves: list[float] = []
    model.train()
    for _ in range(steps):
        idx = torch.randint(0, len(x), (batch_size,), generator=generator)
        with torch.autocast(x.device.type, dtype=autocast or torch.bfloat16, enabled=autocast is not None):
            loss = loss_fn(model(x[idx]), y[idx])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        before = None if watch is None else watch.detach().clone()
        optimizer.step()
        if watch is not None:
            moves.append(torch.linalg.matrix_norm(watch.detach() - before).max().item())
        losses.append(loss.item())
    return {"loss": losses, "step_norm": moves}

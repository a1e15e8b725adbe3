"""AdamW's step with ``torch.optim.AdamW``'s kernel and state layout, for the parameters that
:class:`~stiefel_mini.optim.StiefelAdam` and :class:`~stiefel_mini.muon.StiefelMuon` train as AdamW.

Both optimizers call :func:`adamw_step`, so those parameters move exactly as under
``torch.optim.AdamW`` and their state dicts read the same.
"""

from __future__ import annotations

from typing import Any, Iterable

import torch
from torch import Tensor
from torch.optim.adam import adam as _adam_functional

__all__ = ["adamw_step"]


def adamw_step(
    params: Iterable[Tensor],
    state: Any,
    *,
    lr: float | Tensor,
    betas: tuple[float, float],
    eps: float,
    weight_decay: float,
    foreach: bool | None = None,
    maximize: bool = False,
    owner: str = "this optimizer",
) -> None:
    """One AdamW step on each of ``params`` that has a gradient ``g`` (decoupled weight decay
    ``lambda``, learning rate ``eta``, step count ``t``):

    .. math::
        m \\leftarrow \\beta_1 m + (1 - \\beta_1) g, \\quad v \\leftarrow \\beta_2 v + (1 - \\beta_2) g^2, \\quad
        \\theta \\leftarrow (1 - \\eta \\lambda)\\, \\theta - \\eta\\, \\frac{m / (1 - \\beta_1^t)}{\\sqrt{v / (1 - \\beta_2^t)} + \\epsilon}

    ``state`` maps each parameter to its state (an optimizer's ``self.state``): ``step`` (a float32
    scalar tensor), ``exp_avg`` (``m``) and ``exp_avg_sq`` (``v``), shaped like the parameter and
    created at zero on its first step, as ``torch.optim.AdamW`` lays them out; ``maximize`` steps up the
    gradient, as torch's. Raises
    ``RuntimeError`` for a sparse gradient, naming ``owner``. Called inside an optimizer's ``step``
    (under ``torch.no_grad``), as the parameters are written in place.

    Reference: Loshchilov & Hutter (2019), "Decoupled weight decay regularization".
    """
    ps, grads, exp_avgs, exp_avg_sqs, steps = [], [], [], [], []
    for p in params:
        if p.grad is None:
            continue
        if p.grad.is_sparse:
            raise RuntimeError(f"{owner} does not support sparse gradients")
        s = state[p]
        if len(s) == 0:
            s["step"] = torch.tensor(0.0, dtype=torch.float32)
            s["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            s["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        ps.append(p)
        grads.append(p.grad)
        exp_avgs.append(s["exp_avg"])
        exp_avg_sqs.append(s["exp_avg_sq"])
        steps.append(s["step"])
    if not ps:
        return
    _adam_functional(ps, grads, exp_avgs, exp_avg_sqs, [], steps, foreach=foreach,
                     has_complex=any(torch.is_complex(p) for p in ps), decoupled_weight_decay=True, amsgrad=False,
                     beta1=betas[0], beta2=betas[1], lr=lr, weight_decay=weight_decay, eps=eps, maximize=maximize)

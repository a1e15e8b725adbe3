"""Reference optimizers the comparisons run beside StiefelAdam, written from their papers.

Not part of the library's API: :class:`Muon` and its :func:`newton_schulz` iteration exist so that
:mod:`stiefel_mini.experiments.compare_tools` and the language-model study
(:mod:`stiefel_mini.experiments.lm`) can compare against an optimizer that orthogonalises the
*update* rather than the weight, with no extra dependency (``torch.optim.Muon`` iterates in
bfloat16, slow on a CPU).

Reference: Jordan et al. (2024), "Muon: an optimizer for hidden layers in neural networks".
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["newton_schulz", "Muon"]


def newton_schulz(G: Tensor, steps: int = 5) -> Tensor:
    """Approximate orthogonal polar factor ``U V^T`` of ``G = U S V^T`` by a quintic iteration.

    ``X <- a X + (b A + c A^2) X`` with ``A = X X^T``, from ``X = G / ||G||_F``, on the wide
    orientation (fewer rows) so that ``A`` is the small Gram matrix. The coefficients
    ``(a, b, c) = (3.4445, -4.7750, 2.0315)`` push every singular value into roughly [0.7, 1.2]
    in five steps rather than converging exactly, which is all an update direction needs.

    Shapes: ``(..., r, c)`` -> ``(..., r, c)``. Reference: Jordan et al. (2024), "Muon".
    """
    a, b, c = 3.4445, -4.7750, 2.0315
    tall = G.shape[-2] > G.shape[-1]
    X = G.mT if tall else G  # (..., min, max)
    X = X / (torch.linalg.matrix_norm(X, keepdim=True) + 1e-7)
    for _ in range(steps):
        A = X @ X.mT  # (..., min, min)
        X = a * X + (b * A + c * A @ A) @ X
    return X.mT if tall else X


class Muon(torch.optim.Optimizer):
    """Muon: SGD with Nesterov momentum whose update is orthogonalised per matrix.

    ``B <- mu B + G``, ``O = NS(G + mu B)``, ``W <- (1 - lr wd) W - lr sqrt(max(1, fan_out/fan_in)) O``
    for each matrix, with ``NS`` the Newton-Schulz iteration :func:`newton_schulz`. The weights are
    not kept on any manifold: it is the *step* that is (nearly) orthogonal.

    Layouts, as group options: by default a param ``(..., r, c)`` is a batch of ``nn.Linear``
    weights ``(fan_out, fan_in)``; ``in_out=True`` says it is stored ``(fan_in, fan_out)`` (GPT-2's
    ``Conv1D``); ``heads=True`` says a 3-D param ``(H, fan_in, d_head)`` holds the head blocks of
    one ``(fan_in, H * d_head)`` projection (a converted Q or K), orthogonalised as that one matrix,
    as the Muon recipe orthogonalises Q, K and V each whole. The Newton-Schulz iteration runs in the
    param's dtype (float32 on the CPU).

    Reference: Jordan et al. (2024), "Muon: an optimizer for hidden layers in neural networks";
    decoupled weight decay as in Liu et al. (2025), "Muon is scalable for LLM training".
    """

    def __init__(self, params, lr: float = 0.02, momentum: float = 0.95, weight_decay: float = 0.0,
                 in_out: bool = False, heads: bool = False) -> None:
        if lr <= 0 or not 0 <= momentum < 1 or weight_decay < 0:
            raise ValueError(f"Muon needs lr > 0, 0 <= momentum < 1 and weight_decay >= 0; got lr={lr}, "
                             f"momentum={momentum}, weight_decay={weight_decay}")
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay, in_out=in_out,
                                      heads=heads))
        for group in self.param_groups:
            for p in group["params"]:
                if p.ndim < 2 or (group["heads"] and p.ndim != 3):
                    raise ValueError(f"Muon updates matrices (heads=True: (H, fan_in, d_head) tensors); got a "
                                     f"param of shape {tuple(p.shape)}: give vectors and embeddings to AdamW")

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            lr, mu, wd = group["lr"], group["momentum"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                buf = self.state[p].setdefault("momentum_buffer", torch.zeros_like(p))
                buf.mul_(mu).add_(p.grad)
                G = p.grad + mu * buf
                if group["heads"]:
                    H, n, d = G.shape
                    G = G.permute(1, 0, 2).reshape(n, H * d)  # (H, in, dh) -> (in, H * dh)
                fan_in, fan_out = G.shape[-2:] if group["in_out"] or group["heads"] else G.shape[-2:][::-1]
                update = newton_schulz(G)
                if group["heads"]:
                    update = update.reshape(n, H, d).permute(1, 0, 2)  # (in, H * dh) -> (H, in, dh)
                p.mul_(1 - lr * wd).add_(update, alpha=-lr * max(1.0, fan_out / fan_in) ** 0.5)

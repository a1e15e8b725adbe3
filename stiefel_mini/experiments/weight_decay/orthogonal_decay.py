"""What weight decay does to an orthogonal weight under the other ways of keeping it orthogonal.

Three short, executed demonstrations, one per library, each from named streams of ``seed``:
:func:`torch_orthogonal_decay` (``torch.nn.utils.parametrizations.orthogonal`` under AdamW's decay),
:func:`geotorch_decay` (decoupled decay alone on a ``geotorch.orthogonal`` weight) and
:func:`geoopt_decay` (one ``geoopt.optim.RiemannianAdam`` step with decay on ``geoopt.Stiefel``).
The training comparison of the same libraries is :mod:`stiefel_mini.experiments.compare_tools`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from stiefel_mini.experiments.runtime import generator, stream_seed
from stiefel_mini.geometry import orthogonality_error, random_stiefel

__all__ = ["torch_orthogonal_decay", "geotorch_decay", "geoopt_decay"]


def _demo_data(d_in: int, n: int = 32, seed: int = 0) -> Tensor:
    """``n`` Gaussian inputs of size ``d_in`` from the ``"data"`` stream of ``seed``."""
    return torch.randn(n, d_in, generator=generator(seed, "data"))


def torch_orthogonal_decay(out_features: int = 64, in_features: int = 256, steps: int = 3,
                           lr: float = 1e-3, weight_decay: float | None = None,
                           orthogonal_map: str | None = None, seed: int = 0) -> dict[str, Any]:
    """``nn.Linear(in, out)`` under ``torch.nn.utils.parametrizations.orthogonal`` trained by
    ``torch.optim.AdamW`` (``weight_decay=None``: AdamW's default, 0.01) on ``||W x||^2``.

    Returns per step (0 = before training): ``norm`` (``||W||_F``), ``orth`` (``||W W^T - I||_F``),
    ``diag`` (the stored diagonal of the parametrization's unconstrained matrix, for the Householder
    map; ``None`` otherwise) and the map used.
    """
    from torch.nn.utils.parametrizations import orthogonal

    torch.manual_seed(stream_seed(seed, "init"))  # nn.Linear and the parametrization draw globally
    lin = nn.Linear(in_features, out_features, bias=False)
    orthogonal(lin, orthogonal_map=orthogonal_map)
    kwargs = {} if weight_decay is None else {"weight_decay": weight_decay}
    opt = torch.optim.AdamW(lin.parameters(), lr=lr, **kwargs)
    x = _demo_data(in_features, seed=seed)
    param = lin.parametrizations.weight[0]
    used = param.orthogonal_map.name
    out: dict[str, Any] = {"map": used, "weight_decay": opt.param_groups[0]["weight_decay"],
                           "norm": [], "orth": [], "diag": []}

    def record():
        with torch.no_grad():
            W = lin.weight
            out["norm"].append(torch.linalg.matrix_norm(W).item())
            out["orth"].append(orthogonality_error(W).item())
            X = lin.parametrizations.weight.original
            out["diag"].append(X.diagonal().tolist()[:4] if used == "householder" else None)

    record()
    for _ in range(steps):
        loss = lin(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        record()
    return out


def geotorch_decay(out_features: int = 16, in_features: int = 64, steps: int = 50,
                   lr: float = 1e-2, weight_decay: float = 1.0, seed: int = 0) -> dict[str, Any]:
    """What decoupled weight decay alone does to a ``geotorch.orthogonal`` weight.

    ``geotorch`` writes ``W = phi_B(X)``: an unconstrained matrix X mapped onto the manifold around a
    base point ``B = phi_B(0)``. First the weight is moved away from B (30 AdamW steps, no decay, on
    ``-<W, T>`` for a random frame T); then a fresh ``AdamW(weight_decay=...)`` takes ``steps`` steps
    with zero gradients, so its Adam update is exactly zero and only the decay ``X <- (1 - lr wd) X``
    acts. Returns per recorded step ``dist_to_base`` (``||W - B||_F``), ``x_norm`` (``||X||_F``) and
    ``orth`` (``||W W^T - I||_F``), with ``steps_recorded``.
    """
    import geotorch

    torch.manual_seed(stream_seed(seed, "init"))  # geotorch samples its start from the global generator
    T = random_stiefel(out_features, in_features, generator=generator(seed, "target"))
    lin = nn.Linear(in_features, out_features, bias=False)
    geotorch.orthogonal(lin, "weight")
    P = lin.parametrizations.weight
    opt = torch.optim.AdamW(lin.parameters(), lr=0.05, weight_decay=0.0)
    for _ in range(30):
        loss = -(lin.weight * T).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    out: dict[str, Any] = {"weight_decay": weight_decay, "lr": lr, "steps_recorded": [],
                           "dist_to_base": [], "x_norm": [], "orth": []}
    decay = torch.optim.AdamW(lin.parameters(), lr=lr, weight_decay=weight_decay)
    for step in range(steps + 1):
        if step % max(1, steps // 5) == 0 or step == steps:
            with torch.no_grad():
                W = lin.weight
                base = P[0](torch.zeros_like(P.original))  # B = phi_B(0)
                out["steps_recorded"].append(step)
                out["dist_to_base"].append(torch.linalg.matrix_norm(W - base).item())
                out["x_norm"].append(torch.linalg.matrix_norm(P.original).item())
                out["orth"].append(orthogonality_error(W).item())
        if step == steps:
            break
        P.original.grad = torch.zeros_like(P.original)  # no loss: only the decay moves X
        decay.step()
    return out


def geoopt_decay(n: int = 256, p: int = 64, lr: float = 1e-2, weight_decay: float = 0.1,
                 seed: int = 0) -> dict[str, Any]:
    """One ``geoopt.optim.RiemannianAdam`` step on a ``ManifoldParameter`` on ``geoopt.Stiefel``.

    Returns: ``grad_rewritten`` (``max |p.grad_after - p.grad_before|`` and its distance from
    ``weight_decay * W``), ``same_point`` (``max |W(wd) - W(0)|`` after the step: the decay is
    projected away), and ``accumulated`` (after two ``backward`` calls without ``zero_grad``,
    how far ``p.grad`` is from the sum of the two true gradients).
    """
    import geoopt

    g = generator(seed, "init")
    W0 = random_stiefel(n, p, generator=g, dtype=torch.float64)
    G = torch.randn(n, p, generator=g, dtype=torch.float64)
    result: dict[str, Any] = {"weight_decay": weight_decay}
    finals = {}
    for wd in (0.0, weight_decay):
        param = geoopt.ManifoldParameter(W0.clone(), manifold=geoopt.Stiefel())
        opt = geoopt.optim.RiemannianAdam([param], lr=lr, weight_decay=wd)
        (param * G).sum().backward()
        before = param.grad.clone()
        opt.step()
        after = param.grad.clone()
        finals[wd] = param.detach().clone()
        if wd:
            result["grad_change"] = (after - before).abs().max().item()
            result["grad_change_minus_wdW"] = (after - before - wd * W0).abs().max().item()
    result["max_change_from_decay"] = (finals[weight_decay] - finals[0.0]).abs().max().item()
    return result

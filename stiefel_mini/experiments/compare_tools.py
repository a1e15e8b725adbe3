"""Tools for training orthonormal frames, measured side by side on one model in one run.

The model is the query/key path of one attention layer, ``softmax(x W_Q (x W_K)^T / sqrt(p)) x``,
with ``n_heads`` frames ``W_Q^h, W_K^h`` in St(d_model, d_head) (256 x 64 by default), fitted to a
teacher of the same form by mean squared error. Every tool starts from the same frames, sees the same
batches and runs the same number of steps at the same learning rate:

* ``stiefel_mini``: :class:`stiefel_mini.optim.StiefelAdam` (per-frame scalar second moment, polar
  retraction, trust cap).
* ``geoopt``: ``geoopt.optim.RiemannianAdam`` on ``geoopt.ManifoldParameter(manifold=geoopt.Stiefel())``
  (canonical metric, Cayley retraction).
* ``torch_orthogonal``: ``torch.nn.utils.parametrizations.orthogonal`` (Householder map for
  non-square matrices), trained with ``torch.optim.AdamW``.
* ``geotorch``: ``geotorch.orthogonal`` (matrix exponential, dynamic trivialization), with AdamW.
* ``muon``: :class:`~stiefel_mini.experiments.reference_optimizers.Muon`, momentum orthogonalised by
  a Newton-Schulz iteration; the weights themselves are not constrained.
* ``adamw``: ``torch.optim.AdamW`` on unconstrained weights, for reference.

What weight decay does to an orthogonal weight under each library is in
:mod:`stiefel_mini.experiments.weight_decay.orthogonal_decay`.

``run(cfg)`` trains one tool (``cfg.tool``); ``sweep(cfg)`` gives one row per tool of ``cfg.tools``.
CLI: ``python -m stiefel_mini.experiments.compare_tools --steps 40 --weight_decay 0.1``.

Reference: Becigneul & Ganea (2019) and Kochurov et al. (2020) for geoopt; Lezcano-Casado (2019),
"Trivializations for gradient-based optimization on manifolds" for geotorch; Jordan et al. (2024),
"Muon: an optimizer for hidden layers in neural networks".
"""

from __future__ import annotations

import math
import re
import statistics
import sys
import time
from dataclasses import dataclass, replace
from typing import Any, Literal, Sequence

import torch
from torch import Tensor, nn

from stiefel_mini.experiments.arms import make_optimizer
from stiefel_mini.experiments.records import provenance, save_results
from stiefel_mini.experiments.reference_optimizers import Muon
from stiefel_mini.experiments.runner import cli, parse_cli
from stiefel_mini.experiments.runtime import generator, progress
from stiefel_mini.geometry import orthogonality_error, random_stiefel

__all__ = ["TOOLS", "ToolConfig", "QKAttention", "run", "sweep", "KERNELS", "error_text", "format_table", "main"]

TOOLS = ("stiefel_mini", "geoopt", "torch_orthogonal", "geotorch", "muon", "adamw")
"""The libraries compared (tools, not arms: each is used through its own API)."""


@dataclass
class ToolConfig:
    """One run (``tool``) and the sweep's list of tools (``tools``), on the same frames and batches.

    :func:`sweep` runs each tool three times: float32 without decay, float32 with ``weight_decay``,
    and bfloat16 weights without decay; :func:`run` uses ``weight_decay`` and ``dtype`` as given.
    """

    tool: str = "stiefel_mini"
    tools: tuple[str, ...] = TOOLS
    steps: int = 60
    lr: float = 1e-3
    weight_decay: float = 0.0
    dtype: Literal["float32", "bfloat16"] = "float32"
    batch: int = 8
    seq: int = 16
    full_batch: bool = False  # reuse one batch every step (deterministic gradients)
    seed: int = 0
    progress: bool = False


class QKAttention(nn.Module):
    r"""Attention with identity values: ``y = mean_h softmax(x W_Q^h (x W_K^h)^T / sqrt(p)) x``.

    Only the tall frames ``w_q``, ``w_k`` of shape ``(n_heads, d_model, d_head)`` are trained, so
    every tool below acts on exactly the same tensors. Shapes: ``(B, T, d_model)`` -> same.
    """

    def __init__(self, d_model: int = 256, d_head: int = 64, n_heads: int = 2, *,
                 generator: torch.Generator | None = None) -> None:
        super().__init__()
        g = generator
        self.w_q = nn.Parameter(random_stiefel(n_heads, d_model, d_head, generator=g))
        self.w_k = nn.Parameter(random_stiefel(n_heads, d_model, d_head, generator=g))

    def frames(self) -> list[Tensor]:
        return [self.w_q, self.w_k]

    def forward(self, x: Tensor) -> Tensor:
        xh = x.unsqueeze(1)  # (B, 1, T, d)
        q, k = xh @ self.w_q, xh @ self.w_k  # (B, H, T, p)
        attn = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).softmax(dim=-1)  # (B, H, T, T)
        return (attn @ xh).mean(dim=1)  # (B, T, d)


def _setup(tool: str, model: QKAttention, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    """Attach ``tool`` to the model's frames (in place) and return its optimizer."""
    if tool == "stiefel_mini":
        # Default betas and max_step; the decay is handed to the frames, which ignore it.
        return make_optimizer(model, "stiefel", lr=lr, qk_weight_decay=weight_decay)
    if tool == "geoopt":
        import geoopt

        manifold = geoopt.Stiefel()  # canonical metric
        model.w_q = geoopt.ManifoldParameter(model.w_q.data, manifold=manifold)
        model.w_k = geoopt.ManifoldParameter(model.w_k.data, manifold=manifold)
        return geoopt.optim.RiemannianAdam(model.parameters(), lr=lr, weight_decay=weight_decay)
    if tool in ("torch_orthogonal", "geotorch"):
        start = [w.detach().clone() for w in model.frames()]
        for name, w0 in zip(("w_q", "w_k"), start):
            if tool == "torch_orthogonal":
                nn.utils.parametrizations.orthogonal(model, name)  # starts at the current weight
            else:
                import geotorch

                geotorch.orthogonal(model, name)  # samples a random start ...
                setattr(model, name, w0)  # ... so set it to the common one
        return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    if tool == "muon":
        return Muon(model.parameters(), lr=lr, weight_decay=weight_decay)
    if tool == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    raise ValueError(f"unknown tool {tool!r}; choose one of {TOOLS}")


def _frames(model: QKAttention) -> Tensor:
    """The current frames (parametrizations evaluated), ``(2 n_heads, d_model, d_head)`` float64."""
    with torch.no_grad():
        return torch.cat([model.w_q, model.w_k]).double()


def run(cfg: ToolConfig) -> dict[str, Any]:
    """Train the frames of a :class:`QKAttention` with ``cfg.tool`` and measure what happened.

    The student, the teacher and the batches come from the streams ``"student"``, ``"teacher"`` and
    ``"data"`` of ``cfg.seed``. Every step draws a new batch, or reuses one batch if ``full_batch``
    (deterministic gradients, so that momentum does not average noise away and step lengths show the
    optimizer alone).

    Returns a dict with ``ms_per_step`` (median wall time of forward, backward and update),
    ``step_over_lr`` (median over steps 2.. and frames of ``||W_{t+1} - W_t||_F / lr``),
    ``first_step_over_lr`` (the same for step 1, before any averaging in the moments), ``drift``
    (final ``max ||W^T W - I||_F``), ``loss`` (last training loss), ``frames`` (final frames,
    float64) and ``error`` (``None``, or the exception's message if the tool failed).
    """
    tool, lr, dtype = cfg.tool, cfg.lr, getattr(torch, cfg.dtype)
    model = QKAttention(generator=generator(cfg.seed, "student"))
    teacher = QKAttention(generator=generator(cfg.seed, "teacher"))
    out: dict[str, Any] = {"tool": tool, "error": None}
    g = generator(cfg.seed, "data")
    n_batches = 1 if cfg.full_batch else cfg.steps
    data = [torch.randn(cfg.batch, cfg.seq, model.w_q.shape[1], generator=g) for _ in range(n_batches)]
    data = data * cfg.steps if cfg.full_batch else data
    with torch.no_grad():
        targets = [teacher(x) for x in data]
    try:
        model.to(dtype)
        opt = _setup(tool, model, lr, cfg.weight_decay)
        times, moves, prev = [], [], _frames(model)
        for x, y in zip(data, targets):
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = (model(x.to(dtype)).float() - y).square().mean()
            loss.backward()
            opt.step()
            times.append(time.perf_counter() - t0)
            now = _frames(model)
            moves.append(torch.linalg.matrix_norm(now - prev).median().item() / lr)
            prev = now
    except Exception as e:  # reported in the table: some tools have no bf16 kernels
        out["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"
        return out
    out.update(
        ms_per_step=1e3 * statistics.median(times),
        step_over_lr=statistics.median(moves[1:]),
        first_step_over_lr=moves[0],
        drift=orthogonality_error(prev).max().item(),
        loss=loss.item(),
        frames=prev,
    )
    return out


def sweep(cfg: ToolConfig) -> list[dict[str, Any]]:
    """One row per tool of ``cfg.tools``: float32 run, the same run with ``cfg.weight_decay``, and a
    bf16-weights run (both without decay when ``cfg.weight_decay`` is 0).

    Row keys: ``tool``, ``ms_per_step``, ``step_over_lr``, ``drift``, ``loss`` (float32 run, no
    decay); ``wd_change`` (``||W_wd - W||_F / ||W||_F`` between the final frames with and without
    decay, 0 when decay does nothing), ``wd_norm`` (mean ``||W_wd||_F / sqrt(d_head)``: 1 on the
    manifold, below 1 if decay shrinks the weights); ``bf16_drift`` and ``bf16_error``.
    """
    rows = []
    for tool in progress(cfg.tools, desc="tools", enabled=cfg.progress):
        one = replace(cfg, tool=tool, weight_decay=0.0, dtype="float32")
        base = run(one)
        if base["error"]:
            raise RuntimeError(f"{tool} failed in float32: {base['error']}")
        wd = run(replace(one, weight_decay=cfg.weight_decay))
        bf16 = run(replace(one, dtype="bfloat16"))
        W, W_wd = base["frames"], wd["frames"]
        rows.append(
            {
                **{k: base[k] for k in ("tool", "ms_per_step", "step_over_lr", "drift", "loss")},
                "wd_change": (torch.linalg.norm(W_wd - W) / torch.linalg.norm(W)).item(),
                "wd_norm": (torch.linalg.matrix_norm(W_wd) / math.sqrt(W.shape[-1])).mean().item(),
                "bf16_drift": None if bf16["error"] else bf16["drift"],
                "bf16_error": bf16["error"],
            }
        )
    return rows


KERNELS = {"lu": "LU factorisation", "orgqr": "Householder product", "geqrf": "QR factorisation"}
"""torch's names of the kernels a tool's retraction or map needs, as a reader knows them."""


def error_text(error: str) -> str:
    """A tool's error (:func:`run`'s ``error``) in words: a kernel torch lacks for a dtype, ``'"lu_cpu" not
    implemented for 'BFloat16''``, as ``"no bfloat16 LU factorisation on the CPU"``; any other error as its
    message, without the exception's name."""
    m = re.search(r'"(\w+?)(?:_(cpu|cuda))?" not implemented for \'(\w+)\'', error)
    if m is None:
        return error.split(": ", 1)[-1]
    kernel, device, dtype = m.groups()
    where = {"cpu": " on the CPU", "cuda": " on the GPU"}.get(device or "", "")
    return f"no {dtype.lower()} {KERNELS.get(kernel, kernel)}{where}"


def format_table(rows: list[dict[str, Any]]) -> str:
    """The rows of :func:`compare` as a fixed-width text table."""
    head = (
        f"{'tool':<17}{'ms/step':>9}{'|dW|/lr':>9}{'drift':>10}{'loss':>8}"
        f"{'wd: dW/W':>10}{'wd: |W|':>9}  {'bf16 weights: drift or error'}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        bf16 = f"{r['bf16_drift']:.1e}" if r["bf16_error"] is None else r["bf16_error"]
        lines.append(
            f"{r['tool']:<17}{r['ms_per_step']:>9.1f}{r['step_over_lr']:>9.2f}{r['drift']:>10.1e}"
            f"{r['loss']:>8.4f}{r['wd_change']:>10.1e}{r['wd_norm']:>9.3f}  {bf16}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """CLI: ``[--out PATH] [--field value ...]``; prints :func:`format_table` of the sweep, and writes
    the rows with their provenance to ``PATH`` if given."""
    cfg, out, _ = parse_cli(ToolConfig, list(sys.argv[1:] if argv is None else argv),
                            usage="python -m stiefel_mini.experiments.compare_tools [--out PATH] [--field value ...]")
    rows = sweep(cfg)
    print(format_table(rows))
    if out:
        save_results(out, {"experiment": "compare_tools", "provenance": provenance(cfg, [cfg.seed]), "rows": rows})
        print(f"wrote {out}")
    return rows


if __name__ == "__main__":
    cli(main)

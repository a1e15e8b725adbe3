"""How far float32 frames stay from the manifold under repeated polar retractions, by the precision
of the retraction, and what the higher precision costs.

    python benchmarks/gram_precision.py                # 10,000 steps, frames 8 x 256 x 64
    python benchmarks/gram_precision.py --steps 1000   # a quick look

Each step is ``W <- polar(W + S)`` with a random tangent ``S`` of Frobenius length ``--length``
(StiefelAdam's trust cap is 0.1; its steps are about ``lr``), on float32 frames:

* ``float32``: the checked polar factor on the float32 ``M = W + S``, the retraction
  ``StiefelAdam`` uses: the Gram matrix ``M^T M``, the series ``Z = (M^T M)^{-1/2}`` and the
  product ``M Z`` in float32;
* ``float64 Gram``: ``M^T M`` and the series in float64 (from the float32 M), ``Z`` rounded to
  float32, the product ``M Z`` in float32: the least that a higher-precision Gram matrix costs.

Printed: the largest ``||W^T W - I||_F`` over the frames after the last step, evaluated in float64
(the frames' own error) and in float32, and the time of one retraction of a batch shaped as the
48 frames of ``benchmarks/optimizer_step.py`` at width 256 (best of interleaved rounds).
"""

from __future__ import annotations

import argparse
import time

import torch

from stiefel_mini._numerics import inv_sqrt_series, polar_or_nan, series_degree
from stiefel_mini.geometry import orthogonality_error, project_tangent, random_stiefel


def retract(W: torch.Tensor, S: torch.Tensor, gram: torch.dtype, bound: float) -> torch.Tensor:
    """``polar(W + S)`` with the Gram matrix and the series computed in ``gram``."""
    M = W + S
    if gram == M.dtype:
        Y, ok = polar_or_nan(M, bound)
    else:
        M64 = M.to(gram)
        E = M64.mT @ M64
        E.diagonal(dim1=-2, dim2=-1).sub_(1.0)  # M^T M - I, (B, p, p)
        ok = torch.linalg.matrix_norm(E) <= bound
        Z = inv_sqrt_series(E, series_degree(bound, gram))
        Y = M @ Z.to(M.dtype)
    if not bool(ok.all()):
        raise RuntimeError("a retraction was refused: lower --length")
    return Y


def drift(dtype: torch.dtype, steps: int, shape: tuple[int, int, int], length: float) -> tuple[float, float]:
    gen = torch.Generator().manual_seed(0)
    W = random_stiefel(*shape, generator=gen)  # float32
    bound = length**2 + 0.02  # as StiefelAdam's capped step: ||E||_F <= length^2 + the frame's error
    for _ in range(steps):
        xi = project_tangent(W, torch.randn(shape, generator=gen))
        S = xi * (length / torch.linalg.matrix_norm(xi, keepdim=True))
        W = retract(W, S, dtype, bound)
    return orthogonality_error(W.double()).max().item(), orthogonality_error(W).max().item()


def cost(dtype: torch.dtype, W: torch.Tensor, S: torch.Tensor, bound: float, rounds: int, reps: int) -> list[float]:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps):
            retract(W, S, dtype, bound)
        times.append((time.perf_counter() - t0) / reps)
    return times


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--length", type=float, default=0.1, help="Frobenius length of each step (at most 0.4)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    if not 0.0 < args.length <= 0.4:
        ap.error(f"--length {args.length}: use a step length in (0, 0.4], where the polar series is accurate")
    torch.set_num_threads(args.threads)
    dtypes = {"float32": torch.float32, "float64 Gram": torch.float64}

    print(f"torch {torch.__version__}, {args.threads} thread(s); frames 8 x 256 x 64, float32, "
          f"{args.steps} retractions of length {args.length}\n")
    W = random_stiefel(48, 256, 64, generator=torch.Generator().manual_seed(1))
    bound = args.length**2 + 0.02
    xi = project_tangent(W, torch.randn(W.shape, generator=torch.Generator().manual_seed(2)))
    S = xi * (args.length / torch.linalg.matrix_norm(xi, keepdim=True))
    for dtype in dtypes.values():  # warm-up
        cost(dtype, W, S, bound, 1, 2)
    times: dict[str, list[float]] = {name: [] for name in dtypes}
    for _ in range(args.rounds):  # interleaved, so that a change in load hits both
        for name, dtype in dtypes.items():
            times[name] += cost(dtype, W, S, bound, 1, 5)
    ratio = sorted(a / b for a, b in zip(times["float64 Gram"], times["float32"]))
    print("| Gram matrix and series in | max ||W^T W - I||_F, in float64 | in float32 "
          "| ms per retraction of 48 x 256 x 64 |")
    print("|---|---|---|---|")
    for name, dtype in dtypes.items():
        e64, e32 = drift(dtype, args.steps, (8, 256, 64), args.length)
        print(f"| {name} | {e64:.2e} | {e32:.2e} | {min(times[name]) * 1e3:.2f} |", flush=True)
    print(f"\nfloat64 Gram / float32 time per retraction: median over rounds {ratio[len(ratio) // 2]:.2f}x "
          f"(range {ratio[0]:.2f}-{ratio[-1]:.2f})")


if __name__ == "__main__":
    main()

"""Why the grokking runs flush subnormals: elementwise arithmetic on subnormal floats, side by side.

    python benchmarks/subnormals.py

Times Adam's elementwise second-moment update ``v = beta2 v + (1 - beta2) g^2`` on
a float32 tensor of ordinary numbers and on one computed as 1e-20 * 1e-19 (subnormal, 1e-39, or
zero once flushed, as in a training run), one thread, with
torch's default and inside ``stiefel_mini.experiments.runtime.subnormals_flushed()``, and prints each
time and its ratio to the ordinary numbers' time under the default.
"""

from __future__ import annotations

import contextlib
import time

import torch

from stiefel_mini.experiments.runtime import subnormals_flushed


def time_update(x: torch.Tensor, repeats: int = 200) -> float:
    """Best of 5 rounds of ``repeats`` second-moment updates on ``x``, in seconds per update."""
    v = torch.empty_like(x)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(repeats):
            torch.mul(x, 0.999, out=v)
            v.addcmul_(x, x, value=0.001)
        best = min(best, (time.perf_counter() - t0) / repeats)
    return best


def main() -> None:
    torch.set_num_threads(1)
    n = 512 * 128  # the size of the grokking model's MLP weight
    rows = []
    for label, flush in (("torch default", False), ("subnormals_flushed()", True)):
        with subnormals_flushed() if flush else contextlib.nullcontext():
            normal = torch.full((n,), 0.5)
            # 1e-39 as a training run makes it, by arithmetic: subnormal, or 0 once flushed
            subnormal = torch.full((n,), 1e-20) * 1e-19
            rows.append((label, time_update(normal), time_update(subnormal)))
    base = rows[0][1]
    print("| setting | ordinary numbers (us) | subnormal numbers (us) | subnormal / ordinary, default = 1 |")
    print("|---|---|---|---|")
    for label, t_n, t_s in rows:
        print(f"| {label} | {1e6 * t_n:.1f} ({t_n / base:.2f}x) | {1e6 * t_s:.1f} ({t_s / base:.2f}x) | {t_s / t_n:.1f} |")


if __name__ == "__main__":
    main()

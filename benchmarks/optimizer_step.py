"""Cost of one optimizer step on a ViT-sized model, and drift off the manifold, measured side by side.

    python benchmarks/optimizer_step.py --threads 2    # widths 256 and 512, depth 6, 4 heads
    python benchmarks/optimizer_step.py --rounds 3 --drift-steps 1000   # a quick look
    python benchmarks/optimizer_step.py --no-others --baseline 9162160^ --drift-steps 0   # against an older StiefelAdam
    python benchmarks/optimizer_step.py --device cuda --widths 256 512 1024 --dtype bfloat16

Every optimizer steps the same parameters with the same fixed gradients. Rounds are interleaved
in alternating order (A, B, C, C, B, A, ...) so that a change in machine load hits all of them
alike; each time is the best round, and each ratio between two optimizers is the median over rounds
of the ratio of their times in that round, with its range over rounds in brackets (a paired
comparison: a slow round slows both). Ratios in the time columns are to ``torch.optim.AdamW``
(torch's default implementation) in the same run. The tables use wall-clock time; the results file
also keeps each round's CPU time of the process, which other work on a shared machine inflates
less. Columns:

* ``AdamW``: ``torch.optim.AdamW`` on every parameter, frames included;
* ``StiefelAdam``: the Q/K frames in one ``stiefel=True`` group, AdamW on the rest;
* ``POGO``: ``pogo.POGO`` with ``VectorAdam`` (pogo-torch) on the frames, AdamW on the rest;
* ``geoopt``: ``geoopt.optim.RiemannianAdam`` with the frames on ``geoopt.Stiefel()``;
* ``floor``: AdamW's step plus the five batched products of the frame shape that the frame rule
  needs (``W^T G``, ``W^T M``, ``W S``, ``Y^T Y``, ``Y Z``);
* ``floor+series``: the floor plus the ``p x p`` products of the polar factor's series
  (``(Y^T Y)^{-1/2}`` by the binomial series, two products at the degree the trust cap's bound
  needs in float32): every matrix product of the rule, the arithmetic no implementation of the rule
  with the polar retraction can skip;
* ``StiefelAdam@REV`` (with ``--baseline REV``): ``StiefelAdam`` as it was at git commit ``REV``,
  that commit's ``stiefel_mini`` extracted with ``git archive`` and imported beside this one, on
  the same groups, so that a change to the step is measured against the step before it in one run.

POGO and geoopt are optional (``pip install -e '.[bench]'``); a missing one's column is left out,
and so is geoopt's where torch's batched ``torch.linalg.solve``, which its Stiefel step calls on
``n x n`` systems, gives wrong results at this width and thread count (torch 2.14.1's CPU build does
above about 160 x 160 with 2 threads; the script checks before it times, and says so).
``--out PATH`` also writes every round's time, the drift table, the run's provenance (command,
commit, versions, device, threads) and the load the timing ran under
(:class:`~stiefel_mini.experiments.machine_load.LoadMeter`) to a JSON file; the "Which tool should
I use?" chapter reads ``results/benchmarks/optimizer_step.json``.
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import importlib.metadata
import importlib.util
import io
import platform
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Callable

import torch
from torch import nn
from torch.optim import optimizer as torch_optimizer

from stiefel_mini import StiefelAdam, StiefelSelfAttention, orthogonality_error, param_groups
from stiefel_mini._frame_kernel import compute_dtype, polar_bound
from stiefel_mini._numerics import series_degree, series_products
from stiefel_mini.experiments import stats
from stiefel_mini.experiments.machine_load import LoadMeter
from stiefel_mini.experiments.records import provenance, save_results

ROOT = Path(__file__).resolve().parents[1]
FLOORS = ("floor", "floor+series")
"""The columns that are not optimizers but the arithmetic one step of the rule cannot skip."""
BASELINES: dict[str, object] = {}
"""``StiefelAdam@REV`` column name -> that commit's ``stiefel_mini.optim`` module (:func:`load_baseline`)."""


class Block(nn.Module):
    """A pre-norm transformer block: attention and a 4x MLP."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attn = StiefelSelfAttention(width, heads)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


def make_model(
    width: int, depth: int, heads: int, seed: int = 0, device: str = "cpu", dtype: torch.dtype = torch.float32
) -> nn.Module:
    torch.manual_seed(seed)
    model = nn.Sequential(*[Block(width, heads) for _ in range(depth)]).to(device=device, dtype=dtype)
    for p in model.parameters():
        p.grad = torch.randn_like(p) * 1e-2
    return model


def frames_of(model: nn.Module) -> list[nn.Parameter]:
    return [p for m in model.modules() if isinstance(m, StiefelSelfAttention) for p in (m.w_q, m.w_k)]


class Combined:
    """Two optimizers stepped as one: a frame optimizer and AdamW on the other parameters."""

    def __init__(self, *opts: torch.optim.Optimizer) -> None:
        self.opts = opts

    def step(self) -> None:
        for opt in self.opts:
            opt.step()


class Floor:
    """AdamW's step plus the five batched frame-shaped products of the frame rule."""

    def __init__(self, model: nn.Module) -> None:
        self.adamw = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
        W = torch.cat([p.detach().reshape(-1, *p.shape[-2:]) for p in frames_of(model)])  # (B, n, p)
        self.W, self.G = W.clone(), W.clone()
        k = W.shape[-1]
        self.A = W.new_empty(W.shape[0], k, k)  # (B, p, p)
        self.Y = torch.empty_like(W)  # (B, n, p)

    def step(self) -> None:
        self.adamw.step()
        W, G, A, Y = self.W, self.G, self.A, self.Y
        torch.bmm(W.mT, G, out=A)  # W^T G
        torch.bmm(W.mT, G, out=A)  # W^T M
        torch.bmm(W, A, out=Y)  # W S
        torch.bmm(Y.mT, Y, out=A)  # Y^T Y
        torch.bmm(Y, A, out=Y)  # Y Z


class SeriesFloor(Floor):
    """:class:`Floor` plus the ``p x p`` products of the polar series: every product of the frame rule.

    Their number is the one the rule takes with StiefelAdam's default trust cap (0.1) in the frames'
    dtype (:func:`~stiefel_mini._numerics.series_products` at :func:`~stiefel_mini._numerics.series_degree`
    of :func:`~stiefel_mini._frame_kernel.polar_bound`): two for float32 frames, more for frames
    stored in 16 bits, whose series is summed for a wider bound.
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__(model)
        dtype = self.W.dtype
        bound = polar_bound(0.1, "euclidean", compute_dtype(dtype), dtype)
        self.products = series_products(series_degree(bound, compute_dtype(dtype)))
        self.E = torch.empty_like(self.A)  # (B, p, p)

    def step(self) -> None:
        super().step()
        for _ in range(self.products):
            torch.bmm(self.A, self.A, out=self.E)


def load_baseline(rev: str) -> str:
    """Import ``StiefelAdam``'s module as it was at git commit ``rev``; returns its column name.

    That commit's ``stiefel_mini`` is extracted with ``git archive`` into a temporary folder, under
    the name ``stiefel_mini_<commit>`` with an empty ``__init__``, so that only the optimizer and the
    modules it imports (relatively) load, beside this checkout's package.
    """
    try:
        sha = subprocess.run(["git", "rev-parse", "--verify", f"{rev}^{{commit}}"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.strip()
        archive = subprocess.run(["git", "archive", sha, "stiefel_mini"], cwd=ROOT, capture_output=True,
                                 check=True).stdout
    except (OSError, subprocess.CalledProcessError) as err:
        raise SystemExit(f"--baseline {rev}: not a commit of this repository's git history ({err})") from err
    folder = tempfile.TemporaryDirectory(prefix="optimizer_step_baseline_")
    atexit.register(folder.cleanup)
    package = f"stiefel_mini_{sha[:7]}"
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        # The "data" filter (refusing links and paths outside the folder) exists from Python 3.11.4 on;
        # without it the archive, this repository's own history, is extracted as it is.
        tar.extractall(folder.name, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    (Path(folder.name) / "stiefel_mini").rename(Path(folder.name) / package)
    (Path(folder.name) / package / "__init__.py").write_text("")
    sys.path.insert(0, folder.name)
    name = f"StiefelAdam@{sha[:7]}"
    # A copy with the frames' guard registers torch's global step hooks again, judging every optimizer by
    # its own copies of the classes: it would warn at every later StiefelAdam step of this process.
    hooks = [torch_optimizer._global_optimizer_pre_hooks, torch_optimizer._global_optimizer_post_hooks]
    before = [set(h) for h in hooks]
    BASELINES[name] = importlib.import_module(f"{package}.optim")
    for h, keys in zip(hooks, before):
        for key in set(h) - keys:
            del h[key]
    return name


def build(name: str, model: nn.Module) -> torch.optim.Optimizer:
    """The optimizers under test, all at lr 1e-3 (frames at 1e-2)."""
    if name == "AdamW":
        return torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    if name == "StiefelAdam" or name in BASELINES:
        cls = StiefelAdam if name == "StiefelAdam" else BASELINES[name].StiefelAdam
        return cls(param_groups(model, weight_decay=0.1, frame_options={"lr": 1e-2}), lr=1e-3)
    if name == "floor":
        return Floor(model)
    if name == "floor+series":
        return SeriesFloor(model)
    if name == "POGO":
        from pogo import POGO
        from pogo.base import VectorAdam

        frames = frames_of(model)
        ids = {id(p) for p in frames}
        rest = [p for p in model.parameters() if id(p) not in ids]
        # POGO wants row-orthonormal (batch, p, n) frames: ours are (heads, n, p) column frames.
        pogo = POGO(frames, base_optimizer=VectorAdam(), lr=1e-2, rows=False)
        return Combined(pogo, torch.optim.AdamW(rest, lr=1e-3, weight_decay=0.1))
    if name == "geoopt":
        import geoopt

        stiefel = geoopt.Stiefel()
        frames = []
        for m in model.modules():
            if isinstance(m, StiefelSelfAttention):
                for attr in ("w_q", "w_k"):
                    p = getattr(m, attr)
                    mp = geoopt.ManifoldParameter(p.data, manifold=stiefel)
                    mp.grad = p.grad
                    setattr(m, attr, mp)
                    frames.append(mp)
        ids = {id(p) for p in frames}
        rest = [p for p in model.parameters() if id(p) not in ids]
        return geoopt.optim.RiemannianAdam(
            [{"params": frames, "lr": 1e-2, "weight_decay": 0.0}, {"params": rest, "weight_decay": 0.1}],
            lr=1e-3,
        )
    raise ValueError(name)


def sync(device: str) -> None:
    """Wait for queued GPU work, so that wall-clock times cover it."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def time_steps(opt: torch.optim.Optimizer, steps: int, device: str) -> tuple[float, float]:
    """Wall-clock and CPU seconds (this process's, all threads) per step, over ``steps`` steps."""
    sync(device)
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(steps):
        opt.step()
    sync(device)
    return (time.perf_counter() - t0) / steps, (time.process_time() - c0) / steps


def bench_step(names: list[str], width: int, args: argparse.Namespace) -> tuple[dict, dict]:
    """Wall-clock and CPU seconds per step of each optimizer, one entry per interleaved round (in
    alternating order, so that no optimizer always runs right after the same one)."""
    dtype = getattr(torch, args.dtype)
    opts = {name: build(name, make_model(width, args.depth, args.heads, device=args.device, dtype=dtype))
            for name in names}
    for opt in opts.values():  # warm-up: state allocation and first-call dispatch
        time_steps(opt, 3, args.device)
    wall: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    for r in range(args.rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            w, c = time_steps(opts[name], args.steps, args.device)
            wall[name].append(w)
            cpu[name].append(c)
    return wall, cpu


def drift(name: str, steps: int, width: int, heads: int, device: str) -> tuple[float, float]:
    """Largest ``||W^T W - I||_F`` over the frames of one block after ``steps`` float32 steps,
    evaluated in float64 (the frames' own error) and in float32 (whose rounding of the Gram matrix
    alone is of order 1e-6 for 256 x 64 frames, so it cannot show a smaller error)."""
    model = make_model(width, 1, heads, seed=1, device=device)
    opt = build(name, model)
    attn = model[0].attn
    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        for p in (attn.w_q, attn.w_k):
            p.grad = torch.randn(p.shape, generator=gen).to(device)
        opt.step()
    frames = (attn.w_q.detach(), attn.w_k.detach())
    return tuple(max(orthogonality_error(W.to(dtype)).max().item() for W in frames)
                 for dtype in (torch.float64, torch.float32))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--widths", type=int, nargs="+", default=[256, 512])
    ap.add_argument("--depth", type=int, default=6)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=10, help="steps per timed round")
    ap.add_argument("--drift-steps", type=int, default=10_000, help="0 skips the drift table")
    ap.add_argument("--skip-timing", action="store_true", help="only the drift table")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="parameter dtype")
    ap.add_argument("--no-others", action="store_true",
                    help="leave out POGO and geoopt (only AdamW, StiefelAdam and the floor)")
    ap.add_argument("--baseline", nargs="+", default=[], metavar="REV",
                    help="also time StiefelAdam as it was at these git commits (columns StiefelAdam@REV)")
    ap.add_argument("--out", default=None, help="also write the measurements and their provenance to this JSON file")
    args = ap.parse_args(argv)
    for width in args.widths:
        if width % args.heads:
            ap.error(f"--widths {width} is not a multiple of --heads {args.heads}: each head's frame has "
                     "width / heads columns; pick widths that the number of heads divides")
    if args.threads:
        torch.set_num_threads(args.threads)

    names, left_out = ["AdamW", "StiefelAdam", *(load_baseline(rev) for rev in args.baseline)], {}
    for name, module in (("POGO", "pogo"), ("geoopt", "geoopt")) if not args.no_others else ():
        if importlib.util.find_spec(module) is None:
            left_out[name] = f"{module} is not installed (pip install -e '.[bench]')"
        elif name == "geoopt" and (why := solve_fault(args.widths, args.device)):
            left_out[name] = why
        else:
            names.append(name)
    names += FLOORS
    for name, why in left_out.items():
        print(f"the {name} column is left out: {why}")

    where = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else (
        f"{torch.get_num_threads()} threads, {platform.processor() or platform.machine()}")
    print(f"torch {torch.__version__}, {args.device} ({where}), {args.dtype}")
    record = {
        "provenance": provenance(device=args.device),
        "settings": {k: getattr(args, k) for k in ("widths", "depth", "heads", "rounds", "steps", "dtype", "baseline")}
        | {"threads": torch.get_num_threads()},
        "packages": {name: package_version(module) for name, module in (("POGO", "pogo-torch"), ("geoopt", "geoopt"))
                     if name in names},
        "left_out": left_out,
        "load": None,
        "timing": [],
        "drift": None,
    }

    def save() -> None:  # after every table row, so that an interrupted run keeps what it measured
        if args.out:
            save_results(args.out, record)

    if not args.skip_timing:
        with LoadMeter() as meter:
            timing_table(names, args, record["timing"], save)
        record["load"] = meter.record
        save()
        print(f"\nload: {meter.record}")
    if args.drift_steps:
        frames = [2 * args.heads, args.widths[0], args.widths[0] // args.heads]  # (B, n, p) of one block
        record["drift"] = {"steps": args.drift_steps, "frames": frames, "rows": []}
        drift_table([n for n in names if n not in BASELINES], args, record["drift"]["rows"], save)


def solve_fault(widths: list[int], device: str) -> str | None:
    """Why geoopt's column cannot be timed here, or ``None``: geoopt's Stiefel step solves batches of
    ``n x n`` systems with ``torch.linalg.solve``, and torch 2.14.1's CPU build solves such batches
    wrongly (or raises) above about 160 x 160 with more than one thread. Checked on a batch of four
    well-conditioned systems at each width, at this run's thread count."""
    gen = torch.Generator().manual_seed(0)
    for n in widths:
        A = (torch.randn(4, n, n, generator=gen) + n**0.5 * torch.eye(n)).to(device)  # (4, n, n)
        b = torch.randn(4, n, 8, generator=gen).to(device)  # (4, n, 8)
        try:
            residual = (torch.linalg.matrix_norm(A @ torch.linalg.solve(A, b) - b) / torch.linalg.matrix_norm(b)).max()
        except RuntimeError as err:
            residual, error = None, str(err).splitlines()[0]
        if residual is None or not residual <= 1e-3:
            what = f"raises ({error})" if residual is None else f"returns a relative residual of {residual:.1e}"
            return (f"torch {torch.__version__}'s batched torch.linalg.solve {what} on {n} x {n} systems at "
                    f"{torch.get_num_threads()} thread(s) on {device}, and geoopt's Stiefel step solves such systems; "
                    "run with --threads 1 for its column")
    return None


def package_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def timing_table(names: list[str], args: argparse.Namespace, rows: list, save: Callable[[], None]) -> None:
    ours = ["StiefelAdam", *BASELINES]
    others = [n for n in names if n not in ("AdamW", *FLOORS, *ours)]
    pairs = [*((n, f) for n in ours for f in FLOORS), *((n, "StiefelAdam") for n in others),
             *(("StiefelAdam", n) for n in BASELINES)]
    print(f"one optimizer step, depth {args.depth}, {args.heads} heads, {args.rounds} interleaved rounds of "
          f"{args.steps} steps; ms (best round), and in brackets the ratio to AdamW; the last columns: median "
          "over rounds of the per-round ratio, and its range\n")
    print("| " + " | ".join(["width", *names, *(f"{a} / {b}" for a, b in pairs)]) + " |")
    print("|---" * (1 + len(names) + len(pairs)) + "|")
    for width in args.widths:
        times, cpu = bench_step(names, width, args)
        rows.append({"width": width, "seconds_per_step": times, "cpu_seconds_per_step": cpu})
        save()
        best = {n: min(t) for n, t in times.items()}
        ms = [f"{best[n] * 1e3:.2f} ({best[n] / best['AdamW']:.2f}x)" for n in names]
        ratios = [stats.paired_ratio_text(times[a], times[b]) for a, b in pairs]
        print("| " + " | ".join([str(width), *ms, *ratios]) + " |", flush=True)


def drift_table(names: list[str], args: argparse.Namespace, rows: list, save: Callable[[], None]) -> None:
    frame_names = [n for n in names if n not in ("AdamW", *FLOORS)]
    print(f"\n||W^T W - I||_F after {args.drift_steps} float32 steps with random gradients "
          f"(frames {args.widths[0]} x {args.widths[0] // args.heads}, worst of {2 * args.heads}):\n")
    print("| optimizer | evaluated in float64 | evaluated in float32 |")
    print("|---|---|---|")
    for name in frame_names:
        e64, e32 = drift(name, args.drift_steps, args.widths[0], args.heads, args.device)
        rows.append({"optimizer": name, "float64": e64, "float32": e32})
        save()
        print(f"| {name} | {e64:.2e} | {e32:.2e} |")


if __name__ == "__main__":
    main()

"""What capping manifold Muon's frame solve at one multiplier update costs, on the frames and momenta of a real run.

    python benchmarks/manifold_muon_cap.py                     # 25 steps, captured at 1, 10, 25
    python benchmarks/manifold_muon_cap.py --steps 100 --out results/benchmarks/manifold_muon_cap.json
    python benchmarks/manifold_muon_cap.py --preset tiny --steps 5 --rounds 1    # a look in a minute

**The run.** The fourth language-model study's ``all_stiefel`` arm (arXiv 2606.13276's module-wise
manifold Muon: every block's ``attn.c_attn``, ``attn.c_proj``, ``mlp.c_fc`` and ``mlp.c_proj`` a frame,
:func:`stiefel_mini.experiments.lm.arms.build` and ``optimizers``) at the study's settings (its
tuning's start: lr 2e-3, frame lr 0.02, warm-up 0.25 of the study's 800-step schedule, the frame
solve capped at ``max_iter=1`` update, warm-started) trains on the State of the Union corpus
(batches as :func:`stiefel_mini.experiments.lm.experiment.run` draws them, seed ``--seed``) for
``--steps`` steps: the first steps of one of the study's runs. At each step of ``--capture``, hooks
on the optimizer copy what its frame rule is given: each frame ``W``, its Nesterov direction ``U``
(``StiefelMuon._direction``'s arithmetic, without touching the buffer), the spectral step ``eta``
(the scheduled ``frame_lr``) and the previous step's multiplier; after the step, what it stored.

**At each captured step**, per bucket of frames of one shape (one matrix kind, all layers: the
batch the optimizer solves), the frame problem ``min <U, A>`` s.t. ``||A||_2 <= eta``, ``A`` tangent
(:func:`~stiefel_mini.manifold_muon.manifold_muon_update`) is solved four ways: **capped** (as the
run: ``max_iter``, ``tol``, warm start), **uncapped** (StiefelMuon's default cap of 20 updates, same
``tol``, warm start), **converged** (``--converged_iter`` 100 updates, ``--converged_tol`` 1e-6,
warm start: the reference) and **converged, cold** (the same from ``Sigma = 0``). The capped and
uncapped solves are timed as the run computes them, in float32, and the capped one is checked
against the run (its multiplier against the one the optimizer stored: ``replay_max_abs_diff``);
all four are then solved, timed and measured in float64 on the frames made orthonormal to float64
rounding: a float32 frame's ``||W^T W - I||_F`` is of order 1e-5 (``orthogonality_error``), a floor
under every residual measured on it.
Per frame: the **objective ratio** ``<U, A> / <U, A_converged>`` (the share of the steepest descent a
step achieves: 1 is no loss; no tangent step of norm ``eta`` exceeds 1, while a step off the tangent
space, as a capped one is, may); the **tangency residual** ``||W^T A + A^T W||_F / (2 eta sqrt(p))``
(the solver's ``||sym(Z Q)||_F / sqrt(p)``); ``||A||_2 / eta``; the **move** the retraction makes of
the step, ``M = polar(W + A) - W`` (to first order the tangent part of ``A``, which may be longer
than ``eta``), with ``<U, M>`` over the converged step's and ``||M||_2 / eta``; the angles between
the capped and the converged step and between their moves. Per bucket: the updates each solve took
and its time.

**Whole step.** After the run, one training step (:func:`~stiefel_mini.experiments.lm.experiment.train_step`)
of the trained model with the capped optimizer against a copy with the cap at 20 updates
(``--uncapped_iter``), on one real batch, in ``--rounds`` interleaved rounds of alternating order; the
ratio is the median over rounds of the per-round ratio, with its range. ``--out PATH`` writes every
measurement, the settings, the provenance and the load average before and after.
"""

from __future__ import annotations

import argparse
import copy
import math
import os
import statistics
import time

import torch

from stiefel_mini.experiments import stats
from stiefel_mini.experiments.config import replace
from stiefel_mini.experiments.lm import arms
from stiefel_mini.experiments.lm.config import PRESETS
from stiefel_mini.experiments.lm.data import EOT, encode_split, load_tokenizer, random_batch, read_split
from stiefel_mini.experiments.lm.experiment import train_step
from stiefel_mini.experiments.lm.model import lr_factor
from stiefel_mini.experiments.lm.plans import DEFAULTS
from stiefel_mini.experiments.lm.studies import ROUND4
from stiefel_mini.experiments.records import provenance, save_results
from stiefel_mini.experiments.runtime import generator
from stiefel_mini.geometry import orthogonality_error
from stiefel_mini.manifold_muon import manifold_muon_update, polar_gram

_START = dict(ROUND4.tuning("all_stiefel").start)  # warm-up 0.25, max_iter 1
KINDS = tuple(m.removesuffix(".weight") for m in arms.WHOLE_MATRICES)
"""The matrix kinds of a GPT-2 block that ``all_stiefel`` holds on the manifold."""
SOLVES = ("capped", "uncapped", "converged", "converged_cold")
"""The four solves of each captured frame problem, in the order they run."""


class Recorder:
    """Copies, at the steps ``steps`` (1 = the first), what StiefelMuon's frame rule is given and what it stored."""

    def __init__(self, opt: torch.optim.Optimizer, names: dict[int, str], steps: set[int]) -> None:
        self.opt, self.names, self.steps = opt, names, steps
        self.step, self.points = 0, []
        self.handles = [opt.register_step_pre_hook(self._before), opt.register_step_post_hook(self._after)]

    def _frames(self) -> dict:
        return next(g for g in self.opt.param_groups if g["role"] == "frame")

    def _before(self, opt, args, kwargs) -> None:
        if self.step not in self.steps:
            return
        group, frames = self._frames(), []
        for p in group["params"]:
            state = opt.state[p]
            buf = state.get("momentum_buffer", torch.zeros_like(p.grad)).lerp(p.grad, 1 - group["momentum"])
            U = p.grad.lerp(buf, group["momentum"]) if group["nesterov"] else buf
            prev = state.get("multiplier")
            frames.append({"name": self.names[id(p)], "W": p.detach().clone(), "U": U.clone(), "buffer": buf,
                           "multiplier": None if prev is None else prev.clone()})
        self.points.append({"step": self.step, "eta": group["lr"], "tol": group["tol"],
                            "max_iter": group["max_iter"], "frames": frames})

    def _after(self, opt, args, kwargs) -> None:
        if self.step not in self.steps:
            return
        for f, p in zip(self.points[-1]["frames"], self._frames()["params"]):
            f["stored"] = opt.state[p]["multiplier"].clone()
            f["buffer_matches"] = torch.equal(f.pop("buffer"), opt.state[p]["momentum_buffer"])

    def close(self) -> None:
        for h in self.handles:
            h.remove()


def train(args, cfg, point: dict):
    """The run: ``(model, optimizers, recorder, losses, a batch for the whole-step timing)``."""
    tok = load_tokenizer()
    ids = encode_split(tok, read_split("train")).ids
    model = arms.build("all_stiefel", cfg, tok.token_to_id(EOT))
    opts = arms.optimizers("all_stiefel", model, cfg, point)
    for group in opts[0].param_groups:
        if group["role"] == "frame":  # the recipe leaves StiefelMuon's tolerance, 1e-3, the default here
            group["tol"] = args.tol
    o = cfg.optimizer
    scheds = [torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: lr_factor(s, args.schedule_steps, o.warmup_frac, o.final_lr_frac)) for opt in opts]
    names = {id(p): n for n, p in model.named_parameters()}
    rec = Recorder(opts[0], names, set(args.capture))
    params = [p for p in model.parameters() if p.requires_grad]
    gen = generator(cfg.seed, "batches")
    losses = []
    for step in range(1, args.steps + 1):
        x, y = random_batch(ids, cfg.batch_size, cfg.model.context, gen)  # (B, T) each
        rec.step = step
        losses.append(train_step(model, opts, x, y, params, o.grad_clip).item())
        for sched in scheds:
            sched.step()
    rec.close()
    return model, opts, rec, losses, random_batch(ids, cfg.batch_size, cfg.model.context, gen)


def _tall(T: torch.Tensor) -> torch.Tensor:
    """``T`` oriented as the solver works on it: tall (``r >= c``), in float64."""
    T = T.double()
    return T.mT if T.shape[-2] < T.shape[-1] else T


def measure(W: torch.Tensor, U: torch.Tensor, A: torch.Tensor, eta: float) -> dict:
    """Per frame of float64 ``(k, r, c)``: the step ``A`` and the frame's move ``M = polar(W + A) - W``
    (what is left of ``A`` after the retraction: to first order its tangent part), ``<U, A>``, ``<U, M>``,
    ``||A||_2 / eta``, ``||M||_2 / eta`` and the tangency residual ``||W^T A + A^T W||_F / (2 eta sqrt(p))``
    (tall orientation)."""
    M = polar_gram(W + A) - W
    S = _tall(W).mT @ _tall(A)  # (k, p, p)
    return {"step": A, "move": M, "objective": (U * A).sum((-2, -1)), "moved": (U * M).sum((-2, -1)),
            "spectral_over_eta": torch.linalg.matrix_norm(A, ord=2) / eta,
            "move_spectral_over_eta": torch.linalg.matrix_norm(M, ord=2) / eta,
            "residual": torch.linalg.matrix_norm(S + S.mT) / (2 * eta * math.sqrt(S.shape[-1]))}


def _angle_deg(a: torch.Tensor, b: torch.Tensor) -> list[float]:
    """The angle between ``a[i]`` and ``b[i]`` in the Frobenius inner product, in degrees."""
    a, b = a.flatten(1), b.flatten(1)
    return torch.rad2deg(torch.arccos(((a * b).sum(-1) / (a.norm(dim=-1) * b.norm(dim=-1))).clamp(-1, 1))).tolist()


def solve_point(point: dict, args) -> list[dict]:
    """The solves of every bucket of one captured step, with their measurements (one row per bucket).

    The capped and uncapped solves are timed as the run computes them (float32; the capped one's
    multiplier is compared with the one the optimizer stored); all four are timed and measured in
    float64 on the frames made orthonormal to float64 rounding (:func:`~stiefel_mini.manifold_muon.polar_gram`):
    a float32 frame's ``||W^T W - I||_F`` (of order 1e-5) is a floor under any residual measured on it.
    """
    eta, rows = point["eta"], []
    settings = {"capped": (point["tol"], point["max_iter"], True), "uncapped": (point["tol"], args.uncapped_iter, True),
                "converged": (args.converged_tol, args.converged_iter, True),
                "converged_cold": (args.converged_tol, args.converged_iter, False)}
    for kind in KINDS:
        frames = [f for f in point["frames"] if f["name"].removesuffix(".weight").endswith(kind)]
        W, U = torch.stack([f["W"] for f in frames]), torch.stack([f["U"] for f in frames])  # (k, r, c)
        prev = None if frames[0]["multiplier"] is None else torch.stack([f["multiplier"] for f in frames])
        seconds: dict[str, dict[str, float]] = {"float32": {}, "float64": {}}
        for name in SOLVES[:2]:
            tol, max_iter, _ = settings[name]
            t0 = time.perf_counter()
            _, mult, _ = manifold_muon_update(W, U, eta, multiplier=prev, tol=tol, max_iter=max_iter)
            seconds["float32"][name] = time.perf_counter() - t0
            if name == "capped":
                replay = max(float((m - f["stored"]).abs().max()) for m, f in zip(mult, frames))
        W64, U64 = polar_gram(W.double()), U.double()
        out, iterations = {}, {}
        for name in SOLVES:
            tol, max_iter, warm = settings[name]
            t0 = time.perf_counter()
            A, _, iterations[name] = manifold_muon_update(W64, U64, eta, multiplier=prev if warm else None,
                                                          tol=tol, max_iter=max_iter)
            seconds["float64"][name] = time.perf_counter() - t0
            out[name] = measure(W64, U64, A, eta)
        conv = out["converged"]
        rows.append({
            "step": point["step"], "kind": kind, "shape": list(W.shape[1:]), "frames": [f["name"] for f in frames],
            "eta": eta, "warm_started": prev is not None, "seconds": seconds, "iterations": iterations,
            "objective_ratio": {n: (out[n]["objective"] / conv["objective"]).tolist() for n in SOLVES},
            "moved_ratio": {n: (out[n]["moved"] / conv["moved"]).tolist() for n in SOLVES},
            **{key: {n: out[n][key].tolist() for n in SOLVES}
               for key in ("residual", "spectral_over_eta", "move_spectral_over_eta")},
            "angle_capped_converged_deg": _angle_deg(out["capped"]["step"], conv["step"]),
            "move_angle_capped_converged_deg": _angle_deg(out["capped"]["move"], conv["move"]),
            "orthogonality_error": orthogonality_error(W).tolist(),
            "replay_max_abs_diff": replay, "buffer_replayed": all(f["buffer_matches"] for f in frames)})
    return rows


def whole_step(model, opts, batch, clip: float, args) -> dict:
    """Seconds per training step of the capped optimizer and of a copy capped at ``--uncapped_iter``."""
    models = {"capped": (model, opts)}
    m_u, o_u = copy.deepcopy((model, opts))
    for g in o_u[0].param_groups:
        if g["role"] == "frame":
            g["max_iter"] = args.uncapped_iter
    models["uncapped"] = (m_u, o_u)
    x, y = batch
    params = {k: [p for p in m.parameters() if p.requires_grad] for k, (m, _) in models.items()}
    for k, (m, o) in models.items():
        train_step(m, o, x, y, params[k], clip)  # warm-up: first-call allocations
    times: dict[str, list[float]] = {k: [] for k in models}
    for r in range(args.rounds):
        for k in list(models) if r % 2 == 0 else list(models)[::-1]:
            t0 = time.perf_counter()
            train_step(*models[k], x, y, params[k], clip)
            times[k].append(time.perf_counter() - t0)
    return {"seconds": times, "ratio": stats.paired_ratio(times["uncapped"], times["capped"])}


PER_SOLVE = ("objective_ratio", "moved_ratio", "residual", "spectral_over_eta", "move_spectral_over_eta")
"""The measurements a row holds per solve and per frame."""
ANGLES = ("angle_capped_converged_deg", "move_angle_capped_converged_deg")


def _spread(values: list[float], worst=min, digits: int = 4) -> str:
    return f"{statistics.median(values):.{digits}f}, {worst(values):.{digits}f}"


def _range(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarise(rows: list[dict]) -> dict:
    """Per kind over every captured step and layer: median, lowest and highest of each measurement, and
    the mean updates and seconds of each solve."""
    out = {}
    for kind in KINDS:
        rs = [r for r in rows if r["kind"] == kind]
        out[kind] = {
            **{key: {n: _range([v for r in rs for v in r[key][n]]) for n in SOLVES} for key in PER_SOLVE},
            **{key: _range([v for r in rs for v in r[key]]) for key in ANGLES},
            "iterations": {n: statistics.mean(r["iterations"][n] for r in rs) for n in SOLVES},
            "seconds": {d: {n: statistics.mean(r["seconds"][d][n] for r in rs) for n in rs[0]["seconds"][d]}
                        for d in ("float32", "float64")}}
    return out


def print_tables(rows: list[dict], summary: dict, whole: dict | None) -> None:
    """The per-step table, the per-kind summary and the whole-step times, in Markdown."""
    print("Per captured step and kind, over its layers (median, worst); ratios of the capped step to the converged "
          "one\n")
    print("| step | kind | eta | <U, A> | <U, move> | move: norm / eta | uncapped <U, A> | residual capped | "
          "converged | angle, deg | move angle | updates capped / uncapped / converged / cold | ms capped / "
          "uncapped (float32) | ms converged |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        it, s, s64 = r["iterations"], r["seconds"]["float32"], r["seconds"]["float64"]
        print(f"| {r['step']} | {r['kind']} | {r['eta']:.1e} | {_spread(r['objective_ratio']['capped'])} | "
              f"{_spread(r['moved_ratio']['capped'])} | {_spread(r['move_spectral_over_eta']['capped'], max)} | "
              f"{_spread(r['objective_ratio']['uncapped'])} | {_spread(r['residual']['capped'], max, 3)} | "
              f"{max(r['residual']['converged']):.1e} | {_spread(r['angle_capped_converged_deg'], max, 1)} | "
              f"{_spread(r['move_angle_capped_converged_deg'], max, 1)} | "
              f"{it['capped']} / {it['uncapped']} / {it['converged']} / {it['converged_cold']} | "
              f"{1e3 * s['capped']:.0f} / {1e3 * s['uncapped']:.0f} | {1e3 * s64['converged']:.0f} |")
    print("\nPer kind, over every captured step and layer (median, worst)\n")
    print("| kind | <U, A> capped / converged | <U, move> | move: norm / eta | residual capped | uncapped | "
          "angle, deg | move angle | updates uncapped / converged (mean) | ms capped / uncapped (float32, mean) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for kind, k in summary.items():
        lo = lambda d: f"{d['median']:.4f}, {d['min']:.4f}"  # noqa: E731
        hi = lambda d, f=".4f": f"{d['median']:{f}}, {d['max']:{f}}"  # noqa: E731
        print(f"| {kind} | {lo(k['objective_ratio']['capped'])} | {lo(k['moved_ratio']['capped'])} | "
              f"{hi(k['move_spectral_over_eta']['capped'])} | {hi(k['residual']['capped'], '.3f')} | "
              f"{hi(k['residual']['uncapped'], '.1e')} | {hi(k['angle_capped_converged_deg'], '.1f')} | "
              f"{hi(k['move_angle_capped_converged_deg'], '.1f')} | "
              f"{k['iterations']['uncapped']:.1f} / {k['iterations']['converged']:.1f} | "
              f"{1e3 * k['seconds']['float32']['capped']:.0f} / {1e3 * k['seconds']['float32']['uncapped']:.0f} |")
    if whole:
        w = whole["seconds"]
        print("\n| whole step, capped (s) | uncapped (s) | uncapped / capped |\n|---|---|---|")
        print(f"| {min(w['capped']):.2f} | {min(w['uncapped']):.2f} | "
              f"{stats.paired_ratio_text(w['uncapped'], w['capped'])} |")


def default_capture(steps: int) -> list[int]:
    """Steps 1, 10, 25, 50, 100, ... up to ``steps``, and ``steps`` itself."""
    return sorted({s for s in (1, 10, 25, 50, 100, 200, 400, 800, 1600) if s <= steps} | {steps})


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=25, help="training steps of the run")
    ap.add_argument("--capture", type=int, nargs="+", default=None,
                    help="steps (1 = the first) whose frame problems are solved (default: 1, 10, 25, 50, 100, ... "
                         "up to --steps, and --steps)")
    ap.add_argument("--preset", default="cpu", choices=sorted(PRESETS), help="the model and batch (the study's: cpu)")
    ap.add_argument("--seed", type=int, default=ROUND4.sweep_seeds[0],
                    help="the run's seed (default: the study's first sweep seed)")
    ap.add_argument("--lr", type=float, default=DEFAULTS["lr"], help="AdamW's lr (embeddings, vectors)")
    ap.add_argument("--frame_lr", type=float, default=0.02,
                    help="the frames' spectral step eta at its peak (default: the middle of the study's grid)")
    ap.add_argument("--warmup_frac", type=float, default=_START["warmup_frac"])
    ap.add_argument("--schedule_steps", type=int, default=ROUND4.steps,
                    help="the length of the lr schedule (the study's runs: 800); the run takes its first --steps")
    ap.add_argument("--max_iter", type=int, default=_START["max_iter"], help="the cap: multiplier updates per step")
    ap.add_argument("--tol", type=float, default=1e-3,
                    help="the frame solve's tangency tolerance in the run (default: StiefelMuon's, the study's)")
    ap.add_argument("--uncapped_iter", type=int, default=20, help="the uncapped solve's cap (StiefelMuon's default)")
    ap.add_argument("--converged_iter", type=int, default=100)
    ap.add_argument("--converged_tol", type=float, default=1e-6)
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds of the whole-step timing (0: none)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--out", default=None, help="also write the measurements and their provenance to this JSON file")
    args = ap.parse_args(argv)
    args.capture = sorted(set(args.capture)) if args.capture else default_capture(args.steps)
    if args.steps < 1 or not 1 <= args.capture[0] <= args.capture[-1] <= args.steps:
        ap.error(f"--capture {args.capture} must lie in 1..--steps ({args.steps}), with --steps >= 1")
    if args.max_iter < 0 or min(args.uncapped_iter, args.converged_iter) < 1 or min(args.tol, args.converged_tol) <= 0:
        ap.error("need --max_iter >= 0, --uncapped_iter and --converged_iter >= 1, --tol and --converged_tol > 0")
    torch.set_num_threads(args.threads)
    cfg = replace(PRESETS[args.preset], arm="all_stiefel", seed=args.seed, steps=args.schedule_steps, lr=args.lr,
                  frame_lr=args.frame_lr, warmup_frac=args.warmup_frac, threads=args.threads, progress=False)
    point = {"lr": args.lr, "frame_lr": args.frame_lr, "warmup_frac": args.warmup_frac, "max_iter": args.max_iter}
    record = {"settings": vars(args), "point": point, "provenance": provenance(cfg, seeds=[args.seed]),
              "load_average_before": list(os.getloadavg()), "cores": os.cpu_count()}
    t0 = time.perf_counter()
    model, opts, rec, losses, batch = train(args, cfg, point)
    record["train_loss"], record["train_seconds"] = losses, time.perf_counter() - t0
    record["load_average_after_training"] = list(os.getloadavg())
    rows = [row for p in rec.points for row in solve_point(p, args)]
    record["points"], record["summary"] = rows, summarise(rows)
    record["whole_step"] = whole_step(model, opts, batch, cfg.optimizer.grad_clip, args) if args.rounds else None
    record["load_average_after"], record["seconds"] = list(os.getloadavg()), time.perf_counter() - t0
    m = PRESETS[args.preset].model
    print(f"all_stiefel, GPT-2 {m.n_layer} layers, width {m.d_model}, seed {args.seed}, {args.steps} steps "
          f"({record['train_seconds']:.0f} s), cap {args.max_iter} update(s), tol {args.tol}; "
          f"{torch.get_num_threads()} thread(s); {record['seconds'] / 60:.1f} min in all; load average "
          f"{record['load_average_before'][0]:.1f} before, {record['load_average_after'][0]:.1f} after\n")
    print_tables(rows, record["summary"], record["whole_step"])
    if args.out:
        save_results(args.out, record)
    return record


if __name__ == "__main__":
    main()

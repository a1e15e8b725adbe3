"""StiefelMuon against torch's Muon + AdamW on GPT-2 small, side by side in one run, and manifold Muon's
frame rule against plain Muon on momenta recorded from a real training run.

    python benchmarks/muon_step.py --threads 1 --out results/benchmarks/muon_step.json
    python benchmarks/muon_step.py --threads 1 --train_steps 6 --rounds 2 --model_rounds 2   # a quick look

**Newton-Schulz's precision.** Five iterations on one ``768 x 768`` matrix in float32 and in bfloat16 (as
``torch.optim.Muon`` runs them), and the precision :func:`~stiefel_mini.muon.newton_schulz_dtype` picks
for this device (bfloat16 only where the device computes it natively).

**Frame rule, on real momenta.** A GPT-2 of GPT-2 small's attention shape (``--layers 12 --width 768
--heads 12``: 24 Q/K frames ``(12, 768, 64)``; the language-model study's tokenizer and context, so a
2,048-token vocabulary) is converted (learned logit scale) and trained for ``--train_steps`` steps of
``--batch`` windows of the State of the Union corpus with ``StiefelMuon`` at the study's lrs. The frame
rule's inputs of the last ``--rounds`` steps (each frame, its Nesterov momentum and last multiplier) are
recorded; on each, the **frame rule** (:func:`~stiefel_mini.manifold_muon.manifold_muon_update`,
warm-started, then :func:`~stiefel_mini.manifold_muon.polar_gram`) is timed against **plain Muon**'s step
on the same momenta (:func:`~stiefel_mini.muon.muon_update`), interleaved. Stated: the fixed-point
iterations warm and cold, the objective ``<U, A>`` of the warm step over that of the converged solve
(``tol=1e-8``, 500 iterations), and the tangency residual ``||sym(W^T A)||_F / (sqrt(p) lr)``. The same
run times a training forward + backward and the frames' guard: its check when the frames were last
written by StiefelMuon (the version test every training forward pays) and its full check (once, and
after a write by anything else).

**Whole step.** GPT-2 small (124M, ``GPT2Config()``, random weights, fixed random gradients): one
``StiefelMuon`` step on the converted model (roles read off the model) against ``torch.optim.Muon`` on
the unconverted model's hidden matrices (Q|K|V whole, as the Muon recipe) + ``torch.optim.AdamW`` on its
embeddings, head and vectors, in interleaved rounds; each ratio is the median over rounds of the ratio
within a round, with its range. ``torch.optim.Muon`` runs Newton-Schulz in bfloat16; ``--torch_ns auto``
keeps that where the device computes bfloat16 natively and otherwise swaps in float32 (the same
iteration; on a CPU without it bfloat16 products are emulated, far slower) and says so in the record.
Target: StiefelMuon on the converted model at most 1.15x torch's Muon + AdamW.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import time

import torch

from stiefel_mini import StiefelMuon, _frame_guard, convert_attention
from stiefel_mini import muon as muon_module
from stiefel_mini.experiments import stats
from stiefel_mini.experiments.records import provenance, save_results
from stiefel_mini.groups import FrameHolder
from stiefel_mini.manifold_muon import manifold_muon_update, polar_gram
from stiefel_mini.muon import mark_muon_roles, muon_update, newton_schulz_dtype, zeropower_via_newtonschulz


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def ns_precision(args) -> dict:
    """Seconds of five Newton-Schulz iterations on one ``ns_size`` square matrix in each precision."""
    G = torch.randn(args.ns_size, args.ns_size, generator=torch.Generator().manual_seed(0))
    out = {"chosen": str(newton_schulz_dtype("cpu")).removeprefix("torch.")}
    for dtype in (torch.float32, torch.bfloat16):
        zeropower_via_newtonschulz(G[:64, :64], dtype=dtype)  # first-call set-up
        out[str(dtype).removeprefix("torch.")] = min(_timed(lambda: zeropower_via_newtonschulz(G, dtype=dtype))
                                                     for _ in range(args.ns_rounds))
    return out


def record_momenta(args) -> dict:
    """Train a converted GPT-2 on the corpus; the frame rule's inputs of the last ``rounds`` steps and the
    times of a forward + backward, a StiefelMuon step and the frames' guard."""
    import transformers

    from stiefel_mini.experiments.lm.data import random_batch
    from stiefel_mini.experiments.lm.experiment import corpus
    from stiefel_mini.experiments.lm.plans import DEFAULTS

    data = corpus()
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_embd=args.width, n_layer=args.layers, n_head=args.heads, n_positions=args.context,
                                  vocab_size=data["tokenizer"].get_vocab_size(), resid_pdrop=0.0, embd_pdrop=0.0,
                                  attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(cfg).train()
    convert_attention(model, logit_scale="learned")
    opt = StiefelMuon(model.parameters(), lr=DEFAULTS["muon_lr"], frame_lr=DEFAULTS["frame_lr"],
                      adamw_lr=DEFAULTS["lr"], weight_decay=0.1)
    recorded, solve = [], muon_module.manifold_muon_update

    def recording(W, U, lr, **kw):
        if step >= args.train_steps - args.rounds:
            m = kw.get("multiplier")
            recorded.append({"W": W.clone(), "U": U.clone(), "lr": lr, "multiplier": None if m is None else m.clone()})
        return solve(W, U, lr, **kw)

    muon_module.manifold_muon_update = recording
    gen = torch.Generator().manual_seed(0)
    times = {"forward_backward": [], "stiefel_muon_step": []}
    try:
        for step in range(args.train_steps):
            x, y = random_batch(data["train"].ids, args.batch, args.context, gen)
            opt.zero_grad()
            t0 = time.perf_counter()
            torch.nn.functional.cross_entropy(model(input_ids=x).logits.flatten(0, 1), y.flatten()).backward()
            times["forward_backward"].append(time.perf_counter() - t0)
            times["stiefel_muon_step"].append(_timed(opt.step))
    finally:
        muon_module.manifold_muon_update = solve
    holders = [m for m in model.modules() if isinstance(m, FrameHolder)]

    def guard():  # what every training forward runs after a StiefelMuon step: the version test
        for m in holders:
            _frame_guard.on_training_forward(m, 10**9)

    guard()
    return {"records": recorded, "times": times, "guard_version_s": min(_timed(guard) for _ in range(5)),
            "guard_full_check_s": min(_timed(lambda: [m.check_frames() for m in holders]) for _ in range(3)),
            "frames": sum(len(m.frames()) for m in holders)}


def frame_rule(records: list[dict], args) -> dict:
    """Times of the frame rule and of plain Muon on each recorded step, iterations, objective, tangency."""
    times: dict[str, list[float]] = {"frame rule": [], "plain Muon": []}
    iterations, cold, accuracy, tangency = [], [], [], []
    for r, rec in enumerate(records):
        W, U, lr, m = rec["W"], rec["U"], rec["lr"], rec["multiplier"]
        for name in ("frame rule", "plain Muon") if r % 2 == 0 else ("plain Muon", "frame rule"):
            if name == "plain Muon":
                times[name].append(_timed(lambda: muon_update(U, lr)))
            else:
                t0 = time.perf_counter()
                step = manifold_muon_update(W, U, lr, multiplier=m)
                polar_gram(W + step.step)
                times[name].append(time.perf_counter() - t0)
                iterations.append(step.iterations)
        A = step.step
        A_star = manifold_muon_update(W, U, lr, tol=1e-8, max_iter=500).step
        accuracy += ((U * A).sum((-2, -1)) / (U * A_star).sum((-2, -1))).tolist()
        S = W.mT @ A
        tangency.append(float((torch.linalg.matrix_norm(S + S.mT) / 2 / (W.shape[-1] ** 0.5 * lr)).max()))
        cold.append(manifold_muon_update(W, U, lr).iterations)
    return {"seconds": times, "iterations_warm": iterations, "iterations_cold": cold,
            "objective_over_converged": {"min": min(accuracy), "mean": sum(accuracy) / len(accuracy)},
            "tangency_max": max(tangency), "shape": list(records[0]["W"].shape)}


def _float32_ns(grad, ns_coefficients, ns_steps, eps):
    return zeropower_via_newtonschulz(grad, ns_steps, eps, dtype=torch.float32)


def gpt2_small(converted: bool, args):
    """GPT-2 small (or the ``--model_*`` sizes) with fixed random gradients, and its optimizers:
    StiefelMuon (converted) or torch's Muon on the hidden matrices + AdamW on the rest (unconverted)."""
    import transformers

    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=args.model_layers, n_embd=args.model_width, n_head=args.model_heads, vocab_size=args.model_vocab))
    if converted:
        convert_attention(model)
    g = torch.Generator().manual_seed(1)
    for p in model.parameters():
        p.grad = 1e-3 * torch.randn(p.shape, generator=g)
    if converted:
        return [StiefelMuon(model.parameters(), lr=0.02, frame_lr=0.02, adamw_lr=3e-4, weight_decay=0.1)]
    roles = mark_muon_roles(model)
    named = dict(model.named_parameters())
    hidden = [named[n] for n, r in roles.items() if r.role == "muon"]
    rest = [named[n] for n, r in roles.items() if r.role != "muon"]
    return [torch.optim.Muon(hidden, lr=0.02, weight_decay=0.1), torch.optim.AdamW(rest, lr=3e-4, weight_decay=0.1)]


def whole_step(args) -> dict:
    native = newton_schulz_dtype("cpu") == torch.bfloat16
    swap = args.torch_ns == "float32" or (args.torch_ns == "auto" and not native)
    original = torch.optim._muon._zeropower_via_newtonschulz
    if swap:
        torch.optim._muon._zeropower_via_newtonschulz = _float32_ns
    try:
        opts = {"converted": gpt2_small(True, args), "unconverted": gpt2_small(False, args)}
        for group in opts.values():
            for opt in group:
                opt.step()  # warm-up: state, multipliers
        times: dict[str, list[float]] = {k: [] for k in opts}
        for r in range(args.model_rounds):
            for k in opts if r % 2 == 0 else list(opts)[::-1]:
                times[k].append(_timed(lambda: [opt.step() for opt in opts[k]]))
    finally:
        torch.optim._muon._zeropower_via_newtonschulz = original
    return {"seconds": times, "ns": {"torch Muon": "float32 (swapped in)" if swap else "bfloat16 (torch's own)",
                                     "StiefelMuon": str(newton_schulz_dtype("cpu")).removeprefix("torch.")}}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=12, help="layers of the GPT-2 trained for its momenta")
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--batch", type=int, default=4, help="windows per training step")
    ap.add_argument("--train_steps", type=int, default=24, help="training steps before the momenta are read")
    ap.add_argument("--rounds", type=int, default=4, help="recorded steps (interleaved rounds of the frame rule)")
    ap.add_argument("--ns_size", type=int, default=768, help="side of the matrix of the Newton-Schulz precision timing")
    ap.add_argument("--ns_rounds", type=int, default=1, help="rounds of the Newton-Schulz precision timing")
    ap.add_argument("--model_rounds", type=int, default=5, help="interleaved rounds of the GPT-2 small step")
    ap.add_argument("--model_layers", type=int, default=12, help="the whole step's GPT-2 (default: GPT-2 small)")
    ap.add_argument("--model_width", type=int, default=768)
    ap.add_argument("--model_heads", type=int, default=12)
    ap.add_argument("--model_vocab", type=int, default=50257)
    ap.add_argument("--torch_ns", choices=("auto", "bfloat16", "float32"), default="auto",
                    help="torch.optim.Muon's Newton-Schulz precision (auto: bfloat16 only where native)")
    ap.add_argument("--skip_model", action="store_true", help="leave out the GPT-2 small whole step")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--out", default=None, help="also write the results and their provenance to this JSON file")
    args = ap.parse_args(argv)
    if args.rounds > args.train_steps:
        ap.error("--rounds must be at most --train_steps")
    if args.threads:
        torch.set_num_threads(args.threads)
    record = {"settings": vars(args), "provenance": provenance(), "load_average": list(os.getloadavg()),
              "packages": {"transformers": importlib.metadata.version("transformers")}}
    ns = record["ns_precision"] = ns_precision(args)
    print(f"{torch.get_num_threads()} thread(s), load average {record['load_average'][0]:.1f}\n")
    print(f"Newton-Schulz, 5 iterations on {args.ns_size} x {args.ns_size}: float32 {ns['float32']:.3f} s, "
          f"bfloat16 {ns['bfloat16']:.3f} s; StiefelMuon's choice here: {ns['chosen']}\n")
    run = record_momenta(args)
    f = record["frame_rule"] = frame_rule(run["records"], args)
    t = record["training"] = {**run["times"], "guard_version_s": run["guard_version_s"],
                              "guard_full_check_s": run["guard_full_check_s"], "frames": run["frames"]}
    s, o = f["seconds"], f["objective_over_converged"]
    print(f"Frame rule on the momenta of training steps {args.train_steps - args.rounds + 1}-{args.train_steps} "
          f"({run['frames']} frames, {f['shape'][0]} heads of {f['shape'][1]} x {f['shape'][2]}), ms per step, "
          f"best of {args.rounds}\n")
    print("| frame rule | plain Muon | frame rule / plain Muon | <U, A> / converged (min, mean) "
          "| iterations warm / cold (mean) | tangency (max) |")
    print("|---|---|---|---|---|---|")
    print(f"| {1e3 * min(s['frame rule']):.1f} | {1e3 * min(s['plain Muon']):.1f} | "
          f"{stats.paired_ratio_text(s['frame rule'], s['plain Muon'])} | {o['min']:.4f}, {o['mean']:.4f} | "
          f"{sum(f['iterations_warm']) / len(f['iterations_warm']):.1f} / "
          f"{sum(f['iterations_cold']) / len(f['iterations_cold']):.1f} | {f['tangency_max']:.1e} |")
    step = min(t["forward_backward"]) + min(t["stiefel_muon_step"])
    print(f"\nTraining step (batch {args.batch} x {args.context}): forward + backward {min(t['forward_backward']):.2f} s, "
          f"StiefelMuon step {min(t['stiefel_muon_step']):.2f} s; the frames' guard per training forward: "
          f"{1e3 * t['guard_version_s']:.3f} ms after a StiefelMuon step ({100 * t['guard_version_s'] / step:.4f}% of "
          f"the step), {1e3 * t['guard_full_check_s']:.1f} ms for a full check "
          f"({100 * t['guard_full_check_s'] / step:.2f}%)")
    if not args.skip_model:
        w = whole_step(args)
        sec = record["whole_step"] = w["seconds"]
        ns = record["whole_step_ns"] = w["ns"]
        print(f"\nGPT-2 small, one optimizer step, s (best of {args.model_rounds} rounds; torch's Muon's Newton-Schulz "
              f"in {ns['torch Muon']}, StiefelMuon's in {ns['StiefelMuon']})\n")
        print("| StiefelMuon, converted | torch Muon + AdamW, unconverted | StiefelMuon / torch |")
        print("|---|---|---|")
        print(f"| {min(sec['converted']):.2f} | {min(sec['unconverted']):.2f} | "
              f"{stats.paired_ratio_text(sec['converted'], sec['unconverted'])} |")
    if args.out:
        save_results(args.out, record)
    return record


if __name__ == "__main__":
    main()

"""Training tokens per second of the language-model studies' arms, side by side in one run.

    python benchmarks/lm_throughput.py --study 1 2 4 --per_head     # the stored run's arms
    python benchmarks/lm_throughput.py                              # the first study's arms
    python benchmarks/lm_throughput.py --rounds 2 --steps 1         # a quick look

``--study`` takes one or more of the studies (:data:`stiefel_mini.experiments.lm.studies.STUDIES`:
1-4, ``ROUND1``-``ROUND4``); each study's arms are built by its own recipe
(:func:`stiefel_mini.experiments.lm.arms.setup_for`: ``r1_<arm>``, ``r2_<arm>``, ``r3_<arm>``, the
fourth study's unprefixed), at the settings its tuning starts from (the rest at
:data:`~stiefel_mini.experiments.lm.plans.DEFAULTS`: no lr changes what a step computes, but the
fourth study's ``all_stiefel`` stops its frame solve after ``max_iter = 1`` update, as it trained).
``--per_head``: the recipes that read ``per_head`` and whose tuning does not fix it (the second
study's Muon arms: ``muon``, ``muon_qknorm``, ``stiefel_muon``, whose best was per head) orthogonalise
Q, K and V per head; without it, whole. The fourth study's recipes read no ``per_head``. Preset
``cpu``: a converted GPT-2, 4 layers, width 256, batches of 16 x 128 tokens, from one seed.

A step is :func:`stiefel_mini.experiments.lm.experiment.train_step` (forward, backward, clipping,
every optimizer's step) on a fixed batch of random tokens (no corpus needed). After one warm-up
step, arms whose optimizers are of the same classes and whose weights are then bit for bit equal are
one computation and are timed once (the three studies' AdamW arms are); the record says which
study's arms each timed arm stands for, and the one ``adamw`` computation is the baseline of every
ratio. Rounds are interleaved in alternating order at each thread count; a rate is the best
round's, a ratio the median over rounds of the per-round ratio of step times to the baseline's,
with its range. ``--out PATH`` writes the times, what each timed arm stands for, the provenance and
the machine's load over the timing (:class:`~stiefel_mini.experiments.machine_load.LoadMeter`).
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import torch

from stiefel_mini.experiments import stats
from stiefel_mini.experiments.config import replace
from stiefel_mini.experiments.lm.arms import setup_for
from stiefel_mini.experiments.lm.config import PRESETS, LMOptimizer
from stiefel_mini.experiments.lm.experiment import train_step
from stiefel_mini.experiments.lm.plans import DEFAULTS, Study
from stiefel_mini.experiments.lm.studies import ROUND1, ROUND2, ROUND3, ROUND4
from stiefel_mini.experiments.machine_load import LoadMeter
from stiefel_mini.experiments.records import provenance, save_results

STUDIES = {1: ROUND1, 2: ROUND2, 3: ROUND3, 4: ROUND4}
"""``--study`` number -> the declared study."""

BASELINE = "adamw"
"""The arm every ratio divides by; the requested studies' arms of this name must be one computation."""

_CONFIG_SETTINGS = {f.name for f in dataclasses.fields(LMOptimizer)}  # a point's settings the run config carries


def time_steps(state: tuple, x: torch.Tensor, steps: int) -> float:
    """Seconds per training step over ``steps`` steps."""
    model, opts, params, clip = state
    start = time.perf_counter()
    for _ in range(steps):
        train_step(model, opts, x, x, params, clip)
    return (time.perf_counter() - start) / steps


def point_for(study: Study, arm: str, per_head: bool) -> dict:
    """The settings ``arm`` of ``study`` is built at: :data:`DEFAULTS` of those its recipe reads, its
    tuning's start, and ``per_head`` where the recipe reads it and the tuning does not fix it."""
    start = dict(study.tuning(arm).start)
    point = {k: DEFAULTS[k] for k in study.uses(arm)} | start
    if "per_head" in point and "per_head" not in start:
        point["per_head"] = per_head
    return point


def build(study: Study, arm: str, base, per_head: bool) -> tuple[tuple, dict]:
    """``((model, optimizers, params, grad_clip), point)`` of ``arm`` as ``study``'s recipe builds it."""
    point = point_for(study, arm, per_head)
    cfg = replace(base, arm=arm, **{k: v for k, v in point.items() if k in _CONFIG_SETTINGS})
    model, opts = setup_for(study.recipe(arm), point)(cfg, 0)
    return (model, opts, [p for p in model.parameters() if p.requires_grad], cfg.optimizer.grad_clip), point


def same_computation(a: tuple, b: tuple) -> bool:
    """Whether two built arms, one warm-up step from the same start, hold optimizers of the same
    classes and bit-for-bit equal weights."""
    (ma, oa, *_), (mb, ob, *_) = a, b
    pa, pb = list(ma.parameters()), list(mb.parameters())
    return ([type(o) for o in oa] == [type(o) for o in ob] and len(pa) == len(pb)
            and all(p.shape == q.shape and torch.equal(p, q) for p, q in zip(pa, pb)))


def timed_arms(studies: list[int], arms: list[str] | None, base, per_head: bool, x: torch.Tensor) -> list[dict]:
    """The computations to time, each ``{"name", "state", "stands_for": [{"study", "arm", "recipe",
    "point"}]}``: every requested arm built and stepped once, arms that are the same computation
    (:func:`same_computation`) merged; ``name``: the recipe of the latest study it stands for."""
    timed: list[dict] = []
    for s in studies:
        study = STUDIES[s]
        for arm, recipe in study.arms:
            if arms is not None and arm not in arms:
                continue
            state, point = build(study, arm, base, per_head)
            time_steps(state, x, 1)  # warm-up: first-call allocations, optimizer state; then compared
            entry = {"study": s, "arm": arm, "recipe": recipe, "point": point}
            twin = next((t for t in timed if same_computation(t["state"], state)), None)
            if twin is None:
                timed.append({"name": recipe, "state": state, "stands_for": [entry]})
            else:
                twin["name"] = recipe
                twin["stands_for"].append(entry)
    baselines = [t["name"] for t in timed if any(e["arm"] == BASELINE for e in t["stands_for"])]
    if len(baselines) != 1:
        raise RuntimeError(f"the requested studies' {BASELINE!r} arms are not one computation: {baselines}")
    return sorted(timed, key=lambda t: t["name"] != baselines[0])  # the baseline first, the rest as built


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--study", type=int, nargs="+", default=[1], choices=sorted(STUDIES),
                    help="whose arms, one or more studies (default: the first's)")
    ap.add_argument("--arms", nargs="+", default=None, help="only the requested studies' arms of these names")
    ap.add_argument("--per_head", action="store_true",
                    help="the second study's Muon arms: Q, K and V orthogonalised per head (default: whole)")
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=3, help="steps per timed round")
    ap.add_argument("--d_model", type=int, default=PRESETS["cpu"].model.d_model)
    ap.add_argument("--n_layer", type=int, default=PRESETS["cpu"].model.n_layer)
    ap.add_argument("--batch_size", type=int, default=PRESETS["cpu"].batch_size)
    ap.add_argument("--out", default=None, help="also write the times and their provenance to this JSON file")
    args = ap.parse_args(argv)
    args.study = sorted(set(args.study))
    names = {a for s in args.study for a, _ in STUDIES[s].arms}
    if args.arms is not None and (unknown := [a for a in args.arms if a not in names]):
        ap.error(f"--arms {unknown}: not arms of study {' or '.join(map(str, args.study))}; choose from {sorted(names)}")
    if BASELINE not in (args.arms or names):
        ap.error(f"the arms must include {BASELINE}, the baseline of the ratios: add it to --arms, or add --study 2 "
                 "(the third study has no AdamW arm; its runs pair with the second study's)")
    reads = [a for s in args.study for a, _ in STUDIES[s].arms
             if "per_head" in STUDIES[s].uses(a) and "per_head" not in dict(STUDIES[s].tuning(a).start)]
    if args.per_head and not reads:
        ap.error("--per_head applies to the second study's Muon arms: add --study 2")
    if args.d_model % PRESETS["cpu"].model.n_head:
        ap.error(f"--d_model {args.d_model} is not a multiple of the {PRESETS['cpu'].model.n_head} heads")
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    base = replace(PRESETS["cpu"], d_model=args.d_model, n_layer=args.n_layer, batch_size=args.batch_size)
    tokens = base.batch_size * base.model.context
    x = torch.randint(0, base.model.vocab_size, (base.batch_size, base.model.context),
                      generator=torch.Generator().manual_seed(0))  # (B, T)
    torch.set_num_threads(args.threads[0])
    timed = timed_arms(args.study, args.arms, base, args.per_head, x)
    names = [t["name"] for t in timed]
    record = {"settings": vars(args), "provenance": provenance(base), "baseline": names[0],
              "arms": [{"name": t["name"], "stands_for": t["stands_for"]} for t in timed], "load": None,
              "timing": []}
    print(f"GPT-2, {base.model.n_layer} layers, width {base.model.d_model}, {tokens} tokens a step; tokens per "
          f"second (best of {args.rounds} rounds of {args.steps} steps) and step time / {names[0]}'s")
    with LoadMeter() as meter:
        for threads in args.threads:
            torch.set_num_threads(threads)
            for t in timed:
                time_steps(t["state"], x, 1)  # warm-up at this thread count
            times: dict[str, list[float]] = {n: [] for n in names}
            for r in range(args.rounds):
                for t in timed if r % 2 == 0 else timed[::-1]:
                    times[t["name"]].append(time_steps(t["state"], x, args.steps))
            record["timing"].append({"threads": threads, "seconds_per_step": times, "tokens_per_step": tokens})
            print(f"\n{threads} thread(s)\n\n| arm | stands for | tokens per second | step time / {names[0]}'s |\n"
                  "|---|---|---|---|")
            for t in timed:
                stands = ", ".join(f"{e['study']}: {e['arm']}" for e in t["stands_for"])
                print(f"| {t['name']} | {stands} | {tokens / min(times[t['name']]):,.0f} | "
                      f"{stats.paired_ratio_text(times[t['name']], times[names[0]])} |", flush=True)
    record["load"] = meter.record
    print(f"\nload: {meter.record}")
    if args.out:
        save_results(args.out, record)
    return record


if __name__ == "__main__":
    main()

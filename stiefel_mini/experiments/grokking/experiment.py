"""Grokking on modular arithmetic: Stiefel-constrained Q/K against AdamW, with paired seeds.

A one-layer transformer in the style of Nanda et al. (2023) reads the three tokens ``a b =`` and
predicts ``c = a op b (mod p)`` at the last position. Trained full batch on a fraction of all ``p^2``
pairs with AdamW and strong weight decay, it first memorises the training set and only much later
generalises to the held-out pairs -- "grokking" (Power et al. 2022). The experiment measures, over
seeds that are paired across arms (same data split, same initial weights), how long each arm takes to
grok and whether the accuracy stays once reached.

Arms (see :data:`.config.ARM_NAMES` and :mod:`stiefel_mini.experiments.arms`): ``adamw`` (Q/K decayed like
every weight), ``adamw_nodecay_qk``, ``stiefel`` (StiefelAdam's frame rule on the Q/K frames, AdamW on
the rest), ``frozen`` (random frames never updated) and ``uniform`` (a control: attention weights fixed
at 1/3, removing the routing entirely). The studies' arms (:data:`.config.STUDY_ARMS`) separate "Stiefel" from
"flat attention": ``stiefel_learned`` and ``frozen_learned`` carry a learned per-head temperature
started at a set logit size (``logit_rms_init``), ``adamw_scaled_qk`` takes AdamW steps on Q/K as
small as StiefelAdam's, and ``qknorm`` bounds the logits by normalising q and k.

The experiment's other modules: configs and plans (:mod:`.config`), task and model (:mod:`.model`),
metrics and run selection (:mod:`.metrics`). This one is the run, the sweep (over
:mod:`stiefel_mini.experiments.runner`) and the command line (:func:`main`). Usage::

    python -m stiefel_mini.experiments.grokking --arm stiefel --seed 0 --out results/grokking/one.json
    python -m stiefel_mini.experiments.grokking sweep --seeds 0 1 2 3 4 --out results/grokking/cpu.json
    python -m stiefel_mini.experiments.grokking --preset reference --arm adamw   # Nanda et al. recipe
    python -m stiefel_mini.experiments.grokking sweep --plan r2_long   # a study (SWEEPS)
    python -m stiefel_mini.experiments.grokking recount results/grokking/r2_long.json   # metrics from the stored curves

References: Power et al. (2022), "Grokking: generalization beyond overfitting on small algorithmic
datasets"; Nanda et al. (2023), "Progress measures for grokking via mechanistic interpretability".
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Sequence

import torch
import torch.nn.functional as F

from stiefel_mini.attention import entropy
from stiefel_mini.experiments.arms import arm_spec, make_optimizer, optimizer_options
from stiefel_mini.experiments.config import ConfigError, config_help, replace
from stiefel_mini.experiments.grokking.config import PLANS, SWEEPS, GrokkingConfig, STUDY_NAMES, SweepConfig
from stiefel_mini.experiments.grokking.metrics import metrics, recount, subsample
from stiefel_mini.experiments.grokking.model import build_model, last_logits, make_dataset
from stiefel_mini.experiments.records import (config_dict, cpu_description, load_results, provenance, save_results,
                                              utc_now)
from stiefel_mini.experiments.runner import parse_cli, parse_sweep_cli, resume, run_grid
from stiefel_mini.experiments.runtime import progress, set_threads, subnormals_flushed
from stiefel_mini.geometry import orthogonality_error
from stiefel_mini.resources import results_path

__all__ = ["run", "repro_record", "run_key", "reusable_runs", "sweep", "merge_results", "load_study", "parse_args",
           "main"]


def run(cfg: GrokkingConfig) -> dict:
    """Train one arm on one seed; return ``{"config", "history", "metrics", "wall_time_s"}``.

    Full-batch AdamW-style training for ``cfg.steps`` steps. Every ``eval_every`` steps (and at the
    end) the history records, for the parameters after that many updates: train/val loss and accuracy;
    per Q/K projection (mean over heads) the Frobenius norm of the latest update ``||W_s - W_{s-1}||``,
    the distance from initialisation ``||W_s - W_0||`` and the orthogonality error ``||W^T W - I||``;
    and the entropy of the last token's attention per head (on the first 512 validation examples,
    which keeps evaluation cheap; the entropy is an average and needs no more); on the same examples
    the largest absolute last-query logit (``max_logit``) and the logits' RMS (``logit_rms``), both
    ``None`` for the uniform control; the mean per-head logit scale (``scale``); and the Frobenius norm
    of every weight tensor (``weight_norm``: ``{name: norm}``).

    Runs with subnormal numbers flushed to zero (:func:`~stiefel_mini.experiments.runtime.subnormals_flushed`:
    the same numbers, several times faster late in long runs).
    """
    with subnormals_flushed():
        return _train(cfg)


def _train(cfg: GrokkingConfig) -> dict:
    """The training loop of :func:`run` (without the subnormal setting)."""
    set_threads(cfg.threads)
    data = make_dataset(cfg.task.p, cfg.task.op, cfg.task.train_frac, cfg.seed)
    model = build_model(cfg)
    opt = make_optimizer(model, cfg.arm, **optimizer_options(cfg.optimizer))
    warmup = cfg.optimizer.warmup_steps
    if warmup < 0:
        raise ValueError(f"warmup_steps must be >= 0, got {warmup}")
    # LambdaLR's factor at optimizer step s (from 0) is min(s / warmup, 1): step 0 moves nothing.
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(s / warmup, 1.0)) if warmup else None
    qk = [model.attn.w_q, model.attn.w_k]  # each (H, d, dh)
    init = [w.detach().clone() for w in qk]
    prev = [w.detach().clone() for w in qk]
    keys = ("step", "train_loss", "train_acc", "val_loss", "val_acc", "step_q", "step_k", "dist_q",
            "dist_k", "orth_q", "orth_k", "entropy", "max_logit", "logit_rms", "scale", "weight_norm")
    hist: dict[str, list] = {k: [] for k in keys}
    xt, yt, xv, yv = data["x_train"], data["y_train"], data["x_val"], data["y_val"]
    t0 = time.perf_counter()
    bar = progress(total=cfg.steps, desc=f"{cfg.arm} seed {cfg.seed}", enabled=cfg.progress,
                   mininterval=1.0)
    for step in range(cfg.steps + 1):
        logits = model(xt)
        loss = F.cross_entropy(logits, yt)
        if step % cfg.eval_every == 0 or step == cfg.steps:
            with torch.no_grad():
                lv = model(xv)
                hist["step"].append(step)
                hist["train_loss"].append(loss.item())
                hist["train_acc"].append((logits.argmax(-1) == yt).float().mean().item())
                hist["val_loss"].append(F.cross_entropy(lv, yv).item())
                hist["val_acc"].append((lv.argmax(-1) == yv).float().mean().item())
                for tag, W, W0, Wp in zip("qk", qk, init, prev):
                    hist[f"step_{tag}"].append(torch.linalg.matrix_norm(W - Wp).mean().item())
                    hist[f"dist_{tag}"].append(torch.linalg.matrix_norm(W - W0).mean().item())
                    hist[f"orth_{tag}"].append(orthogonality_error(W).mean().item())
                # (B, H, 3) -> per head, mean over the examples: (H,)
                hist["entropy"].append(entropy(model.last_attention(xv[:512])).mean(0).tolist())
                ell = None if model.uniform else last_logits(model, xv[:512])  # (B, H, 3)
                hist["max_logit"].append(None if ell is None else ell.abs().max().item())
                hist["logit_rms"].append(None if ell is None else ell.pow(2).mean().sqrt().item())
                hist["scale"].append(model.attn.scale().mean().item())
                hist["weight_norm"].append({n: w.norm().item() for n, w in model.named_parameters()
                                            if w.ndim >= 2})
            bar.set_postfix(train=f"{hist['train_acc'][-1]:.2f}", val=f"{hist['val_acc'][-1]:.2f}",
                            refresh=False)
        if step == cfg.steps:
            break
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if (step + 1) % cfg.eval_every == 0 or step + 1 == cfg.steps:
            # Keep the frames before the update that precedes an evaluation, for its step size.
            for Wp, W in zip(prev, qk):
                Wp.copy_(W.detach())
        opt.step()
        if sched is not None:
            sched.step()
        bar.update()
    bar.close()
    return {"config": config_dict(cfg), "history": hist, "metrics": metrics(hist, cfg),
            "wall_time_s": time.perf_counter() - t0}


def repro_record(cfg: GrokkingConfig) -> dict:
    """The short run the reproduction test re-runs: ``cfg`` shortened, with its full history."""
    out = run(cfg)
    return {"config": out["config"], "history": out["history"], "metrics": out["metrics"]}


def run_key(r: dict, base: GrokkingConfig) -> tuple:
    """``(arm, seed, weight_decay)`` of a stored run (runs of files without a decay sweep: the base's)."""
    return (r["arm"], int(r["seed"]), float(r.get("weight_decay", base.optimizer.weight_decay)))


def reusable_runs(sweep_cfg: SweepConfig, base: GrokkingConfig) -> dict[tuple, dict]:
    """The runs of ``sweep_cfg.reuse`` that ``sweep`` would otherwise make, keyed ``(arm, seed, wd)``.

    The file must hold the same base config as ``base`` in every field but ``weight_decay``
    (``ValueError`` naming the fields otherwise); only its runs of the sweep's arms and seeds at a
    decay of the sweep's grid count.
    """
    if sweep_cfg.reuse is None:
        return {}
    src = load_results(sweep_cfg.reuse)
    src_base = dict(src["base_config"])
    mine = config_dict(replace(base, arm="*", seed=-1))
    changed = sorted(k for k in mine if k != "weight_decay" and src_base.get(k) != mine[k])
    if changed:
        raise ValueError(f"reuse={sweep_cfg.reuse} holds runs of another base config (fields {changed}); "
                         "reuse a file of the same preset, or drop reuse")
    decays = {float(w) for w in sweep_cfg.weight_decays} or {float(base.optimizer.weight_decay)}
    out = {}
    for r in src["runs"]:
        # a file without a decay sweep: its runs are at its base config's decay
        key = (r["arm"], int(r["seed"]), float(r.get("weight_decay", src_base["weight_decay"])))
        if key[0] in sweep_cfg.arms and key[1] in sweep_cfg.seeds and key[2] in decays:
            out[key] = {**r, "weight_decay": key[2], "copied_from": sweep_cfg.reuse}
    return out


def sweep(sweep_cfg: SweepConfig, base: GrokkingConfig, command: str | None = None) -> dict:
    """Run every (seed, weight decay, arm), writing ``sweep_cfg.out`` after each; resume from a file.

    The short reproduction run is stored first, so even a stopped sweep's file can be checked. Runs
    already in the file with the same base config are kept, so an interrupted sweep continues where
    it stopped; the provenance of the earlier invocations is kept in ``provenance_previous``, and
    each run records the commit (``git_commit``, ``git_dirty``) it ran at, when it started
    (``started_utc``) and the CPU it ran on (``cpu``: :func:`~stiefel_mini.experiments.records.cpu_description`). A file with a different
    base config raises a ``ValueError`` rather than being overwritten. Runs of ``redo_arms`` are
    dropped first and run again, and so are runs that record ``git_dirty: true`` when
    ``sweep_cfg.redo_dirty``. Runs of ``sweep_cfg.reuse`` (:func:`reusable_runs`) are copied in
    their turn instead of being run. Seed-major order makes every completed seed a complete set of pairs.
    """
    out_path = Path(sweep_cfg.out)
    decays = tuple(float(w) for w in sweep_cfg.weight_decays) or (float(base.optimizer.weight_decay),)
    wild = {"arm": "*", "seed": -1, **({"weight_decay": -1.0} if sweep_cfg.weight_decays else {})}
    base_dict = config_dict(replace(base, **wild))
    set_threads(base.threads)  # before the provenance records torch's thread count
    prov = provenance(base, sweep_cfg.seeds, command)
    payload = {
        "experiment": "grokking",
        "provenance": prov,
        "sweep": config_dict(sweep_cfg),
        "base_config": base_dict,
        "runs": [],
        "repro": None,
    }
    old = resume(out_path, "base_config", base_dict)
    if old is not None:
        payload["provenance_previous"] = [*old.get("provenance_previous", []), old["provenance"]]
        payload["runs"] = [r for r in old["runs"] if r["arm"] not in sweep_cfg.redo_arms
                           and not (sweep_cfg.redo_dirty and r["git_dirty"])]
        repro = old.get("repro")
        if repro is not None and repro["config"]["arm"] not in sweep_cfg.redo_arms:
            payload["repro"] = repro
    if payload["repro"] is None:
        payload["repro"] = repro_record(replace(
            base, arm=sweep_cfg.repro_arm, seed=sweep_cfg.repro_seed, steps=sweep_cfg.repro_steps,
            progress=False, weight_decay=decays[-1] if sweep_cfg.weight_decays else base.optimizer.weight_decay))
        save_results(out_path, payload)
    done = {run_key(r, base) for r in payload["runs"]}
    reusable = reusable_runs(sweep_cfg, base)
    t_start = time.perf_counter()

    def run_point(key: tuple) -> None:
        if key in reusable:
            payload["runs"].append(reusable[key])
            return
        arm, seed, wd = key
        started = utc_now()
        result = run(replace(base, arm=arm, seed=seed, weight_decay=wd))
        payload["runs"].append({
            "arm": arm, "seed": seed, "weight_decay": wd, "started_utc": started, "cpu": cpu_description(),
            "metrics": result["metrics"],
            "wall_time_s": result["wall_time_s"], "git_commit": prov["git_commit"], "git_dirty": prov["git_dirty"],
            "history": subsample(result["history"], sweep_cfg.history_points),
        })
        payload["wall_time_s"] = time.perf_counter() - t_start

    grid = [(arm, seed, wd) for seed in sweep_cfg.seeds for wd in decays for arm in sweep_cfg.arms]
    run_grid(grid, done.__contains__, run_point, lambda: save_results(out_path, payload), enabled=False)
    return payload


def merge_results(results: Sequence[dict]) -> dict:
    """One results payload from sweeps of the same base config run in parallel into separate files.

    The runs are concatenated (a run present in several files raises ``ValueError``), ``sweep.arms``
    and ``sweep.seeds`` become the union in first-seen order, ``provenance`` is the first file's and
    every file's own provenance is kept under ``provenance_merged``. Raises ``ValueError`` when the
    files hold different base configs or weight-decay grids.
    """
    if not results:
        raise ValueError("merge_results needs at least one results payload")
    first = results[0]
    for other in results[1:]:
        if other["base_config"] != first["base_config"] or \
                other["sweep"].get("weight_decays") != first["sweep"].get("weight_decays"):
            raise ValueError("results of different base configs (or decay grids) cannot be merged")
    runs, seen = [], set()
    for res in results:
        for r in res["runs"]:
            key = (r["arm"], r["seed"], r.get("weight_decay"))
            if key in seen:
                raise ValueError(f"run {key} is in more than one file")
            seen.add(key)
            runs.append(r)
    union = lambda key: list(dict.fromkeys(x for res in results for x in res["sweep"][key]))  # noqa: E731
    return {**first, "sweep": {**first["sweep"], "arms": union("arms"), "seeds": union("seeds")}, "runs": runs,
            "provenance_merged": [res["provenance"] for res in results]}


def load_study(name: str) -> dict | None:
    """The results file ``results/grokking/<name>.json`` (a key of :data:`STUDY_NAMES`), or ``None``
    when this copy of the results lacks it (the chapters then say which study is missing)."""
    if name not in STUDY_NAMES:
        raise ValueError(f"unknown grokking study {name!r}: choose one of {sorted(STUDY_NAMES)}")
    try:
        return load_results(results_path(f"grokking/{name}.json"))
    except FileNotFoundError:
        return None


def _check_arm(arm: str) -> None:
    try:
        arm_spec(arm)
    except ValueError as err:
        raise ConfigError(f"--arm(s): {err}") from None


def parse_args(argv: Sequence[str]) -> tuple:
    """``(sweep config, base config)`` of ``sweep [--plan NAME] [--field value ...]``, else
    ``(config, out)`` of ``[--preset NAME] [--out PATH] [--field value ...]``; arms are checked."""
    argv = list(argv)
    if argv and argv[0] == "sweep":
        scfg, base = parse_sweep_cli(SweepConfig, GrokkingConfig, argv[1:], plans=SWEEPS, presets=PLANS)
        for arm in scfg.arms:
            _check_arm(arm)
        return scfg, base
    cfg, out, _ = parse_cli(GrokkingConfig, argv, presets=PLANS, default_preset="cpu")
    _check_arm(cfg.arm)
    return cfg, out


def main(argv: Sequence[str] | None = None) -> None:
    """CLI: ``[sweep [--plan NAME]] [--preset NAME] [--field value ...] [--out PATH]``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "-h" in argv or "--help" in argv:
        print("usage: python -m stiefel_mini.experiments.grokking recount FILE...  (metrics from stored curves)")
        print("usage: python -m stiefel_mini.experiments.grokking [sweep [--plan "
              f"{'|'.join(SWEEPS)}]] [--preset {'|'.join(PLANS)}] [--out PATH] [--field value ...]")
        print(config_help(SweepConfig) + "\n" + config_help(GrokkingConfig))
        return
    if argv and argv[0] == "recount":
        for path in argv[1:]:
            print(f"{path}: metrics of {recount(path)} run(s) rewritten from the stored histories")
        return
    if argv and argv[0] == "sweep":
        scfg, base = parse_args(argv)
        try:
            payload = sweep(scfg, base)
        except ValueError as err:  # a results file of another config: say so in one line
            raise SystemExit(f"error: {err}") from None
        print(f"wrote {scfg.out}: {len(payload['runs'])} runs")
        return
    cfg, out = parse_args(argv)
    result = run(cfg)
    m = result["metrics"]
    print(f"{cfg.arm} seed {cfg.seed}: val95 at {m['steps_to_val95']}, val99 at {m['steps_to_val99']}, "
          f"train99 at {m['steps_to_train99']}, final val {m['final_val_acc']:.3f} "
          f"({result['wall_time_s']:.0f} s)")
    if out:
        save_results(out, {"experiment": "grokking", "provenance": provenance(cfg, [cfg.seed]),
                           **result})

"""A small language model on real text: Stiefel attention against AdamW and Muon, with paired seeds.

A GPT-2 of four layers (:mod:`.model`) learns to predict the next token of the State of the
Union addresses (:mod:`.data`) for a fixed budget of tokens; each arm (:data:`LM_ARMS`) trains
the same initial weights on the same batches. :func:`run` is one run; :func:`study` runs a plan's
:class:`Schedule` on several processes (the ready runs in the order the plan gives them), writing
the results file after every run and resuming from it; the declared studies' schedules are
:func:`stiefel_mini.experiments.lm.run_study.schedule`'s. Usage (the package's command line,
:func:`stiefel_mini.experiments.lm.run_study.main`, hands the tokenizer and single runs to :func:`main`)::

    python -m stiefel_mini.experiments.lm tokenizer                    # results/lm/tokenizer.json
    python -m stiefel_mini.experiments.lm --arm stiefel --seed 0       # one run (8 CPU minutes)
    python -m stiefel_mini.experiments.lm --preset tiny --arm muon     # a few seconds
    python -m stiefel_mini.experiments.lm study round1 --workers 2     # results/lm/study.json (also: study)
    python -m stiefel_mini.experiments.lm study round2 --workers 2     # results/lm/round2.json (also: round2)
    python -m stiefel_mini.experiments.lm study round3 --workers 2     # results/lm/round3.json (also: round3)
    python -m stiefel_mini.experiments.lm study round4 --workers 2     # results/lm/round4.json
    python -m stiefel_mini.experiments.lm study round2 --dry_run true  # what is left of it, running nothing
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, ThreadPoolExecutor, wait
from multiprocessing import get_context
from pathlib import Path
from typing import Callable, Sequence

import torch
import torch.nn.functional as F

from stiefel_mini.experiments.config import ConfigError, config_help, parse_config, replace
from stiefel_mini.experiments.lm.attention import attention_stats
from stiefel_mini.experiments.lm.config import LM_ARMS, PRESETS, LMConfig
from stiefel_mini.experiments.lm.data import (EOT, addresses, corpus_dir, encode_split, eval_windows, load_tokenizer,
                                              random_batch, read_split, split_addresses, token_bytes, train_tokenizer)
from stiefel_mini.experiments.lm.model import build_model, lr_factor, make_optimizers
from stiefel_mini.experiments.records import config_dict, provenance, save_results
from stiefel_mini.experiments.runner import parse_cli, resume
from stiefel_mini.experiments.runtime import generator, progress, set_threads
from stiefel_mini.geometry import orthogonality_error
from stiefel_mini.groups import frame_parameters, is_frame, qk_parameters

Setup = Callable[[LMConfig, int], tuple[torch.nn.Module, list[torch.optim.Optimizer]]]
"""``setup(cfg, eot_id) -> (model, optimizers)``: how :func:`run` builds an arm."""

__all__ = ["PROMPTS", "corpus", "bits_per_byte", "sample", "train_step", "device_for", "device_name", "run", "study",
           "write_tokenizer", "parse_args", "main"]

PROMPTS = ("Fellow-Citizens of the Senate and House of Representatives:", "The state of our Union is",
           "We must")
"""The prompts each trained model continues (:func:`sample`)."""


def corpus(tokenizer_path: str | None = None) -> dict:
    """``{"tokenizer", "bytes", "train", "val", "test"}``: the tokenizer, its ``(vocab,)`` bytes per
    token and the three splits of :func:`~stiefel_mini.experiments.lm.data.corpus_dir` as
    :class:`~stiefel_mini.experiments.lm.data.TokenSplit` (cached per process, per tokenizer and folder)."""
    return _corpus(tokenizer_path, str(corpus_dir()))


@functools.lru_cache(maxsize=2)
def _corpus(tokenizer_path: str | None, folder: str) -> dict:
    tok = load_tokenizer(tokenizer_path)
    return {"tokenizer": tok, "bytes": token_bytes(tok),
            **{split: encode_split(tok, read_split(split, Path(folder))) for split in ("train", "val", "test")}}


@torch.no_grad()
def bits_per_byte(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, n_bytes: torch.Tensor,
                  batch: int = 32) -> float:
    """``sum -log2 p(y | x) / sum bytes(y)`` over windows ``x``, ``y`` ``(W, T)``; ``n_bytes`` ``(vocab,)``."""
    was = model.training
    model.eval()
    nll, nb = 0.0, 0
    for i in range(0, x.shape[0], batch):
        logits = model(input_ids=x[i:i + batch]).logits  # (b, T, vocab)
        nll += F.cross_entropy(logits.flatten(0, 1), y[i:i + batch].flatten(), reduction="sum").item()
        nb += int(n_bytes[y[i:i + batch]].sum())
    model.train(was)
    return nll / math.log(2) / nb


@torch.no_grad()
def sample(model: torch.nn.Module, tokenizer, prompt: str, n_tokens: int, gen: torch.Generator,
           temperature: float = 0.8, top_k: int = 40) -> str:
    """``prompt`` continued by ``n_tokens`` tokens drawn from ``model`` (softmax of logits / temperature
    over the ``top_k`` likeliest), stopping at :data:`EOT`; returns the continuation alone."""
    was = model.training
    model.eval()
    context = model.config.n_positions
    ids = tokenizer.encode(prompt).ids
    start, eot = len(ids), tokenizer.token_to_id(EOT)
    for _ in range(n_tokens):
        x = torch.tensor([ids[-context:]], device=next(model.parameters()).device)  # (1, T)
        logits = model(input_ids=x).logits[0, -1] / temperature  # (vocab,)
        top = torch.topk(logits, min(top_k, logits.numel()))
        pick = torch.multinomial(top.values.softmax(-1).cpu(), 1, generator=gen)  # gen lives on the CPU
        nxt = int(top.indices[int(pick)])
        if nxt == eot:
            break
        ids.append(nxt)
    model.train(was)
    return tokenizer.decode(ids[start:])


def train_step(model: torch.nn.Module, opts: list[torch.optim.Optimizer], x: torch.Tensor, y: torch.Tensor,
               params: list[torch.Tensor], grad_clip: float) -> torch.Tensor:
    """One step on windows ``x``, targets ``y`` ``(B, T)``: the mean next-token cross-entropy, its
    gradient clipped to global norm ``grad_clip`` over ``params``, then every optimizer's step.

    Raises ``FloatingPointError`` (before any weight changes) when the loss or the gradient is not
    finite: the run has diverged.
    """
    logits = model(input_ids=x).logits  # (B, T, vocab)
    loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
    for opt in opts:
        opt.zero_grad(set_to_none=True)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(params, grad_clip)
    if not (torch.isfinite(loss) and torch.isfinite(norm)):
        raise FloatingPointError(f"loss {loss.item()}, gradient norm {norm.item()}: the run diverged")
    for opt in opts:
        opt.step()
    return loss


def _qk_vector(qk: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([w.detach().flatten() for w in qk]) if qk else torch.zeros(0)


def device_for(name: str) -> torch.device:
    """``torch.device(name)`` for ``"cpu"`` or ``"cuda[:i]"``, or ``ValueError`` naming what to pass instead."""
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(f"device {name!r} is not a torch device; pass cpu or cuda") from None
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device {name!r}: this experiment runs on cpu or cuda")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} asked for, but torch sees no CUDA GPU here; pass --device cpu")
    return device


def device_name(name: str) -> str:
    """What a run record says of its device: ``"cpu"``, or the GPU's name (``"cuda: NVIDIA H200"``)."""
    device = device_for(name)
    return "cpu" if device.type == "cpu" else f"cuda: {torch.cuda.get_device_name(device)}"


def run(cfg: LMConfig, tokenizer_path: str | None = None, setup: Setup | None = None,
        stats_windows: int = 0) -> dict:
    """Train ``cfg.arm`` on seed ``cfg.seed`` on ``cfg.device``; return the run's measurements.

    ``val_bpb`` and ``test_bpb``: bits per byte on every validation and test window at the end;
    ``history``: per evaluation ``step``, ``tokens``, ``train_bpb`` (the mean over the steps since
    the last evaluation) and ``val_bpb`` (on ``cfg.eval_windows`` windows); ``qk_step_mean``: mean
    over steps of ``||Q/K after - before||_F`` over all Q/K weights of the model (``None`` for a
    model whose Q/K are not stored apart, as in GPT-2's fused ``c_attn``); ``orth_error``:
    the largest ``||W^T W - I||_F`` of any frame at the end (``None`` without frames);
    ``tokens_per_s``: training tokens per second of training time; ``samples``: the model's
    continuations of :data:`PROMPTS`. A run whose loss or gradient stops being finite ends there:
    ``diverged_at`` is that step (``None`` for a run that finished), its bits per byte ``None``.

    ``setup(cfg, eot_id) -> (model, optimizers)`` builds another arm's model and optimizers (default:
    :func:`~stiefel_mini.experiments.lm.model.build_model` and
    :func:`~stiefel_mini.experiments.lm.model.make_optimizers`); ``stats_windows > 0`` adds to each
    evaluation the largest attention logit and the lowest attention entropy on that many validation
    windows (``history`` ``max_logit``, ``min_entropy``; :func:`.attention.attention_stats`).
    """
    set_threads(cfg.threads)
    device = device_for(cfg.device)
    data = corpus(tokenizer_path)
    tok, nbytes, ctx = data["tokenizer"], data["bytes"].to(device), cfg.model.context
    if tok.get_vocab_size() != cfg.model.vocab_size:
        raise ValueError(f"the tokenizer has {tok.get_vocab_size()} tokens but vocab_size={cfg.model.vocab_size}; "
                         "train one of that size (python -m stiefel_mini.experiments.lm tokenizer --vocab_size N)")
    if setup is None:
        model = build_model(cfg, eot_id=tok.token_to_id(EOT))
        opts = make_optimizers(model, cfg)
    else:
        model, opts = setup(cfg, tok.token_to_id(EOT))
    model.to(device)  # in place: the optimizers hold the same parameters, their state is made on first step
    o = cfg.optimizer
    scheds = [torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: lr_factor(s, cfg.steps, o.warmup_frac, o.final_lr_frac)) for opt in opts]
    params = [p for p in model.parameters() if p.requires_grad]
    qk = list(qk_parameters(model))
    gen = generator(cfg.seed, "batches")
    xv, yv = (t.to(device) for t in eval_windows(data["val"].ids, ctx, cfg.eval_windows))  # (W, T) each
    keys = ("step", "tokens", "train_bpb", "val_bpb") + (("max_logit", "min_entropy") if stats_windows else ())
    hist: dict[str, list] = {k: [] for k in keys}
    nll_sum, byte_sum, step_sum, train_time, diverged = 0.0, 0, 0.0, 0.0, None
    bar = progress(total=cfg.steps, desc=f"{cfg.arm} seed {cfg.seed}", enabled=cfg.progress, mininterval=2.0)
    for step in range(cfg.steps + 1):
        if step % cfg.eval_every == 0 or step == cfg.steps:
            hist["step"].append(step)
            hist["tokens"].append(step * cfg.batch_size * ctx)
            hist["train_bpb"].append(nll_sum / math.log(2) / byte_sum if byte_sum else None)
            hist["val_bpb"].append(bits_per_byte(model, xv, yv, nbytes))
            if stats_windows:
                for k, v in attention_stats(model, xv[:stats_windows]).items():
                    hist[k].append(v)
            nll_sum, byte_sum = 0.0, 0
            bar.set_postfix(val_bpb=f"{hist['val_bpb'][-1]:.3f}", refresh=False)
        if step == cfg.steps:
            break
        t0 = time.perf_counter()
        x, y = (t.to(device) for t in random_batch(data["train"].ids, cfg.batch_size, ctx, gen))  # (B, T) each
        before = _qk_vector(qk)
        try:
            loss = train_step(model, opts, x, y, params, o.grad_clip)
        except FloatingPointError:
            diverged = step
            break
        for sched in scheds:
            sched.step()
        step_sum += torch.linalg.vector_norm(_qk_vector(qk) - before).item()
        train_time += time.perf_counter() - t0
        nll_sum += loss.item() * y.numel()
        byte_sum += int(nbytes[y].sum())
        bar.update()
    bar.close()
    # frames held by this library's modules, and any other parameter marked as one (whole matrices)
    frames = list({id(p): p for p in [*frame_parameters(model), *filter(is_frame, model.parameters())]}.values())
    gen_s = generator(cfg.seed, "sample")
    done = cfg.steps if diverged is None else diverged
    if diverged is not None:
        return {"val_bpb": None, "test_bpb": None, "diverged_at": diverged, "history": hist,
                "qk_step_mean": step_sum / max(1, done) if qk else None, "orth_error": None,
                "tokens_per_s": done * cfg.batch_size * ctx / max(train_time, 1e-9), "train_time_s": train_time,
                "samples": []}
    return {
        "val_bpb": bits_per_byte(model, *(t.to(device) for t in eval_windows(data["val"].ids, ctx)), nbytes),
        "test_bpb": bits_per_byte(model, *(t.to(device) for t in eval_windows(data["test"].ids, ctx)), nbytes),
        "diverged_at": None,
        "history": hist,
        "qk_step_mean": step_sum / done if qk else None,
        "orth_error": max(orthogonality_error(f.detach()).max().item() for f in frames) if frames else None,
        "tokens_per_s": cfg.steps * cfg.batch_size * ctx / max(train_time, 1e-9),
        "train_time_s": train_time,
        "samples": [{"prompt": p, "text": sample(model, tok, p, cfg.sample_tokens, gen_s)}
                    for p in PROMPTS[:cfg.samples]],
    }


@dataclasses.dataclass(frozen=True)
class Schedule:
    """How :func:`study` runs a plan: ``state(runs) -> (ready points, remaining runs)``, ``key(point)``
    (what tells two runs apart), ``run_point(base, point, commit) -> record`` (in a worker process,
    so a module-level function), ``plan`` (the plan as stored in the results file) and ``seeds`` (the
    comparisons' seeds, for the provenance)."""

    state: Callable[[list[dict]], tuple[list[dict], float]]
    key: Callable[[dict], tuple]
    run_point: Callable[[LMConfig, dict, dict], dict]
    plan: dict
    seeds: tuple[int, ...]


def study(base: LMConfig, out: str | Path, schedule: Schedule, workers: int = 2, command: str | None = None) -> dict:
    """Run ``schedule`` from ``base`` on ``workers`` processes, writing ``out`` after every run.

    The file holds the plan, the base config and the runs; run again with the same settings it
    resumes (a file of other settings raises ``ValueError`` naming the fields). Each finished run is
    stored as ``schedule.run_point`` records it (its settings, phase, start time, commit and CPU).
    Which runs are ready, and each choice, come from the ``schedule``
    (:func:`stiefel_mini.experiments.lm.run_study.schedule` of a declared study).
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    set_threads(base.threads)
    prov = provenance(base, schedule.seeds, command)
    device_for(base.device)
    # Where a run computes is stored per run, so that one results file can be resumed on another device.
    base_dict = {k: v for k, v in config_dict(replace(base, arm="*", seed=-1, progress=False)).items() if k != "device"}
    settings = {"base_config": base_dict, "plan": schedule.plan}
    payload = {"experiment": "lm", "provenance": prov, **settings, "runs": []}
    old = resume(out, "base_config", base_dict)
    if old is not None:
        if old.get("plan") != settings["plan"]:
            raise ValueError(f"{out} holds runs of another plan; resume with the same plan, or write to another --out")
        payload["provenance_previous"] = [*old.get("provenance_previous", []), old["provenance"]]
        payload["runs"] = old["runs"]
    save_results(out, payload)
    commit = {"git_commit": prov["git_commit"], "git_dirty": prov["git_dirty"]}
    ready, remaining = schedule.state(payload["runs"])
    bar = progress(total=len(payload["runs"]) + remaining, initial=len(payload["runs"]), desc="lm study")
    in_flight: dict = {}
    # One worker runs in this process (a thread), so a study of one worker needs no fresh interpreter.
    pool = (ThreadPoolExecutor(max_workers=1) if workers == 1 else
            ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")))
    with pool:
        while True:
            ready, _ = schedule.state(payload["runs"])
            for point in ready:
                key = schedule.key(point)
                if key not in in_flight and len(in_flight) < workers:
                    in_flight[key] = pool.submit(schedule.run_point, base, point, commit)
            if not in_flight:
                break
            done, _ = wait(in_flight.values(), return_when=FIRST_COMPLETED)
            for key in [k for k, f in in_flight.items() if f in done]:
                payload["runs"].append(in_flight.pop(key).result())
                save_results(out, payload)
                bar.total = len(payload["runs"]) + schedule.state(payload["runs"])[1]
                bar.update()
    bar.close()
    return payload


def write_tokenizer(vocab_size: int, out: str | Path) -> dict:
    """Train the byte-level BPE on the training addresses, save it to ``out`` and its record beside it
    (``<out stem>_meta.json``: the command, commit, versions; per split its addresses' count and
    first and last year, its tokens and bytes per token), so that a reader without the corpus sees them."""
    tok = train_tokenizer(read_split("train"), vocab_size)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(out))
    names = split_addresses(addresses())
    stats = {split: encode_split(tok, read_split(split)) for split in ("train", "val", "test")}
    meta = {"provenance": provenance(), "vocab_size": vocab_size,
            "addresses": {k: len(v) for k, v in names.items()},
            "years": {k: [int(min(v)[:4]), int(max(v)[:4])] for k, v in names.items()},
            "bytes_per_token": {k: s.n_bytes / s.ids.numel() for k, s in stats.items()},
            "tokens": {k: s.ids.numel() for k, s in stats.items()}}
    save_results(out.with_name(f"{out.stem}_meta.json"), meta)
    return meta


@dataclasses.dataclass
class _TokenizerArgs:
    vocab_size: int = 2048
    out: str = "results/lm/tokenizer.json"


def parse_args(argv: Sequence[str]) -> tuple:
    """What a command line asks for, checked, without running it: ``("tokenizer", args)`` or
    ``("run", config, out)`` (the studies' commands are
    :func:`stiefel_mini.experiments.lm.run_study.parse_args`')."""
    argv = list(argv)
    if argv and argv[0] == "tokenizer":
        return "tokenizer", parse_config(_TokenizerArgs, argv[1:])
    cfg, out, _ = parse_cli(LMConfig, argv, presets=PRESETS, default_preset="cpu")
    if cfg.arm not in LM_ARMS:
        raise ConfigError(f"--arm: expected one of {sorted(LM_ARMS)}, got {cfg.arm!r}")
    return "run", cfg, out


def main(argv: Sequence[str] | None = None) -> None:
    """CLI: ``tokenizer [--vocab_size N] [--out PATH]`` or one run ``[--preset NAME] [--out PATH]
    [--field value ...]`` (the studies: :func:`stiefel_mini.experiments.lm.run_study.main`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "-h" in argv or "--help" in argv:
        print(__doc__)
        print(config_help(_TokenizerArgs) + "\n" + config_help(LMConfig))
        return
    kind, *parsed = parse_args(argv)
    if kind == "tokenizer":
        args = parsed[0]
        meta = write_tokenizer(args.vocab_size, args.out)
        print(f"wrote {args.out}: {args.vocab_size} tokens, {meta['bytes_per_token']['val']:.2f} bytes per token "
              "on the validation addresses")
        return
    cfg, out = parsed
    result = run(cfg)
    print(f"{cfg.arm} seed {cfg.seed}: validation {result['val_bpb']:.4f} bits per byte, test "
          f"{result['test_bpb']:.4f}, {result['tokens_per_s']:.0f} tokens/s")
    for s in result["samples"]:
        print(f"  {s['prompt']}{s['text']}")
    if out:
        save_results(out, {"experiment": "lm", "provenance": provenance(cfg, [cfg.seed]),
                           "config": config_dict(cfg), **result})

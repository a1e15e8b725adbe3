"""Weight decay on the attention Q/K projections: AdamW against StiefelAdam on an associative-recall task.

The experiment trains one small attention model on associative recall (a sequence of key/value pair
tokens and a query key; the answer is the value stored with that key) under arms of
:data:`stiefel_mini.experiments.arms.ARMS` (default ``adamw``, ``stiefel``, ``qknorm``):

* ``"adamw"``: ``torch.optim.AdamW`` on every weight; ``W_Q``, ``W_K`` are ordinary weights and
  receive the weight decay;
* ``"stiefel"``: :class:`~stiefel_mini.optim.StiefelAdam` with ``W_Q``, ``W_K`` as Stiefel frames.
  The frame group is *given* the same weight decay; StiefelAdam ignores it on frames by
  construction, and the experiment shows that it does;
* ``"qknorm"``: AdamW on :class:`~stiefel_mini.attention.QKNormSelfAttention`.

Every run starts from the same weights and sees the same batches (named streams of ``seed``).
``decay_scope="qk"`` (default) applies the decay to Q/K only and holds everything else fixed across
decays (no decay elsewhere), so any difference between two runs of one arm comes from the decay on
Q/K; ``"all"`` decays every matrix.

The configs are in :mod:`stiefel_mini.experiments.weight_decay.config`: one run
(:class:`WeightDecayConfig`) and the sweep (:class:`WeightDecaySweep`, the run as its part ``run``).
``run(cfg) -> record`` trains ``cfg.arm`` at ``cfg.optimizer.weight_decay`` and records, every
``log_every`` steps: loss, accuracy on a fixed evaluation batch, ``||W_Q^h||_F`` and ``||W_K^h||_F``
(mean over heads), the query's logit range and attention entropy, and the angular update per step
of ``W_Q^h``; and at ``snapshot_steps`` the Q/K weights and one head's attention map.
``sweep(cfg) -> history`` runs ``cfg.run`` for every arm of ``cfg.arms`` at every decay of
``cfg.weight_decays``; :func:`stiefel_mini.widgets.weight_decay_widget` shows a sweep. CLI (runs the sweep)::

    python -m stiefel_mini.experiments.weight_decay --steps 400 --weight_decays 0,0.3,1,3 --out wd.json

What weight decay does under ``torch.nn.utils.parametrizations.orthogonal``, geotorch and geoopt is
shown in :mod:`stiefel_mini.experiments.weight_decay.orthogonal_decay`.

Reference: Loshchilov & Hutter (2019), decoupled weight decay; Kosson, Messmer, Jaggi (2024),
"Rotational equilibrium: how weight decay balances learning across neural networks" (ICML), for the
equilibrium angular update ``sqrt(2 lr wd)`` of scale-invariant weights under AdamW.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from stiefel_mini.attention import entropy, make_attention
from stiefel_mini.experiments.arms import arm_spec, make_optimizer
from stiefel_mini.experiments.config import replace
from stiefel_mini.experiments.records import config_dict, provenance, save_results
from stiefel_mini.experiments.runner import parse_cli
from stiefel_mini.experiments.runtime import generator, progress, set_threads
from stiefel_mini.experiments.weight_decay.config import RecallTask, WeightDecayConfig, WeightDecaySweep
from stiefel_mini.experiments.weight_decay.readouts import fingerprint, frames_identical, summary_table
from stiefel_mini.geometry import orthogonality_error

__all__ = ["make_batch", "RecallModel", "build_model", "angular_update", "eval_batches", "run", "sweep", "main"]


# ----------------------------------------------------------------------------------------------------
# Task and model
# ----------------------------------------------------------------------------------------------------


def make_batch(task: RecallTask, n: int, generator: torch.Generator) -> dict[str, Tensor]:
    """``n`` recall problems: distinct keys ``(n, P)``, values ``(n, P)``, the queried slot ``(n,)``.

    The query is one of the sequence's keys; the target is the value stored with it.
    """
    keys = torch.rand(n, task.n_keys, generator=generator).argsort(dim=-1)[:, : task.n_pairs]
    values = torch.randint(task.n_values, (n, task.n_pairs), generator=generator)
    slot = torch.randint(task.n_pairs, (n,), generator=generator)
    rows = torch.arange(n)
    return {"keys": keys, "values": values, "slot": slot, "query": keys[rows, slot],
            "target": values[rows, slot]}


class RecallModel(nn.Module):
    """Pair tokens ``E_k[k_i] + E_v[v_i]``, then a query token ``E_k[q] + e_q``; one attention layer
    (:func:`~stiefel_mini.attention.make_attention` with the arm's module flags), read out at the
    query: value logits ``U (x_q + Attn(x)_q)``. Shapes: batch dict -> ``(B, n_values)``.

    Weights come from the ``"init"`` stream of ``cfg.seed`` (embeddings, then the attention's
    ``reset_parameters(generator)``, then ``U``), so every arm starts from the same weights.
    """

    def __init__(self, cfg: WeightDecayConfig, **attention_flags: Any):
        super().__init__()
        g = generator(cfg.seed, "init")
        d = cfg.model.d_model
        self.key_emb = nn.Parameter(torch.randn(cfg.task.n_keys, d, generator=g))
        self.val_emb = nn.Parameter(torch.randn(cfg.task.n_values, d, generator=g))
        self.query_emb = nn.Parameter(torch.randn(d, generator=g))
        self.attn = make_attention(d, cfg.model.n_heads, cfg.model.d_head, **attention_flags)
        self.attn.reset_parameters(g)
        self.unembed = nn.Linear(d, cfg.task.n_values, bias=False)
        with torch.no_grad():
            self.unembed.weight.copy_(torch.randn(self.unembed.weight.shape, generator=g) / math.sqrt(d))

    def tokens(self, batch: dict[str, Tensor]) -> Tensor:
        """The sequence ``(B, P + 1, d_model)``: P pair tokens, then the query token."""
        pairs = self.key_emb[batch["keys"]] + self.val_emb[batch["values"]]  # (B, P, d)
        query = self.key_emb[batch["query"]] + self.query_emb  # (B, d)
        return torch.cat([pairs, query[:, None]], dim=1)

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        x = self.tokens(batch)
        h = x[:, -1] + self.attn(x, last_only=True)[:, 0]  # (B, d)
        return self.unembed(h)

    @torch.no_grad()
    def query_logits(self, batch: dict[str, Tensor]) -> Tensor:
        """Scaled logits of the query over the sequence, ``(B, n_heads, P + 1)``."""
        return self.attn.logits(self.tokens(batch))[:, :, -1]


def build_model(cfg: WeightDecayConfig, arm: str | None = None) -> RecallModel:
    """The model for ``arm`` (default ``cfg.arm``), built with the arm's module flags."""
    spec = arm_spec(cfg.arm if arm is None else arm)
    if spec.qk == "none":
        raise ValueError(f"arm {spec.name} removes the attention; the recall task needs it")
    return RecallModel(cfg, **spec.module_flags())


# ----------------------------------------------------------------------------------------------------
# Measurements
# ----------------------------------------------------------------------------------------------------


def angular_update(W_old: Tensor, W_new: Tensor) -> Tensor:
    """Angle (radians) between ``W_old^h`` and ``W_new^h`` as vectors, per head: ``(H, n, p) -> (H,)``.

    ``2 asin(||u - u'|| / 2)`` with ``u = W / ||W||_F``: exact, and accurate for small angles where
    ``acos`` of the cosine is not.
    """
    a = W_old.flatten(1) / torch.linalg.vector_norm(W_old.flatten(1), dim=-1, keepdim=True)
    b = W_new.flatten(1) / torch.linalg.vector_norm(W_new.flatten(1), dim=-1, keepdim=True)
    return 2 * torch.asin((torch.linalg.vector_norm(a - b, dim=-1) / 2).clamp(max=1.0))


def eval_batches(cfg: WeightDecayConfig) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """The fixed evaluation batch (``eval_size`` problems, stream ``"eval"``) and its first 8 examples,
    whose attention the snapshots keep."""
    eval_batch = make_batch(cfg.task, cfg.task.eval_size, generator(cfg.seed, "eval"))
    return eval_batch, {k: v[:8] for k, v in eval_batch.items()}


def run(cfg: WeightDecayConfig) -> dict[str, Any]:
    """Train ``cfg.arm`` at decay ``cfg.optimizer.weight_decay`` on Q/K; return its record.

    The record holds lists ``step, loss, acc, norm_q, norm_k, logit_absmax, logit_std, entropy,
    angle_q, angle_k, orth_q`` (one entry per ``log_every`` steps; the angle is the mean angular update
    per step since the previous entry), ``snapshots`` (``step``, ``w_q``, ``w_k`` tensors and ``attn``:
    head 0's attention of the query, ``(8, P + 1)``, on the first 8 evaluation problems), ``final``
    (the Q/K weights after the last step) and ``wall_time_s``. The optimizer is
    :func:`~stiefel_mini.experiments.arms.make_optimizer` with the decay on Q/K (frames included) and,
    with ``decay_scope="all"``, on every other matrix.
    """
    set_threads(cfg.threads)
    task, settings = cfg.task, cfg.optimizer
    wd = float(settings.weight_decay)
    if wd < 0:
        raise ValueError(f"weight_decay must be >= 0; got {wd}")
    eval_batch, show_batch = eval_batches(cfg)
    model = build_model(cfg)
    opt = make_optimizer(model, cfg.arm, lr=settings.lr, betas=settings.betas, frame_lr=settings.frame_lr,
                         weight_decay=wd if settings.decay_scope == "all" else 0.0, qk_weight_decay=wd)
    data_gen = generator(cfg.seed, "batches")  # the same batches for every run
    w_q, w_k = model.attn.w_q, model.attn.w_k
    rec: dict[str, Any] = {k: [] for k in ("step", "loss", "acc", "norm_q", "norm_k", "logit_absmax",
                                          "logit_std", "entropy", "angle_q", "angle_k", "orth_q")}
    snaps: dict[str, list] = {"step": [], "w_q": [], "w_k": [], "attn": []}
    angles_q: list[Tensor] = []
    angles_k: list[Tensor] = []
    snapshot_steps = set(cfg.snapshot_steps)
    t0 = time.perf_counter()
    for step in range(cfg.steps + 1):
        if step % cfg.log_every == 0 or step == cfg.steps:
            with torch.no_grad():
                out = model(eval_batch)
                logits = model.query_logits(eval_batch)  # (B, H, P+1)
                rec["step"].append(step)
                rec["loss"].append(F.cross_entropy(out, eval_batch["target"]).item())
                rec["acc"].append((out.argmax(-1) == eval_batch["target"]).float().mean().item())
                rec["norm_q"].append(torch.linalg.matrix_norm(w_q).mean().item())
                rec["norm_k"].append(torch.linalg.matrix_norm(w_k).mean().item())
                rec["logit_absmax"].append(logits.abs().amax(-1).mean().item())
                rec["logit_std"].append(logits.std(-1).mean().item())
                rec["entropy"].append(entropy(logits.softmax(-1)).mean().item())
                rec["orth_q"].append(orthogonality_error(w_q).mean().item())
                # Mean angle per step over the steps since the last record (nan before any step).
                for key, acc in (("angle_q", angles_q), ("angle_k", angles_k)):
                    rec[key].append(torch.stack(acc).mean().item() if acc else float("nan"))
                    acc.clear()
        if step in snapshot_steps:
            with torch.no_grad():
                snaps["step"].append(step)
                snaps["w_q"].append(w_q.detach().clone())
                snaps["w_k"].append(w_k.detach().clone())
                snaps["attn"].append(model.query_logits(show_batch)[:, 0].softmax(-1))  # head 0
        if step == cfg.steps:
            break
        batch = make_batch(task, task.batch_size, data_gen)
        if task.label_noise > 0:
            # Label noise keeps the gradient noisy for the whole run, as in real training, so that
            # the optimizer's steps do not fade to zero once the task is solved.
            flip = torch.rand(task.batch_size, generator=data_gen) < task.label_noise
            noise = torch.randint(task.n_values, (task.batch_size,), generator=data_gen)
            batch["target"] = torch.where(flip, noise, batch["target"])
        loss = F.cross_entropy(model(batch), batch["target"])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        old_q, old_k = w_q.detach().clone(), w_k.detach().clone()
        opt.step()
        with torch.no_grad():
            angles_q.append(angular_update(old_q, w_q).mean())
            angles_k.append(angular_update(old_k, w_k).mean())
    rec["snapshots"] = snaps
    rec["final"] = {"w_q": w_q.detach().clone(), "w_k": w_k.detach().clone()}
    rec["wall_time_s"] = time.perf_counter() - t0
    return rec


def sweep(cfg: WeightDecaySweep) -> dict[str, Any]:
    """:func:`run` ``cfg.run`` for every arm of ``cfg.arms`` at every decay of ``cfg.weight_decays``.

    Returns ``{"config", "runs", "show_batch", "wall_time_s"}`` where ``runs[arm][i]`` is the record of
    ``arm`` at ``cfg.weight_decays[i]`` and ``show_batch`` the 8 problems of the attention snapshots.
    """
    for arm in cfg.arms:
        arm_spec(arm)
    if any(wd < 0 for wd in cfg.weight_decays):
        raise ValueError(f"weight decays must be >= 0; got {cfg.weight_decays}")
    t0 = time.perf_counter()
    runs: dict[str, list] = {arm: [] for arm in cfg.arms}
    bar = progress(total=len(cfg.arms) * len(cfg.weight_decays), desc="weight decay", enabled=cfg.progress)
    for arm in cfg.arms:
        for wd in cfg.weight_decays:
            runs[arm].append(run(replace(cfg.run, arm=arm, weight_decay=float(wd))))
            bar.update()
    bar.close()
    return {"config": cfg, "runs": runs, "show_batch": eval_batches(cfg.run)[1],
            "wall_time_s": time.perf_counter() - t0}


# ----------------------------------------------------------------------------------------------------
# CLI (the readouts of a history, the widget's too, are in stiefel_mini.experiments.weight_decay.readouts)
# ----------------------------------------------------------------------------------------------------


def _print_summary(history: dict[str, Any]) -> None:
    print(f"{'arm':8s} {'wd':>5s} {'|W_Q|':>7s} {'|logit|':>8s} {'entropy':>8s} {'acc':>6s} "
          f"{'angle/step':>10s} {'reference':>9s} {'max dW':>9s}  bits")
    for row in summary_table(history):
        print(f"{row['arm']:8s} {row['weight_decay']:5g} {row['norm_q']:7.3f} {row['logit_absmax']:8.3f} "
              f"{row['entropy']:8.4f} {row['acc']:6.3f} {row['angle_q']:10.4f} {row['angle_ref']:9.4f} "
              f"{row['max_change']:9.2e}  {row['fingerprint']}")
    for arm in history["runs"]:
        print(f"{arm}: final W_Q, W_K bitwise identical across decays: {frames_identical(history, arm)}")


def _jsonable_history(history: dict[str, Any]) -> dict[str, Any]:
    runs = {}
    for arm, recs in history["runs"].items():
        runs[arm] = [{k: v for k, v in r.items() if k not in ("snapshots", "final")} |
                     {"fingerprint": fingerprint(r["final"]["w_q"], r["final"]["w_k"])} for r in recs]
    return {"config": config_dict(history["config"]), "runs": runs, "summary": summary_table(history),
            "frames_identical": {arm: frames_identical(history, arm) for arm in history["runs"]},
            "wall_time_s": history["wall_time_s"]}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """CLI: ``[--out PATH] [--field value ...]``; runs the sweep and prints its summary table."""
    cfg, out, _ = parse_cli(WeightDecaySweep, list(sys.argv[1:] if argv is None else argv),
                            usage="python -m stiefel_mini.experiments.weight_decay [--out PATH] [--field value ...]")
    history = sweep(cfg)
    _print_summary(history)
    print(f"({history['wall_time_s']:.1f} s)")
    if out:
        save_results(out, {"experiment": "weight_decay", "provenance": provenance(cfg, [cfg.run.seed]),
                           **_jsonable_history(history)})
        print(f"wrote {out}")
    return history

"""How each arm of the second language-model study is built and run, and its schedule for :func:`.experiment.study`.

Every arm of a seed starts from the same GPT-2 weights (:func:`~stiefel_mini.experiments.lm.model.gpt2`)
computing the same function: the AdamW arms convert it with ``stiefel=False`` (Q/K stored per head,
as in the first study), the Stiefel arms with frames and a learned per-head logit scale (started
at the scale the polar map removed), the Muon arms keep GPT-2's fused Q|K|V ``Conv1D`` so that
StiefelMuon can orthogonalise Q, K and V whole or per head. QK-norm
(:func:`~stiefel_mini.experiments.lm.attention.add_qk_norm`) changes the function, by design.

Who trains what (``wd``: the weight decay, 0.1 for every matrix and embedding of every arm, never
for vectors, gains or frames):

=============  ==========================  ==========================  =====================
arm            Q/K                         V, output, MLP              embeddings, vectors
=============  ==========================  ==========================  =====================
adamw(_qk..)   AdamW ``lr``                AdamW ``lr``                AdamW ``lr``
stiefel        StiefelAdam ``frame_lr``    AdamW ``lr``                AdamW ``lr``
muon(_qk..)    Muon ``muon_lr`` (Q|K|V whole or per head)              AdamW ``lr``
stiefel_muon   manifold Muon ``frame_lr``  Muon ``muon_lr``            AdamW ``lr``
=============  ==========================  ==========================  =====================

A point with a ``scale_lr`` (the third study's, :mod:`~stiefel_mini.experiments.lm.round3`) trains a
Stiefel arm's learned logit scales at that AdamW lr instead of ``lr``.
"""

from __future__ import annotations

import dataclasses
import time

import torch
from torch import nn

from stiefel_mini import StiefelMuon, convert_attention, mark_adamw_params
from stiefel_mini.experiments.config import replace
from stiefel_mini.experiments.lm.attention import add_qk_norm
from stiefel_mini.experiments.lm.config import LMConfig
from stiefel_mini.experiments.lm.experiment import Schedule, device_name, run
from stiefel_mini.experiments.lm.model import gpt2, make_optimizers, parameter_roles, split_logit_scales
from stiefel_mini.experiments.lm.round2 import ARMS2, ROUND2, Round2, plan2, point_key
from stiefel_mini.experiments.records import cpu_description, jsonable, utc_now

__all__ = ["STATS_WINDOWS", "build", "setup_for", "run_point", "schedule"]

STATS_WINDOWS = 8
"""Validation windows on which each evaluation measures the largest logit and the lowest entropy."""

_SETTINGS = ("lr", "frame_lr", "muon_lr", "warmup_frac", "max_step")  # LMConfig fields a point sets


def build(arm: str, cfg: LMConfig, eot_id: int = 0) -> nn.Module:
    """The model of ``arm`` for ``cfg``: the seed's GPT-2, converted or marked as the arm needs."""
    if arm not in ARMS2:
        raise ValueError(f"unknown arm {arm!r}; choose one of {sorted(ARMS2)}")
    model = gpt2(cfg, eot_id)
    if arm in ("stiefel", "stiefel_muon"):
        convert_attention(model, stiefel=True, logit_scale="learned")
    elif arm in ("adamw", "adamw_qknorm"):
        convert_attention(model, stiefel=False)
    else:
        mark_adamw_params(model)  # the Muon arms keep c_attn fused: only the embeddings are marked
    if arm.endswith("_qknorm"):
        add_qk_norm(model)
    return model


def _muon_groups(model: nn.Module, cfg: LMConfig, per_head: bool, scale_lr: float | None = None) -> list[dict]:
    """StiefelMuon's groups: frames, Q|K|V (whole or per head), the other matrices, embeddings, vectors
    (and the learned logit scales at ``scale_lr``, when it is set)."""
    o, roles, n_head = cfg.optimizer, parameter_roles(model), cfg.model.n_head
    roles["vector"], scale = split_logit_scales(roles["vector"], model, scale_lr)
    qkv = {id(p) for name, p in model.named_parameters()
           if name.endswith(("c_attn.weight", "c_attn.proj.weight", "c_attn.rest_weight"))}
    fused = {id(p) for name, p in model.named_parameters() if name.endswith(("c_attn.weight", "c_attn.proj.weight"))}
    hidden = [p for p in roles["hidden"] if id(p) not in qkv]
    heads = n_head if per_head else 1
    groups = [{"params": roles["frames"], "role": "frame"},
              {"params": [p for p in roles["hidden"] if id(p) in fused], "role": "muon", "heads": heads, "fused": 3},
              {"params": [p for p in roles["hidden"] if id(p) in qkv - fused], "role": "muon",
               "heads": n_head if per_head else None},
              {"params": hidden, "role": "muon"},
              {"params": roles["embedding"], "role": "adamw", "adamw_weight_decay": o.weight_decay},
              {"params": roles["vector"] + roles["qk"], "role": "adamw", "adamw_weight_decay": 0.0},
              *({"params": g["params"], "role": "adamw", "adamw_weight_decay": 0.0, "adamw_lr": g["lr"]} for g in scale)]
    return [g for g in groups if g["params"]]


def setup_for(point: dict):
    """``setup(cfg, eot_id) -> (model, optimizers)`` for :func:`~stiefel_mini.experiments.lm.experiment.run`."""
    arm, scale_lr = point["arm"], point.get("scale_lr")

    def setup(cfg: LMConfig, eot_id: int):
        model = build(arm, cfg, eot_id)
        o = cfg.optimizer
        if arm in ("adamw", "adamw_qknorm", "stiefel"):
            return model, make_optimizers(model, replace(cfg, arm="stiefel" if arm == "stiefel" else "adamw"), scale_lr)
        opt = StiefelMuon(_muon_groups(model, cfg, bool(point["per_head"]), scale_lr), lr=o.muon_lr, momentum=o.momentum,
                          weight_decay=o.weight_decay, frame_lr=o.frame_lr, adamw_lr=o.lr, betas=o.betas, eps=o.eps,
                          in_out=True)  # GPT-2's Conv1D weights are stored (in, out)
        return model, [opt]
    return setup


def run_point(cfg: LMConfig, point: dict, commit: dict) -> dict:
    """One planned run in a worker process: its record, stamped with when and where it ran.

    The record: the point (arm, seed, phase, steps, settings), ``logit_scale`` (``"learned"`` for the
    Stiefel arms), ``qk_norm``, ``max_logit`` and ``min_entropy`` at the last evaluation, the run's
    measurements (:func:`~stiefel_mini.experiments.lm.experiment.run`, with both at every evaluation in
    ``history``), when, where and at which commit it ran.
    """
    started = utc_now()
    t0 = time.perf_counter()
    settings = {k: point[k] for k in _SETTINGS if point.get(k) is not None}
    cfg = replace(cfg, arm=point["arm"], seed=point["seed"], steps=point["steps"], progress=False, **settings)
    result = run(cfg, setup=setup_for(point), stats_windows=STATS_WINDOWS)
    last = {k: (result["history"][k][-1] if result["diverged_at"] is None else None) for k in ("max_logit", "min_entropy")}
    return {**point, **last, "logit_scale": "learned" if point["arm"] in ("stiefel", "stiefel_muon") else None,
            "qk_norm": point["arm"].endswith("_qknorm"), **result, "started_utc": started,
            "wall_time_s": time.perf_counter() - t0, "git_commit": commit["git_commit"],
            "git_dirty": commit["git_dirty"], "cpu": cpu_description(), "threads": torch.get_num_threads(),
            "device": device_name(cfg.device)}


def schedule(study: Round2 = ROUND2) -> Schedule:
    """The :class:`~stiefel_mini.experiments.lm.experiment.Schedule` of the second study."""
    def state(runs):
        s = plan2(study, runs)
        return s.ready, s.remaining
    return Schedule(state, point_key, run_point, jsonable(dataclasses.asdict(study)), study.seeds)

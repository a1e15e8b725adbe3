"""Readouts of a stored weight-decay history: its summary and what the widget shows, no training code.

:func:`max_change` (how far decay moved ``W_Q``, ``W_K`` from the run without it), :func:`fingerprint`
(a short hash of the frames' bits), :func:`frames_identical`, :func:`summary_table` beside the
random-walk prediction :func:`equilibrium_angle`, and :func:`widget_readouts` (the numbers of one
widget frame), read from a :func:`stiefel_mini.experiments.weight_decay.experiment.sweep` history. The widgets
(:mod:`stiefel_mini.widgets`) import these, not the experiment that writes the history.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import torch
from torch import Tensor

from stiefel_mini.attention import entropy
from stiefel_mini.experiments.arms import arm_spec

__all__ = ["max_change", "fingerprint", "frames_identical", "momentum_factor", "equilibrium_angle", "summary_table",
           "widget_readouts"]


def max_change(history: dict[str, Any], arm: str, i_wd: int, i_snap: int = -1) -> float:
    """``max |W(wd) - W(wd_0)|`` over the entries of ``W_Q`` and ``W_K`` at snapshot ``i_snap``,
    with ``wd_0 = cfg.weight_decays[0]`` (0 in the default sweep)."""
    runs = history["runs"][arm]
    a, b = runs[i_wd]["snapshots"], runs[0]["snapshots"]
    return max((a["w_q"][i_snap] - b["w_q"][i_snap]).abs().max().item(),
               (a["w_k"][i_snap] - b["w_k"][i_snap]).abs().max().item())


def fingerprint(*tensors: Tensor) -> str:
    """First 12 hex digits of the SHA-256 of the tensors' bytes: equal strings mean equal bits."""
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()[:12]


def widget_readouts(history: dict[str, Any], i_wd: int, i_snap: int) -> dict[str, dict[str, Any]]:
    """The numbers the widget shows for decay ``i_wd`` at snapshot ``i_snap``, per arm:
    ``norm_q`` (mean over heads of ``||W_Q^h||_F``), ``max_change`` (see :func:`max_change`),
    ``entropy`` (head 0's attention entropy on the shown examples, nats), ``fingerprint``."""
    out = {}
    for arm, recs in history["runs"].items():
        s = recs[i_wd]["snapshots"]
        attn = s["attn"][i_snap]
        out[arm] = {
            "norm_q": torch.linalg.matrix_norm(s["w_q"][i_snap]).mean().item(),
            "max_change": max_change(history, arm, i_wd, i_snap),
            "entropy": entropy(attn).mean().item(),
            "fingerprint": fingerprint(s["w_q"][i_snap], s["w_k"][i_snap]),
        }
    return out


def frames_identical(history: dict[str, Any], arm: str = "stiefel") -> bool:
    """Whether the final ``W_Q`` and ``W_K`` of ``arm`` are bitwise identical across all decays."""
    finals = [r["final"] for r in history["runs"][arm]]
    return all(torch.equal(f["w_q"], finals[0]["w_q"]) and torch.equal(f["w_k"], finals[0]["w_k"])
               for f in finals)


def momentum_factor(beta1: float) -> float:
    """``sqrt((1 - beta1) / (1 + beta1))``: the RMS of Adam's ``m_hat / sqrt(v_hat)`` per entry when
    the gradients are independent noise (the average of ``1/(1-beta1)`` noisy steps partly cancels)."""
    return math.sqrt((1 - beta1) / (1 + beta1))


def equilibrium_angle(cfg: Any, arm: str, wd: float) -> float:
    """The angular update per step that the random-walk model predicts.

    AdamW on scale-invariant weights (Kosson et al. 2024): ``sqrt(2 lr wd (1 - beta1) / (1 + beta1))``,
    which is ``sqrt(2 lr wd)`` without momentum. StiefelAdam: a step of Frobenius length
    ``frame_lr * rho`` (``rho`` = :func:`momentum_factor`) on a frame of norm ``sqrt(d_head)``, i.e.
    ``frame_lr * rho / sqrt(d_head)`` whatever the decay. ``cfg`` is the run config
    (:class:`~stiefel_mini.experiments.weight_decay.config.WeightDecayConfig`; a sweep's is its ``run``).
    """
    rho = momentum_factor(cfg.optimizer.betas[0])
    if arm_spec(arm).qk == "stiefel":
        return cfg.optimizer.frame_lr * rho / math.sqrt(cfg.model.d_head)
    return math.sqrt(2 * cfg.optimizer.lr * wd) * rho


def summary_table(history: dict[str, Any], last: int = 5) -> list[dict[str, Any]]:
    """One row per (arm, decay): final norms, logit range, entropy, accuracy, and the angular update
    per step averaged over the last ``last`` records beside :func:`equilibrium_angle`."""
    cfg = history["config"]
    rows = []
    for arm, recs in history["runs"].items():
        for wd, r in zip(cfg.weight_decays, recs):
            angle = sum(r["angle_q"][-last:]) / len(r["angle_q"][-last:])
            ref = equilibrium_angle(cfg.run, arm, wd)
            rows.append({"arm": arm, "weight_decay": wd, "norm_q": r["norm_q"][-1],
                         "norm_k": r["norm_k"][-1], "logit_absmax": r["logit_absmax"][-1],
                         "entropy": r["entropy"][-1], "acc": r["acc"][-1], "angle_q": angle,
                         "angle_ref": ref, "max_change": max_change(history, arm, cfg.weight_decays.index(wd)),
                         "fingerprint": fingerprint(r["final"]["w_q"], r["final"]["w_k"])})
    return rows

"""Readouts of a stored weight-decay history: what the weight-decay widget shows, with no training code.

:func:`max_change` (how far decay moved ``W_Q``, ``W_K`` from the run without it), :func:`fingerprint`
(a short hash of the frames' bits) and :func:`widget_readouts` (the numbers of one widget frame), read
from a :func:`stiefel_mini.experiments.weight_decay.sweep` history. The widgets
(:mod:`stiefel_mini.widgets`) import these, not the experiment that writes the history.
"""

from __future__ import annotations

import hashlib
from typing import Any

import torch
from torch import Tensor

from stiefel_mini.attention import entropy

__all__ = ["max_change", "fingerprint", "widget_readouts"]


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

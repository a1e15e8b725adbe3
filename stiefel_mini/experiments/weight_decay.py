"""Weight decay on the attention Q/K projections: AdamW against StiefelAdam, and the other libraries.

The experiment trains one small attention model on an associative-recall task (a sequence of
key/value pair tokens and a query key; the answer is the value stored with that key) with two arms:

* ``"adamw"``: ``torch.optim.AdamW`` on every weight; ``W_Q``, ``W_K`` are ordinary weights
  (``StiefelSelfAttention(stiefel=False)``) and receive the weight decay;
* ``"stiefel"``: :class:`~stiefel_mini.optim.StiefelAdam` with ``W_Q``, ``W_K`` as Stiefel frames.
  The frame group is *given* the same weight decay (``weight_decay=wd``); StiefelAdam ignores it on
  frames by construction, and the experiment shows that it does.

Both arms start from the same weights and see the same batches. ``decay_scope="qk"`` (default)
applies the decay to Q/K only and holds everything else fixed across decays (no decay elsewhere), so
any difference between two runs of one arm comes from the decay on Q/K; ``"all"`` decays every matrix.

``run(cfg) -> history`` records, every ``log_every`` steps: loss, accuracy on a fixed evaluation
batch, ``||W_Q^h||_F`` and ``||W_K^h||_F`` (mean over heads), the query's logit range and attention
entropy, and the angular update per step of ``W_Q^h``; and at ``snapshot_steps`` the Q/K weights and
one head's attention map, which :func:`widget` shows. CLI::

    python -m stiefel_mini.experiments.weight_decay --steps 400 --weight_decays 0,0.3,1,3 --out wd.json

The module also holds the executed demonstrations of what weight decay does under
``torch.nn.utils.parametrizations.orthogonal``, geotorch and geoopt (:func:`torch_orthogonal_decay`,
:func:`geotorch_decay`, :func:`geoopt_decay`).

Reference: Loshchilov & Hutter (2019), decoupled weight decay; Kosson, Messmer, Jaggi (2024),
"Rotational equilibrium: how weight decay balances learning across neural networks" (ICML), for the
equilibrium angular update ``sqrt(2 lr wd)`` of scale-invariant weights under AdamW.
"""

from __future__ import annotations

import base64
import hashlib
import html
import math
import sys
import time
from dataclasses import dataclass
from typing import Any, Literal, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from stiefel_mini.attention import QKNormSelfAttention, StiefelSelfAttention, param_groups
from stiefel_mini.experiments.config import parse_config
from stiefel_mini.experiments.records import config_dict, provenance, save_results
from stiefel_mini.experiments.runtime import progress, set_threads
from stiefel_mini.geometry import orthogonality_error, random_stiefel
from stiefel_mini.optim import StiefelAdam

__all__ = [
    "WeightDecayConfig",
    "CHAPTER_CONFIG",
    "RecallModel",
    "QKNormSelfAttention",
    "make_batch",
    "build_model",
    "build_optimizer",
    "angular_update",
    "run",
    "summary",
    "momentum_factor",
    "equilibrium_angle",
    "frames_identical",
    "max_change",
    "fingerprint",
    "widget_readouts",
    "widget_frame_html",
    "widget",
    "torch_orthogonal_decay",
    "geotorch_decay",
    "geoopt_decay",
    "main",
]

ARMS = ("adamw", "stiefel", "qknorm")


@dataclass
class WeightDecayConfig:
    """One sweep: every arm in ``arms`` at every decay in ``weight_decays``, same seed, same batches."""

    arms: tuple[str, ...] = ARMS
    weight_decays: tuple[float, ...] = (0.0, 0.3, 1.0, 3.0, 10.0)
    decay_scope: Literal["qk", "all"] = "qk"
    steps: int = 300
    lr: float = 1e-2  # AdamW learning rate (every non-frame weight; Q/K in the adamw arm)
    frame_lr: float = 0.05  # StiefelAdam: Frobenius length of one frame step
    betas: tuple[float, float] = (0.9, 0.98)
    batch_size: int = 64
    eval_size: int = 256
    label_noise: float = 0.2  # fraction of training targets replaced by a random value
    n_pairs: int = 6  # key/value pair tokens per sequence
    n_keys: int = 16
    n_values: int = 16
    d_model: int = 32
    n_heads: int = 2
    d_head: int = 8
    seed: int = 0
    log_every: int = 10
    snapshot_steps: tuple[int, ...] = (0, 50, 100, 200, 300)
    threads: int | None = 1  # a model this small runs fastest on one thread
    progress: bool = False


#: The configuration the book's weight-decay chapter runs (the defaults); the browser test re-runs it to
#: check the numbers on the built page.
CHAPTER_CONFIG = WeightDecayConfig()


# ----------------------------------------------------------------------------------------------------
# Task and model
# ----------------------------------------------------------------------------------------------------


def make_batch(cfg: WeightDecayConfig, n: int, generator: torch.Generator) -> dict[str, Tensor]:
    """``n`` recall problems: distinct keys ``(n, P)``, values ``(n, P)``, the queried slot ``(n,)``.

    The query is one of the sequence's keys; the target is the value stored with it.
    """
    keys = torch.rand(n, cfg.n_keys, generator=generator).argsort(dim=-1)[:, : cfg.n_pairs]
    values = torch.randint(cfg.n_values, (n, cfg.n_pairs), generator=generator)
    slot = torch.randint(cfg.n_pairs, (n,), generator=generator)
    rows = torch.arange(n)
    return {"keys": keys, "values": values, "slot": slot, "query": keys[rows, slot],
            "target": values[rows, slot]}


class RecallModel(nn.Module):
    """Pair tokens ``E_k[k_i] + E_v[v_i]``, then a query token ``E_k[q] + e_q``; one attention layer
    (:class:`~stiefel_mini.attention.StiefelSelfAttention`), read out at the query: value logits
    ``U (x_q + Attn(x)_q)``. Shapes: batch dict -> ``(B, n_values)``.
    """

    def __init__(self, cfg: WeightDecayConfig, *, stiefel: bool, qk_norm: bool = False):
        super().__init__()
        g = torch.Generator().manual_seed(cfg.seed)
        d = cfg.d_model
        self.key_emb = nn.Parameter(torch.randn(cfg.n_keys, d, generator=g))
        self.val_emb = nn.Parameter(torch.randn(cfg.n_values, d, generator=g))
        self.query_emb = nn.Parameter(torch.randn(d, generator=g))
        if qk_norm:
            self.attn = QKNormSelfAttention(d, cfg.n_heads, cfg.d_head)
        else:
            self.attn = StiefelSelfAttention(d, cfg.n_heads, cfg.d_head, stiefel=stiefel)
        self.unembed = nn.Linear(d, cfg.n_values, bias=False)
        with torch.no_grad():
            # The same initial weights for both arms (the frames start orthonormal either way).
            self.attn.w_q.copy_(random_stiefel(*self.attn.w_q.shape, generator=g))
            self.attn.w_k.copy_(random_stiefel(*self.attn.w_k.shape, generator=g))
            for lin in (self.attn.v_proj, self.attn.out_proj, self.unembed):
                lin.weight.copy_(torch.randn(lin.weight.shape, generator=g) / math.sqrt(lin.in_features))

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


def build_model(cfg: WeightDecayConfig, arm: str) -> RecallModel:
    """The model for ``arm`` (``"adamw"``: unconstrained Q/K; ``"stiefel"``: Q/K frames;
    ``"qknorm"``: unconstrained Q/K with :class:`QKNormSelfAttention`)."""
    if arm not in ARMS:
        raise ValueError(f"unknown arm {arm!r}; choose one of {list(ARMS)}")
    return RecallModel(cfg, stiefel=arm == "stiefel", qk_norm=arm == "qknorm")


def build_optimizer(model: RecallModel, arm: str, weight_decay: float,
                    cfg: WeightDecayConfig) -> torch.optim.Optimizer:
    """AdamW (arm ``"adamw"``) or StiefelAdam (arm ``"stiefel"``) with ``weight_decay`` on Q/K.

    Groups come from :func:`stiefel_mini.attention.param_groups`. With ``decay_scope="qk"`` the
    non-Q/K weights get no decay; with ``"all"`` every matrix does. In the StiefelAdam arm the frame
    group is given ``weight_decay`` too: StiefelAdam ignores decay on frames, which is the claim.
    """
    rest_wd = weight_decay if cfg.decay_scope == "all" else 0.0
    groups = param_groups(model, weight_decay=rest_wd,
                          frame_options={"lr": cfg.frame_lr, "weight_decay": weight_decay},
                          qk_options={"weight_decay": weight_decay})
    # The embeddings are matrices and land in "decay"; the query vector is 1-D ("no_decay").
    if arm == "stiefel":
        return StiefelAdam(groups, lr=cfg.lr, betas=cfg.betas, weight_decay=rest_wd)
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas, weight_decay=rest_wd)


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


def _entropy(p: Tensor) -> Tensor:
    """Entropy in nats of distributions over the last dim (``0 log 0 = 0``)."""
    return -(p * p.clamp_min(1e-30).log()).sum(-1)


def _train_one(cfg: WeightDecayConfig, arm: str, wd: float, eval_batch: dict[str, Tensor],
               show_batch: dict[str, Tensor]) -> dict[str, Any]:
    model = build_model(cfg, arm)
    opt = build_optimizer(model, arm, wd, cfg)
    data_gen = torch.Generator().manual_seed(cfg.seed + 1)  # the same batches for every run
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
                rec["entropy"].append(_entropy(logits.softmax(-1)).mean().item())
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
        batch = make_batch(cfg, cfg.batch_size, data_gen)
        if cfg.label_noise > 0:
            # Label noise keeps the gradient noisy for the whole run, as in real training, so that
            # the optimizer's steps do not fade to zero once the task is solved.
            flip = torch.rand(cfg.batch_size, generator=data_gen) < cfg.label_noise
            noise = torch.randint(cfg.n_values, (cfg.batch_size,), generator=data_gen)
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


def run(cfg: WeightDecayConfig) -> dict[str, Any]:
    """Train every arm at every weight decay; return the history.

    Returns ``{"config", "runs", "show_batch", "wall_time_s"}`` where ``runs[arm][i]`` is the record
    of ``arm`` at ``cfg.weight_decays[i]``: lists ``step, loss, acc, norm_q, norm_k, logit_absmax,
    logit_std, entropy, angle_q, angle_k, orth_q`` (one entry per ``log_every`` steps; the angle is
    the mean angular update per step since the previous entry), ``snapshots`` (``step``, ``w_q``,
    ``w_k`` tensors and ``attn``: head 0's attention of the query, ``(8, P + 1)``, on ``show_batch``)
    and ``final`` (the Q/K weights after the last step).
    """
    set_threads(cfg.threads)
    for arm in cfg.arms:
        if arm not in ARMS:
            raise ValueError(f"unknown arm {arm!r}; choose one of {list(ARMS)}")
    if any(wd < 0 for wd in cfg.weight_decays):
        raise ValueError(f"weight decays must be >= 0; got {cfg.weight_decays}")
    eval_gen = torch.Generator().manual_seed(cfg.seed + 10_000)
    eval_batch = make_batch(cfg, cfg.eval_size, eval_gen)
    show_batch = {k: v[:8] for k, v in eval_batch.items()}
    t0 = time.perf_counter()
    runs: dict[str, list] = {arm: [] for arm in cfg.arms}
    bar = progress(total=len(cfg.arms) * len(cfg.weight_decays), desc="weight decay",
                   enabled=cfg.progress)
    for arm in cfg.arms:
        for wd in cfg.weight_decays:
            runs[arm].append(_train_one(cfg, arm, float(wd), eval_batch, show_batch))
            bar.update()
    bar.close()
    return {"config": cfg, "runs": runs, "show_batch": show_batch,
            "wall_time_s": time.perf_counter() - t0}


def frames_identical(history: dict[str, Any], arm: str = "stiefel") -> bool:
    """Whether the final ``W_Q`` and ``W_K`` of ``arm`` are bitwise identical across all decays."""
    finals = [r["final"] for r in history["runs"][arm]]
    return all(torch.equal(f["w_q"], finals[0]["w_q"]) and torch.equal(f["w_k"], finals[0]["w_k"])
               for f in finals)


def max_change(history: dict[str, Any], arm: str, i_wd: int, i_snap: int = -1) -> float:
    """``max |W(wd) - W(wd_0)|`` over the entries of ``W_Q`` and ``W_K`` at snapshot ``i_snap``,
    with ``wd_0 = cfg.weight_decays[0]`` (0 in the default sweep)."""
    runs = history["runs"][arm]
    a, b = runs[i_wd]["snapshots"], runs[0]["snapshots"]
    return max((a["w_q"][i_snap] - b["w_q"][i_snap]).abs().max().item(),
               (a["w_k"][i_snap] - b["w_k"][i_snap]).abs().max().item())


def momentum_factor(beta1: float) -> float:
    """``sqrt((1 - beta1) / (1 + beta1))``: the RMS of Adam's ``m_hat / sqrt(v_hat)`` per entry when
    the gradients are independent noise (the average of ``1/(1-beta1)`` noisy steps partly cancels)."""
    return math.sqrt((1 - beta1) / (1 + beta1))


def equilibrium_angle(cfg: WeightDecayConfig, arm: str, wd: float) -> float:
    """The angular update per step that the random-walk model predicts.

    AdamW on scale-invariant weights (Kosson et al. 2024): ``sqrt(2 lr wd (1 - beta1) / (1 + beta1))``,
    which is ``sqrt(2 lr wd)`` without momentum. StiefelAdam: a step of Frobenius length
    ``frame_lr * rho`` (``rho`` = :func:`momentum_factor`) on a frame of norm ``sqrt(d_head)``, i.e.
    ``frame_lr * rho / sqrt(d_head)`` whatever the decay.
    """
    rho = momentum_factor(cfg.betas[0])
    if arm == "stiefel":
        return cfg.frame_lr * rho / math.sqrt(cfg.d_head)
    return math.sqrt(2 * cfg.lr * wd) * rho


def summary(history: dict[str, Any], last: int = 5) -> list[dict[str, Any]]:
    """One row per (arm, decay): final norms, logit range, entropy, accuracy, and the angular update
    per step averaged over the last ``last`` records beside :func:`equilibrium_angle`."""
    cfg = history["config"]
    rows = []
    for arm, recs in history["runs"].items():
        for wd, r in zip(cfg.weight_decays, recs):
            angle = sum(r["angle_q"][-last:]) / len(r["angle_q"][-last:])
            ref = equilibrium_angle(cfg, arm, wd)
            rows.append({"arm": arm, "weight_decay": wd, "norm_q": r["norm_q"][-1],
                         "norm_k": r["norm_k"][-1], "logit_absmax": r["logit_absmax"][-1],
                         "entropy": r["entropy"][-1], "acc": r["acc"][-1], "angle_q": angle,
                         "angle_ref": ref, "max_change": max_change(history, arm, cfg.weight_decays.index(wd)),
                         "fingerprint": fingerprint(r["final"]["w_q"], r["final"]["w_k"])})
    return rows


def fingerprint(*tensors: Tensor) -> str:
    """First 12 hex digits of the SHA-256 of the tensors' bytes: equal strings mean equal bits."""
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()[:12]


# ----------------------------------------------------------------------------------------------------
# The widget: frames rendered here, a slider jslink-ed to them in the browser
# ----------------------------------------------------------------------------------------------------

ARM_TITLES = {"adamw": "AdamW", "stiefel": "StiefelAdam", "qknorm": "AdamW + QK-norm"}


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
            "entropy": _entropy(attn).mean().item(),
            "fingerprint": fingerprint(s["w_q"][i_snap], s["w_k"][i_snap]),
        }
    return out


def _arm_png(history: dict[str, Any], arm: str, i_wd: int, i_snap: int, dpi: int) -> bytes:
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    from stiefel_mini.widgets import figure_to_png

    cfg = history["config"]
    recs = history["runs"][arm]
    r = recs[i_wd]
    s = r["snapshots"]
    attn = s["attn"][i_snap].numpy()
    slot = history["show_batch"]["slot"].numpy()
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(5.2, 2.3), gridspec_kw={"width_ratios": [1.1, 1]})
    ax0.imshow(attn, vmin=0, vmax=1, cmap="viridis", aspect="auto")
    ax0.scatter(slot, range(len(slot)), marker="s", s=46, facecolors="none", edgecolors="red", lw=1.2)
    ax0.set_xticks(range(attn.shape[1]), [*map(str, range(1, attn.shape[1])), "q"])
    ax0.set_yticks([])
    ax0.set_xlabel("token (red: the queried pair)")
    ax0.set_ylabel("8 examples")
    ax0.set_title("head 0: attention of the query", fontsize=9)
    steps = r["step"]
    # No label names the decay: StiefelAdam's picture must be the same for every decay.
    ax1.plot(steps, recs[0]["norm_q"], color="0.6", ls="--", lw=1, label=f"decay {cfg.weight_decays[0]:g}")
    ax1.plot(steps, r["norm_q"], color="C0" if arm == "adamw" else "C2", lw=1.6, label="this decay")
    step = s["step"][i_snap]
    ax1.plot([step], [torch.linalg.matrix_norm(s["w_q"][i_snap]).mean().item()], "ko", ms=4)
    top = max(max(rr["norm_q"]) for rrs in history["runs"].values() for rr in rrs)
    ax1.set_ylim(0, 1.08 * top)
    ax1.set_xlabel("step")
    ax1.set_title(r"$\|W_Q^h\|_F$ (mean over heads)", fontsize=9)
    ax1.legend(fontsize=7, loc="lower right")
    fig.suptitle(ARM_TITLES[arm], fontsize=10, y=1.02)
    fig.tight_layout()
    return figure_to_png(fig, dpi=dpi)


def widget_frame_html(history: dict[str, Any], i_wd: int, i_snap: int,
                      pngs: dict[str, bytes] | None = None,
                      arms: Sequence[str] = ("adamw", "stiefel")) -> str:
    """HTML of one widget frame: per arm, its image (if ``pngs``) and a readout whose numbers are
    :func:`widget_readouts`. Each readout is a ``<div class="wd-readout" data-arm=...>`` with one
    ``<span data-key=...>`` per number, so a test can read them back."""
    cfg = history["config"]
    nums = widget_readouts(history, i_wd, i_snap)
    step = history["runs"][arms[0]][i_wd]["snapshots"]["step"][i_snap]
    cols = []
    for arm in arms:
        n = nums[arm]
        img = ""
        if pngs is not None:
            b64 = base64.b64encode(pngs[arm]).decode("ascii")
            img = f'<img class="wd-image" data-arm="{arm}" src="data:image/png;base64,{b64}" style="max-width:100%">'
        change = "0 (bitwise equal)" if n["max_change"] == 0.0 else f"{n['max_change']:.4e}"
        cols.append(
            f'<div style="flex:1 1 0;min-width:15rem">{img}'
            f'<div class="wd-readout" data-arm="{arm}" style="font-family:monospace;font-size:0.85em">'
            f"<b>{html.escape(ARM_TITLES[arm])}</b>, wd = {cfg.weight_decays[i_wd]:g}, step {step}<br>"
            f'mean ||W_Q^h||_F = <span data-key="norm_q">{n["norm_q"]:.6f}</span><br>'
            f'max |W(wd) - W(wd={cfg.weight_decays[0]:g})| = <span data-key="max_change" '
            f'data-value="{n["max_change"]!r}">{change}</span><br>'
            f'head-0 attention entropy = <span data-key="entropy">{n["entropy"]:.6f}</span> nats<br>'
            f'bits of W_Q, W_K: <span data-key="fingerprint">{n["fingerprint"]}</span>'
            f"</div></div>"
        )
    return (f'<div class="wd-frame" data-wd="{cfg.weight_decays[i_wd]!r}" data-step="{step}" '
            f'style="display:flex;flex-wrap:wrap;gap:1rem">{"".join(cols)}</div>')


def widget(history: dict[str, Any], *, arms: Sequence[str] = ("adamw", "stiefel"), dpi: int = 70):
    """The chapter's widget: a weight-decay slider and a training-step slider over frames rendered
    from ``history`` (AdamW beside StiefelAdam) at the snapshot steps after step 0. Works in static
    HTML with no kernel (:func:`stiefel_mini.widgets.frame_grid_player`); both sliders open at their
    first position. The box carries the CSS class ``wd-widget``. Identical images (StiefelAdam's
    across decays) are rendered once."""
    from stiefel_mini.widgets import frame_grid_player

    cfg = history["config"]
    snap_steps = history["runs"][arms[0]][0]["snapshots"]["step"]
    # Step 0 is left out: before the first step no decay has acted, and the widget opens on its first
    # column, which should already show what the decay does.
    cols = [i for i, step in enumerate(snap_steps) if step > 0] or list(range(len(snap_steps)))
    cache: dict[str, bytes] = {}
    grid = []
    for i_wd in range(len(cfg.weight_decays)):
        row = []
        for i_snap in cols:
            pngs = {}
            for arm in arms:
                r = history["runs"][arm]
                key = arm + fingerprint(r[i_wd]["snapshots"]["attn"][i_snap],
                                        torch.tensor(r[i_wd]["norm_q"]), torch.tensor(r[0]["norm_q"]),
                                        torch.tensor([i_snap, i_wd if r[i_wd]["norm_q"] != r[0]["norm_q"] else 0]))
                if key not in cache:
                    cache[key] = _arm_png(history, arm, i_wd, i_snap, dpi)
                pngs[arm] = cache[key]
            row.append(widget_frame_html(history, i_wd, i_snap, pngs, arms=arms))
        grid.append(row)
    box = frame_grid_player(grid, row_labels=[f"{wd:g}" for wd in cfg.weight_decays],
                            col_labels=[str(snap_steps[i]) for i in cols],
                            row_description="weight decay", col_description="training step")
    box.add_class("wd-widget")
    return box


# ----------------------------------------------------------------------------------------------------
# Weight decay under the other ways of keeping weights orthogonal
# ----------------------------------------------------------------------------------------------------


def _demo_data(d_in: int, n: int = 32, seed: int = 0) -> Tensor:
    return torch.randn(n, d_in, generator=torch.Generator().manual_seed(seed))


def torch_orthogonal_decay(out_features: int = 64, in_features: int = 256, steps: int = 3,
                           lr: float = 1e-3, weight_decay: float | None = None,
                           orthogonal_map: str | None = None, seed: int = 0) -> dict[str, Any]:
    """``nn.Linear(in, out)`` under ``torch.nn.utils.parametrizations.orthogonal`` trained by
    ``torch.optim.AdamW`` (``weight_decay=None``: AdamW's default, 0.01) on ``||W x||^2``.

    Returns per step (0 = before training): ``norm`` (``||W||_F``), ``orth`` (``||W W^T - I||_F``),
    ``diag`` (the stored diagonal of the parametrization's unconstrained matrix, for the Householder
    map; ``None`` otherwise) and the map used.
    """
    from torch.nn.utils.parametrizations import orthogonal

    torch.manual_seed(seed)
    lin = nn.Linear(in_features, out_features, bias=False)
    orthogonal(lin, orthogonal_map=orthogonal_map)
    kwargs = {} if weight_decay is None else {"weight_decay": weight_decay}
    opt = torch.optim.AdamW(lin.parameters(), lr=lr, **kwargs)
    x = _demo_data(in_features, seed=seed)
    param = lin.parametrizations.weight[0]
    used = param.orthogonal_map.name
    out: dict[str, Any] = {"map": used, "weight_decay": opt.param_groups[0]["weight_decay"],
                           "norm": [], "orth": [], "diag": []}

    def record():
        with torch.no_grad():
            W = lin.weight
            out["norm"].append(torch.linalg.matrix_norm(W).item())
            out["orth"].append(orthogonality_error(W).item())
            X = lin.parametrizations.weight.original
            out["diag"].append(X.diagonal().tolist()[:4] if used == "householder" else None)

    record()
    for _ in range(steps):
        loss = lin(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        record()
    return out


def geotorch_decay(out_features: int = 16, in_features: int = 64, steps: int = 50,
                   lr: float = 1e-2, weight_decay: float = 1.0, seed: int = 0) -> dict[str, Any]:
    """What decoupled weight decay alone does to a ``geotorch.orthogonal`` weight.

    ``geotorch`` writes ``W = phi_B(X)``: an unconstrained matrix X mapped onto the manifold around a
    base point ``B = phi_B(0)``. First the weight is moved away from B (30 AdamW steps, no decay, on
    ``-<W, T>`` for a random frame T); then a fresh ``AdamW(weight_decay=...)`` takes ``steps`` steps
    with zero gradients, so its Adam update is exactly zero and only the decay ``X <- (1 - lr wd) X``
    acts. Returns per recorded step ``dist_to_base`` (``||W - B||_F``), ``x_norm`` (``||X||_F``) and
    ``orth`` (``||W W^T - I||_F``), with ``steps_recorded``.
    """
    import geotorch

    torch.manual_seed(seed)
    T = random_stiefel(out_features, in_features, generator=torch.Generator().manual_seed(seed + 7))
    lin = nn.Linear(in_features, out_features, bias=False)
    geotorch.orthogonal(lin, "weight")
    P = lin.parametrizations.weight
    opt = torch.optim.AdamW(lin.parameters(), lr=0.05, weight_decay=0.0)
    for _ in range(30):
        loss = -(lin.weight * T).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    out: dict[str, Any] = {"weight_decay": weight_decay, "lr": lr, "steps_recorded": [],
                           "dist_to_base": [], "x_norm": [], "orth": []}
    decay = torch.optim.AdamW(lin.parameters(), lr=lr, weight_decay=weight_decay)
    for step in range(steps + 1):
        if step % max(1, steps // 5) == 0 or step == steps:
            with torch.no_grad():
                W = lin.weight
                base = P[0](torch.zeros_like(P.original))  # B = phi_B(0)
                out["steps_recorded"].append(step)
                out["dist_to_base"].append(torch.linalg.matrix_norm(W - base).item())
                out["x_norm"].append(torch.linalg.matrix_norm(P.original).item())
                out["orth"].append(orthogonality_error(W).item())
        if step == steps:
            break
        P.original.grad = torch.zeros_like(P.original)  # no loss: only the decay moves X
        decay.step()
    return out


def geoopt_decay(n: int = 256, p: int = 64, lr: float = 1e-2, weight_decay: float = 0.1,
                 seed: int = 0) -> dict[str, Any]:
    """One ``geoopt.optim.RiemannianAdam`` step on a ``ManifoldParameter`` on ``geoopt.Stiefel``.

    Returns: ``grad_rewritten`` (``max |p.grad_after - p.grad_before|`` and its distance from
    ``weight_decay * W``), ``same_point`` (``max |W(wd) - W(0)|`` after the step: the decay is
    projected away), and ``accumulated`` (after two ``backward`` calls without ``zero_grad``,
    how far ``p.grad`` is from the sum of the two true gradients).
    """
    import geoopt

    g = torch.Generator().manual_seed(seed)
    W0 = random_stiefel(n, p, generator=g, dtype=torch.float64)
    G = torch.randn(n, p, generator=g, dtype=torch.float64)
    result: dict[str, Any] = {"weight_decay": weight_decay}
    finals = {}
    for wd in (0.0, weight_decay):
        param = geoopt.ManifoldParameter(W0.clone(), manifold=geoopt.Stiefel())
        opt = geoopt.optim.RiemannianAdam([param], lr=lr, weight_decay=wd)
        (param * G).sum().backward()
        before = param.grad.clone()
        opt.step()
        after = param.grad.clone()
        finals[wd] = param.detach().clone()
        if wd:
            result["grad_change"] = (after - before).abs().max().item()
            result["grad_change_minus_wdW"] = (after - before - wd * W0).abs().max().item()
    result["max_change_from_decay"] = (finals[weight_decay] - finals[0.0]).abs().max().item()
    return result


# ----------------------------------------------------------------------------------------------------
# CLI
# ----------------------------------------------------------------------------------------------------


def _print_summary(history: dict[str, Any]) -> None:
    print(f"{'arm':8s} {'wd':>5s} {'|W_Q|':>7s} {'|logit|':>8s} {'entropy':>8s} {'acc':>6s} "
          f"{'angle/step':>10s} {'reference':>9s} {'max dW':>9s}  bits")
    for row in summary(history):
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
    return {"config": config_dict(history["config"]), "runs": runs, "summary": summary(history),
            "frames_identical": {arm: frames_identical(history, arm) for arm in history["runs"]},
            "wall_time_s": history["wall_time_s"]}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """CLI: ``[--field value ...] [--out PATH]``; prints the summary table."""
    argv = list(sys.argv[1:] if argv is None else argv)
    out = None
    if "--out" in argv:
        i = argv.index("--out")
        out = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    cfg = parse_config(WeightDecayConfig, argv)
    history = run(cfg)
    _print_summary(history)
    print(f"({history['wall_time_s']:.1f} s)")
    if out:
        save_results(out, {"experiment": "weight_decay", "provenance": provenance(cfg, [cfg.seed]),
                           **_jsonable_history(history)})
        print(f"wrote {out}")
    return history


if __name__ == "__main__":
    main()

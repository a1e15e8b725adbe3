"""Grokking on modular arithmetic: Stiefel-constrained Q/K against AdamW, with paired seeds.

A one-layer transformer in the style of Nanda et al. (2023) reads the three tokens ``a b =`` and
predicts ``c = a op b (mod p)`` at the last position. Trained full batch on a fraction of all ``p^2``
pairs with AdamW and strong weight decay, it first memorises the training set and only much later
generalises to the held-out pairs -- "grokking" (Power et al. 2022). The experiment measures, over
seeds that are paired across arms (same data split, same initial weights), how long each arm takes to
grok and whether the accuracy stays once reached.

Arms (see :data:`ARM_NAMES` and :mod:`stiefel_mini.experiments.arms`): ``adamw`` (Q/K decayed like
every weight), ``adamw_nodecay_qk``, ``stiefel`` (StiefelAdam's frame rule on the Q/K frames, AdamW on
the rest), ``frozen`` (random frames never updated) and ``uniform`` (a control: attention weights fixed
at 1/3, removing the routing entirely). Round 2 (:data:`ROUND2_ARMS`) separates "Stiefel" from "flat
attention": ``stiefel_learned`` and ``frozen_learned`` carry a learned per-head temperature started
at a set logit size (``logit_rms_init``), ``adamw_scaled_qk`` takes AdamW steps on Q/K as small as
StiefelAdam's, and ``qknorm`` bounds the logits by normalising q and k.

Usage::

    python -m stiefel_mini.experiments.grokking --arm stiefel --seed 0 --out results/grokking/one.json
    python -m stiefel_mini.experiments.grokking sweep --seeds 0 1 2 3 4 --out results/grokking/cpu.json
    python -m stiefel_mini.experiments.grokking --preset reference --arm adamw   # Nanda et al. recipe
    python -m stiefel_mini.experiments.grokking sweep --plan r2_long   # round 2 (see SWEEP_PLANS)
    python -m stiefel_mini.experiments.grokking recount results/grokking/r2_long.json   # metrics from the stored curves

References: Power et al. (2022), "Grokking: generalization beyond overfitting on small algorithmic
datasets"; Nanda et al. (2023), "Progress measures for grokking via mechanistic interpretability".
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from stiefel_mini.attention import entropy, make_attention
from stiefel_mini.experiments.arms import arm_spec, make_optimizer, optimizer_options
from stiefel_mini.experiments.config import ConfigError, cli, config_help, parse_cli, parse_config, preset, split_argv
from stiefel_mini.experiments.records import config_dict, load_results, provenance, save_results
from stiefel_mini.experiments.runtime import generator, progress, set_threads, subnormals_flushed
from stiefel_mini.geometry import orthogonality_error, random_stiefel

ARM_NAMES = ("adamw", "adamw_nodecay_qk", "stiefel", "frozen", "uniform")
ROUND2_ARMS = ("adamw", "stiefel_learned", "frozen_learned", "uniform", "adamw_scaled_qk", "qknorm")
"""Round 2, in order of information value: the first three separate the optimiser from flat attention."""


@dataclass
class GrokkingConfig:
    """One training run. Defaults are the CPU setting of the book (see :data:`PRESETS`)."""

    p: int = 59  # modulus (prime); vocabulary is 0..p-1 plus the "=" token p
    op: Literal["add", "sub", "div"] = "add"  # a+b, a-b, a*b^-1 (mod p); div excludes b = 0
    train_frac: float = 0.3
    d_model: int = 128
    n_heads: int = 4
    d_mlp: int = 512
    arm: str = "adamw"
    seed: int = 0
    steps: int = 1800  # full-batch steps (= epochs)
    lr: float = 1e-2
    frame_lr: Optional[float] = None  # StiefelAdam lr on the frames (None: lr)
    betas: tuple[float, float] = (0.9, 0.98)
    weight_decay: float = 1.0
    max_step: Optional[float] = 0.1  # StiefelAdam's cap on a frame step's Frobenius norm
    logit_scale: Literal["fixed", "learned"] = "fixed"
    # Initial RMS of each head's attention logits for a learned logit scale (QK-norm excepted):
    # None keeps the module's 1/sqrt(d_head); see match_logit_scale.
    logit_rms_init: Optional[float] = None
    eval_every: int = 20
    late_frac: float = 0.25  # "late" evaluations: the last late_frac of training
    threads: int = 1
    progress: bool = True


PRESETS: dict[str, GrokkingConfig] = {
    # Nanda et al. (2023): p = 113, 30% train, lr 1e-3, wd 1, betas (0.9, 0.98); groks in ~5-10k epochs.
    # Learned temperatures start at unit logit RMS, as in "long".
    "reference": GrokkingConfig(p=113, lr=1e-3, steps=20_000, eval_every=50, logit_rms_init=1.0),
    # The book's CPU setting: the same model and recipe on a smaller modulus (1,044 training
    # equations instead of 3,831) with a 10x larger lr; AdamW reaches 99% validation accuracy within
    # the 1,800 steps on every seed of results/grokking/cpu.json.
    "cpu": GrokkingConfig(),
    # The chapter's live run: small enough to memorise and grok within about a minute of CPU.
    "live": GrokkingConfig(p=31, train_frac=0.5, steps=1200),
    # Round 2's long horizon: the cpu setting for 8,000 steps (>= 4x the slowest AdamW grok of
    # results/grokking/cpu.json), learned temperatures started at unit logit RMS (the size the
    # 1/sqrt(d_head) rule aims at for unit-variance q and k; AdamW's own logits pass it within its
    # first ~10 steps here, while all arms start at RMS ~0.02 from the shared initialisation).
    "long": GrokkingConfig(steps=8000, logit_rms_init=1.0),
    # Round 2's arms at round 1's length (1,800 steps): the grokking-time comparisons at a third of
    # the cost of "long" (collapses need "long").
    "short": GrokkingConfig(logit_rms_init=1.0),
    # A few seconds: the tests' stand-in for "long" (same code path, tiny sizes).
    "tiny": GrokkingConfig(p=11, d_model=16, n_heads=2, d_mlp=32, steps=40, eval_every=5, logit_rms_init=1.0,
                           progress=False),
}


# ----------------------------------------------------------------------------------------------------
# Data
# ----------------------------------------------------------------------------------------------------


def modular_table(p: int, op: str) -> tuple[Tensor, Tensor]:
    """All equations ``a op b = c (mod p)`` as tokens ``(N, 3)`` = ``[a, b, p]`` and labels ``(N,)``.

    ``op``: ``"add"`` (a + b), ``"sub"`` (a - b), ``"div"`` (a * b^(p-2), i.e. a / b by Fermat; b != 0).
    """
    a, b = torch.meshgrid(torch.arange(p), torch.arange(p), indexing="ij")
    a, b = a.reshape(-1), b.reshape(-1)  # (p^2,)
    if op == "add":
        c = (a + b) % p
    elif op == "sub":
        c = (a - b) % p
    elif op == "div":
        keep = b != 0
        a, b = a[keep], b[keep]
        inv = torch.tensor([pow(int(x), p - 2, p) for x in range(p)])
        c = (a * inv[b]) % p
    else:
        raise ValueError(f"unknown op {op!r}; choices: add, sub, div")
    eq = torch.full_like(a, p)
    return torch.stack([a, b, eq], dim=1), c


def make_dataset(p: int, op: str, train_frac: float, seed: int) -> dict[str, Tensor]:
    """The train/validation split of seed ``seed``: a random ``train_frac`` of all equations trains.

    The split depends only on ``(p, op, train_frac, seed)``, never on the arm, so arms are paired.
    Returns ``x_train (N_tr, 3)``, ``y_train (N_tr,)``, ``x_val (N_val, 3)``, ``y_val (N_val,)``.
    """
    x, y = modular_table(p, op)
    g = generator(seed, "split")
    perm = torch.randperm(len(y), generator=g)
    n_train = int(round(train_frac * len(y)))
    tr, va = perm[:n_train], perm[n_train:]
    return {"x_train": x[tr], "y_train": y[tr], "x_val": x[va], "y_val": y[va]}


# ----------------------------------------------------------------------------------------------------
# Model
# ----------------------------------------------------------------------------------------------------


class GrokkingTransformer(nn.Module):
    """One-layer transformer for ``a b =`` (Nanda et al. 2023): embed, attention, ReLU MLP, unembed.

    ``h0 = E[tokens] + P`` (B, 3, d); ``h1 = h0 + Attn(h0)``; ``h2 = h1 + W_out relu(W_in h1 + b_in)
    + b_out``; logits ``= U h2`` at the last position, over the ``p`` answers. No layer norm. The
    attention is :func:`~stiefel_mini.attention.make_attention` with the arm's module flags
    (``stiefel``, ``train_qk``, ``qk_norm``, ``logit_scale``); ``uniform=True`` replaces its weights by
    1/3 (the control arm).

    Only the last position feeds the loss, and nothing after the attention mixes positions, so
    :meth:`forward` computes keys and values for the three tokens but the query, the residual stream
    and the MLP for the last token only; :meth:`forward_full` runs the whole sequence through the
    module's own ``forward`` and is the reference that :meth:`forward` must equal.

    Initialisation (Nanda et al.): every weight ``N(0, 1/fan_in)``-like, biases 0, Q/K Haar-random
    frames (columns of norm 1, as Gaussian 1/sqrt(d_model) columns are on average). Each parameter is
    drawn from its own stream ``runtime.generator(seed, name)``, so the initial weights do not depend
    on the arm or on the module's flags: arms that share a seed share the start.
    """

    def __init__(self, p: int, d_model: int = 128, n_heads: int = 4, d_mlp: int = 512, *,
                 stiefel: bool = True, uniform: bool = False, logit_scale: str = "fixed",
                 train_qk: bool = True, qk_norm: bool = False, seed: int = 0):
        super().__init__()
        self.p, self.uniform = p, uniform
        self.embed = nn.Embedding(p + 1, d_model)
        self.pos = nn.Parameter(torch.empty(3, d_model))
        self.attn = make_attention(d_model, n_heads, stiefel=stiefel, logit_scale=logit_scale, train_qk=train_qk,
                                   qk_norm=qk_norm)
        self.mlp_in = nn.Linear(d_model, d_mlp)
        self.mlp_out = nn.Linear(d_mlp, d_model)
        self.unembed = nn.Linear(d_model, p, bias=False)
        self.reset_parameters(seed)

    @torch.no_grad()
    def reset_parameters(self, seed: int) -> None:
        """Draw every parameter from the generator of ``(seed, its name)`` (see the class docstring)."""
        frames = {id(self.attn.w_q), id(self.attn.w_k)}
        for name, param in self.named_parameters():
            g = generator(seed, name)
            if id(param) in frames:
                param.copy_(random_stiefel(*param.shape, generator=g, dtype=param.dtype))
            elif name == "attn.log_scale":
                continue  # a learned logit scale keeps the module's initial 1/sqrt(d_head)
            elif param.ndim == 1:
                param.zero_()
            else:
                # nn.Linear stores (out, in): fan-in is the last dim; the embedding and positions are
                # (rows, d_model) with N(0, 1/d_model); the unembedding follows Nanda's 1/sqrt(p).
                fan_in = self.p if name == "unembed.weight" else param.shape[-1]
                param.copy_(torch.randn(param.shape, generator=g) / math.sqrt(fan_in))

    def _residual(self, tokens: Tensor) -> Tensor:
        return self.embed(tokens) + self.pos  # (B, 3, d)

    def _mlp_unembed(self, h: Tensor) -> Tensor:
        h = h + self.mlp_out(F.relu(self.mlp_in(h)))
        return self.unembed(h)

    def _last_hidden(self, x: Tensor) -> Tensor:
        """Residual stream of the last token after attention, ``(B, d)``, from ``x`` ``(B, 3, d)``."""
        if not self.uniform:
            return x[:, -1] + self.attn(x, last_only=True)[:, 0]  # (B, 1, d) -> (B, d)
        # Uniform control: the last token averages the values of all three tokens, w = 1/3.
        attn = self.attn
        B, T, _ = x.shape
        v = attn.v_proj(x).view(B, T, attn.n_heads, attn.d_head)  # (B, T, H*dh) -> (B, T, H, dh)
        z = v.mean(dim=1).reshape(B, attn.n_heads * attn.d_head)  # (B, H, dh) -> (B, H*dh)
        return x[:, -1] + attn.out_proj(z)

    def forward(self, tokens: Tensor) -> Tensor:
        """Logits ``(B, p)`` for tokens ``(B, 3)``, computing only what the last position needs."""
        return self._mlp_unembed(self._last_hidden(self._residual(tokens)))

    def forward_full(self, tokens: Tensor) -> Tensor:
        """Logits ``(B, p)`` via the attention module's full ``forward`` (reference for tests)."""
        if self.uniform:
            raise ValueError("forward_full runs the module's softmax attention; uniform has none")
        x = self._residual(tokens)
        h = x + self.attn(x)  # (B, 3, d)
        return self._mlp_unembed(h[:, -1])

    @torch.no_grad()
    def last_attention(self, tokens: Tensor) -> Tensor:
        """Attention weights of the last token over the three positions, ``(B, H, 3)``."""
        x = self._residual(tokens)
        if self.uniform:
            return x.new_full((x.shape[0], self.attn.n_heads, x.shape[1]), 1.0 / x.shape[1])
        return self.attn.attention_weights(x)[:, :, -1]  # (B, H, T, T) -> (B, H, T)


def build_model(cfg: GrokkingConfig) -> GrokkingTransformer:
    """The model of ``cfg.arm`` with the seed's shared initialisation.

    With ``cfg.logit_rms_init`` set, a learned logit scale (not QK-norm's gain) starts where
    :func:`match_logit_scale` puts it on the seed's training inputs.
    """
    spec = arm_spec(cfg.arm)
    model = GrokkingTransformer(cfg.p, cfg.d_model, cfg.n_heads, cfg.d_mlp, uniform=spec.qk == "none",
                                seed=cfg.seed, **spec.module_flags(cfg.logit_scale))
    if cfg.logit_rms_init is not None and model.attn.log_scale is not None and not spec.qk_norm:
        tokens = make_dataset(cfg.p, cfg.op, cfg.train_frac, cfg.seed)["x_train"]
        match_logit_scale(model, tokens, cfg.logit_rms_init)
    return model


@torch.no_grad()
def last_logits(model: GrokkingTransformer, tokens: Tensor) -> Tensor:
    """Scaled attention logits of the last query over the three positions, ``(B, H, 3)``."""
    return model.attn.logits(model._residual(tokens))[:, :, -1]  # (B, H, T, T) -> (B, H, T)


@torch.no_grad()
def match_logit_scale(model: GrokkingTransformer, tokens: Tensor, target_rms: float) -> Tensor:
    """Set each head's learned log-scale so its last-query logits on ``tokens`` have RMS ``target_rms``.

    ``tau_h = log(target_rms / r_h)`` with ``r_h = sqrt(mean_{b, j} (q_b^h . k_{bj}^h)^2)`` the RMS of
    the unscaled logits of head h over the examples ``b`` and the three keys ``j``. Depends only on
    the frames, embeddings and positions, which every arm of a seed shares, so two arms with a learned
    scale start from the same temperatures. Returns the new scales ``(H,)``.
    """
    if target_rms <= 0:
        raise ValueError(f"logit_rms_init must be positive, got {target_rms}")
    attn = model.attn
    if attn.log_scale is None:
        raise ValueError("match_logit_scale needs a model built with logit_scale='learned'")
    raw = last_logits(model, tokens) / attn.scale().view(1, -1, 1)  # (B, H, 3), unscaled
    rms = raw.pow(2).mean(dim=(0, 2)).sqrt()  # (H,)
    attn.log_scale.copy_(torch.log(target_rms / rms))
    return attn.scale()


# ----------------------------------------------------------------------------------------------------
# Training
# ----------------------------------------------------------------------------------------------------


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
    data = make_dataset(cfg.p, cfg.op, cfg.train_frac, cfg.seed)
    model = build_model(cfg)
    opt = make_optimizer(model, cfg.arm, **optimizer_options(cfg))
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
        bar.update()
    bar.close()
    return {"config": config_dict(cfg), "history": hist, "metrics": metrics(hist, cfg),
            "wall_time_s": time.perf_counter() - t0}


# ----------------------------------------------------------------------------------------------------
# Metrics
# ----------------------------------------------------------------------------------------------------


def first_step(steps: Sequence[int], values: Sequence[float], threshold: float) -> int | None:
    """First evaluated step with ``value >= threshold`` (``None`` if never: censored)."""
    for s, v in zip(steps, values):
        if v >= threshold:
            return int(s)
    return None


def collapses(values: Sequence[float], high: float = 0.95, low: float = 0.5) -> int:
    """Number of falls below ``low`` after having been at ``>= high`` (counted again after recovering)."""
    n, armed = 0, False
    for v in values:
        if v >= high:
            armed = True
        elif armed and v < low:
            n, armed = n + 1, False
    return n


def drops(values: Sequence[float], reach: float = 0.95, drop: float = 0.10) -> list[int]:
    """Indices of the collapses of a validation curve: falls of ``>= drop`` after first reaching ``reach``.

    Armed at the first value ``>= reach``; a collapse is the first later value at or below
    ``peak - drop``, ``peak`` the highest value since arming. It is re-armed when the curve is back at
    ``>= reach``, so a curve that oscillates is counted once per fall. With the defaults a collapse
    takes validation accuracy at least 10 points below a peak of at least 95%.
    """
    out, armed, peak = [], False, -math.inf
    for i, v in enumerate(values):
        if v >= reach and not armed:
            armed, peak = True, v
        elif armed:
            peak = max(peak, v)
            if v <= peak - drop + 1e-9:  # 1e-9: 0.96 - 0.10 is 0.8599999... in floating point
                out.append(i)
                armed, peak = False, -math.inf
    return out


def metrics(hist: dict, cfg: GrokkingConfig) -> dict:
    """Summary numbers of one run's history.

    ``steps_to_val95/99``, ``steps_to_train99``: first evaluation at or above the threshold (None:
    never). ``grok_delay``: ``steps_to_val99 - steps_to_train99``. ``late_share95``: share of the
    evaluations in the last ``late_frac`` of training with val acc >= 95%. ``post_grok_share95``: share
    of evaluations after the first >= 95% that stay >= 95%. ``collapses``: falls below 50% after
    reaching 95%. ``collapses10``: falls of >= 10 points after first reaching 95% (:func:`drops`),
    ``first_collapse_step`` the step of the first (None: none); ``steps_above95``: evaluations with
    val acc >= 95% times ``eval_every`` (the time spent there), ``share_above95`` their share of all
    evaluations. Frame numbers are at the end of training; ``entropy_final`` is the mean over heads;
    ``max_logit_final`` / ``max_logit_peak``: the largest attention logit at the end / over training.
    """
    steps, val, train = hist["step"], hist["val_acc"], hist["train_acc"]
    s95, s99, t99 = (first_step(steps, val, 0.95), first_step(steps, val, 0.99),
                     first_step(steps, train, 0.99))
    late = [v for s, v in zip(steps, val) if s >= (1 - cfg.late_frac) * cfg.steps]
    falls = drops(val)
    post = [v for s, v in zip(steps, val) if s95 is not None and s >= s95]
    return {
        "steps_to_val95": s95,
        "steps_to_val99": s99,
        "steps_to_train99": t99,
        "grok_delay": None if s99 is None or t99 is None else s99 - t99,
        "final_val_acc": val[-1],
        "final_train_acc": train[-1],
        "max_val_acc": max(val),
        "late_share95": sum(v >= 0.95 for v in late) / len(late),
        "post_grok_share95": None if not post else sum(v >= 0.95 for v in post) / len(post),
        "collapses": collapses(val),
        "collapses10": len(falls),
        "first_collapse_step": steps[falls[0]] if falls else None,
        "steps_above95": cfg.eval_every * sum(v >= 0.95 for v in val),
        "share_above95": sum(v >= 0.95 for v in val) / len(val),
        "dist_q_final": hist["dist_q"][-1],
        "dist_k_final": hist["dist_k"][-1],
        "orth_q_final": hist["orth_q"][-1],
        "mean_step_q": sum(hist["step_q"][1:]) / max(len(hist["step_q"]) - 1, 1),
        "mean_step_k": sum(hist["step_k"][1:]) / max(len(hist["step_k"]) - 1, 1),
        "entropy_final": sum(hist["entropy"][-1]) / len(hist["entropy"][-1]),
        **_logit_metrics(hist),
    }


def stored_metrics(run: dict, base_config: dict) -> dict:
    """A stored run's :func:`metrics`, recomputed from the history its file keeps.

    A file may keep only every k-th evaluation (``SweepConfig.history_points``); the metrics are then
    those of the stored curve, each stored evaluation standing for the spacing of the stored steps
    (``steps[1] - steps[0]``, for ``steps_above95``), so that every stored number can be recounted from
    the file. ``base_config`` is the file's ``base_config``.
    """
    fields = {f.name for f in dataclasses.fields(GrokkingConfig)}
    cfg = GrokkingConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in base_config.items() if k in fields})
    steps = run["history"]["step"]
    spacing = steps[1] - steps[0] if len(steps) > 1 else cfg.eval_every
    return metrics(run["history"], dataclasses.replace(cfg, eval_every=int(spacing)))


def recount(path: str | Path) -> int:
    """Rewrite the metrics of every run in the results file ``path`` by :func:`stored_metrics`.

    Deterministic and idempotent: apply it after runs are merged into a file. Returns the number of
    runs whose metrics changed.
    """
    res = load_results(path)
    changed = 0
    for r in res["runs"]:
        m = stored_metrics(r, res["base_config"])
        if m != r["metrics"]:
            r["metrics"] = m
            changed += 1
    save_results(path, res)
    return changed


def _logit_metrics(hist: dict) -> dict:
    """``max_logit_final`` and ``max_logit_peak`` of a history (absent in histories before round 2)."""
    logits = [v for v in hist.get("max_logit", []) if v is not None]
    if not logits:
        return {}
    return {"max_logit_final": logits[-1], "max_logit_peak": max(logits)}


def subsample(hist: dict, max_points: int) -> dict:
    """Every k-th evaluation of ``hist`` (always keeping the last) so at most ~``max_points`` remain."""
    n = len(hist["step"])
    k = max(1, math.ceil(n / max_points))
    idx = list(range(0, n, k))
    if idx[-1] != n - 1:
        idx.append(n - 1)
    return {key: [vals[i] for i in idx] for key, vals in hist.items()}


# ----------------------------------------------------------------------------------------------------
# Selecting runs of a sweep (the comparisons are in stiefel_mini.evidence)
# ----------------------------------------------------------------------------------------------------


def runs_by_arm(results: dict, weight_decay: float | None = None,
                arms: Sequence[str] | None = None) -> dict[str, list[dict]]:
    """The runs of a sweep grouped by arm, each list in seed order, keeping only complete seeds.

    A seed counts when every arm of the sweep (or of ``arms``, a subset) has finished it, so every
    comparison is paired. In a weight-decay sweep, ``weight_decay`` picks the runs at that value
    (required there).
    """
    arms = list(results["sweep"]["arms"] if arms is None else arms)
    swept = bool(results["sweep"].get("weight_decays"))
    if swept and weight_decay is None:
        raise ValueError("this sweep varies weight_decay: pass weight_decay= one of "
                         f"{results['sweep']['weight_decays']}")
    by_seed: dict[int, dict[str, dict]] = {}
    for r in results["runs"]:
        if swept and r["weight_decay"] != weight_decay:
            continue
        by_seed.setdefault(r["seed"], {})[r["arm"]] = r
    seeds = sorted(s for s, runs in by_seed.items() if all(a in runs for a in arms))
    return {a: [by_seed[s][a] for s in seeds] for a in arms}


def seed_runs(results: dict, arm: str, weight_decay: float | None = None) -> dict[int, dict]:
    """The finished runs of one arm, by seed (in a weight-decay sweep, those at ``weight_decay``).

    Unlike :func:`runs_by_arm` this keeps every seed the arm has, whether or not the other arms
    finished it: a growing results file can then be paired comparison by comparison.
    """
    swept = bool(results["sweep"].get("weight_decays"))
    if swept and weight_decay is None:
        raise ValueError("this sweep varies weight_decay: pass weight_decay= one of "
                         f"{results['sweep']['weight_decays']}")
    return {r["seed"]: r for r in sorted(results["runs"], key=lambda r: r["seed"])
            if r["arm"] == arm and (not swept or r["weight_decay"] == weight_decay)}


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


def curve_bands(results: dict, arm: str, key: str = "val_acc",
                weight_decay: float | None = None) -> dict[str, list[float]]:
    """Median and quartiles over seeds of ``history[key]`` per evaluated step, for one arm.

    Runs of one sweep share their evaluation steps, so the curves align step by step. ``entropy``
    (per head) is averaged over heads first.
    """
    import numpy as np

    hists = [r["history"] for r in runs_by_arm(results, weight_decay)[arm]]
    steps = hists[0]["step"]
    vals = np.array([[np.mean(v) if isinstance(v, list) else v for v in h[key]] for h in hists])
    q25, med, q75 = np.quantile(vals, [0.25, 0.5, 0.75], axis=0)  # (n_seeds, n_steps) -> (n_steps,)
    return {"step": list(steps), "median": med.tolist(), "q25": q25.tolist(), "q75": q75.tolist()}


# ----------------------------------------------------------------------------------------------------
# Sweep and CLI
# ----------------------------------------------------------------------------------------------------


@dataclass
class SweepConfig:
    """A paired sweep: every arm on every seed (and weight decay), seed-major, rewritten after each run."""

    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    arms: tuple[str, ...] = ARM_NAMES
    out: str = "results/grokking/cpu.json"
    preset: str = "cpu"
    history_points: int = 200  # evaluations kept per run in the file (metrics use all of them)
    repro_arm: str = "stiefel"
    repro_seed: int = 0
    repro_steps: int = 300  # length of the short run stored for the reproduction test
    # Arms whose stored runs are dropped and run again, e.g. after a change to their optimiser's
    # numerics (the repro record too, if its arm is among them).
    redo_arms: tuple[str, ...] = ()
    # Drop the stored runs that record ``git_dirty: true`` and run them again (from a clean tree).
    redo_dirty: bool = False
    # A weight-decay sweep: every (seed, arm) at each of these values of ``weight_decay`` (the decay
    # of every weight outside Q/K; the Q/K rules' own decay as in arms.make_optimizer). () = no sweep.
    weight_decays: tuple[float, ...] = ()
    # A results file of the same base config (weight decay aside), e.g. r2_long.json: its finished
    # runs of this sweep's arms and seeds, at a decay of this sweep's grid, are copied (marked
    # ``copied_from``) instead of being run again. None = run everything.
    reuse: str | None = None


SWEEP_PLANS: dict[str, SweepConfig] = {
    # Round 2 of issue 17, each resumable (re-run the same command to continue a stopped sweep).
    # Long horizon: 8,000 steps, the six arms of ROUND2_ARMS; the first three are the priority.
    "r2_long": SweepConfig(seeds=(0, 1, 2, 3, 4), arms=ROUND2_ARMS, out="results/grokking/r2_long.json",
                           preset="long", history_points=400, repro_arm="stiefel_learned", repro_steps=100),
    # The same arms at round 1's 1,800 steps: time to grok, with paired seeds, cheaply.
    "r2_short": SweepConfig(seeds=(0, 1, 2, 3, 4), arms=ROUND2_ARMS, out="results/grokking/r2_short.json",
                            preset="short", repro_arm="stiefel_learned", repro_steps=100),
    # Weight decay of the rest of the model, 0.1 .. 3 (30x), AdamW against Stiefel, long horizon;
    # decay 1.0 is r2_long's own, so those runs are copied from it.
    "r2_wd": SweepConfig(seeds=(0, 1, 2), arms=("adamw", "stiefel_learned"), out="results/grokking/r2_wd.json",
                         preset="long", history_points=400, repro_arm="stiefel_learned", repro_steps=100,
                         weight_decays=(0.1, 0.3, 1.0, 3.0), reuse="results/grokking/r2_long.json"),
    # Nanda et al.'s p = 113 recipe (20,000 steps).
    "r2_reference": SweepConfig(seeds=(0, 1, 2), arms=("adamw", "stiefel_learned"),
                                out="results/grokking/r2_reference.json", preset="reference", history_points=400,
                                repro_arm="stiefel_learned", repro_steps=100),
    # Seconds: the tests' version of r2_long and r2_wd.
    "tiny": SweepConfig(seeds=(0, 1), arms=("adamw", "stiefel_learned", "frozen_learned"),
                        out="results/grokking/tiny.json", preset="tiny", repro_arm="stiefel_learned",
                        repro_steps=10),
}


def repro_record(cfg: GrokkingConfig) -> dict:
    """The short run the reproduction test re-runs: ``cfg`` shortened, with its full history."""
    out = run(cfg)
    return {"config": out["config"], "history": out["history"], "metrics": out["metrics"]}


def run_key(r: dict, base: GrokkingConfig) -> tuple:
    """``(arm, seed, weight_decay)`` of a stored run (runs of files without a decay sweep: the base's)."""
    return (r["arm"], int(r["seed"]), float(r.get("weight_decay", base.weight_decay)))


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
    mine = config_dict(dataclasses.replace(base, arm="*", seed=-1))
    changed = sorted(k for k in mine if k != "weight_decay" and src_base.get(k) != mine[k])
    if changed:
        raise ValueError(f"reuse={sweep_cfg.reuse} holds runs of another base config (fields {changed}); "
                         "reuse a file of the same preset, or drop reuse")
    decays = {float(w) for w in sweep_cfg.weight_decays} or {float(base.weight_decay)}
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
    each run records the commit (``git_commit``, ``git_dirty``) it ran at. A file with a different
    base config raises a ``ValueError`` rather than being overwritten. Runs of ``redo_arms`` are
    dropped first and run again, and so are runs that record ``git_dirty: true`` when
    ``sweep_cfg.redo_dirty``. Runs of ``sweep_cfg.reuse`` (:func:`reusable_runs`) are copied in
    their turn instead of being run. Seed-major order makes every completed seed a complete set of pairs.
    """
    out_path = Path(sweep_cfg.out)
    decays = tuple(float(w) for w in sweep_cfg.weight_decays) or (float(base.weight_decay),)
    wild = {"arm": "*", "seed": -1, **({"weight_decay": -1.0} if sweep_cfg.weight_decays else {})}
    base_dict = config_dict(dataclasses.replace(base, **wild))
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
    if out_path.exists():
        old = load_results(out_path)
        if old.get("base_config") != base_dict:
            changed = sorted(k for k in base_dict if (old.get("base_config") or {}).get(k) != base_dict[k])
            raise ValueError(f"{out_path} holds runs of another base config (fields {changed}); "
                             "resume with the same settings, or write to another --out")
        payload["provenance_previous"] = [*old.get("provenance_previous", []), old["provenance"]]
        payload["runs"] = [r for r in old["runs"] if r["arm"] not in sweep_cfg.redo_arms
                           and not (sweep_cfg.redo_dirty and r["git_dirty"])]
        repro = old.get("repro")
        if repro is not None and repro["config"]["arm"] not in sweep_cfg.redo_arms:
            payload["repro"] = repro
    if payload["repro"] is None:
        payload["repro"] = repro_record(dataclasses.replace(
            base, arm=sweep_cfg.repro_arm, seed=sweep_cfg.repro_seed, steps=sweep_cfg.repro_steps,
            progress=False, weight_decay=decays[-1] if sweep_cfg.weight_decays else base.weight_decay))
        save_results(out_path, payload)
    done = {run_key(r, base) for r in payload["runs"]}
    reusable = reusable_runs(sweep_cfg, base)
    t_start = time.perf_counter()
    for seed in sweep_cfg.seeds:
        for wd in decays:
            for arm in sweep_cfg.arms:
                if (arm, seed, wd) in done:
                    continue
                if (arm, seed, wd) in reusable:
                    payload["runs"].append(reusable[(arm, seed, wd)])
                    save_results(out_path, payload)
                    continue
                result = run(dataclasses.replace(base, arm=arm, seed=seed, weight_decay=wd))
                payload["runs"].append({
                    "arm": arm, "seed": seed, "weight_decay": wd, "metrics": result["metrics"],
                    "wall_time_s": result["wall_time_s"], "git_commit": prov["git_commit"],
                    "git_dirty": prov["git_dirty"],
                    "history": subsample(result["history"], sweep_cfg.history_points),
                })
                payload["wall_time_s"] = time.perf_counter() - t_start
                save_results(out_path, payload)
    return payload


def _pop_plan(argv: list[str]) -> tuple[SweepConfig | None, list[str]]:
    """Remove ``--plan NAME`` from ``argv``; return (``SWEEP_PLANS[NAME]`` or None, the rest)."""
    for i, tok in enumerate(argv):
        if tok == "--plan" or tok.startswith("--plan="):
            name = tok.partition("=")[2] if "=" in tok else (argv[i + 1] if i + 1 < len(argv) else "")
            rest = argv[:i] + argv[i + (1 if "=" in tok else 2):]
            if name not in SWEEP_PLANS:
                raise ConfigError(f"--plan: expected one of {sorted(SWEEP_PLANS)}, got {name!r}")
            return SWEEP_PLANS[name], rest
    return None, argv


def _check_arm(arm: str) -> None:
    try:
        arm_spec(arm)
    except ValueError as err:
        raise ConfigError(f"--arm(s): {err}") from None


def main(argv: Sequence[str] | None = None) -> None:
    """CLI: ``[sweep [--plan NAME]] [--preset NAME] [--field value ...] [--out PATH]``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "-h" in argv or "--help" in argv:
        print("usage: python -m stiefel_mini.experiments.grokking recount FILE...  (metrics from stored curves)")
        print("usage: python -m stiefel_mini.experiments.grokking [sweep [--plan "
              f"{'|'.join(SWEEP_PLANS)}]] [--preset {'|'.join(PRESETS)}] [--out PATH] [--field value ...]")
        print(config_help(SweepConfig) + "\n" + config_help(GrokkingConfig))
        return
    if argv and argv[0] == "recount":
        for path in argv[1:]:
            print(f"{path}: metrics of {recount(path)} run(s) rewritten from the stored histories")
        return
    if argv and argv[0] == "sweep":
        plan, argv = _pop_plan(argv[1:])
        sweep_argv, rest = split_argv(argv, SweepConfig)
        scfg = parse_config(SweepConfig, sweep_argv, base=plan)
        base = parse_config(GrokkingConfig, rest, base=preset(PRESETS, scfg.preset))
        for arm in scfg.arms:
            _check_arm(arm)
        try:
            payload = sweep(scfg, base)
        except ValueError as err:  # a results file of another config: say so in one line
            raise SystemExit(f"error: {err}") from None
        print(f"wrote {scfg.out}: {len(payload['runs'])} runs")
        return
    cfg, out, _ = parse_cli(GrokkingConfig, argv, presets=PRESETS, default_preset="cpu")
    _check_arm(cfg.arm)
    result = run(cfg)
    m = result["metrics"]
    print(f"{cfg.arm} seed {cfg.seed}: val95 at {m['steps_to_val95']}, val99 at {m['steps_to_val99']}, "
          f"train99 at {m['steps_to_train99']}, final val {m['final_val_acc']:.3f} "
          f"({result['wall_time_s']:.0f} s)")
    if out:
        save_results(out, {"experiment": "grokking", "provenance": provenance(cfg, [cfg.seed]),
                           **result})


if __name__ == "__main__":
    cli(main)

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
at 1/3, removing the routing entirely).

Usage::

    python -m stiefel_mini.experiments.grokking --arm stiefel --seed 0 --out results/grokking/one.json
    python -m stiefel_mini.experiments.grokking sweep --seeds 0 1 2 3 4 --out results/grokking/cpu.json
    python -m stiefel_mini.experiments.grokking --preset reference --arm adamw   # Nanda et al. recipe

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
from stiefel_mini.experiments.runtime import generator, progress, set_threads
from stiefel_mini.experiments.stats import compare, holm, summarize
from stiefel_mini.geometry import orthogonality_error, random_stiefel

ARM_NAMES = ("adamw", "adamw_nodecay_qk", "stiefel", "frozen", "uniform")


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
    eval_every: int = 20
    late_frac: float = 0.25  # "late" evaluations: the last late_frac of training
    threads: int = 1
    progress: bool = True


PRESETS: dict[str, GrokkingConfig] = {
    # Nanda et al. (2023): p = 113, 30% train, lr 1e-3, wd 1, betas (0.9, 0.98); groks in ~5-10k epochs.
    "reference": GrokkingConfig(p=113, lr=1e-3, steps=20_000, eval_every=50),
    # The book's CPU setting: the same model and recipe on a smaller modulus (1,044 training
    # equations instead of 3,831) with a 10x larger lr; AdamW reaches 99% validation accuracy within
    # the 1,800 steps on every seed of results/grokking/cpu.json.
    "cpu": GrokkingConfig(),
    # The chapter's live run: small enough to memorise and grok within about a minute of CPU.
    "live": GrokkingConfig(p=31, train_frac=0.5, steps=1200),
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
    """The model of ``cfg.arm`` with the seed's shared initialisation."""
    spec = arm_spec(cfg.arm)
    return GrokkingTransformer(cfg.p, cfg.d_model, cfg.n_heads, cfg.d_mlp, uniform=spec.qk == "none",
                               seed=cfg.seed, **spec.module_flags(cfg.logit_scale))


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
    which keeps evaluation cheap; the entropy is an average and needs no more).
    """
    set_threads(cfg.threads)
    data = make_dataset(cfg.p, cfg.op, cfg.train_frac, cfg.seed)
    model = build_model(cfg)
    opt = make_optimizer(model, cfg.arm, **optimizer_options(cfg))
    qk = [model.attn.w_q, model.attn.w_k]  # each (H, d, dh)
    init = [w.detach().clone() for w in qk]
    prev = [w.detach().clone() for w in qk]
    keys = ("step", "train_loss", "train_acc", "val_loss", "val_acc", "step_q", "step_k", "dist_q",
            "dist_k", "orth_q", "orth_k", "entropy")
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


def metrics(hist: dict, cfg: GrokkingConfig) -> dict:
    """Summary numbers of one run's history.

    ``steps_to_val95/99``, ``steps_to_train99``: first evaluation at or above the threshold (None:
    never). ``grok_delay``: ``steps_to_val99 - steps_to_train99``. ``late_share95``: share of the
    evaluations in the last ``late_frac`` of training with val acc >= 95%. ``post_grok_share95``: share
    of evaluations after the first >= 95% that stay >= 95%. ``collapses``: falls below 50% after
    reaching 95%. Frame numbers are at the end of training; ``entropy_final`` is the mean over heads.
    """
    steps, val, train = hist["step"], hist["val_acc"], hist["train_acc"]
    s95, s99, t99 = (first_step(steps, val, 0.95), first_step(steps, val, 0.99),
                     first_step(steps, train, 0.99))
    late = [v for s, v in zip(steps, val) if s >= (1 - cfg.late_frac) * cfg.steps]
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
        "dist_q_final": hist["dist_q"][-1],
        "dist_k_final": hist["dist_k"][-1],
        "orth_q_final": hist["orth_q"][-1],
        "mean_step_q": sum(hist["step_q"][1:]) / max(len(hist["step_q"]) - 1, 1),
        "entropy_final": sum(hist["entropy"][-1]) / len(hist["entropy"][-1]),
    }


def subsample(hist: dict, max_points: int) -> dict:
    """Every k-th evaluation of ``hist`` (always keeping the last) so at most ~``max_points`` remain."""
    n = len(hist["step"])
    k = max(1, math.ceil(n / max_points))
    idx = list(range(0, n, k))
    if idx[-1] != n - 1:
        idx.append(n - 1)
    return {key: [vals[i] for i in idx] for key, vals in hist.items()}


# ----------------------------------------------------------------------------------------------------
# Analysis of a sweep (used by the book chapter)
# ----------------------------------------------------------------------------------------------------

# Metrics of the results table: (key, lower_is_better, censored). A censored "steps to" metric of a run
# that never got there counts as +inf: it loses to any run that did, and medians stay meaningful.
TABLE_METRICS = (
    ("steps_to_val95", True, True),
    ("steps_to_val99", True, True),
    ("steps_to_train99", True, True),
    ("grok_delay", True, True),
    ("final_val_acc", False, False),
    ("late_share95", False, False),
    ("collapses", True, False),
    ("dist_q_final", False, False),
    ("entropy_final", False, False),
)


def runs_by_arm(results: dict) -> dict[str, list[dict]]:
    """The runs of a sweep grouped by arm, each list in seed order, keeping only complete seeds.

    A seed counts when every arm of the sweep has finished it, so every comparison is paired.
    """
    arms = list(results["sweep"]["arms"])
    by_seed: dict[int, dict[str, dict]] = {}
    for r in results["runs"]:
        by_seed.setdefault(r["seed"], {})[r["arm"]] = r
    seeds = sorted(s for s, runs in by_seed.items() if all(a in runs for a in arms))
    return {a: [by_seed[s][a] for s in seeds] for a in arms}


def summary_table(results: dict, baseline: str = "adamw") -> list[dict]:
    """One row per (arm, metric): median and quartiles, and the paired comparison with ``baseline``.

    Each row holds ``arm``, ``metric``, the :func:`~stiefel_mini.experiments.stats.summarize` numbers
    (``median``, ``q25``, ``q75``, ``n_censored``: runs that never reached a "steps to" threshold,
    counted as +inf), and for arms other than the baseline: ``diff_median`` (median over seeds of
    arm - baseline) with ``diff_interval`` and its honest name ``diff_interval_name`` (``"range"`` for
    n <= 5, see :func:`~stiefel_mini.experiments.stats.median_interval`), ``p_sign`` and
    ``p_wilcoxon`` (exact two-sided), ``p_wilcoxon_holm`` (Holm-corrected across every comparison of
    this table, one family) and ``wins``/``ties``/``n`` (seeds on which the arm beats the baseline).
    """
    runs = runs_by_arm(results)
    rows = []
    for arm, arm_runs in runs.items():
        for key, lower, censored in TABLE_METRICS:
            vals = [r["metrics"][key] for r in arm_runs]
            row = {"arm": arm, "metric": key, **summarize(vals, censored=censored)}
            if arm != baseline:
                base = [r["metrics"][key] for r in runs[baseline]]
                c = compare(base, vals, lower_is_better=lower, censored=censored)
                med = c["median_difference"]
                row.update(diff_median=med["median"], diff_interval=[med["low"], med["high"]],
                           diff_interval_name=med["name"], p_sign=c["p_sign"], p_wilcoxon=c["p_wilcoxon"],
                           wins=c["wins"]["wins"], ties=c["wins"]["ties"], n=c["wins"]["n"])
            rows.append(row)
    tested = [r for r in rows if "p_wilcoxon" in r]
    for r, p in zip(tested, holm([r["p_wilcoxon"] for r in tested])["adjusted"]):
        r["p_wilcoxon_holm"] = p
    return rows


def curve_bands(results: dict, arm: str, key: str = "val_acc") -> dict[str, list[float]]:
    """Median and quartiles over seeds of ``history[key]`` per evaluated step, for one arm.

    Runs of one sweep share their evaluation steps, so the curves align step by step. ``entropy``
    (per head) is averaged over heads first.
    """
    import numpy as np

    hists = [r["history"] for r in runs_by_arm(results)[arm]]
    steps = hists[0]["step"]
    vals = np.array([[np.mean(v) if isinstance(v, list) else v for v in h[key]] for h in hists])
    q25, med, q75 = np.quantile(vals, [0.25, 0.5, 0.75], axis=0)  # (n_seeds, n_steps) -> (n_steps,)
    return {"step": list(steps), "median": med.tolist(), "q25": q25.tolist(), "q75": q75.tolist()}


# ----------------------------------------------------------------------------------------------------
# Sweep and CLI
# ----------------------------------------------------------------------------------------------------


@dataclass
class SweepConfig:
    """A paired sweep: every arm on every seed, seed-major, results rewritten after each run."""

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


def repro_record(cfg: GrokkingConfig) -> dict:
    """The short run the reproduction test re-runs: ``cfg`` shortened, with its full history."""
    out = run(cfg)
    return {"config": out["config"], "history": out["history"], "metrics": out["metrics"]}


def sweep(sweep_cfg: SweepConfig, base: GrokkingConfig, command: str | None = None) -> dict:
    """Run every (seed, arm), writing ``sweep_cfg.out`` after each; resume from an existing file.

    Runs already in the file with the same base config are kept, so an interrupted sweep continues
    where it stopped; the provenance of the earlier invocations is kept in ``provenance_previous``.
    Runs of ``redo_arms`` are dropped first and run again. Seed-major order makes every completed
    seed a complete set of pairs.
    """
    out_path = Path(sweep_cfg.out)
    base_dict = config_dict(dataclasses.replace(base, arm="*", seed=-1))
    payload = {
        "experiment": "grokking",
        "provenance": provenance(base, sweep_cfg.seeds, command),
        "sweep": config_dict(sweep_cfg),
        "base_config": base_dict,
        "runs": [],
        "repro": None,
    }
    if out_path.exists():
        old = load_results(out_path)
        if old.get("base_config") == base_dict:
            payload["provenance_previous"] = [*old.get("provenance_previous", []), old["provenance"]]
            payload["runs"] = [r for r in old["runs"] if r["arm"] not in sweep_cfg.redo_arms]
            repro = old.get("repro")
            if repro is not None and repro["config"]["arm"] not in sweep_cfg.redo_arms:
                payload["repro"] = repro
    done = {(r["arm"], r["seed"]) for r in payload["runs"]}
    t_start = time.perf_counter()
    for seed in sweep_cfg.seeds:
        for arm in sweep_cfg.arms:
            if (arm, seed) in done:
                continue
            result = run(dataclasses.replace(base, arm=arm, seed=seed))
            payload["runs"].append({
                "arm": arm, "seed": seed, "metrics": result["metrics"],
                "wall_time_s": result["wall_time_s"],
                "history": subsample(result["history"], sweep_cfg.history_points),
            })
            payload["wall_time_s"] = time.perf_counter() - t_start
            save_results(out_path, payload)
    if payload["repro"] is None:
        payload["repro"] = repro_record(dataclasses.replace(
            base, arm=sweep_cfg.repro_arm, seed=sweep_cfg.repro_seed, steps=sweep_cfg.repro_steps,
            progress=False))
        save_results(out_path, payload)
    return payload


def _check_arm(arm: str) -> None:
    try:
        arm_spec(arm)
    except ValueError as err:
        raise ConfigError(f"--arm(s): {err}") from None


def main(argv: Sequence[str] | None = None) -> None:
    """CLI: ``[sweep] [--preset cpu|reference] [--field value ...] [--out PATH]``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "-h" in argv or "--help" in argv:
        print("usage: python -m stiefel_mini.experiments.grokking [sweep] [--preset "
              f"{'|'.join(PRESETS)}] [--out PATH] [--field value ...]")
        print(config_help(SweepConfig) + "\n" + config_help(GrokkingConfig))
        return
    if argv and argv[0] == "sweep":
        sweep_argv, rest = split_argv(argv[1:], SweepConfig)
        scfg = parse_config(SweepConfig, sweep_argv)
        base = parse_config(GrokkingConfig, rest, base=preset(PRESETS, scfg.preset))
        for arm in scfg.arms:
            _check_arm(arm)
        payload = sweep(scfg, base)
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

"""Shared machinery for the experiments: configs, provenance, results files, progress, arms, statistics.

Every experiment in :mod:`stiefel_mini.experiments` follows one pattern: a config dataclass, a
``run(cfg) -> history`` function, and a ``python -m`` CLI whose ``--field value`` overrides are parsed by
:func:`parse_config`. Results are JSON files written by :func:`save_results` carrying the
:func:`provenance` of the run (command, commit, library versions, device). The optimiser arms compared
in the book are defined once here (:data:`ARMS`, :func:`make_optimizer`) so that every experiment trains
the same arm the same way, and the paired-seed statistics of the book's tables are
:func:`summarize`, :func:`paired_differences`, :func:`bootstrap_ci`, :func:`t_ci` and :func:`wins`.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
import os
import platform
import shlex
import subprocess
import sys
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import torch

__all__ = [
    "ConfigError",
    "parse_config",
    "config_dict",
    "config_help",
    "provenance",
    "save_results",
    "load_results",
    "progress",
    "set_threads",
    "seed_everything",
    "Arm",
    "ARMS",
    "arm_spec",
    "make_optimizer",
    "ProjectedAdamW",
    "summarize",
    "paired_differences",
    "bootstrap_ci",
    "t_ci",
    "wins",
    "compare",
]


# ----------------------------------------------------------------------------------------------------
# Configs
# ----------------------------------------------------------------------------------------------------


class ConfigError(ValueError):
    """A command-line override names an unknown field or gives a value of the wrong type."""


_TRUE = {"true", "1", "yes", "y", "on"}
_FALSE = {"false", "0", "no", "n", "off"}
_NONE = {"none", "null"}


def _type_name(tp: Any) -> str:
    """Readable name of a type annotation, used in error messages and ``--help``."""
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")


def _is_optional(tp: Any) -> tuple[bool, Any]:
    """(True, X) for ``Optional[X]`` / ``X | None``, else (False, tp)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return True, args[0]
    return False, tp


def _convert_scalar(text: str, tp: Any, field: str) -> Any:
    """Convert one command-line token to the scalar type ``tp`` (bool, int, float, str, Literal)."""
    optional, tp = _is_optional(tp)
    if optional and text.lower() in _NONE:
        return None
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        choices = typing.get_args(tp)
        for choice in choices:
            if str(choice) == text:
                return choice
        raise ConfigError(f"--{field}: expected one of {list(choices)}, got {text!r}")
    if tp is bool:
        low = text.lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise ConfigError(f"--{field}: expected bool (true/false), got {text!r}")
    if tp is int:
        try:
            return int(text)
        except ValueError:
            raise ConfigError(f"--{field}: expected int, got {text!r}") from None
    if tp is float:
        try:
            return float(text)
        except ValueError:
            raise ConfigError(f"--{field}: expected float, got {text!r}") from None
    if tp is str:
        return text
    raise ConfigError(f"--{field}: unsupported field type {_type_name(tp)}")


def _is_tuple(tp: Any) -> bool:
    _, inner = _is_optional(tp)
    return typing.get_origin(inner) in (tuple, typing.Tuple)


def _convert(tokens: list[str], tp: Any, field: str) -> Any:
    """Convert the tokens that follow ``--field`` to the annotated type (tuples take several tokens)."""
    optional, inner = _is_optional(tp)
    if not _is_tuple(tp):
        if len(tokens) != 1:
            raise ConfigError(f"--{field}: expected one {_type_name(tp)} value, got {len(tokens)}")
        return _convert_scalar(tokens[0], tp, field)
    if optional and len(tokens) == 1 and tokens[0].lower() in _NONE:
        return None
    # A single token may also hold the whole tuple, comma separated: --betas 0.9,0.98
    if len(tokens) == 1 and "," in tokens[0]:
        tokens = [t for t in tokens[0].split(",") if t != ""]
    args = typing.get_args(inner)
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(_convert_scalar(t, args[0], field) for t in tokens)
    if len(tokens) != len(args):
        raise ConfigError(
            f"--{field}: expected {len(args)} values of types "
            f"({', '.join(_type_name(a) for a in args)}), got {len(tokens)}"
        )
    return tuple(_convert_scalar(t, a, field) for t, a in zip(tokens, args))


def config_help(cls: type) -> str:
    """The ``--field type default`` lines of a config dataclass, as ``--help`` prints them."""
    hints = typing.get_type_hints(cls)
    lines = [f"{cls.__name__} options (--field value):"]
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else "(required)"
        )
        lines.append(f"  --{f.name:<24} {_type_name(hints[f.name]):<28} default {default!r}")
    return "\n".join(lines)


def parse_config(cls: type, argv: Sequence[str] | None = None, base: Any = None) -> Any:
    """Build a ``cls`` dataclass from ``--field value`` overrides, type-checked against its annotations.

    ``argv`` defaults to ``sys.argv[1:]``; ``base`` (an instance of ``cls``) supplies the values not
    overridden, else the dataclass defaults. Accepted forms: ``--lr 3e-3``, ``--lr=3e-3``, bools as
    ``true/false/1/0/yes/no``, ``Optional`` fields as ``none``, tuples as several tokens or one comma
    list (``--betas 0.9 0.98`` or ``--betas 0.9,0.98``), ``Literal`` fields by value. Underscores and
    dashes in field names are interchangeable. ``-h``/``--help`` prints the fields and exits.

    Raises :class:`ConfigError` (a ``ValueError``) naming the field and the expected type on an unknown
    field, a missing value or a value that does not convert.
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"parse_config expects a dataclass type, got {cls!r}")
    argv = list(sys.argv[1:] if argv is None else argv)
    if "-h" in argv or "--help" in argv:
        print(config_help(cls))
        raise SystemExit(0)
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    values: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        token = argv[i]
        if not token.startswith("--"):
            raise ConfigError(f"expected --field, got {token!r}; fields: {', '.join(names)}")
        key, eq, inline = token[2:].partition("=")
        key = key.replace("-", "_")
        if key not in hints or key not in names:
            raise ConfigError(f"unknown field --{key} for {cls.__name__}; fields: {', '.join(names)}")
        if eq:
            tokens = [inline]
            i += 1
        else:
            # Tuples take every token up to the next --field; scalars take exactly one.
            j = i + 1
            if _is_tuple(hints[key]):
                while j < len(argv) and not argv[j].startswith("--"):
                    j += 1
            else:
                j = min(i + 2, len(argv))
            tokens = argv[i + 1 : j]
            if not tokens:
                raise ConfigError(f"--{key}: missing value (expected {_type_name(hints[key])})")
            i = j
        values[key] = _convert(tokens, hints[key], key)
    if base is not None:
        return dataclasses.replace(base, **values)
    return cls(**values)


def config_dict(cfg: Any) -> dict:
    """The dataclass ``cfg`` as a JSON-ready dict (tuples become lists)."""
    return _jsonable(dataclasses.asdict(cfg))


# ----------------------------------------------------------------------------------------------------
# Provenance and results files
# ----------------------------------------------------------------------------------------------------

_REPO_ROOT = Path(__file__).resolve().parents[2]


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], cwd=_REPO_ROOT, capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def _device_description(device: str | torch.device | None) -> dict:
    """What ran the experiment, without the host name: device kind, CPU/GPU model, thread count."""
    device = torch.device(device) if device is not None else torch.device("cpu")
    info: dict[str, Any] = {"device": str(device), "torch_threads": torch.get_num_threads()}
    if device.type == "cuda" and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(device)
    info["machine"] = platform.machine()
    info["processor"] = platform.processor() or None
    info["cpu_count"] = os.cpu_count()
    return info


def provenance(
    cfg: Any = None,
    seeds: Iterable[int] | None = None,
    command: str | Sequence[str] | None = None,
    device: str | torch.device | None = None,
) -> dict:
    """Where a result came from: command, git commit and dirty flag, versions, device, time (UTC).

    ``command`` defaults to the interpreter's own command line (``sys.orig_argv``), so a results file
    written by ``python -m stiefel_mini.experiments.grokking ...`` records exactly that line. The git
    commit is that of the repository holding this package (``None`` outside a checkout); ``dirty`` is
    true when tracked files differ from it. The host name is deliberately not recorded.
    """
    import stiefel_mini

    if command is None:
        command = getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv]
    if not isinstance(command, str):
        command = shlex.join(str(c) for c in command)
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "command": command,
        "git_commit": commit,
        "git_dirty": None if status is None else bool(status),
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "numpy": np.__version__,
            "stiefel_mini": getattr(stiefel_mini, "__version__", None),
        },
        **_device_description(device),
        "config": None if cfg is None else config_dict(cfg),
        "seeds": None if seeds is None else [int(s) for s in seeds],
        "timestamp_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def _jsonable(obj: Any) -> Any:
    """Recursively convert to JSON types; non-finite floats become ``None`` (strict JSON has no NaN)."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, torch.Tensor):
        return _jsonable(obj.detach().cpu().tolist())
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    if isinstance(obj, (np.floating, float)):
        value = float(obj)
        return value if math.isfinite(value) else None
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.bool_,)):
        return bool(obj)
    if isinstance(obj, Path):
        return str(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return _jsonable(dataclasses.asdict(obj))
    return obj


def save_results(path: str | os.PathLike, payload: dict) -> Path:
    """Write ``payload`` as JSON to ``path`` atomically (temp file + rename), creating parent folders.

    The atomic replace lets a sweep rewrite its results file after every run: an interrupted sweep
    leaves the last complete file, never a truncated one. NaN/inf are stored as ``null``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "w") as fh:
        json.dump(_jsonable(payload), fh, indent=1, allow_nan=False)
        fh.write("\n")
    os.replace(tmp, path)
    return path


def load_results(path: str | os.PathLike) -> dict:
    """Read a results file written by :func:`save_results`."""
    with open(path) as fh:
        return json.load(fh)


# ----------------------------------------------------------------------------------------------------
# Progress, threads, seeds
# ----------------------------------------------------------------------------------------------------


def progress(
    iterable: Iterable | None = None,
    total: int | None = None,
    desc: str | None = None,
    enabled: bool = True,
    **kwargs: Any,
):
    """A tqdm progress bar, silent when ``enabled`` is false or ``STIEFEL_MINI_PROGRESS=0`` is set.

    Used as an iterator (``for step in progress(range(n), desc="train")``) or driven by hand
    (``bar = progress(total=n); bar.update(); bar.set_postfix(...)``). The environment switch lets the
    book build and CI silence every experiment without touching their configs.
    """
    from tqdm.auto import tqdm

    if os.environ.get("STIEFEL_MINI_PROGRESS", "1").lower() in _FALSE:
        enabled = False
    return tqdm(iterable, total=total, desc=desc, disable=not enabled, **kwargs)


def set_threads(n: int | None) -> None:
    """Pin torch's intra-op threads (``None`` or 0 leaves the default). Results are timed per thread."""
    if n:
        torch.set_num_threads(int(n))


def seed_everything(seed: int) -> torch.Generator:
    """Seed python, numpy and torch's global generators; return a fresh ``torch.Generator`` at ``seed``."""
    import random

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


# ----------------------------------------------------------------------------------------------------
# Optimiser arms
# ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Arm:
    """One way of training the attention Q/K projections; every other weight gets AdamW.

    ``stiefel_module``: build the attention with ``stiefel=True`` (Q/K are frames on the manifold).
    ``qk``: the rule for Q/K -- ``"adamw"`` (decayed like any weight), ``"adamw_nodecay"``,
    ``"adamw_scaled"`` (lr / sqrt(d_model * d_head), so the Frobenius step matches StiefelAdam's),
    ``"adamw_polar"`` (AdamW step, then the polar projection back onto the manifold), ``"stiefel"``
    (StiefelAdam frame rule), ``"frozen"`` (random frames, never updated), ``"none"`` (the attention
    routing is removed by the experiment; Q/K are not trained).
    ``second_moment``: StiefelAdam's second-moment pooling for ``qk="stiefel"``.
    """

    name: str
    stiefel_module: bool
    qk: str
    second_moment: str = "frame"
    description: str = ""


ARMS: dict[str, Arm] = {
    a.name: a
    for a in [
        Arm("adamw", False, "adamw", description="A0: AdamW on everything, Q/K decayed"),
        Arm("adamw_nodecay_qk", False, "adamw_nodecay", description="A0': AdamW, no weight decay on Q/K"),
        Arm("stiefel", True, "stiefel", "frame", "A1: StiefelAdam (paper rule) on Q/K frames, AdamW on the rest"),
        Arm("frozen", True, "frozen", description="A3: random Q/K frames, never updated"),
        Arm("adamw_scaled_qk", False, "adamw_scaled", description="A4: AdamW, Q/K lr / sqrt(d_model*d_head)"),
        Arm("adamw_polar", True, "adamw_polar", description="A5: AdamW on Q/K, then polar projection each step"),
        Arm("stiefel_element", True, "stiefel", "element", "A7: StiefelAdam, per-element second moment"),
        Arm("uniform", False, "none", description="control: uniform attention, Q/K unused"),
    ]
}

# The names used in the CIFAR issue, for readers who know the arms by their codes.
ARM_CODES = {"A0": "adamw", "A0'": "adamw_nodecay_qk", "A1": "stiefel", "A3": "frozen",
             "A4": "adamw_scaled_qk", "A5": "adamw_polar", "A7": "stiefel_element"}


def arm_spec(arm: str | Arm) -> Arm:
    """The :class:`Arm` called ``arm`` (a name of :data:`ARMS` or a code of ``ARM_CODES``)."""
    if isinstance(arm, Arm):
        return arm
    name = ARM_CODES.get(arm, arm)
    if name not in ARMS:
        raise ValueError(f"unknown arm {arm!r}; choices: {sorted(ARMS)} or codes {sorted(ARM_CODES)}")
    return ARMS[name]


class ProjectedAdamW(torch.optim.AdamW):
    """AdamW, then the polar projection of every param in groups with ``project=True`` (arm A5).

    After the Euclidean AdamW step ``W' = W - lr * (m_hat / (sqrt(v_hat) + eps) + wd W)``, the frame is
    replaced by its closest point on the Stiefel manifold, ``W <- U V^T`` with ``W' = U S V^T``
    (:func:`stiefel_mini.geometry.project`). This is the "project after an unconstrained step" baseline:
    unlike StiefelAdam its moments are never transported to the tangent space.
    """

    @torch.no_grad()
    def step(self, closure: Callable | None = None):
        from stiefel_mini.geometry import project

        loss = super().step(closure)
        for group in self.param_groups:
            if group.get("project", False):
                for p in group["params"]:
                    p.copy_(project(p))
        return loss


def make_optimizer(model: torch.nn.Module, arm: str | Arm, cfg: Any) -> torch.optim.Optimizer:
    """The optimiser of ``arm`` for ``model`` (built with ``stiefel=arm_spec(arm).stiefel_module``).

    Reads from ``cfg`` (any object): ``lr``, ``betas``, ``weight_decay`` and optionally ``eps``
    (1e-8), ``frame_lr`` (StiefelAdam / projected lr for Q/K, default ``lr``), ``max_step`` (0.1),
    ``retraction`` ("polar"). Non-Q/K weights always get AdamW with ``weight_decay`` on >=2-D weights
    and embeddings and none on biases / 1-D params (the ``param_groups`` split of the library).
    Q/K follow the arm (see :class:`Arm`); for ``frozen`` and ``none`` they are set
    ``requires_grad=False`` and left out of the optimiser, so they stay exactly at initialisation.
    Every group carries a ``"name"`` ("frames", "qk", "decay", "no_decay").
    """
    from stiefel_mini.attention import param_groups, qk_parameters
    from stiefel_mini.optim import StiefelAdam

    spec = arm_spec(arm)
    lr = float(cfg.lr)
    betas = tuple(cfg.betas)
    wd = float(cfg.weight_decay)
    eps = float(getattr(cfg, "eps", 1e-8))
    frame_lr = getattr(cfg, "frame_lr", None)
    frame_lr = lr if frame_lr is None else float(frame_lr)

    qk = list(qk_parameters(model))
    if spec.qk in ("frozen", "none"):
        for p in qk:
            p.requires_grad_(False)
    groups = param_groups(model, weight_decay=wd)
    qk_ids = {id(p) for p in qk}
    out: list[dict] = []
    for g in groups:
        params = [p for p in g["params"] if p.requires_grad]
        if not params:
            continue
        is_qk = all(id(p) in qk_ids for p in params)
        g = {**g, "params": params, "lr": lr}
        if not is_qk:
            g["weight_decay"] = wd if g.get("name") == "decay" else 0.0
            g.pop("stiefel", None)
        elif spec.qk == "adamw":
            g.update(weight_decay=wd)
        elif spec.qk == "adamw_nodecay":
            g.update(weight_decay=0.0)
        elif spec.qk == "adamw_scaled":
            n, p_ = params[0].shape[-2:]
            g.update(weight_decay=wd, lr=lr / math.sqrt(n * p_))
        elif spec.qk == "adamw_polar":
            # Decay would only shrink the frame for the projection to undo; it is left off.
            g.update(weight_decay=0.0, lr=frame_lr, project=True)
            g.pop("stiefel", None)
        elif spec.qk == "stiefel":
            g.update(weight_decay=0.0, lr=frame_lr, stiefel=True, second_moment=spec.second_moment,
                     max_step=getattr(cfg, "max_step", 0.1),
                     retraction=getattr(cfg, "retraction", "polar"))
        else:  # pragma: no cover - ARMS only holds the rules above
            raise ValueError(f"arm {spec.name}: unknown Q/K rule {spec.qk!r}")
        out.append(g)
    if spec.qk == "stiefel":
        return StiefelAdam(out, lr=lr, betas=betas, eps=eps, weight_decay=wd)
    if spec.qk == "adamw_polar":
        return ProjectedAdamW(out, lr=lr, betas=betas, eps=eps, weight_decay=wd)
    return torch.optim.AdamW(out, lr=lr, betas=betas, eps=eps, weight_decay=wd)


# ----------------------------------------------------------------------------------------------------
# Paired statistics
# ----------------------------------------------------------------------------------------------------

# Two-sided 95% Student-t critical values t_{0.975, df} for df = 1..30 (beyond: normal 1.96).
_T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
         2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
         2.052, 2.048, 2.045, 2.042]


def _arr(xs: Iterable[float | None], missing: float = math.nan) -> np.ndarray:
    """Float array with ``None`` replaced by ``missing`` (``inf`` for censored "steps to" metrics)."""
    return np.array([missing if x is None else float(x) for x in xs], dtype=float)


def _quantile(x: np.ndarray, q: float) -> float:
    """Linear-interpolation quantile (numpy's default) that stays exact when entries are infinite."""
    x = np.sort(x)
    pos = q * (x.size - 1)
    lo, hi = int(math.floor(pos)), int(math.ceil(pos))
    t = pos - lo
    if t == 0 or x[lo] == x[hi]:
        return float(x[lo])
    return float(x[lo] + t * (x[hi] - x[lo]))


def summarize(xs: Iterable[float | None], missing: float = math.nan) -> dict:
    """Median, quartiles (IQR), min, max, mean of ``xs``; ``None`` entries count as ``missing``.

    For a "steps to reach" metric pass ``missing=math.inf``: a run that never reached the threshold is
    censored at infinity, so the median is still right as long as fewer than half the runs are censored
    (it is then ``inf``). NaN entries are dropped and counted in ``n_missing``.
    """
    a = _arr(xs, missing)
    finite = a[~np.isnan(a)]
    n_missing = int(np.isnan(a).sum() + np.isinf(a).sum())
    if finite.size == 0:
        return {"n": int(a.size), "n_missing": n_missing, "median": None, "q25": None, "q75": None,
                "min": None, "max": None, "mean": None}
    q25, med, q75 = (_quantile(finite, q) for q in (0.25, 0.5, 0.75))
    return {"n": int(a.size), "n_missing": n_missing, "median": float(med), "q25": float(q25),
            "q75": float(q75), "min": float(finite.min()), "max": float(finite.max()),
            "mean": float(finite.mean())}


def paired_differences(a: Iterable[float | None], b: Iterable[float | None],
                       missing: float = math.nan) -> np.ndarray:
    """Per-seed ``b - a`` (arrays in seed order). ``inf - inf`` (both censored) counts as 0."""
    a, b = _arr(a, missing), _arr(b, missing)
    if a.shape != b.shape:
        raise ValueError(f"paired arrays differ in length: {a.shape} vs {b.shape}")
    with np.errstate(invalid="ignore"):
        d = b - a
    both_inf = np.isinf(a) & np.isinf(b) & (np.sign(a) == np.sign(b))
    d[both_inf] = 0.0
    return d


def bootstrap_ci(xs: Iterable[float], stat: Callable[[np.ndarray], float] = np.median,
                 level: float = 0.95, n_boot: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap CI of ``stat(xs)``: resample ``xs`` with replacement ``n_boot`` times.

    With 5 paired seeds this is coarse (the median can only take the observed values); it is
    reported for honesty, not precision. Infinite entries are kept (the CI may be infinite).
    """
    x = np.asarray([v for v in xs if not (isinstance(v, float) and math.isnan(v))], dtype=float)
    if x.size == 0:
        return (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(n_boot, x.size))
    with np.errstate(invalid="ignore"):
        boots = np.apply_along_axis(stat, 1, x[idx])
    return (_quantile(boots, (1 - level) / 2), _quantile(boots, (1 + level) / 2))


def t_ci(xs: Iterable[float]) -> tuple[float, float]:
    """95% Student-t CI of the mean: ``mean +- t_{0.975, n-1} * sd / sqrt(n)`` (finite entries only)."""
    x = np.asarray([v for v in xs if v is not None and math.isfinite(v)], dtype=float)
    if x.size < 2:
        return (math.nan, math.nan)
    df = x.size - 1
    t = _T975[df - 1] if df <= len(_T975) else 1.96
    half = t * x.std(ddof=1) / math.sqrt(x.size)
    return (float(x.mean() - half), float(x.mean() + half))


def wins(a: Iterable[float | None], b: Iterable[float | None], lower_is_better: bool = True,
         missing: float = math.nan) -> dict:
    """How often ``b`` beats ``a`` on the same seed: ``{"wins": k, "ties": t, "losses": l, "n": n}``.

    Pairs with a NaN on either side are skipped (not counted in ``n``).
    """
    a, b = _arr(a, missing), _arr(b, missing)
    ok = ~(np.isnan(a) | np.isnan(b))
    a, b = a[ok], b[ok]
    better = b < a if lower_is_better else b > a
    worse = b > a if lower_is_better else b < a
    return {"wins": int(better.sum()), "ties": int((a == b).sum()), "losses": int(worse.sum()),
            "n": int(a.size)}


def compare(a: Iterable[float | None], b: Iterable[float | None], lower_is_better: bool = True,
            missing: float = math.nan, seed: int = 0) -> dict:
    """Paired comparison of arm ``b`` against baseline ``a`` over the same seeds, for the book's tables.

    Returns the summaries of both, the per-seed differences ``b - a``, their median with a bootstrap
    95% CI, the t CI of their mean (finite differences only) and the wins of ``b`` over ``a``.
    """
    a, b = list(a), list(b)
    d = paired_differences(a, b, missing)
    finite_d = d[~np.isnan(d)]
    return {
        "baseline": summarize(a, missing),
        "arm": summarize(b, missing),
        "differences": [None if math.isnan(v) else v for v in d.tolist()],
        "median_difference": float(np.median(finite_d)) if finite_d.size else None,
        "median_difference_ci": bootstrap_ci(finite_d, seed=seed) if finite_d.size else None,
        "mean_difference_t_ci": t_ci(finite_d),
        "wins": wins(a, b, lower_is_better, missing),
    }

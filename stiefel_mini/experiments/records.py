"""Results files and their provenance: where a number came from, written so that it survives a crash.

:func:`provenance` records the command, git commit and dirty flag, library versions, device and time
of a run (never the host name); :func:`save_results` writes a JSON payload atomically (an interrupted
sweep leaves its last complete file); :func:`load_results` reads it back; :func:`jsonable` and
:func:`config_dict` turn tensors, arrays, dataclasses and non-finite floats into strict JSON.

Per-evaluation histories (a dict under a key ``"history"`` whose every float is a float32 value, as
the grokking loop records them) are stored packed: compact JSON with each float at its shortest
float32 spelling, xz-compressed and base64-encoded (:func:`pack_history`), which
:func:`load_results` returns bit for bit. Packing takes r2_long.json from 6.9 MB to 1.0 MB; a history
holding any float64 value is stored plain, so packing never rounds.
"""

from __future__ import annotations

import base64
import collections
import dataclasses
import datetime as _dt
import json
import lzma
import math
import os
import pickle
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import torch

from stiefel_mini.experiments.config import leaf_fields, leaf_values, replace

__all__ = ["provenance", "cpu_description", "utc_now", "save_results", "load_results", "jsonable", "config_dict",
           "config_from_dict", "describe_file", "pack_history", "unpack_history", "HISTORY_ENCODING"]

HISTORY_ENCODING = "float32-json-xz-base64"


def config_dict(cfg: Any) -> dict:
    """The config dataclass ``cfg`` as a flat JSON-ready dict: one key per leaf field, its parts
    included (:func:`stiefel_mini.experiments.config.leaf_values`); tuples become lists."""
    return jsonable(leaf_values(cfg))


_REPO_ROOT = Path(__file__).resolve().parents[2]


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], cwd=_REPO_ROOT, capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def utc_now() -> str:
    """The time now in UTC, ISO 8601 to the second (``2026-12-02T13:45:00+00:00``)."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def cpu_description() -> dict:
    """The CPU a run computes on: ``{"model", "capability"}``.

    ``model``: the processor's model name (``/proc/cpuinfo``'s first ``model name``; elsewhere
    ``platform.processor()``, ``None`` if neither says); ``capability``: the instruction-set level
    that torch's CPU kernels dispatch to (``torch.backends.cpu.get_cpu_capability()``, e.g.
    ``"AVX512"``, ``"AVX2"``; lowered by ``ATEN_CPU_CAPABILITY``). Two runs paired across CPUs that
    differ here can differ by rounding that training amplifies.
    """
    model = None
    try:
        with open("/proc/cpuinfo") as fh:
            model = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), None)
    except OSError:
        pass
    return {"model": model or platform.processor() or None, "capability": torch.backends.cpu.get_cpu_capability()}


def _device_description(device: str | torch.device | None) -> dict:
    """What ran the experiment, without the host name: device kind, CPU/GPU model, thread count."""
    device = torch.device(device) if device is not None else torch.device("cpu")
    info: dict[str, Any] = {"device": str(device), "torch_threads": torch.get_num_threads()}
    if device.type == "cuda" and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(device)
    info["machine"] = platform.machine()
    info["processor"] = platform.processor() or None
    info["cpu_count"] = os.cpu_count()
    info["cpu"] = cpu_description()
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
    # A sweep's own results file may be tracked and rewritten as it runs: it is output, not code.
    status = _git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)results/**/*.json")
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
        "timestamp_utc": utc_now(),
    }


def jsonable(obj: Any) -> Any:
    """Recursively convert to JSON types; non-finite floats become ``None`` (strict JSON has no NaN)."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, torch.Tensor):
        return jsonable(obj.detach().cpu().tolist())
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist())
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
        return jsonable(dataclasses.asdict(obj))
    return obj


def _is_float32(obj: Any) -> bool:
    """Whether every float in ``obj`` (nested dicts and lists) is exactly a float32 value."""
    if isinstance(obj, dict):
        return all(_is_float32(v) for v in obj.values())
    if isinstance(obj, list):
        return all(_is_float32(v) for v in obj)
    return not isinstance(obj, float) or float(np.float32(obj)) == obj


def _float32_text(obj: Any) -> Any:
    """``obj`` with every float replaced by the double that spells its float32 value shortest
    (``6.676219463348389`` -> ``6.6762195``), so that ``json.dumps`` writes at most 9 digits."""
    if isinstance(obj, dict):
        return {k: _float32_text(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_float32_text(v) for v in obj]
    if isinstance(obj, float):
        if math.isfinite(obj) and abs(obj) > float(np.finfo(np.float32).max):
            raise ValueError(f"history value {obj!r} does not fit in float32; histories are stored as float32")
        return float(str(np.float32(obj)))
    return obj


def pack_history(hist: dict) -> dict:
    """One run's history (column name -> list of values) in its stored form.

    ``{"encoding": HISTORY_ENCODING, "data": base64(xz(compact JSON))}``, floats at their shortest
    float32 spelling (at most 9 significant digits; a float64 value would be rounded to float32, which
    :func:`save_results` avoids by packing float32-valued histories only; ints, ``None`` and nesting
    are kept). Deterministic: the same history always gives the same text.
    """
    text = json.dumps(_float32_text(jsonable(hist)), separators=(",", ":"), allow_nan=False)
    data = lzma.compress(text.encode(), format=lzma.FORMAT_XZ, preset=9)
    return {"encoding": HISTORY_ENCODING, "data": base64.b64encode(data).decode("ascii")}


def unpack_history(packed: dict) -> dict:
    """The history :func:`pack_history` stored: every float read back as its float32 value (as a
    Python float), so a float32-valued history returns bit for bit."""
    if packed.get("encoding") != HISTORY_ENCODING:
        raise ValueError(f"unknown history encoding {packed.get('encoding')!r}; this version reads "
                         f"{HISTORY_ENCODING!r} (or a plain dict of lists)")
    text = lzma.decompress(base64.b64decode(packed["data"]))
    return _as_float32(json.loads(text))


def _as_float32(obj: Any) -> Any:
    """``obj`` with every float rounded to float32 (as a Python float); a list of floats in one numpy
    cast. The stored spellings are float32 values' shortest, so reading them as float64 first and then
    rounding gives the float32 they spell (a test reads every committed history both ways)."""
    if isinstance(obj, float):
        return float(np.float32(obj))
    if isinstance(obj, list):
        if obj and all(type(v) is float for v in obj):
            return np.asarray(obj, dtype=np.float32).tolist()
        return [_as_float32(v) for v in obj]
    if isinstance(obj, dict):
        return {k: _as_float32(v) for k, v in obj.items()}
    return obj


def _map_histories(obj: Any, fn) -> Any:
    """``obj`` with ``fn`` applied to every dict stored under a key ``"history"`` (any depth)."""
    if isinstance(obj, dict):
        return {k: fn(v) if k == "history" and isinstance(v, dict) else _map_histories(v, fn)
                for k, v in obj.items()}
    if isinstance(obj, list):
        return [_map_histories(v, fn) for v in obj]
    return obj


def save_results(path: str | os.PathLike, payload: dict) -> Path:
    """Write ``payload`` as JSON to ``path`` atomically (temp file + rename), creating parent folders.

    The atomic replace lets a sweep rewrite its results file after every run: an interrupted sweep
    leaves the last complete file, never a truncated one. NaN/inf are stored as ``null``. Every
    ``"history"`` dict whose floats are all float32 values is stored packed (:func:`pack_history`),
    losslessly; the rest stays readable JSON.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    packed = _map_histories(jsonable(payload),
                            lambda h: pack_history(h) if "encoding" not in h and _is_float32(h) else h)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "w") as fh:
        json.dump(packed, fh, indent=1, allow_nan=False)
        fh.write("\n")
    os.replace(tmp, path)
    return path


_LOADED: "collections.OrderedDict[tuple, bytes]" = collections.OrderedDict()
_LOADED_MAX = 64  # files kept; the book's and the evidence's reads of one file reuse its first


def load_results(path: str | os.PathLike) -> dict:
    """Read a results file written by :func:`save_results`, histories unpacked (:func:`unpack_history`;
    a file written before packing, with plain histories, reads as it is).

    The unpacking is what costs; a file read again unchanged (same inode, size and modification time,
    as :func:`save_results`' atomic replace changes) comes from a pickled copy of its first read, so
    every call returns a fresh object the caller may change."""
    st = os.stat(path)
    key = (os.path.realpath(path), st.st_ino, st.st_size, st.st_mtime_ns)
    if key in _LOADED:
        _LOADED.move_to_end(key)
        return pickle.loads(_LOADED[key])
    with open(path) as fh:
        res = json.load(fh)
    res = _map_histories(res, lambda h: unpack_history(h) if "encoding" in h else h)
    _LOADED[key] = pickle.dumps(res, protocol=pickle.HIGHEST_PROTOCOL)
    if len(_LOADED) > _LOADED_MAX:
        _LOADED.popitem(last=False)
    return res


def config_from_dict(cls: type, stored: dict) -> Any:
    """The ``cls`` config a results file stores as a flat dict (:func:`config_dict`): lists become
    tuples again, leaves it does not store keep their defaults, and keys that are not leaf fields of
    ``cls`` are left out."""
    leaves = leaf_fields(cls)
    return replace(cls(), **{k: tuple(v) if isinstance(v, list) else v for k, v in stored.items() if k in leaves})


def describe_file(payload: dict) -> dict:
    """What a whole results file holds, for its top-level ``file`` entry: the record of its runs and of
    every sweep invocation that wrote them (``provenance`` is only the last of those).

    Returns ``{"runs", "arms", "seeds", "git_commits", "git_dirty", "invocations", "commands",
    "interpreters", "first_utc", "last_utc", "cpus", "started_utc"}``: the number of runs, the distinct arms, seeds
    and commits of the runs (in first-seen order), whether any run records a dirty tree, the number of
    invocations recorded (``provenance``, ``provenance_previous``, ``provenance_merged``) with their
    distinct commands and interpreters (older files' only trace of the machine) and the span of their times, the distinct CPUs the runs or invocations record,
    and the span of the runs' own start times where they record them.
    """
    runs = payload.get("runs") or []
    invs: list[dict] = []

    def walk(p: Any) -> None:
        if isinstance(p, list):
            for q in p:
                walk(q)
        elif isinstance(p, dict) and "timestamp_utc" in p:
            invs.append(p)
            walk(p.get("provenance_previous"))
            walk(p.get("provenance_merged"))

    for key in ("provenance", "provenance_previous", "provenance_merged"):
        walk(payload.get(key))
    distinct = lambda xs: list(dict.fromkeys(x for x in xs if x is not None))  # noqa: E731
    cpus = distinct(json.dumps(c, sort_keys=True) for c in [*(r.get("cpu") for r in runs),
                                                             *(p.get("cpu") for p in invs)] if c)
    times = sorted(p["timestamp_utc"] for p in invs)
    started = sorted(r["started_utc"] for r in runs if r.get("started_utc"))
    return {"runs": len(runs), "arms": distinct(r.get("arm") for r in runs),
            "seeds": sorted({r["seed"] for r in runs if "seed" in r}),
            "git_commits": distinct(r.get("git_commit") for r in runs),
            "git_dirty": any(bool(r.get("git_dirty")) for r in runs),
            "invocations": len(invs), "commands": distinct(p.get("command") for p in invs),
            "interpreters": distinct(p["command"].split()[0] for p in invs if p.get("command")),
            "first_utc": times[0] if times else None, "last_utc": times[-1] if times else None,
            "cpus": [json.loads(c) for c in cpus],
            "started_utc": [started[0], started[-1]] if started else None}

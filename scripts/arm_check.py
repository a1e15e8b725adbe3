"""Bitwise check of every arm of every experiment: the numbers before and after a refactor must agree.

``record OUT.json`` runs a short run of every arm of every task on tiny settings (CIFAR on the
tests' synthetic image folder, never the real data) and stores every logged number as its exact
``repr`` (tensors as a SHA-256 of their bytes with dtype and shape); ``compare OUT.json`` runs the
same again and prints one line per (task, arm): ``equal`` or the first keys that differ. Exit status
1 on any difference. Timings, provenance and paths are left out: they change from run to run.

    python scripts/arm_check.py record _baseline/arms.json
    python scripts/arm_check.py compare _baseline/arms.json

A few CPU minutes, on one thread.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from stiefel_mini.experiments.config import leaf_values, replace

SKIP = {"provenance", "provenance_previous", "provenance_merged", "wall_time_s", "train_seconds",
        "images_per_second", "ms_per_step", "timestamp_utc", "git_commit", "git_dirty", "command", "out",
        "data_dir", "reuse", "copied_from"}


def flatten(obj: Any, prefix: str = "") -> Iterator[tuple[str, str]]:
    """``(path, exact text)`` of every number, string and tensor in ``obj``."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        obj = leaf_values(obj)  # configs made of parts store flat
    if isinstance(obj, dict):
        for k in sorted(obj, key=str):
            if str(k) not in SKIP:
                yield from flatten(obj[k], f"{prefix}.{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from flatten(v, f"{prefix}[{i}]")
    elif isinstance(obj, torch.Tensor):
        t = obj.detach().cpu().contiguous().reshape(-1) if obj.ndim == 0 else obj.detach().cpu().contiguous()
        digest = hashlib.sha256(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"").hexdigest()[:16]
        yield prefix, f"tensor{tuple(t.shape)}:{t.dtype}:{digest}"
    elif isinstance(obj, torch.nn.Module):
        yield from flatten(obj.state_dict(), prefix)
    elif isinstance(obj, float):
        yield prefix, repr(obj)
    elif obj is None or isinstance(obj, (bool, int, str)):
        yield prefix, repr(obj)
    else:
        yield prefix, f"<{type(obj).__name__}>"


def _outcome(fn: Callable[[], Any]) -> dict[str, str]:
    try:
        return dict(flatten(fn()))
    except Exception as err:  # an arm a task rejects is an outcome too
        return {"error": f"{type(err).__name__}: {err}"}


def _arm_names() -> list[str]:
    from stiefel_mini.experiments import arms

    return list(arms.ARMS)


def cifar_cases(tmp: Path) -> Iterator[tuple[str, str, Callable[[], Any]]]:
    from stiefel_mini.experiments.cifar import config as cifar_config
    from stiefel_mini.experiments.cifar import data as cifar_data
    from stiefel_mini.experiments.cifar import experiment as cifar_experiment
    from stiefel_mini.experiments.cifar import train as cifar_train

    root = cifar_data.write_tiny_image_folder(tmp / "tiny", **cifar_config.REPRO_TINY_SET)
    os.environ[cifar_data.ENV_CACHE_DIR] = str(tmp / "cache")
    data = cifar_data.load_cifar10(root)
    presets = cifar_config.PLANS
    run_of = lambda name: presets[name].run  # noqa: E731  (a plan is a sweep; .run is its run)
    for arm in _arm_names():
        yield "cifar/repro", arm, lambda arm=arm: cifar_train.run(
            replace(run_of("repro"), arm=arm, epochs=1, data_dir=str(root)), data)
        yield "cifar/r2_tiny", arm, lambda arm=arm: cifar_train.run(
            replace(run_of("r2_tiny"), arm=arm, train_fraction=0.5, steps=4, eval_every=1,
                    data_dir=str(root)), data)
    yield "cifar/sweep", "r2_tiny", lambda: cifar_experiment.sweep(
        replace(presets["r2_tiny"], seeds=(0,), steps=3, repro_steps=2, out=str(tmp / "c.json"),
                data_dir=str(root)), data)
    yield "cifar/tiny_set_run", "r2_ablation", lambda: cifar_experiment.tiny_set_run(
        replace(run_of("r2_ablation"), arm="A1"), 3)
    yield "cifar/repro_record", "repro", lambda: cifar_experiment.repro_record(
        replace(presets["repro"], epochs=1))


def grokking_cases(tmp: Path) -> Iterator[tuple[str, str, Callable[[], Any]]]:
    from stiefel_mini.experiments.grokking import config as grokking_config
    from stiefel_mini.experiments.grokking import experiment as grokking_experiment

    tiny = replace(grokking_config.PLANS["tiny"], steps=12, eval_every=4)
    for arm in _arm_names():
        yield "grokking/tiny", arm, lambda arm=arm: grokking_experiment.run(replace(tiny, arm=arm))
        yield "grokking/fixed", arm, lambda arm=arm: grokking_experiment.run(
            replace(tiny, arm=arm, logit_rms_init=None, frame_lr=0.03))
    plan = replace(grokking_config.SWEEPS["tiny"], seeds=(0,), repro_steps=3, out=str(tmp / "g.json"))
    yield "grokking/sweep", "tiny", lambda: grokking_experiment.sweep(plan, replace(tiny, steps=6), command="x")
    yield "grokking/sweep_wd", "tiny", lambda: grokking_experiment.sweep(
        replace(plan, weight_decays=(0.1, 1.0), arms=("adamw",), out=str(tmp / "gw.json")),
        replace(tiny, steps=6), command="x")


def weight_decay_cases(tmp: Path) -> Iterator[tuple[str, str, Callable[[], Any]]]:
    from stiefel_mini.experiments.weight_decay import config as wd_config
    from stiefel_mini.experiments.weight_decay import experiment as wd_experiment
    from stiefel_mini.experiments.weight_decay import readouts as wd_readouts

    grid = replace(wd_config.WeightDecaySweep(), steps=20, log_every=5, snapshot_steps=(0, 10, 20))
    cfg = grid.run
    for arm in _arm_names():
        for scope in ("qk", "all"):
            yield f"weight_decay/{scope}", arm, lambda arm=arm, scope=scope: wd_experiment.run(
                replace(cfg, arm=arm, weight_decay=0.3, decay_scope=scope))
    yield "weight_decay/sweep", "default", lambda: wd_readouts.summary_table(
        wd_experiment.sweep(replace(grid, weight_decays=(0.0, 1.0))))


def patch_cases(tmp: Path) -> Iterator[tuple[str, str, Callable[[], Any]]]:
    from stiefel_mini.experiments import patch_attention as P

    cfg = replace(P.PatchConfig(), steps=12)
    image = P.sample_image(cfg.downsample)
    for arm in _arm_names():
        yield "patch_attention", arm, lambda arm=arm: P.run(replace(cfg, arm=arm), image)


def compare_tools_cases(tmp: Path) -> Iterator[tuple[str, str, Callable[[], Any]]]:
    from stiefel_mini.experiments import compare_tools as C

    cfg = replace(C.ToolConfig(), steps=5)
    for tool in C.TOOLS:
        for dtype in ("float32", "bfloat16"):
            yield f"compare_tools/{dtype}", tool, lambda tool=tool, dtype=dtype: C.run(
                replace(cfg, tool=tool, dtype=dtype, weight_decay=0.1))
    try:
        from stiefel_mini.experiments.weight_decay import orthogonal_decay as D
    except ImportError:  # the demos lived in compare_tools
        D = C
    yield "compare_tools/demo", "torch_orthogonal_decay", lambda: D.torch_orthogonal_decay()
    yield "compare_tools/demo", "geotorch_decay", lambda: D.geotorch_decay(steps=10)
    yield "compare_tools/demo", "geoopt_decay", lambda: D.geoopt_decay()


def fsdp_cases(tmp: Path) -> Iterator[tuple[str, str, Callable[[], Any]]]:
    from stiefel_mini.experiments import fsdp_example as F

    yield "fsdp_example", "one_process", lambda: F.main(["--steps", "4"])


TASKS = (cifar_cases, grokking_cases, weight_decay_cases, patch_cases, compare_tools_cases, fsdp_cases)


def measure() -> dict[str, dict[str, str]]:
    torch.set_num_threads(1)
    os.environ["STIEFEL_MINI_PROGRESS"] = "0"
    os.environ.pop("STIEFEL_MINI_CIFAR_DIR", None)
    out: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for task in TASKS:
            for name, arm, fn in task(Path(tmp)):
                out[f"{name} :: {arm}"] = _outcome(fn)
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("record", "compare"):
        print(__doc__)
        return 2
    mode, path = argv
    got = measure()
    if mode == "record":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(got, indent=0, sort_keys=True))
        n_err = sum("error" in v for v in got.values())
        print(f"recorded {len(got)} (task, arm) cases ({n_err} rejected by their task) to {path}")
        return 0
    want = json.loads(Path(path).read_text())
    bad = 0
    for case in sorted(set(want) | set(got)):
        a, b = want.get(case), got.get(case)
        if a == b:
            note = "rejected (same error)" if a and "error" in a else f"equal ({len(a)} numbers)"
        else:
            bad += 1
            if a is None or b is None:
                note = "DIFFERENT: case " + ("new" if a is None else "missing")
            else:
                keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
                note = f"DIFFERENT: {len(keys)} keys, e.g. " + ", ".join(
                    f"{k}: {a.get(k)} -> {b.get(k)}" for k in keys[:3])
        print(f"{case:60s} {note}")
    print(f"{len(want)} cases recorded, {len(got)} now, {bad} different")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    raise SystemExit(main(sys.argv[1:]))

"""How far a reproduction run moves across CPU kernel paths, and how far for a real change.

The reproduction tests (``tests/experiments/grokking/test_experiment.py``,
``tests/experiments/cifar/test_experiment.py``) re-run short stored runs. Their tolerances come from
this profile: each task's reproduction run is trained once per kernel setting (torch's
``ATEN_CPU_CAPABILITY``, MKL's ``MKL_ENABLE_INSTRUCTIONS`` / ``MKL_CBWR``: the kernels another CPU
would take) and once per real change (lr x 1.1, another seed, another arm, a term dropped from the
frame rule), each in its own process, logging every step. For every run it reports, per logged step,
the relative difference

    d_t = |x_t - x_t^ref| / |x_t^ref|

of the training loss from the reference run (this machine's own kernels), and the largest ``d`` over
the first ``k`` steps for the ``k`` the tests use. A good test window is one where every kernel setting
stays far below the tolerance and every real change lands far above it.

    python scripts/repro_profile.py                      # both tasks, prints the table
    python scripts/repro_profile.py --out results/repro_profile.json

Code changes ("mutations") are applied to a copy of ``stiefel_mini`` in a temporary folder that the
child process imports instead of the repository's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

KERNELS = {
    "native": {},
    "aten_default": {"ATEN_CPU_CAPABILITY": "default"},
    "aten_avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
    "aten_avx512": {"ATEN_CPU_CAPABILITY": "avx512"},
    "mkl_avx2": {"MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "mkl_cbwr_compatible": {"MKL_CBWR": "COMPATIBLE"},
}
"""Kernel settings: environment variables another CPU's kernels are forced with here."""

# Terms dropped from the frame rule (text replacements in the library's source). The first removes
# the momentum's transport to the new tangent space (beta1 sym(W^T m) in the default rule's
# P_W(beta1 m + (1 - beta1) G)).
MUTATIONS = {
    "drop_transport": ("optim.py", ".mul_(beta1).add_(Sg, alpha=1 - beta1)", ".mul_(0.0).add_(Sg, alpha=1 - beta1)"),
    # The normal part left in the second moment: ||G||^2 instead of ||xi||^2 = ||G||^2 - ||N||^2.
    "normal_in_second_moment": ("optim.py", "sample = (g_sq - n_sq).clamp_min(0.0) + tau2 * n_sq",
                                "sample = g_sq + tau2 * n_sq"),
    # Adam's bias correction of the first moment dropped from the frame step.
    "drop_bias_correction": ("optim.py", "scale = 1 / (bias1 * ((v / bias2).sqrt() + eps))",
                             "scale = 1 / ((v / bias2).sqrt() + eps)"),
}

TASKS = {
    # The grokking reproduction run: StiefelAdam with a learned logit scale, the round-2 setting.
    "grokking": {"arm": "stiefel_learned", "seed": 0, "steps": 100, "changes": {
        "lr_x1.1": {"lr": 1.1e-2}, "seed_1": {"seed": 1}, "arm_adamw": {"arm": "adamw"},
        "arm_frozen": {"arm": "frozen_learned"}}},
    # The CIFAR reproduction run: A1 at frame lr 1.0 on the tiny synthetic set (r3_mechanism's).
    "cifar": {"arm": "stiefel", "seed": 0, "steps": 30, "changes": {
        "lr_x1.1": {"lr": 1.1e-3}, "frame_lr_x1.1": {"frame_lr": 1.1}, "seed_1": {"seed": 1},
        "arm_A0": {"arm": "adamw"}}},
}


OBSERVED = {"grokking": ("train_loss", "dist_q"), "cifar": ("train_loss", "qk_step")}
"""Per task, the logged quantities compared: a loss, and one that the frame rule alone moves."""


def _child(task: str, overrides: dict) -> dict:
    """One run, in this process: the training loss (and a frame quantity) at every step."""
    from stiefel_mini.experiments.config import replace
    from stiefel_mini.experiments.records import config_dict

    if task == "grokking":
        from stiefel_mini.experiments.grokking import config as grokking_config
        from stiefel_mini.experiments.grokking import experiment as grokking_experiment

        cfg = replace(grokking_config.PLANS["long"], eval_every=1, progress=False, **overrides)
        h = grokking_experiment.run(cfg)["history"]
        return {"config": config_dict(cfg), "step": h["step"], "train_loss": h["train_loss"],
                "val_acc": h["val_acc"], "dist_q": h["dist_q"]}
    from stiefel_mini.experiments.cifar import config as cifar_config
    from stiefel_mini.experiments.cifar import experiment as cifar_experiment

    cfg = replace(cifar_config.PLANS["r3_mechanism"], log_every=1, repro_steps=overrides.pop("steps"), **overrides)
    h = cifar_experiment.tiny_set_run(cfg.run, cfg.repro_steps)
    return {"config": config_dict(cfg), "step": h["step"], "train_loss": h["train_loss"], "qk_step": h["qk_step"], "test_acc": h["test_acc"]}


def _spawn(task: str, overrides: dict, env: dict, package: Path | None) -> dict:
    """One run in a child process; ``{"error": message}`` when the run raises (a detected change)."""
    full = {**os.environ, **env, "OMP_NUM_THREADS": "1",
            "PYTHONPATH": os.pathsep.join(str(p) for p in (package, ROOT) if p)}
    out = subprocess.run([sys.executable, __file__, "--child", task, json.dumps(overrides)], env=full,
                         capture_output=True, text=True)
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def _mutated_copy(name: str, into: Path) -> Path:
    file, old, new = MUTATIONS[name]
    dst = into / name
    shutil.copytree(ROOT / "stiefel_mini", dst / "stiefel_mini")
    path = dst / "stiefel_mini" / file
    text = path.read_text()
    if text.count(old) != 1:
        raise ValueError(f"mutation {name}: {old!r} is not in {file} exactly once; update MUTATIONS")
    path.write_text(text.replace(old, new))
    return dst


def rel_diff(a: list[float], ref: list[float]) -> list[float]:
    """``|a_t - ref_t| / |ref_t|`` per step (``ref_t`` floored at 1e-12)."""
    return [abs(x - r) / max(abs(r), 1e-12) for x, r in zip(a, ref)]


def profile(task: str, windows: tuple[int, ...]) -> dict:
    spec = TASKS[task]
    base = {"arm": spec["arm"], "seed": spec["seed"], "steps": spec["steps"]}
    runs = {}
    for name, env in KERNELS.items():
        runs[f"kernel:{name}"] = _spawn(task, dict(base), env, None)
    for name, change in spec["changes"].items():
        runs[f"change:{name}"] = _spawn(task, {**base, **change}, {}, None)
    with tempfile.TemporaryDirectory() as tmp:
        for name in MUTATIONS:
            runs[f"change:{name}"] = _spawn(task, dict(base), {}, _mutated_copy(name, Path(tmp)))
    ref = runs["kernel:native"]
    table = {}
    for name, h in runs.items():
        if "error" in h:
            table[name] = {"error": h["error"]}
            continue
        table[name] = {}
        for key in OBSERVED[task]:
            d = rel_diff(h[key], ref[key])
            # Index t holds the value after t updates (grokking's index 0 is the initial model).
            first = 1 if task == "grokking" else 0
            table[name][key] = {"max_rel_diff_first": {str(k): max(d[first:first + k]) for k in windows},
                                "rel_diff_end": d[-1]}
    return {"task": task, "base": base, "windows": list(windows), "runs": runs, "table": table}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    ap.add_argument("--windows", nargs="+", type=int, default=[1, 2, 3, 5, 10, 20])
    ap.add_argument("--out", default=None, help="write the profile (every run's per-step values) here")
    ap.add_argument("--child", nargs=2, metavar=("TASK", "OVERRIDES"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(_child(args.child[0], json.loads(args.child[1]))))
        return
    from stiefel_mini.experiments.records import provenance, save_results

    result = {"provenance": provenance(), "tasks": TASKS, "kernels": KERNELS,
              "mutations": {k: list(v) for k, v in MUTATIONS.items()}, "profiles": []}
    for task in args.tasks:
        prof = profile(task, tuple(args.windows))
        result["profiles"].append(prof)
        for key in OBSERVED[task]:
            print(f"\n{task}, {key}: largest relative difference from this machine's own kernels over the"
                  " first k steps")
            print(f"{'run':28s}" + "".join(f"{'k = ' + str(k):>10s}" for k in args.windows) + f"{'end':>10s}")
            for name, row in prof["table"].items():
                if "error" in row:
                    print(f"{name:28s}  raised: {row['error'][:80]}")
                    continue
                r = row[key]
                print(f"{name:28s}" + "".join(f"{r['max_rel_diff_first'][str(k)]:10.1e}" for k in args.windows)
                      + f"{r['rel_diff_end']:10.1e}")
    if args.out:
        save_results(args.out, result)


if __name__ == "__main__":
    main()

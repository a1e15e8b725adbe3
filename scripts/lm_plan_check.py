"""The first three language-model studies before and after they became plans of one type: what the old code did.

Until commit af0ff4e each of the first three studies had modules of its own (``lm.plan`` and
``lm.config.STUDY``, ``lm.round2`` and ``lm.round2_run``, ``lm.round3``). They are now
:class:`~stiefel_mini.experiments.lm.plans.Study` instances (``lm.studies.ROUND1``-``ROUND3``) whose
arms are built by recipes (``lm.arms``). This script records what the old code did, so that the
tests can check that the new code does the same:

- ``schedules``: for each study and for every prefix of its committed runs (in file order), the
  old planner's ``ready`` points, ``remaining``, ``best``, ``better`` and ``long_best``
  (``tests/data/lm_schedules_af0ff4e.json.gz``);
- ``arms``: every old arm built by its old builder and trained a few steps at the tiny preset on
  fixed random tokens: the losses, each parameter's bytes (SHA-256) and norm, and the optimizers'
  group options (``tests/data/lm_arms_af0ff4e.json``).

``record`` takes the package as it was at af0ff4e from git (``git archive``) into a temporary folder
and runs the old code there; ``compare`` runs the new code against the two files and prints one line
per study and per arm. ``tests/experiments/lm/test_studies.py`` and ``test_arms.py`` make the same
comparisons. Usage (from the repository root; ``record`` needs the git history)::

    python scripts/lm_plan_check.py record     # rewrites the two files under tests/data/
    python scripts/lm_plan_check.py compare
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OLD = "af0ff4e"
SCHEDULES = ROOT / "tests" / "data" / f"lm_schedules_{OLD}.json.gz"
ARMS = ROOT / "tests" / "data" / f"lm_arms_{OLD}.json"
FILES = {"round1": "results/lm/study.json", "round2": "results/lm/round2.json", "round3": "results/lm/round3.json"}
STEPS = 6
"""Training steps of each arm's trace."""

_R2 = {"lr": 2e-3, "warmup_frac": 0.25, "frame_lr": None, "max_step": None, "muon_lr": None, "per_head": None}
CASES = (
    # (study, arm, recipe, point): the run settings of each old arm, off the defaults where it reads them
    ("round1", "adamw", "r1_adamw", {"lr": 4e-3, "frame_lr": None, "muon_lr": None}),
    ("round1", "frozen", "r1_frozen", {"lr": 4e-3, "frame_lr": None, "muon_lr": None}),
    ("round1", "stiefel", "r1_stiefel", {"lr": 2e-3, "frame_lr": 0.1, "muon_lr": None}),
    ("round1", "muon", "r1_muon", {"lr": 2e-3, "frame_lr": None, "muon_lr": 0.01}),
    ("round1", "muon_stiefel", "r1_muon_stiefel", {"lr": 2e-3, "frame_lr": 0.1, "muon_lr": 0.01}),
    ("round2", "adamw", "r2_adamw", _R2),
    ("round2", "adamw_qknorm", "r2_adamw_qknorm", {**_R2, "lr": 4e-3}),
    ("round2", "stiefel", "r2_stiefel", {**_R2, "frame_lr": 0.3, "max_step": 0.3}),
    ("round2", "muon", "r2_muon", {**_R2, "muon_lr": 0.01, "per_head": True}),
    ("round2", "muon", "r2_muon", {**_R2, "muon_lr": 0.01, "per_head": False}),
    ("round2", "muon_qknorm", "r2_muon_qknorm", {**_R2, "muon_lr": 0.04, "per_head": True}),
    ("round2", "stiefel_muon", "r2_stiefel_muon", {**_R2, "muon_lr": 0.01, "per_head": True, "frame_lr": 0.02}),
    ("round3", "stiefel_scale", "r3_stiefel", {**_R2, "frame_lr": 0.3, "max_step": 0.3, "scale_lr": 0.1}),
    ("round3", "stiefel_muon_scale", "r3_stiefel_muon",
     {**_R2, "muon_lr": 0.01, "per_head": True, "frame_lr": 0.02, "scale_lr": 0.3}),
)


def case_name(study: str, arm: str, point: dict) -> str:
    """``round2/muon/per_head=True``: a case's name in the arms file."""
    return f"{study}/{arm}" + (f"/per_head={point['per_head']}" if point.get("per_head") is not None else "")


def run_config(arm: str, point: dict):
    """The tiny preset's config of a run of ``arm`` at ``point``, set as the studies' runners set it."""
    from stiefel_mini.experiments.config import replace
    from stiefel_mini.experiments.lm.config import PRESETS

    settings = {k: point[k] for k in ("lr", "frame_lr", "muon_lr", "warmup_frac", "max_step") if point.get(k) is not None}
    return replace(PRESETS["tiny"], arm=arm, seed=3, steps=STEPS, progress=False, **settings)


# StiefelMuon's options added after af0ff4e, each at a value that leaves these arms' steps as they were
# (their weights are compared bit for bit), or derived from options compared here; its ``fused`` (how
# many projections one weight stacks) is now ``projections``, and ``fused`` has torch's meaning.
_LATER = ("maximize", "foreach", "differentiable", "decay_vectors", "ns_dtype", "base_lr")


def _as_recorded(g: dict) -> dict:
    """A param group's options under the names the code at af0ff4e gave them."""
    if "projections" not in g:
        return g
    g = {k: v for k, v in g.items() if k not in _LATER and k != "fused"}
    g["fused"] = g.pop("projections")
    return g


def trace(setup, cfg) -> dict:
    """``setup(cfg, 0) -> (model, optimizers)`` trained :data:`STEPS` steps on fixed random tokens, as
    :func:`~stiefel_mini.experiments.lm.experiment.run` trains (its lr schedule, clipping and step):
    ``loss`` per step, per parameter ``sha256`` of its bytes and ``norm`` after, and ``groups``: each
    optimizer's class and its groups' options (the parameters as their count)."""
    import torch

    from stiefel_mini.experiments.lm.experiment import train_step
    from stiefel_mini.experiments.lm.model import lr_factor

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model, opts = setup(cfg, 0)
        o = cfg.optimizer
        scheds = [torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, cfg.steps, o.warmup_frac,
                                                                             o.final_lr_frac)) for opt in opts]
        groups = [[type(opt).__name__] + [repr(sorted((k, len(v) if k == "params" else v)
                                                      for k, v in _as_recorded(g).items())) for g in opt.param_groups]
                  for opt in opts]
        params = [p for p in model.parameters() if p.requires_grad]
        gen = torch.Generator().manual_seed(0)
        losses = []
        for _ in range(cfg.steps):
            x = torch.randint(0, cfg.model.vocab_size, (cfg.batch_size, cfg.model.context), generator=gen)
            losses.append(train_step(model, opts, x, x.roll(-1, 1), params, o.grad_clip).item())
            for sched in scheds:
                sched.step()
        weights = {name: {"sha256": hashlib.sha256(p.detach().contiguous().numpy().tobytes()).hexdigest()[:16],
                          "norm": float(p.detach().double().norm())} for name, p in model.state_dict().items()
                   if p.is_floating_point()}
    finally:
        torch.set_num_threads(threads)
    return {"loss": losses, "weights": weights, "groups": groups}


def _old_schedules() -> dict:
    from stiefel_mini.experiments.lm.config import STUDY
    from stiefel_mini.experiments.lm.plan import plan
    from stiefel_mini.experiments.lm.round2 import ROUND2, plan2
    from stiefel_mini.experiments.lm.round3 import ROUND3, plan3

    planners = {"round1": lambda r: plan(STUDY, r), "round2": lambda r: plan2(ROUND2, r),
                "round3": lambda r: plan3(ROUND3, r)}
    return {name: [_state(planners[name](runs[:k])) for k in range(len(runs) + 1)] for name, runs in _runs().items()}


def _old_setup(study: str, arm: str, point: dict):
    if study == "round1":
        return None  # the first study's runner built every arm with run()'s default: build_model, make_optimizers
    from stiefel_mini.experiments.lm.round2_run import setup_for
    from stiefel_mini.experiments.lm.round3 import BASE3

    return setup_for({**point, "arm": BASE3.get(arm, arm)})


def _old_arms() -> dict:
    from stiefel_mini.experiments.lm.model import build_model, make_optimizers
    from stiefel_mini.experiments.records import cpu_description

    import torch

    def first_study(cfg, eot_id):
        model = build_model(cfg, eot_id)
        return model, make_optimizers(model, cfg)

    out = {}
    for study, arm, _, point in CASES:
        setup = _old_setup(study, arm, point) or first_study
        out[case_name(study, arm, point)] = trace(setup, run_config(BASE_ARM.get(arm, arm), point))
    return {"commit": OLD, "cpu": cpu_description(), "torch": torch.__version__, "cases": out}


BASE_ARM = {"stiefel_scale": "stiefel", "stiefel_muon_scale": "stiefel_muon"}
"""The arm the third study's runner set in the run's config (its round-2 arm's)."""


def _runs() -> dict[str, list[dict]]:
    return {name: json.loads((ROOT / path).read_text())["runs"] for name, path in FILES.items()}


def _state(s) -> dict:
    return {"ready": s.ready, "remaining": s.remaining, "best": s.best, "better": getattr(s, "better", {}),
            "long_best": getattr(s, "long_best", {})}


def new_schedules() -> dict:
    """The new planner's states for every prefix of each study's committed runs, as :func:`_old_schedules`."""
    from stiefel_mini.experiments.lm.plans import plan
    from stiefel_mini.experiments.lm.studies import study

    return {name: [_state(plan(study(name), runs[:k])) for k in range(len(runs) + 1)] for name, runs in _runs().items()}


def new_arms() -> dict:
    """Each case's trace with the new recipes (:func:`stiefel_mini.experiments.lm.arms.setup_for`)."""
    from stiefel_mini.experiments.lm.arms import setup_for

    return {case_name(study, arm, point): trace(setup_for(recipe, point), run_config(arm, point))
            for study, arm, recipe, point in CASES}


def load_schedules() -> dict:
    """The recorded old states (:data:`SCHEDULES`)."""
    return json.loads(gzip.decompress(SCHEDULES.read_bytes()))


def _plain(obj):
    return json.loads(json.dumps(obj))


def schedule_differences(old: list[dict], new: list[dict]) -> list[str]:
    """Per prefix whose states differ, ``"k: field"`` for each of its fields that differ."""
    if len(old) != len(new):
        return [f"{len(old)} prefixes recorded, {len(new)} now"]
    return [f"{k}: {f}" for k, (a, b) in enumerate(zip(old, _plain(new))) for f in a if a[f] != b[f]]


def compare() -> int:
    """Print one line per study and per arm case: ``same`` or what differs; 1 if anything does."""
    old_s, bad = load_schedules(), 0
    for name, states in new_schedules().items():
        diff = schedule_differences(old_s[name], states)
        bad += bool(diff)
        print(f"{name}: {len(states)} prefixes, {sum(len(s['ready']) for s in states)} ready points: "
              + ("same ready, remaining, best, better, long_best" if not diff else f"DIFFERENT at {diff[:5]}"))
    old_a = json.loads(ARMS.read_text())
    for name, got in new_arms().items():
        want = old_a["cases"][name]
        same = _plain(got) == want
        bad += not same
        print(f"{name}: " + ("bit-identical losses, weights and groups" if same else
                             f"DIFFERENT: {[k for k in want if want[k] != _plain(got)[k]]}"))
    return int(bad > 0)


def record() -> None:
    """Run the old code of commit :data:`OLD` (from git) and write :data:`SCHEDULES` and :data:`ARMS`."""
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "archive", OLD, "stiefel_mini"], cwd=ROOT, check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        env = {**os.environ, "PYTHONPATH": tmp, "OMP_NUM_THREADS": "1"}
        subprocess.run([sys.executable, __file__, "_old"], cwd=ROOT, env=env, check=True)


def _record_old() -> None:
    import stiefel_mini

    if Path(stiefel_mini.__file__).resolve().parents[1] == ROOT:
        raise SystemExit("_old runs the old package (record puts it on PYTHONPATH), not this checkout's")
    SCHEDULES.write_bytes(gzip.compress(json.dumps(_old_schedules(), sort_keys=True).encode(), mtime=0))
    ARMS.write_text(json.dumps(_old_arms(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {SCHEDULES.relative_to(ROOT)} and {ARMS.relative_to(ROOT)} with the code of {OLD}")


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "_old":
        _record_old()
    elif cmd in ("record", "compare"):
        sys.path.insert(0, str(ROOT))  # this checkout's package, whatever the environment installed
        record() if cmd == "record" else sys.exit(compare())
    else:
        sys.exit("usage: python scripts/lm_plan_check.py record | compare")

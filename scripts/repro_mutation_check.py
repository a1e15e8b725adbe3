"""Check that the reproduction tests catch real changes and pass under other CPU kernels.

For each real change (a text change to a copy of the repository: the lr x 1.1, every stream's seed
moved by one, StiefelAdam's arms trained by AdamW + polar projection instead, and the frame-rule
terms of ``scripts/repro_profile.py``'s ``MUTATIONS``) the reproduction tests run in that copy and must
fail; under each kernel setting of ``repro_profile.KERNELS`` the unchanged repository's must pass.

    python scripts/repro_mutation_check.py            # prints one line per change / setting

Takes about 1.5 minutes per line on one core.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from repro_profile import KERNELS, MUTATIONS, ROOT  # noqa: E402

TESTS = ["tests/experiments/grokking/test_experiment.py", "tests/experiments/cifar/test_experiment.py"]
SELECT = "reproduc"

CHANGES = {
    "lr_x1.1": ("experiments/arms.py", "    frame_lr = lr if frame_lr is None else frame_lr\n",
                "    lr = lr * 1.1\n    frame_lr = lr if frame_lr is None else frame_lr\n"),
    "seed_plus_1": ("experiments/runtime.py", 'f"{int(seed)}/{name}"', 'f"{int(seed) + 1}/{name}"'),
    "stiefel_arms_as_adamw_polar": ("experiments/arms.py", 'Arm("stiefel", "stiefel", "A1"',
                                    'Arm("stiefel", "adamw_polar", "A1"'),
    **MUTATIONS,
}


def _pytest(cwd: Path, env: dict) -> tuple[bool, str]:
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS, "-k", SELECT],
                         cwd=cwd, env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(cwd), **env},
                         capture_output=True, text=True)
    return out.returncode == 0, out.stdout.strip().splitlines()[-1]


def main() -> None:
    failures = []
    for name, env in KERNELS.items():
        ok, summary = _pytest(ROOT, env)
        print(f"kernel {name:28s} {'pass' if ok else 'FAIL'}: {summary}", flush=True)
        failures += [] if ok else [name]
    with tempfile.TemporaryDirectory() as tmp:
        for name, (file, old, new) in CHANGES.items():
            copy = Path(tmp) / name
            shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(".git", ".venv", "node_modules", "_build"))
            path = copy / "stiefel_mini" / file
            text = path.read_text()
            if text.count(old) != 1:
                raise ValueError(f"change {name}: {old!r} is not in {file} exactly once")
            path.write_text(text.replace(old, new))
            ok, summary = _pytest(copy, {})
            print(f"change {name:28s} {'caught' if not ok else 'MISSED'}: {summary}", flush=True)
            failures += [name] if ok else []
            shutil.rmtree(copy)
    if failures:
        raise SystemExit(f"not as expected: {failures}")


if __name__ == "__main__":
    main()

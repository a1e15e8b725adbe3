"""Bit-for-bit check of StiefelAdam and its pure frame rule over a grid of settings.

    python scripts/step_check.py record OUT.pt    # run the grid, save every frame and state tensor
    python scripts/step_check.py compare OUT.pt   # run it again, torch.equal against OUT.pt

A change to the optimizer's code that is meant to leave its arithmetic alone (a refactor) must pass
``compare`` against a file recorded before the change: committed results were computed with the
old code, and they stay valid only if every step gives the same bits.

Each setting runs ``StiefelAdam`` for 30 steps on frames of several shapes (a batch of frames, a
wide frame, a single tall frame, a batch of batches, and a second frame of the batch's shape whose
gradient starts late, so that one bucket holds two step counts) beside an AdamW parameter, with
deterministic gradients whose scale changes from step to step; every fourth setting reloads its
state dict into a fresh optimizer halfway. The pure rule ``stiefel_adam_frame_update`` runs the
same 30 steps on a batch of frames. Recorded after every step: the frames; after the last: every
state tensor. A setting whose step raises records the message instead, which must also repeat.
The grid: every second moment x projector x retraction x trust cap (0.1 or none) x weight decay
(0 or 0.1) x float32 / float64, plus bfloat16 frames for the default projector and retraction.
Everything runs on one CPU thread, so that no reduction depends on the thread count.
"""

from __future__ import annotations

import itertools
import sys

import torch

from stiefel_mini import StiefelAdam, random_stiefel, stiefel_adam_frame_update

STEPS = 30
SHAPES = [(4, 12, 5), (3, 8), (10, 3), (2, 2, 6, 4), (4, 12, 5)]  # the last starts at step 4
LATE = {4: 4}  # parameter index -> first step with a gradient


def settings() -> list[dict]:
    grid = []
    for mode, proj, retr, cap, wd, dtype in itertools.product(
        ("frame", "column", "element"),
        ("euclidean", "canonical", "none"),
        ("polar", "qr", "cayley", "exp"),
        (0.1, None),
        (0.0, 0.1),
        (torch.float32, torch.float64),
    ):
        if proj == "none" and retr == "exp":
            continue  # refused at construction
        grid.append(dict(second_moment=mode, projector=proj, retraction=retr, max_step=cap, weight_decay=wd,
                         dtype=dtype))
    for mode, cap in itertools.product(("frame", "column", "element"), (0.1, None)):
        grid.append(dict(second_moment=mode, projector="euclidean", retraction="polar", max_step=cap,
                         weight_decay=0.0, dtype=torch.bfloat16))
    return grid


def name(s: dict) -> str:
    return (f"{s['second_moment']}/{s['projector']}/{s['retraction']}/cap={s['max_step']}/"
            f"wd={s['weight_decay']}/{str(s['dtype']).removeprefix('torch.')}")


def gradient(W: torch.Tensor, target: torch.Tensor, seed: int, step: int) -> torch.Tensor:
    """A loss-like gradient ``scale * (W - target + noise)`` whose scale changes with the step."""
    g = torch.Generator().manual_seed(1000 * seed + step)
    noise = torch.randn(W.shape, generator=g, dtype=torch.float64)
    scale = 10.0 ** ((step % 7) - 3)
    return (scale * (W.double() - target + 0.3 * noise)).to(W.dtype)


def run_optimizer(index: int, s: dict) -> dict:
    dtype = s["dtype"]
    frames = [torch.nn.Parameter(random_stiefel(*shape, generator=torch.Generator().manual_seed(index * 31 + j),
                                                dtype=torch.float64).to(dtype))
              for j, shape in enumerate(SHAPES)]
    targets = [torch.randn(f.shape, generator=torch.Generator().manual_seed(7 + j), dtype=torch.float64)
               for j, f in enumerate(frames)]
    other = torch.nn.Parameter(torch.randn(6, 5, generator=torch.Generator().manual_seed(5), dtype=torch.float32))
    options = {k: s[k] for k in ("second_moment", "projector", "retraction", "max_step")}

    def make():
        return StiefelAdam([{"params": frames, "stiefel": True, **options}, {"params": [other]}],
                           lr=0.05, weight_decay=s["weight_decay"])

    opt = make()
    out: dict = {"frames": [], "error": None}
    for t in range(1, STEPS + 1):
        for j, f in enumerate(frames):
            f.grad = gradient(f.detach(), targets[j], index * 11 + j, t) if t >= LATE.get(j, 1) else None
        other.grad = gradient(other.detach(), torch.zeros(6, 5, dtype=torch.float64), index, t)
        if index % 4 == 0 and t == STEPS // 2:
            saved = opt.state_dict()
            opt = make()
            opt.load_state_dict(saved)
        try:
            opt.step()
        except ValueError as e:
            out["error"] = f"step {t}: {e}"
            break
        out["frames"].append([f.detach().clone() for f in frames] + [other.detach().clone()])
    out["state"] = [{k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in opt.state[p].items()}
                    for p in frames + [other]]
    return out


def run_function(index: int, s: dict) -> dict:
    dtype = s["dtype"]
    W = random_stiefel(6, 9, 4, generator=torch.Generator().manual_seed(index), dtype=torch.float64).to(dtype)
    target = torch.randn(W.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    compute = torch.promote_types(dtype, torch.float32)
    m = torch.zeros(W.shape, dtype=compute)
    v_shape = {"frame": (6, 1, 1), "column": (6, 1, 4), "element": (6, 9, 4)}[s["second_moment"]]
    v = torch.zeros(v_shape, dtype=torch.float64)
    options = {k: s[k] for k in ("second_moment", "projector", "retraction", "max_step")}
    out: dict = {"frames": [], "moments": []}
    for t in range(1, STEPS + 1):
        W, m, v = stiefel_adam_frame_update(W, gradient(W, target, index, t), m, v, t, lr=0.05, **options)
        out["frames"].append(W.clone())
        out["moments"].append((m.clone(), v.clone()))
    return out


def run_all() -> dict[str, dict]:
    torch.set_num_threads(1)
    results = {}
    for i, s in enumerate(settings()):
        results[name(s)] = {"optimizer": run_optimizer(i, s), "function": run_function(i, s)}
    return results


def _differences(a, b, where: str) -> list[str]:
    """Where two recorded structures differ: tensors by dtype, shape and torch.equal, others by ==."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return [f"{where}: tensor vs {type(b).__name__}"]
        if a.dtype != b.dtype or a.shape != b.shape:
            return [f"{where}: {a.dtype}{tuple(a.shape)} vs {b.dtype}{tuple(b.shape)}"]
        # torch.equal treats NaN as unequal to itself; a refused frame is NaN in both runs.
        same = torch.equal(a, b) or (torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num()))
        return [] if same else [f"{where}: max |diff| {(a.double() - b.double()).abs().max().item():.3e}"]
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return [f"{where}: keys {sorted(a)} vs {sorted(b)}"]
        return [d for k in a for d in _differences(a[k], b[k], f"{where}.{k}")]
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return [f"{where}: length {len(a)} vs {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _differences(x, y, f"{where}[{i}]")]
    return [] if a == b else [f"{where}: {a!r} vs {b!r}"]


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("record", "compare"):
        print(__doc__)
        return 2
    command, path = argv
    results = run_all()
    if command == "record":
        torch.save(results, path)
        print(f"recorded {len(results)} settings x {STEPS} steps to {path}")
        return 0
    baseline = torch.load(path, weights_only=False)
    if baseline.keys() != results.keys():
        print(f"the grid changed: {len(baseline)} settings recorded, {len(results)} now")
        return 1
    failed = 0
    for key, rec in results.items():
        diffs = _differences(baseline[key], rec, "")
        raised = rec["optimizer"]["error"]
        note = f" (raises as recorded: {raised[:60]})" if raised else ""
        print(f"{'equal' if not diffs else 'DIFFERS'}  {key}{note}" + (f"  {diffs[:3]}" if diffs else ""))
        failed += bool(diffs)
    print(f"{len(results) - failed} of {len(results)} settings x {STEPS} steps bitwise equal")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""StiefelAdam under FSDP2 (``fully_shard``): 2 CPU processes on the gloo backend.

FSDP2 shards every parameter on dim 0, so frames stored ``(n_heads, d_model, d_head)`` are split
between whole frames and the frame rule runs on each rank's shard. The model here has a 4- or
3-head block (2 + 2 or 2 + 1 heads per rank), wide frames ``(2, 6, 12)`` from the drop-in
``StiefelMultiheadAttention`` (1 + 1) and a 1-head block (rank 1 holds none of its heads).

One spawn of 2 ranks runs every distributed scenario and writes its results; the parent process
runs the unsharded reference (the same model on the whole batch), writes a 1-rank checkpoint for
the 1 -> 2 reshard, and resumes the 2-rank checkpoint at 1 rank. The tests then compare.

Tolerance of sharded vs unsharded: each rank averages the loss over its half of the batch and
FSDP averages the halves' gradients, so gradients differ from the unsharded ones in the last bits
of float32 (about 1e-7 relative). Adam divides each entry by its own root mean square, which
passes a relative difference on to the step unchanged, so the parameters (of order 1) differ by a
few float32 spacings (1.2e-7) after 6 steps: 1.2e-7 with 4 heads and 6e-7 with 3 were measured.
``ATOL`` = 1e-5 leaves room for other summation orders and is three orders of magnitude below one
step (``lr`` = 1e-2, and 5e-2 for frames), so a wrong shard (a frame updated from another frame's
gradient, a missed step, a dropped weight decay) fails it. A parameter whose exact gradient is zero
would break this (Adam scales rounding noise up to a step of size ``lr``), so the model has none.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from stiefel_mini.groups import frame_parameters, param_groups
from stiefel_mini.experiments import fsdp_example
from stiefel_mini.geometry import orthogonality_error
from stiefel_mini.mha import StiefelMultiheadAttention
from stiefel_mini.optim import StiefelAdam
from stiefel_mini.vit import Block
from tests.rendezvous import rendezvous

pytestmark = [
    pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                       reason="torch.distributed with gloo is not available"),
    # The unsharded runs read and write checkpoints in one process, as intended.
    pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning"),
]

WORLD_SIZE, STEPS, RESUME_AT, BATCH = 2, 6, 3, 8
HEADS = (4, 3)
ATOL = 1e-5


class _Net(nn.Module):
    """Tokens ``(B, 5, 6)`` -> logits ``(B, 3)``: an n-head block, a drop-in MHA, a 1-head block."""

    def __init__(self, n_heads: int) -> None:
        super().__init__()
        self.embed = nn.Linear(6, 12)
        self.block = Block(12, n_heads, 4, 2, stiefel=True)  # frames (n_heads, 12, 4)
        # No biases: the key bias has no gradient (softmax ignores a shift of a query's logits), and
        # Adam would turn the rounding noise in that zero into steps of size lr.
        self.mha = StiefelMultiheadAttention(12, 2, bias=False, batch_first=True)  # frames (2, 6, 12), wide
        self.single = Block(12, 1, 4, 2, stiefel=True)  # frames (1, 12, 4)
        self.head = nn.Linear(12, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.block(self.embed(x))
        x = x + self.mha(x, x, x, need_weights=False)[0]
        return self.head(self.single(x).mean(dim=1))


def _model(n_heads: int) -> _Net:
    torch.manual_seed(0)
    return _Net(n_heads)


def _optimizer(model: nn.Module, **kwargs) -> StiefelAdam:
    return StiefelAdam(param_groups(model, weight_decay=0.05, frame_options={"lr": 0.05}), lr=1e-2, **kwargs)


def _batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randn(BATCH, 5, 6, generator=g), torch.randint(0, 3, (BATCH,), generator=g)


def _train(model, opt, steps: range, rank: int = 0, world: int = 1) -> None:
    """Steps on the global batch of each step, this rank's rows of it."""
    rows = slice(rank * BATCH // world, (rank + 1) * BATCH // world)
    for step in steps:
        x, y = _batch(step)
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(x[rows]), y[rows]).backward()
        opt.step()


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if hasattr(t, "full_tensor") else t.detach().clone()


def _snapshot(model, opt) -> dict[str, torch.Tensor]:
    """Every parameter, and the frames' moments, as full tensors (a collective when sharded)."""
    out = {name: _full(p) for name, p in model.named_parameters()}
    names = {id(p): name for name, p in model.named_parameters()}
    for p in frame_parameters(model):
        for key in ("exp_avg", "exp_avg_sq"):
            out[f"{names[id(p)]}.{key}"] = _full(opt.state[p][key])
    return out


def _save(model, opt, path: str) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_sd, optim_sd = get_state_dict(model, opt)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=path)


def _load(model, opt, path: str) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_sd, optim_sd = get_state_dict(model, opt)
    state = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id=path)
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])


def _sharded(n_heads: int, placement_fn=None) -> _Net:
    from torch.distributed.fsdp import fully_shard

    model = _model(n_heads)
    for module in (model.block, model.mha, model.single):
        fully_shard(module, shard_placement_fn=placement_fn)
    fully_shard(model, shard_placement_fn=placement_fn)
    return model


def _worker(rank: int, init: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    # A rank left waiting in a collective fails after the timeout instead of hanging the test.
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=WORLD_SIZE, timeout=timedelta(seconds=60))
    try:
        out: dict = {}
        for n_heads in HEADS:
            model = _sharded(n_heads)
            opt = _optimizer(model)
            out[f"local_shapes_{n_heads}"] = [tuple(p.to_local().shape) for p in frame_parameters(model)]
            _train(model, opt, range(RESUME_AT), rank, WORLD_SIZE)
            _save(model, opt, os.path.join(out_dir, f"ckpt2_h{n_heads}"))
            _train(model, opt, range(RESUME_AT, STEPS), rank, WORLD_SIZE)
            out[f"final_{n_heads}"] = _snapshot(model, opt)

            resumed = _sharded(n_heads)
            opt = _optimizer(resumed)
            _load(resumed, opt, os.path.join(out_dir, f"ckpt2_h{n_heads}"))
            _train(resumed, opt, range(RESUME_AT, STEPS), rank, WORLD_SIZE)
            out[f"resumed_{n_heads}"] = _snapshot(resumed, opt)

        # A checkpoint the parent wrote at 1 rank, loaded at 2.
        model = _sharded(4)
        opt = _optimizer(model)
        _load(model, opt, os.path.join(out_dir, "ckpt1_h4"))
        _train(model, opt, range(RESUME_AT, STEPS), rank, WORLD_SIZE)
        out["from_1_rank"] = _snapshot(model, opt)

        # The AdamW groups against torch.optim.AdamW on the same DTensors, foreach off and on.
        for foreach in (False, True):
            a, b = _sharded(4), _sharded(4)
            opt_a = _optimizer(a, foreach=foreach)
            groups_b = param_groups(b, weight_decay=0.05, frame_options={"lr": 0.05})
            opt_b = StiefelAdam([g for g in groups_b if g.get("stiefel")], lr=1e-2)
            torch_b = torch.optim.AdamW([g for g in groups_b if not g.get("stiefel")], lr=1e-2, foreach=foreach)
            for step in range(3):
                x, y = _batch(step)
                rows = slice(rank * BATCH // WORLD_SIZE, (rank + 1) * BATCH // WORLD_SIZE)
                for model, opts in ((a, [opt_a]), (b, [opt_b, torch_b])):
                    for o in opts:
                        o.zero_grad(set_to_none=True)
                    nn.functional.cross_entropy(model(x[rows]), y[rows]).backward()
                    for o in opts:
                        o.step()
            out[f"adamw_{foreach}"] = (
                {n: _full(p) for n, p in a.named_parameters()}, {n: _full(p) for n, p in b.named_parameters()}
            )

        # A placement that splits d_model.
        from torch.distributed.tensor import Shard

        model = _sharded(4, placement_fn=lambda p: Shard(1) if p.dim() == 3 else None)
        try:
            _optimizer(model)
        except ValueError as e:
            out["placement_error"] = str(e)

        # An unsharded optimizer's state_dict loaded as it is into the sharded optimizer.
        plain = _model(4)
        plain_opt = _optimizer(plain)
        _train(plain, plain_opt, range(1))
        model = _sharded(4)
        opt = _optimizer(model)
        _train(model, opt, range(1), rank, WORLD_SIZE)
        try:
            opt.load_state_dict(plain_opt.state_dict())
        except ValueError as e:
            out["load_plain_error"] = str(e)
        # ... and through set_state_dict, which shards it (a copy: this process still trains plain's).
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict

        full = StateDictOptions(full_state_dict=True)
        model_sd, optim_sd = copy.deepcopy(get_state_dict(plain, plain_opt, options=full))
        set_state_dict(model, opt, model_state_dict=model_sd, optim_state_dict=optim_sd, options=full)
        _train(plain, plain_opt, range(1, 3))
        _train(model, opt, range(1, 3), rank, WORLD_SIZE)
        out["full_state_dict_diff"] = _max_diff(_snapshot(model, opt), _snapshot(plain, plain_opt))

        # A frame off the manifold in rank 1's shard only, at the first step.
        model = _sharded(4)
        opt = _optimizer(model)
        if rank == 1:
            with torch.no_grad():
                model.block.attn.w_k.to_local()[0].mul_(1.1)
        try:
            _train(model, opt, range(1), rank, WORLD_SIZE)
        except ValueError as e:
            out["off_manifold_error"] = str(e)

        # A non-finite gradient in rank 1's shard only.
        model = _sharded(4)
        opt = _optimizer(model)
        _train(model, opt, range(1), rank, WORLD_SIZE)
        x, y = _batch(1)
        rows = slice(rank * BATCH // WORLD_SIZE, (rank + 1) * BATCH // WORLD_SIZE)
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(x[rows]), y[rows]).backward()
        if rank == 1:
            model.block.attn.w_q.grad.to_local()[0, 0, 0] = float("nan")
        before = _snapshot(model, opt)
        try:
            opt.step()
        except ValueError as e:
            out["nan_error"] = str(e)
        after = _snapshot(model, opt)
        out["nan_unchanged"] = all(torch.equal(before[k], after[k]) for k in before)
        flag = torch.ones(1)
        dist.all_reduce(flag)  # every rank is still in step with the others
        out["collective_after_error"] = flag.item()

        # The example's command line, in this process group; the parent resumes it at 1 rank.
        out["example"] = fsdp_example.main(["--steps", "3", "--save", os.path.join(out_dir, "example")])
        torch.save(out, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The unsharded reference, the 2-rank runs and the 2 -> 1 reshard, run once for all tests."""
    out_dir = str(tmp_path_factory.mktemp("fsdp"))
    reference = {}
    for n_heads in HEADS:
        model = _model(n_heads)
        opt = _optimizer(model)
        _train(model, opt, range(RESUME_AT))
        if n_heads == 4:
            _save(model, opt, os.path.join(out_dir, "ckpt1_h4"))
        _train(model, opt, range(RESUME_AT, STEPS))
        reference[n_heads] = _snapshot(model, opt)
    mp.spawn(_worker, args=(rendezvous(out_dir), out_dir), nprocs=WORLD_SIZE, join=True)
    ranks = [torch.load(os.path.join(out_dir, f"rank{r}.pt"), weights_only=False) for r in range(WORLD_SIZE)]
    model = _model(4)
    opt = _optimizer(model)
    _load(model, opt, os.path.join(out_dir, "ckpt2_h4"))
    _train(model, opt, range(RESUME_AT, STEPS))
    example = fsdp_example.main(["--steps", "5", "--resume", os.path.join(out_dir, "example")])
    unsharded = fsdp_example.main(["--steps", "5"])
    return {"reference": reference, "ranks": ranks, "from_2_ranks": _snapshot(model, opt), "example": example,
            "example_unsharded": unsharded}


def _max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max((a[k].double() - b[k].double()).abs().max().item() for k in a)


@pytest.mark.parametrize("n_heads", HEADS)
def test_sharded_training_equals_unsharded_with_frames_on_the_manifold(runs, n_heads):
    sharded, reference = runs["ranks"][0][f"final_{n_heads}"], runs["reference"][n_heads]
    assert runs["ranks"][1][f"final_{n_heads}"].keys() == sharded.keys()
    # Whole frames per rank, unevenly split, and a rank with none of the 1-head block's heads.
    shapes = [r[f"local_shapes_{n_heads}"] for r in runs["ranks"]]
    assert shapes[0][:2] == [(2, 12, 4)] * 2 and shapes[1][:2] == [(n_heads - 2, 12, 4)] * 2
    assert shapes[0][2:4] == shapes[1][2:4] == [(1, 6, 12)] * 2
    assert shapes[0][4:] == [(1, 12, 4)] * 2 and shapes[1][4:] == [(0, 12, 4)] * 2
    diff = _max_diff(sharded, reference)
    initial = dict(_model(n_heads).named_parameters())
    moved = min((sharded[k] - initial[k].detach()).abs().max().item() for k in initial)
    print(f"{n_heads} heads: max |sharded - unsharded| = {diff:.1e} (smallest move of a parameter {moved:.1e})")
    assert diff <= ATOL
    assert moved > 100 * ATOL, "a parameter did not train"
    for name, p in initial.items():
        if p.dim() == 3:  # the frames
            err = orthogonality_error(sharded[name]).max().item()
            print(f"  {name} {tuple(p.shape)}: max ||W^T W - I||_F = {err:.1e}")
            assert err < 1e-5


def test_dcp_resume_at_the_same_world_size_is_bit_for_bit(runs):
    for rank in runs["ranks"]:
        for n_heads in HEADS:
            final, resumed = rank[f"final_{n_heads}"], rank[f"resumed_{n_heads}"]
            assert final.keys() == resumed.keys()
            assert all(torch.equal(final[k], resumed[k]) for k in final), f"{n_heads} heads: resume differs"


def test_checkpoint_reshards_between_2_ranks_and_1(runs):
    reference = runs["reference"][4]
    to_1, to_2 = _max_diff(runs["from_2_ranks"], reference), _max_diff(runs["ranks"][0]["from_1_rank"], reference)
    print(f"2 -> 1 ranks: max diff from the unsharded run {to_1:.1e}; 1 -> 2 ranks: {to_2:.1e}")
    assert to_1 <= ATOL and to_2 <= ATOL


@pytest.mark.parametrize("foreach", [False, True])
def test_adamw_groups_on_dtensors_are_torch_adamw(runs, foreach):
    ours, torchs = runs["ranks"][0][f"adamw_{foreach}"]
    assert all(torch.equal(ours[k], torchs[k]) for k in ours)


def test_a_placement_that_splits_frames_is_refused_on_every_rank(runs):
    for rank in runs["ranks"]:
        message = rank.get("placement_error", "")
        print(message)
        for part in ("parameter 0 of param group 0 ('frames')", "(4, 12, 4)", "Shard(dim=1)", "Shard(0)"):
            assert part in message


def test_an_unsharded_state_dict_is_refused_as_it_is_and_sharded_by_set_state_dict(runs):
    for rank in runs["ranks"]:
        message = rank.get("load_plain_error", "")
        assert "a plain tensor" in message and "Shard(dim=0)" in message and "set_state_dict" in message
        print(f"set_state_dict(full_state_dict=True), 2 more steps: max diff {rank['full_state_dict_diff']:.1e}")
        assert rank["full_state_dict_diff"] <= ATOL


def test_a_frame_off_the_manifold_on_one_rank_raises_on_every_rank(runs):
    for rank in runs["ranks"]:
        assert "is not on the Stiefel manifold" in rank.get("off_manifold_error", "")


def test_a_non_finite_gradient_on_one_rank_raises_on_every_rank(runs):
    r0, r1 = runs["ranks"]
    print(r0.get("nan_error"), r1.get("nan_error"), sep="\n")
    assert "another rank" in r0.get("nan_error", "")
    assert "non-finite gradient" in r1.get("nan_error", "") and "this rank's shard" in r1["nan_error"]
    assert r0["nan_unchanged"] and r1["nan_unchanged"], "a parameter or state changed"
    assert r0["collective_after_error"] == r1["collective_after_error"] == WORLD_SIZE


def test_the_example_trains_sharded_and_resumes_at_1_rank(runs):
    sharded = [r["example"] for r in runs["ranks"]]
    assert [r["world_size"] for r in sharded] == [2, 2] and len(sharded[0]["losses"]) == 3
    assert max(r["orthogonality_error"] for r in sharded) < 1e-5
    resumed, unsharded = runs["example"], runs["example_unsharded"]
    assert resumed["world_size"] == 1 and len(resumed["losses"]) == 2  # steps 3 and 4, from the checkpoint
    # The same global batches: the resumed run's last losses are the uninterrupted run's.
    assert resumed["losses"] == pytest.approx(unsharded["losses"][3:], abs=1e-5)


def test_the_benchmark_runs_under_torchrun_and_writes_its_table(tmp_path):
    root = Path(__file__).resolve().parents[1]
    out_file = tmp_path / "fsdp_step.json"
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
    run = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         str(root / "benchmarks" / "fsdp_step.py"), "--widths", "32", "--depth", "1", "--rounds", "2",
         "--steps", "1", "--threads", "1", "--out", str(out_file)],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    rows = [line for line in run.stdout.splitlines() if line.startswith("| 32 |")]
    assert [row.split("|")[3].strip() for row in rows] == ["frame rule", "StiefelAdam", "AdamW", "its check alone"] * 2
    record = json.loads(out_file.read_text())
    assert record["settings"]["world_size"] == 2 and record["provenance"]["git_commit"]
    (timing,) = record["timing"]
    assert len(timing["seconds_per_step"]) == 2
    assert all(len(t) == 2 and min(t) > 0 for rank in timing["seconds_per_step"] for t in rank.values())
    load = record["load"]  # both ranks' CPU is the benchmark's
    assert load["cores"] >= 1 and len(load["loadavg_before"]) == 3 and load["process_cores"] > 0

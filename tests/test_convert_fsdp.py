"""A converted Hugging Face Llama (grouped-query attention) under FSDP2 ``fully_shard`` on 2 gloo
ranks matches one process: the frames ``(heads, d_model, d_head)`` are sharded by head (2 of the 4
query heads and 1 of the 2 key heads per rank) and the frame rule updates each rank's own.

Tolerance as in ``tests/test_fsdp.py``: each rank averages the loss over its half of the batch and
FSDP averages the halves' gradients, which rounds differently from one mean, so parameters differ
by a few float32 spacings after a few steps (2e-7 in the frames). Adam divides each entry by its
own root mean square, which turns the rounding of near-zero MLP gradients into differences of about
1e-3 of a step (1.7e-5 was measured at ``lr`` 1e-2), hence ``lr`` 1e-3 for the AdamW groups.
``ATOL`` = 1e-5 stays two orders of magnitude below one step of either group, so a frame updated
from another head's gradient, or a missed step, fails it.
"""

from __future__ import annotations

import os
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from stiefel_mini.geometry import orthogonality_error
from stiefel_mini.groups import frame_parameters, param_groups
from stiefel_mini.convert import convert_attention
from stiefel_mini.optim import StiefelAdam
from tests.rendezvous import rendezvous

transformers = pytest.importorskip("transformers")

pytestmark = [
    pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                       reason="torch.distributed with gloo is not available"),
    pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning"),
]

WORLD_SIZE, STEPS, BATCH, T, VOCAB = 2, 4, 8, 8, 40
ATOL = 1e-5


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, vocab_size=VOCAB,
                                   max_position_embeddings=32, bos_token_id=0, eos_token_id=0, pad_token_id=0)
    model = transformers.LlamaForCausalLM(cfg)
    convert_attention(model, logit_scale="learned")
    return model


def _train(model, rank: int = 0, world: int = 1) -> None:
    opt = StiefelAdam(param_groups(model, weight_decay=0.05, frame_options={"lr": 0.05}), lr=1e-3)
    rows = slice(rank * BATCH // world, (rank + 1) * BATCH // world)
    for step in range(STEPS):
        ids = torch.randint(0, VOCAB, (BATCH, T), generator=torch.Generator().manual_seed(100 + step))
        opt.zero_grad(set_to_none=True)
        model(ids[rows], labels=ids[rows]).loss.backward()
        opt.step()


def _worker(rank: int, init: str, out_dir: str) -> None:
    from torch.distributed.fsdp import fully_shard

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=WORLD_SIZE, timeout=timedelta(seconds=60))
    try:
        model = _model()
        for layer in model.model.layers:
            fully_shard(layer)
        fully_shard(model)
        shapes = [tuple(p.to_local().shape) for p in frame_parameters(model)]
        _train(model, rank, WORLD_SIZE)
        full = {n: p.full_tensor().detach() for n, p in model.named_parameters()}
        torch.save({"shapes": shapes, "params": full}, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def test_sharded_converted_llama_matches_one_process(tmp_path):
    mp.spawn(_worker, args=(rendezvous(tmp_path), str(tmp_path)), nprocs=WORLD_SIZE, join=True)
    reference = _model()
    _train(reference)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD_SIZE)]
    # q frames (4, 32, 8) and k frames (2, 32, 8) of 2 layers, halved by head on each rank
    assert ranks[0]["shapes"] == [(2, 32, 8), (1, 32, 8)] * 2
    expected = dict(reference.named_parameters())
    for r in ranks:
        assert sorted(r["params"]) == sorted(expected)
        for name, value in r["params"].items():
            torch.testing.assert_close(value, expected[name].detach(), atol=ATOL, rtol=0)
        frames = [v for n, v in r["params"].items() if n.endswith(("q_weight", "k_weight"))]
        assert len(frames) == 4 and max(float(orthogonality_error(f).max()) for f in frames) < 1e-5
    # The frames moved: the comparison is not of two untrained models.
    untrained = dict(_model().named_parameters())
    assert all((expected[n] - untrained[n]).abs().max() > 1e-3 for n in expected if n.endswith("q_weight"))

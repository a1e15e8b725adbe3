"""Tests of stiefel_mini.experiments.runtime: the one seeding rule, threads and progress bars."""

from __future__ import annotations

import zlib

import pytest
import torch

from stiefel_mini.experiments import runtime


def test_streams_are_named_and_independent_of_order():
    assert runtime.stream_seed(3, "split") == zlib.crc32(b"3/split") & 0x7FFFFFFF
    a = torch.rand(4, generator=runtime.generator(0, "init"))
    torch.rand(100, generator=runtime.generator(0, "batches"))  # drawing another stream changes nothing
    assert torch.equal(a, torch.rand(4, generator=runtime.generator(0, "init")))
    assert not torch.equal(a, torch.rand(4, generator=runtime.generator(1, "init")))
    assert not torch.equal(a, torch.rand(4, generator=runtime.generator(0, "batches")))


def test_progress_can_be_disabled(monkeypatch):
    assert list(runtime.progress(range(3), enabled=False)) == [0, 1, 2]
    monkeypatch.setenv("STIEFEL_MINI_PROGRESS", "0")
    assert runtime.progress(range(3), enabled=True).disable


def test_set_threads(two_threads):
    runtime.set_threads(1)
    assert torch.get_num_threads() == 1
    runtime.set_threads(None)  # leaves it
    assert torch.get_num_threads() == 1


def test_subnormals_are_flushed_inside_the_block_only():
    tiny = torch.tensor([1e-39, 3.0])  # a float32 subnormal and a normal number
    torch.set_flush_denormal(False)
    assert (tiny * 1.0)[0] > 0  # torch's default: subnormals are kept
    with runtime.subnormals_flushed():
        out = tiny * 1.0
        if out[0] != 0:
            pytest.skip("this CPU cannot flush subnormals")
        assert out[1] == 3.0  # normal numbers untouched
    assert (tiny * 1.0)[0] > 0  # the previous setting is back
    torch.set_flush_denormal(True)
    with runtime.subnormals_flushed():
        pass
    assert (tiny * 1.0)[0] == 0  # ... whichever it was
    torch.set_flush_denormal(False)

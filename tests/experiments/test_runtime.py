"""Tests of stiefel_mini.experiments.runtime: the one seeding rule, threads and progress bars."""

from __future__ import annotations

import zlib

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

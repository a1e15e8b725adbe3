"""Tests of stiefel_mini.experiments.records: provenance and atomic, strict-JSON results files."""

from __future__ import annotations

import base64
import json
import lzma
import math
import socket
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from stiefel_mini.experiments import records


@dataclass
class Cfg:
    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.98)


def test_provenance_fields():
    prov = records.provenance(Cfg(), seeds=[0, 1], command=["python", "-m", "x", "--lr", "1"])
    assert prov["command"] == "python -m x --lr 1"
    assert set(prov["versions"]) == {"python", "torch", "numpy", "stiefel_mini"}
    assert prov["config"]["betas"] == [0.9, 0.98]
    assert prov["seeds"] == [0, 1]
    assert "git_commit" in prov and "git_dirty" in prov and prov["device"] == "cpu"
    assert socket.gethostname() not in json.dumps(prov)


def test_save_load_roundtrip(tmp_path):
    payload = {"a": (1, 2), "b": np.float32(0.5), "c": torch.tensor([1.0, 2.0]), "d": math.nan,
               "e": math.inf, "f": np.int64(3), "g": Cfg()}
    path = records.save_results(tmp_path / "sub" / "r.json", payload)
    assert records.load_results(path) == {"a": [1, 2], "b": 0.5, "c": [1.0, 2.0], "d": None,
                                          "e": None, "f": 3, "g": {"lr": 1e-3, "betas": [0.9, 0.98]}}
    assert not list(path.parent.glob(".*tmp*"))
    assert records.config_dict(Cfg()) == {"lr": 1e-3, "betas": [0.9, 0.98]}


def test_describe_file_covers_every_invocation_and_run():
    from stiefel_mini.experiments.records import describe_file

    inv = lambda cmd, t: {"command": cmd, "timestamp_utc": t, "git_commit": "c"}  # noqa: E731
    payload = {"provenance": inv("/a/python -m x --seeds 2", "2026-12-02T01:00:00+00:00"),
               "provenance_previous": [inv("/b/python -m x --seeds 0 1", "2026-12-01T01:00:00+00:00")],
               "runs": [{"arm": "A0", "seed": 1, "git_commit": "c", "git_dirty": False},
                        {"arm": "A1", "seed": 2, "git_commit": "d", "git_dirty": True,
                         "cpu": {"model": "M", "capability": "AVX2"}, "started_utc": "2026-12-02T01:00:05+00:00"}]}
    d = describe_file(payload)
    assert (d["runs"], d["arms"], d["seeds"], d["git_commits"], d["git_dirty"]) == (2, ["A0", "A1"], [1, 2],
                                                                                      ["c", "d"], True)
    assert d["invocations"] == 2 and d["interpreters"] == ["/a/python", "/b/python"]
    assert (d["first_utc"], d["last_utc"]) == ("2026-12-01T01:00:00+00:00", "2026-12-02T01:00:00+00:00")
    assert d["cpus"] == [{"capability": "AVX2", "model": "M"}]
    assert d["started_utc"] == ["2026-12-02T01:00:05+00:00"] * 2


def test_every_committed_cifar_file_describes_itself():
    from stiefel_mini.experiments.records import describe_file, load_results
    from stiefel_mini.resources import CHECKOUT_RESULTS

    for path in sorted((CHECKOUT_RESULTS / "cifar").glob("*.json")):
        payload = load_results(path)
        if isinstance(payload.get("runs"), list):
            assert payload["file"] == describe_file(payload), path.name

ROOT = Path(__file__).resolve().parents[2]


def test_history_is_packed_and_read_back_bit_for_bit(tmp_path):
    """float32 values (as the training loop records them), ints, None and per-head lists survive."""
    vals = torch.randn(50, generator=torch.Generator().manual_seed(0)).tolist()  # float32 values
    hist = {"step": list(range(0, 500, 10)), "val_acc": vals, "gap": [None, *vals[1:]],
            "entropy": [[v, -v] for v in vals], "tiny": [float(np.float32(1e-30)), float(np.finfo(np.float32).max), 0.0, -0.0]}
    payload = {"runs": [{"arm": "a", "history": hist, "metrics": {"x": 0.1}}], "repro": {"history": hist}}
    path = records.save_results(tmp_path / "r.json", payload)
    raw = json.loads(path.read_text())
    assert raw["runs"][0]["history"]["encoding"] == records.HISTORY_ENCODING
    assert raw["repro"]["history"]["encoding"] == records.HISTORY_ENCODING
    assert raw["runs"][0]["metrics"] == {"x": 0.1}  # everything else stays plain JSON
    back = records.load_results(path)
    assert back == jsonable_copy(payload)
    assert [math.copysign(1, v) for v in back["runs"][0]["history"]["tiny"]] == [1, 1, 1, -1]
    # deterministic: the same payload gives the same bytes; saving a loaded file changes nothing
    again = records.save_results(tmp_path / "s.json", back)
    assert again.read_bytes() == path.read_bytes()


def jsonable_copy(obj):
    return json.loads(json.dumps(records.jsonable(obj)))


def test_a_float64_history_is_stored_plain_never_rounded(tmp_path):
    hist = {"step": [0, 1], "acc": [1 / 3, 0.5]}  # 1/3 is not a float32 value
    path = records.save_results(tmp_path / "r.json", {"history": hist})
    assert json.loads(path.read_text())["history"] == hist
    assert records.load_results(path)["history"] == hist


def test_pack_history_errors_name_the_problem():
    with pytest.raises(ValueError, match="float32"):
        records.pack_history({"x": [1e300]})
    with pytest.raises(ValueError, match="encoding"):
        records.unpack_history({"encoding": "gzip", "data": ""})


def test_pack_history_spells_floats_short():
    packed = records.pack_history({"v": [float(np.float32(6.676219463348389))]})
    assert lzma.decompress(base64.b64decode(packed["data"])) == b'{"v":[6.6762195]}'


def _packed_histories(obj):
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == "history" and isinstance(v, dict) and "encoding" in v:
                yield v
            else:
                yield from _packed_histories(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _packed_histories(v)


def test_every_committed_history_reads_as_a_float32_parse_of_each_spelling_would():
    n = 0
    for path in sorted((ROOT / "results").rglob("*.json")):
        for packed in _packed_histories(json.loads(path.read_text())):
            text = lzma.decompress(base64.b64decode(packed["data"]))
            direct = json.loads(text, parse_float=lambda s: float(np.float32(s)))
            assert records.unpack_history(packed) == direct, path.name
            n += 1
    assert n >= 100


def test_a_file_read_again_is_a_fresh_copy_and_a_rewritten_one_is_read_anew(tmp_path):
    path = tmp_path / "r.json"
    records.save_results(path, {"runs": [{"history": {"loss": [1.5, 0.25]}}]})
    first = records.load_results(path)
    first["runs"][0]["history"]["loss"].append(9.0)  # a caller's change stays its own
    again = records.load_results(path)
    assert again == {"runs": [{"history": {"loss": [1.5, 0.25]}}]} and again is not first
    records.save_results(path, {"runs": [{"history": {"loss": [0.5]}}]})
    assert records.load_results(path)["runs"][0]["history"]["loss"] == [0.5]


@pytest.mark.parametrize("path", sorted((ROOT / "results").rglob("*.json")), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_committed_results_file_is_at_most_2_mb(path):
    assert path.stat().st_size <= 2_000_000, f"{path.name}: {path.stat().st_size:,} bytes; store histories packed"

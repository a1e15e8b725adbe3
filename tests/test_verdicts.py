"""The deprecated ``stiefel_mini.verdicts`` forwards to the evidence layer and says so."""

from __future__ import annotations

import pytest

from stiefel_mini import evidence, verdicts


def test_the_old_names_forward_to_the_evidence_layer_with_a_warning():
    with pytest.warns(DeprecationWarning, match="evidence.verdicts"):
        rows = verdicts.claim_verdicts()
    assert [r["verdict"] for r in rows] == [v["verdict"] for v in evidence.verdicts()]
    with pytest.warns(DeprecationWarning, match="summary_html"):
        assert verdicts.verdict_table_html(rows) == evidence.summary_html(rows)
    with pytest.warns(DeprecationWarning, match="box_html"):
        assert verdicts.verdict_box_html(rows, "cifar") == evidence.box_html(rows, "cifar")

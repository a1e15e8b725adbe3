"""The intro's one-glance figure (:mod:`stiefel_mini.forest`) on the committed results: a panel per
unit and a row per primary, the language model's panel with each Stiefel arm in both configurations,
names for every arm, and text that a phone shows at a readable size in the narrow variant."""

import re

import matplotlib
import pytest

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from stiefel_mini import evidence, forest, plots  # noqa: E402


@pytest.fixture(scope="module")
def verdicts():
    return evidence.verdicts(), evidence.questions(untested=False)


def _rows(vs):
    return [r for v in vs for r in v["primary"] if r["n"] and (r.get("ratio") or r["mean"] is not None)]


@pytest.mark.parametrize("narrow", [False, True])
def test_forest_has_a_panel_per_unit_and_a_row_per_primary_and_one_per_language_model_configuration(verdicts, narrow):
    vs, qs = verdicts
    lm = forest.language_model_rows(qs)
    fig = forest.forest(vs, lm, narrow=narrow)
    units = {("x" if r.get("ratio") else r["unit"]) for r in _rows(vs)} | {"bpb"}
    assert len(fig.axes) == len(units) and fig.axes[-1].get_xlabel() == forest.UNIT_TITLES["bpb"]
    if narrow:  # labels above the rows, none beside them
        labels = [t.get_text() for ax in fig.axes for t in ax.texts]
        assert all(not ax.get_yticks().size for ax in fig.axes)
    else:
        labels = [t.get_text() for ax in fig.axes for t in ax.get_yticklabels()]
    assert len(labels) == len(_rows(vs)) + len(lm)
    # legible: wide, scaled to the column (about 700 px); narrow, on a phone's column (about 360 px)
    px = forest.NARROW_FONT_PT - 1 if narrow else forest.FOREST_FONT_PT - 1
    shown = (360 if narrow else 700) / (fig.get_figwidth() * 96)
    assert px * 96 / 72 * min(shown, 1.0) >= 9.0
    assert fig.get_figwidth() == (plots.NARROW_WIDTH_IN if narrow else 6.2)
    plt.close(fig)


def test_the_forest_names_every_arm_and_shows_no_code(verdicts):
    vs, qs = verdicts
    fig = forest.forest(vs, forest.language_model_rows(qs))
    labels = [t.get_text() for ax in fig.axes for t in ax.get_yticklabels()]
    plt.close(fig)
    assert labels and not [lab for lab in labels if re.search(r"\bA\d\b|stiefel_|_learned", lab)], labels
    assert any("vs element-wise moment" in lab for lab in labels) and any("StiefelAdam − AdamW" in lab for lab in labels)
    lm = [lab for lab in labels if "scale" in lab]
    assert len(lm) == 4 and all(lab.startswith(("StiefelAdam, ", "StiefelMuon, ")) for lab in lm), lm


def test_the_language_model_rows_put_each_arms_best_configuration_first(verdicts):
    from stiefel_mini.evidence.cards import _rank

    _, qs = verdicts
    rows = forest.language_model_rows(qs)
    for arm in ("StiefelAdam", "StiefelMuon"):
        mine = [r for label, r in rows if label.startswith(arm)]
        assert len(mine) == 2 and _rank(mine[0]) <= _rank(mine[1])

"""The experiment chapters' figures of a study's runs: what they draw, in each optimizer's colour."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.colors import to_hex  # noqa: E402

from stiefel_mini import study_figures  # noqa: E402
from stiefel_mini.plots import optimizer_color  # noqa: E402


def _hist(shift):
    steps = [0, 500, 1000, 5000, 12000, 20000]
    return {"history": {"step": steps, "train_acc": [0, 0.5, 1, 1, 1, 1], "val_acc": [0, 0, 0, 0.2, 0.96 - shift, 1],
                        "train_loss": [5, 1, 0.1, 0.05, 0.01, 0.01], "val_loss": [5, 8, 9, 6, 0.5, 0.1]}}


def test_peer_curve_figure_draws_four_lines_per_run_and_every_phase():
    from stiefel_mini.experiments.grokking.peer_curve import NANDA_PHASES

    runs = {"adamw": {0: _hist(0), 1: _hist(0.1)}, "stiefel_learned": {0: _hist(0.2)}}
    fig, axes = study_figures.peer_curve_figure(runs, NANDA_PHASES)
    n_runs = 3
    assert len(axes[0].lines) == 2 * n_runs + len(NANDA_PHASES) + 2  # test, train per run; phase ends; legend keys
    assert len(axes[1].lines) == 2 * n_runs + len(NANDA_PHASES)
    assert [t.get_text() for t in axes[0].texts] == [name for name, _, _ in NANDA_PHASES]
    colours = {line.get_color() for line in axes[1].lines[len(NANDA_PHASES):]}
    assert colours == {optimizer_color("adamw"), optimizer_color("stiefel_learned")}
    plt.close(fig)


def test_the_narrow_variants_are_phone_wide():
    import pytest

    from stiefel_mini.experiments.grokking.one_run import one_run_gaps
    from stiefel_mini.experiments.grokking.peer_curve import NANDA_PHASES
    from stiefel_mini.plots import COLUMN_WIDTH_IN, NARROW_WIDTH_IN

    res = one_run_gaps({s: _hist(0)["history"] for s in range(3)}, {s: _hist(0.2)["history"] for s in range(3)},
                       step=12000)
    for narrow, width in ((False, COLUMN_WIDTH_IN), (True, NARROW_WIDTH_IN)):
        for fig, _ in (study_figures.one_run_figure(res, ("AdamW", "StiefelAdam"), narrow=narrow),
                       study_figures.peer_curve_figure({"adamw": {0: _hist(0)}}, NANDA_PHASES, narrow=narrow)):
            assert fig.get_figwidth() == pytest.approx(width)
            plt.close(fig)


def test_one_run_figure_shows_every_gap_and_every_dip():
    from stiefel_mini.experiments.grokking.one_run import one_run_gaps

    base = {s: _hist(0)["history"] for s in range(3)}
    arm = {s: _hist(0.5 * s)["history"] for s in range(3)}
    res = one_run_gaps(base, arm, step=12000)
    fig, (ax_gap, ax_dip) = study_figures.one_run_figure(res, ("AdamW", "StiefelAdam"))
    assert [len(c.get_offsets()) for c in ax_gap.collections] == [3, 6]
    assert [len(c.get_offsets()) for c in ax_dip.collections] == [3, 3]
    assert [to_hex(c.get_facecolor()[0]) for c in ax_dip.collections] == [optimizer_color("A1"), optimizer_color("A0")]
    plt.close(fig)


def _band(values):
    return {"step": [0, 20, 40], "median": values, "q25": [v - 0.1 for v in values], "q75": [v + 0.1 for v in values]}


def test_temperature_figure_dashes_the_fixed_scale_and_colours_each_optimizer():
    import pytest

    from stiefel_mini.plots import NARROW_WIDTH_IN

    curves = [{"arm": "stiefel", "label": "StiefelAdam, fixed scale", "fixed": True,
               "entropy": _band([1.1, 1.1, 1.09]), "val_acc": _band([0.0, 0.5, 0.97])},
              {"arm": "stiefel_learned", "label": "StiefelAdam, learned scale", "fixed": False,
               "entropy": _band([1.1, 0.4, 0.3]), "val_acc": _band([0.0, 0.1, 0.2])},
              {"arm": "adamw", "label": "AdamW", "fixed": False,
               "entropy": _band([1.1, 0.6, 0.5]), "val_acc": _band([0.0, 0.3, 0.9])}]
    for narrow in (False, True):
        fig, (ent, acc) = study_figures.temperature_figure(curves, uniform=1.0986, narrow=narrow)
        lines = [line for line in ent.get_lines() if line.get_label() in {c["label"] for c in curves}]
        assert [line.get_linestyle() for line in lines] == ["--", "-", "-"]
        assert [line.get_color() for line in lines] == [optimizer_color(c["arm"]) for c in curves]
        assert list(acc.get_lines()[1].get_ydata()) == [0.0, 0.1, 0.2]
        assert ent.get_lines()[-1].get_ydata()[0] == pytest.approx(1.0986)  # uniform attention
        assert fig.get_figwidth() == pytest.approx(NARROW_WIDTH_IN if narrow else 6.8)
        plt.close(fig)

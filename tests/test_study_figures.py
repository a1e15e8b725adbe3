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

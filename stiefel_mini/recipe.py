"""The settings the studies chose, read from their results files: the book's "If you try it" card.

Each study tuned its Stiefel arm before it compared it: the language-model studies swept the frame lr,
the trust cap, the lr of the other weights, the warm-up and the learned logit scale's own lr
(:func:`stiefel_mini.experiments.lm.results.chosen_settings`: the fourth study's settings once its arm
has run on the long seeds, the third's before), the CIFAR-10 study the lr of the
other weights and the frame lr of a vision transformer with a fixed logit scale
(:func:`stiefel_mini.experiments.cifar.results.chosen_settings`). :func:`recipes` turns those
settings into one :class:`Recipe` per task and optimizer, :meth:`Recipe.code` into the lines a user
types, and :func:`card_html` into the card at the top of the chapter on using the library. Nothing
here holds a number: every setting is read from ``results/`` when it is called.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from stiefel_mini.experiments.cifar import results as cifar_results
from stiefel_mini.experiments.lm import results as lm_results
from stiefel_mini.experiments.lm.studies import ROUND4

__all__ = ["Recipe", "recipes", "card_html", "NOT_MEASURED"]

NOT_MEASURED = (("vision transformer", "StiefelMuon", "Muon"),)
"""``(task, optimizer, instead of)`` pairs no study of this book ran: the card says so rather than guess."""


def _num(x: float) -> str:
    """A setting as Python writes it (``1.0``, ``0.002``, ``0.3``): the same in the text and the code."""
    return repr(float(x))


@dataclass(frozen=True)
class Recipe:
    """One study's choice for one optimizer: the settings its Stiefel arm ran at on the compared seeds.

    ``lr`` trains every weight that is neither a frame nor a logit scale (AdamW's part); ``frame_lr``
    the query/key frames, each step at most ``max_step`` long (StiefelAdam's trust cap; ``None`` for
    StiefelMuon, whose frame step is ``frame_lr`` in spectral norm); ``scale_lr`` the learned logit
    scales (``None``: the fixed scale ``1/sqrt(d_head)``); ``muon_lr`` StiefelMuon's other hidden
    matrices; ``warmup`` the linear warm-up's share of the run, after which a cosine runs to
    ``final_lr_frac`` of each peak lr.
    """

    task: str
    optimizer: str
    instead_of: str
    study: str
    file: str
    lr: float
    frame_lr: float
    warmup: float
    final_lr_frac: float
    betas: tuple[float, float]
    weight_decay: float
    max_step: float | None = None
    scale_lr: float | None = None
    muon_lr: float | None = None

    def settings_text(self) -> str:
        """The settings in words: ``"lr 0.002; frame lr 0.3, trust cap 0.3; scale lr 0.3; ..."``."""
        parts = [f"lr {_num(self.lr)}" if self.muon_lr is None
                 else f"Muon lr {_num(self.muon_lr)}, AdamW lr {_num(self.lr)}",
                 f"frame lr {_num(self.frame_lr)}" + ("" if self.max_step is None else f", trust cap {_num(self.max_step)}"),
                 "fixed logit scale" if self.scale_lr is None else f"scale lr {_num(self.scale_lr)}",
                 f"warm-up {self.warmup:.0%} of the steps"]
        return "; ".join(parts)

    def code(self) -> str:
        """The lines that build this recipe's optimizer for a ``model`` (StiefelAdam recipes; a
        StiefelMuon recipe raises ``ValueError``: its groups depend on the model's layout)."""
        if self.optimizer != "StiefelAdam":
            raise ValueError(f"{self.optimizer}'s groups depend on the model's layout; the card gives its settings")
        convert = ('convert_attention(model, logit_scale="learned", scale_start="unit")' if self.scale_lr is not None
                   else "convert_attention(model)  # the fixed logit scale 1/sqrt(d_head)")
        frame = f'{{"lr": {_num(self.frame_lr)}' + ("" if self.max_step is None else f', "max_step": {_num(self.max_step)}') + "}"
        scale = "" if self.scale_lr is None else f',\n    scale_options={{"lr": {_num(self.scale_lr)}}}'
        end = f"{self.final_lr_frac:.0%} of each lr" if self.final_lr_frac else "zero"
        return (f"{convert}\n"
                f"groups = param_groups(\n    model, weight_decay={_num(self.weight_decay)},\n"
                f"    frame_options={frame}{scale},\n)\n"
                f"optimizer = StiefelAdam(groups, lr={_num(self.lr)}, betas={tuple(map(float, self.betas))!r})\n"
                f"# warm up over {self.warmup:.0%} of the steps, then a cosine to {end}")


def recipes() -> list[Recipe]:
    """One :class:`Recipe` per task and optimizer a study chose settings for, read from ``results/``:
    the language model's StiefelAdam and StiefelMuon, each with its own scale lr, from the fourth study
    once that arm has run on its long seeds (every arm tuned for itself, 2,400 steps), before that from
    the third; and the CIFAR-10 fitted study's StiefelAdam. A study whose file is absent, or whose sweep
    is not complete, gives none."""
    out = []
    fourth = lm_results.chosen_settings(lm_results.load_round4(), ROUND4)
    third = lm_results.chosen_settings(lm_results.load_round3())
    for arms, optimizer, instead_of in ((("stiefel", "stiefel_scale"), "StiefelAdam", "AdamW"),
                                        (("stiefel_muon", "stiefel_muon_scale"), "StiefelMuon", "Muon")):
        for chosen, arm, study, file in ((fourth, arms[0], "the language model's fourth study", lm_results.ROUND4_FILE),
                                         (third, arms[1], "the language model's third study", lm_results.ROUND3_FILE)):
            if arm in chosen:
                s = chosen[arm]
                out.append(Recipe("language model", optimizer, instead_of, study, file, lr=s["lr"],
                                  frame_lr=s["frame_lr"], warmup=s["warmup_frac"], final_lr_frac=s["final_lr_frac"],
                                  betas=s["betas"], weight_decay=s["weight_decay"], max_step=s.get("max_step"),
                                  scale_lr=s["scale_lr"], muon_lr=s.get("muon_lr")))
                break
    fitted = cifar_results.load_studies(("r2_fitted",))["r2_fitted"]
    if fitted is not None:
        s = cifar_results.chosen_settings(fitted)
        out.append(Recipe("vision transformer", "StiefelAdam", "AdamW", "the CIFAR-10 fitted study",
                          "cifar/r2_fitted.json", lr=s["lr"], frame_lr=s["frame_lr"], warmup=s["warmup_share"],
                          final_lr_frac=0.0, betas=s["betas"], weight_decay=s["weight_decay"], max_step=s["max_step"],
                          scale_lr=None if s["logit_scale"] == "fixed" else s["logit_scale"]))
    return out


def card_html(rs: list[Recipe]) -> str:
    """The "If you try it" card: one row per task and optimizer, the chosen settings in words with
    each value also in a ``data-`` attribute of the row (for a test to read), and a row for each
    pair of :data:`NOT_MEASURED`."""
    e = html.escape
    rows = []
    for r in rs:
        data = {"task": r.task, "optimizer": r.optimizer, "lr": r.lr, "frame-lr": r.frame_lr, "max-step": r.max_step,
                "scale-lr": r.scale_lr, "muon-lr": r.muon_lr, "warmup": r.warmup}
        attrs = " ".join(f"data-{k}='{e(str(v))}'" for k, v in data.items() if v is not None)
        rows.append(f"<tr {attrs}><td><b>{e(r.task)}</b>, instead of {e(r.instead_of)}</td><td>{e(r.optimizer)}</td>"
                    f"<td>{e(r.settings_text())}</td><td>{e(r.study)}</td></tr>")
    for task, optimizer, instead_of in NOT_MEASURED:
        rows.append(f"<tr data-task='{e(task)}' data-optimizer='{e(optimizer)}'><td><b>{e(task)}</b>, instead of "
                    f"{e(instead_of)}</td><td>{e(optimizer)}</td><td>not measured</td><td>no study ran it</td></tr>")
    return ("<table class='recipe-card'><thead><tr><th>you train</th><th>use</th><th>the settings the study chose"
            "</th><th>chosen by</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>")

"""The book's answer per task, as a decision card: what to do, in plain words, and the numbers that
decide it, each from the verdicts (:mod:`stiefel_mini.evidence.judge`) and worded by the decision rule
(:mod:`stiefel_mini.evidence.rule`).

:func:`configurations` quotes each Stiefel arm of the language-model studies in its best configuration,
the weaker beside it (:data:`CONFIGURATIONS`: the configurations the studies ran, each against the
better arm of the Stiefel arm's family; the best is the one with the better mean, not a choice written
here); :func:`cards` writes one card per task of :data:`TASKS`: ``{"key", "task", "chapter", "answer",
"lines", "scale"}``, ``lines`` a list of ``(what, result)``; the language model's from the fourth study
(:data:`LM4_LINES`) once it has a paired seed, else from the earlier ones. The intro shows them
(:func:`stiefel_mini.evidence.render.cards_html`); the language-model chapter opens with its card.
"""

from __future__ import annotations

from stiefel_mini.evidence.claims import claim
from stiefel_mini.evidence.rule import LEANS, LEVEL, RESOLVED, UNDECIDABLE, UNTESTED, decision, judged
from stiefel_mini.evidence.sentences import flip, versus
from stiefel_mini.evidence.words import arm_name, gist, number_text, plain_regime, row_phrase, side_names

__all__ = ["TASKS", "CONFIGURATIONS", "LM4_LINES", "SETTINGS", "SCALED", "SHORT_SETTINGS", "row_of", "configurations",
           "configuration_text", "against_text", "open_text", "beside", "family_lead", "cards"]

TASKS = {"cifar": "A vision transformer", "grokking": "Grokking", "language_model": "A small language model"}
"""The tasks with a card, by chapter, in the order the intro shows them."""

CONFIGURATIONS = {
    "StiefelAdam": (("lm3_scale", "stiefel_scale", "adamw_family"), ("lm2_stiefel_adam", "stiefel", "adamw_family")),
    "StiefelMuon": (("lm3_scale", "stiefel_muon_scale", "muon_family"),
                    ("lm2_stiefel_muon", "stiefel_muon", "muon_family")),
}
"""Per Stiefel arm of the language-model studies, each configuration it ran: ``(question key, arm, baseline)``
of the row that sets it against the better arm of its family."""

SETTINGS = {"stiefel": "the logit scale at AdamW's lr", "stiefel_scale": "the logit scale at an lr of its own",
            "stiefel_muon": "the logit scale at AdamW's lr", "stiefel_muon_scale": "the logit scale at an lr of its own"}
"""What sets each configuration of :data:`CONFIGURATIONS` apart, in words."""

SCALED = {key for options in CONFIGURATIONS.values() for key, _, _ in options} | {"lm2_long"}
"""The questions whose Stiefel arm learns its logit scale in one of :data:`SETTINGS` (the second study's
long phase, at AdamW's lr, among them)."""

SHORT_SETTINGS = {"stiefel": "scale at AdamW's lr", "stiefel_scale": "own scale lr",
                  "stiefel_muon": "scale at AdamW's lr", "stiefel_muon_scale": "own scale lr"}
""":data:`SETTINGS` in a few words, where a figure has little room."""

_HELD = ("reproduced", "smaller effect", "larger effect")


def _of(vs: list[dict], key: str) -> dict | None:
    return next((v for v in vs if v["key"] == key), None)


def row_of(vs: list[dict], key: str, arm: str, baseline: str) -> dict | None:
    """The paired row ``arm − baseline`` of verdict ``key`` among ``vs`` (its primary or a secondary), or
    ``baseline − arm`` exchanged (:func:`~stiefel_mini.evidence.sentences.flip`); ``None`` without one
    that has a paired seed."""
    v = _of(vs, key)
    for r in (v["primary"] + v["secondary"]) if v else ():
        if r["n"] and not r.get("ratio") and {r.get("arm"), r.get("baseline")} == {arm, baseline}:
            return r if r["arm"] == arm else flip(r)
    return None


def _rank(r: dict) -> float:
    """Smaller is better: the mean in the metric's direction (a censored row last)."""
    if r["mean"] is None:
        return float("inf")
    return -r["mean"] if r.get("higher_is_better", True) else r["mean"]


def configurations(vs: list[dict]) -> list[dict]:
    """Each Stiefel arm of :data:`CONFIGURATIONS` with a paired row: ``{"arm", "best", "weaker", "keys"}``,
    the rows of its configurations, the one with the better mean against its family's better arm first,
    and ``keys`` the question each of them (best first) comes from."""
    out = []
    for name, options in CONFIGURATIONS.items():
        found = sorted(((r, key) for key, arm, base in options if (r := row_of(vs, key, arm, base))),
                       key=lambda rk: _rank(rk[0]))
        if found:
            out.append({"arm": name, "best": found[0][0], "weaker": [r for r, _ in found[1:]],
                        "keys": [k for _, k in found]})
    return out


def beside(vs: list[dict]) -> dict[str, str]:
    """``{question key: clause}`` for each question whose primary tests a configuration of a Stiefel arm
    (:data:`SETTINGS`): that configuration, then the arm's other configurations with their results, so
    that no row quotes an arm without saying which configuration it is or without its best beside it:
    ``{"lm2_stiefel_muon": "with the logit scale at AdamW's lr; with the logit scale at an lr of its own:
    0.043 bits per byte behind Muon with QK-norm on 16 of 16 seeds"}``."""
    primary = {v["key"]: v["primary"][0]["arm"] for v in vs if v["key"] in SCALED and v["primary"]
               and v["primary"][0]["n"] and v["primary"][0].get("arm") in SETTINGS}
    out = {key: [f"with {SETTINGS[arm]}"] for key, arm in primary.items()}
    for c in configurations(vs):
        rows = [c["best"], *c["weaker"]]
        for i, key in enumerate(c["keys"]):
            if primary.get(key) == rows[i]["arm"]:  # the question's own arm, not one of its secondaries
                out[key] += [f"with {SETTINGS.get(r['arm'], arm_name(r['arm']))}: {against_text(r)}"
                             for j, r in enumerate(rows) if j != i]
    return {k: "; ".join(v) for k, v in out.items()}


_OPEN = {LEANS: "leaned without resolving against it", LEVEL: "made no clear difference against it",
         UNDECIDABLE: "had too few seeds to decide against it", UNTESTED: "has no paired seed against it"}


def open_text(r: dict) -> str:
    """What a row the rule leaves open says of its arm, as a verb phrase with the baseline as "it":
    ``"made no clear difference against it"``; ``""`` for a resolved row."""
    return _OPEN.get(decision(r), "")


def family_lead(vs: list[dict]) -> dict | None:
    """The better Muon-family arm against the better AdamW-family arm of the second language-model study
    (each family's arm as its comparisons picked it, with or without QK-norm), or ``None``."""
    picked = {k: v for c in configurations(vs) for r in (c["best"], *c["weaker"])
              for k, v in (r.get("picked") or {}).items()}
    a, m = picked.get("adamw_family"), picked.get("muon_family")
    return row_of(vs, "lm2_stiefel_adam", m, a) if a and m else None


def against_text(r: dict) -> str:
    """A row's result with its baseline named, no p: ``"0.043 bits per byte behind Muon with QK-norm on 16
    of 16 seeds"``, or ``"no clear difference against AdamW (mean gap -0.001 bits per byte, 95% interval
    -0.006 to +0.003)"``."""
    b, a = side_names(r)
    if judged(r)[1]:
        return versus(r)[len(b) + 1:]
    text = f"{gist(r)} against {a}"
    if r["mean"] is not None and r["ci"] is not None:
        u = r["unit"]
        unit = "bits per byte" if u == "bpb" else u
        text += (f" (mean gap {number_text(r['mean'], u)} {unit}, 95% interval {number_text(r['ci'][0], u)} to "
                 f"{number_text(r['ci'][1], u)})")
    return text


def configuration_text(c: dict) -> str:
    """One Stiefel arm in words, its best configuration first and the weaker beside it: ``"with the logit
    scale at an lr of its own, no clear difference against AdamW (...); with the logit scale at AdamW's
    lr, 0.034 bits per byte behind AdamW on 16 of 16 seeds"``."""
    return "; ".join(f"with {SETTINGS.get(r['arm'], arm_name(r['arm']))}, {against_text(r)}"
                     for r in [c["best"], *c["weaker"]])


def _metric(r: dict) -> str:
    """The metric a row compares, as its label says it (``"test bits per byte"``)."""
    return r["label"].rsplit(", ", 1)[-1] if ", " in r["label"] else ""


def _vision(vs: list[dict]) -> dict | None:
    gain, freeze = _of(vs, "cifar_gain"), _of(vs, "freezing")
    if not gain or not gain["primary"] or not gain["primary"][0]["n"]:
        return None
    r = gain["primary"][0]
    size = f"{abs(r['mean']):.1f} points of test accuracy" if r["mean"] is not None else "a margin"
    answer = (f"Worth a try: StiefelAdam beat a tuned AdamW by {size}" if gain["status"] in _HELD else
              f"Keep AdamW: it beat StiefelAdam by {size}" if gain["status"] == "contradicted" else
              "No clear answer: these runs cannot say whether StiefelAdam helps")
    lines = [("Against a tuned AdamW", gain["sentence"])]
    qk = next((s for s in gain["secondary"] if s["baseline"] == r["baseline"] and s["arm"] == "qknorm"
               and s["regime"] == r["regime"]), None)
    if qk:
        lines.append(("QK-norm instead, the smallest change", versus(qk)))
    if freeze and freeze["primary"] and freeze["primary"][0]["n"]:
        lines.append(("The frames frozen at their random start", freeze["short_phrase"]))
    return {"answer": answer, "lines": lines, "regime": r["regime"]}


def _grokking(vs: list[dict]) -> dict | None:
    end, soon = _of(vs, "grokking_endpoint"), _of(vs, "grokking_sooner")
    got = [v for v in (end, soon) if v and v["primary"] and v["primary"][0]["n"]]
    if not got:
        return None
    if any(v["status"] in _HELD for v in got):
        answer = "Worth a try: StiefelAdam did better on " + " and ".join(
            "the endpoint" if v is end else "the time to grok" for v in got if v["status"] in _HELD)
    elif any(v["status"] == "contradicted" for v in got):
        answer = "Keep AdamW: StiefelAdam did worse on " + " and ".join(
            "the endpoint" if v is end else "the time to grok" for v in got if v["status"] == "contradicted")
    else:
        answer = "No reason to switch: neither a higher endpoint nor earlier grokking was resolved"
    lines = [("At the end" if v is end else "Steps to 95% validation accuracy",
              row_phrase(v["primary"][0], pv=claim(v["key"]).paper_value, short=True, baseline=True, with_p=False))
             for v in got]
    r = got[0]["primary"][0]
    falls = next((s for s in (end or got[0])["secondary"] if s["unit"] == "falls" and s["regime"] == r["regime"]), None)
    if falls:
        lines.append(("Falls of 10 points or more after grokking", row_phrase(falls, short=True, baseline=True,
                                                                               with_p=False)))
    return {"answer": answer, "lines": lines, "regime": r["regime"]}


LM4_LINES = (("StiefelAdam", "lm4_stiefel_adam"), ("StiefelMuon", "lm4_stiefel_muon"),
             ("Every hidden matrix on the manifold", "lm4_all_stiefel"))
"""The fourth language-model study's card lines: what each says, and the question its primary answers."""


def _tested(v: dict | None) -> bool:
    return bool(v and v["primary"] and v["primary"][0]["n"])


def _language_model4(qs: list[dict]) -> dict | None:
    """The card from the fourth study (every arm tuned for itself, 2,400 steps), once its StiefelAdam
    question has a paired seed: its three primaries, each against the better arm of its family."""
    adam = _of(qs, "lm4_stiefel_adam")
    if not _tested(adam):
        return None
    best = adam["primary"][0]
    base = side_names(best)[1]
    how = "trained as the library recommends"
    ahead = best["wins"] > best["losses"]
    answer = (f"Worth a try: {how}, StiefelAdam beat {base}" if decision(best) == RESOLVED and ahead else
              f"Keep {base}: {how}, StiefelAdam was behind it" if decision(best) == RESOLVED
              else f"No reason to switch from {base}: {how}, StiefelAdam {open_text(best)}")
    lines = [(what, against_text(v["primary"][0])) for what, key in LM4_LINES if _tested(v := _of(qs, key))]
    metric = _metric(best)
    return {"answer": answer + (f" (in {metric}, lower is better)" if metric else ""), "lines": lines,
            "regime": best["regime"]}


def _language_model(qs: list[dict]) -> dict | None:
    if (card := _language_model4(qs)) is not None:
        return card
    cfg = {c["arm"]: c for c in configurations(qs)}
    adam = cfg.get("StiefelAdam")
    if adam is None:
        return None
    best = adam["best"]
    base = side_names(best)[1]
    setting = SETTINGS.get(best["arm"], arm_name(best["arm"]))
    ahead = best["wins"] > best["losses"]
    answer = (f"Worth a try: with {setting}, StiefelAdam beat {base}" if decision(best) == RESOLVED and ahead else
              f"Keep {base}: StiefelAdam, even at its best ({setting}), was behind it" if decision(best) == RESOLVED
              else f"No reason to switch from {base}: even at its best ({setting}), StiefelAdam {open_text(best)}")
    muon = family_lead(qs)
    m, a = side_names(muon) if muon else ("", "")
    if muon and judged(muon)[1] and muon["wins"] > muon["losses"]:
        answer += f"; {m} was the one ahead"
    lines = [(name, configuration_text(c)) for name, c in cfg.items()]
    if muon:
        lines.append((f"{m} against {a}", versus(muon)))
    long = _of(qs, "lm2_long")
    if long and long["primary"] and long["primary"][0]["n"]:
        r = long["primary"][0]
        setting = SETTINGS.get(r["arm"], arm_name(r["arm"]))
        lines.append(("Three times the steps", f"with {setting}, {against_text(r)}"))
    metric = _metric(best)
    # the regime the studies share; what sets the configurations apart is said on each line
    return {"answer": answer + (f" (in {metric}, lower is better)" if metric else ""), "lines": lines,
            "regime": best["regime"].split("; ")[0]}


def cards(vs: list[dict], qs: list[dict]) -> list[dict]:
    """A card per task of :data:`TASKS` that has a paired seed: ``{"key", "task", "chapter", "answer",
    "lines", "scale"}`` from the paper's verdicts ``vs`` (vision transformer, grokking) and the reader's
    questions ``qs`` (:func:`stiefel_mini.evidence.judge.questions`; the language model)."""
    made = {"cifar": _vision(vs), "grokking": _grokking(vs), "language_model": _language_model(qs)}
    return [{"key": ch, "task": TASKS[ch], "chapter": ch, "answer": c["answer"], "lines": c["lines"],
             "scale": plain_regime(c["regime"])} for ch, c in made.items() if c]

"""The book's answer in plain words: what was tried and at what scale, which claims held, and what a
reader deciding whether to try the method can take from it.

:func:`scale` reads, from the files the primaries rest on, the tasks, the models' sizes and the
machine; :func:`bottom_line` writes the intro's opening sentence from :func:`scale` (the answer per
task is :mod:`stiefel_mini.evidence.cards`); :func:`tally` counts the claims by verdict; :func:`advice`
writes the rows of Part IV's table (a situation, what to try, what this book measured for it), each
Stiefel arm of the language model in its best configuration with the weaker beside it
(:func:`~stiefel_mini.evidence.cards.configurations`). Every count, size and direction comes from the
verdicts and the results files; the words around them are fixed.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from stiefel_mini.evidence import compare, runs
from stiefel_mini.evidence.cards import SETTINGS, against_text, configuration_text, configurations, family_lead
from stiefel_mini.evidence.cards import open_text
from stiefel_mini.evidence.claims import Comparison, claim
from stiefel_mini.evidence.measure import compute
from stiefel_mini.evidence.rule import judged
from stiefel_mini.evidence.words import plain_regime, row_phrase, side_names

__all__ = ["TASKS", "scale", "tally", "bottom_line", "advice"]

TASKS = {"cifar": "CIFAR-10 images", "grokking": "grokking modular addition",
         "language_model": "a language model on State of the Union addresses"}
"""Each experiment chapter's task, for a reader (a chapter not listed is named by its file)."""

_COUNTED = {"reproduced": "held as stated", "smaller effect": "held with a smaller effect",
            "larger effect": "held with a larger effect", "mixed": "went different ways in different regimes",
            "partly reproduced": "partly held", "contradicted": "were contradicted",
            "not resolved": "are undecided", "not tested yet": "are not tested yet",
            "by construction": "are true by construction"}
"""How :func:`tally` counts each status; a ``mixed`` claim one of whose regimes held is counted as
"held in one regime only"."""
_ONE = {"were contradicted": "was contradicted", "are undecided": "is undecided", "are not tested yet":
        "is not tested yet", "went different ways in different regimes": "went different ways in different regimes"}
_HELD = ("reproduced", "smaller effect", "larger effect")


def _model(settings: dict) -> str:
    """``"a transformer of width 96, 3 blocks of 4 heads"`` from a results file's settings (the
    vision and grokking models' ``depth``, ``n_heads``, or GPT-2's ``n_layer``, ``n_head``)."""
    depth = settings.get("depth", settings.get("n_layer", 1))
    heads = settings.get("n_heads", settings.get("n_head"))
    blocks = f"{depth} block{'s' if depth != 1 else ''}" + (f" of {heads} heads" if heads else "")
    return f"a transformer of width {settings.get('d_model')}, {blocks}"


def scale(vs: list[dict], root: str | Path | None = None) -> dict:
    """What was tried: ``{"tasks": [{"chapter", "task", "model", "width", "tokens", "runs"}], "cores": [..],
    "gpu": bool}``.

    Per chapter with a tested primary: its task (:data:`TASKS`), the model of its primary's first
    file (``settings`` or ``base_config``), the tokens each run trains on (a language model's steps x
    batch x context, else ``None``) and how many runs that file holds; ``cores``: the CPU core
    counts the files' provenance records; ``gpu``: whether any of them ran on CUDA.
    """
    tasks, cores, gpu = {}, set(), False
    for v in vs:
        rows = [r for r in v["primary"] if r["n"]]
        if not rows:
            continue
        res = runs.load(rows[0]["files"][0], root)
        prov = res.get("provenance") or {}
        cores.add(prov.get("cpu_count"))
        gpu = gpu or "cuda" in str(prov.get("device", "")).lower()
        if v["chapter"] not in tasks:
            cfg = res.get("settings") or res.get("base_config") or {}
            tokens = cfg["steps"] * cfg["batch_size"] * cfg["context"] if "context" in cfg else None
            tasks[v["chapter"]] = {"chapter": v["chapter"], "task": TASKS.get(v["chapter"], v["chapter"].replace("_", " ")),
                                   "model": _model(cfg), "width": cfg.get("d_model"), "tokens": tokens,
                                   "runs": len(res["runs"])}
    return {"tasks": list(tasks.values()), "cores": sorted(c for c in cores if c), "gpu": gpu}


def tally(vs: list[dict]) -> str:
    """``"Of the paper's 9 claims, 2 are true by construction (checked by tests); of the 7 the runs
    test, none held as stated: 1 held with a smaller effect, ... and 2 are undecided"``: every verdict
    counted once, by the status the intro's table shows, those true by construction apart."""
    def status(v: dict) -> str:
        if v["status"] == "mixed" and "reproduced" in v.get("regime_status", []):
            return "held in one regime only"
        return _COUNTED[v["status"]]

    count = Counter(status(v) for v in vs)
    design = count.pop(_COUNTED["by construction"], 0)
    tested = sum(count.values())
    held = count.pop(_COUNTED["reproduced"], 0)
    out = f"Of the paper's {len(vs)} claims, "
    if design:
        out += (f"{design} {'is' if design == 1 else 'are'} true by construction (checked by tests); of the "
                f"{tested} the runs test, ")
    out += f"{held or 'none'} held as stated"
    order = [_COUNTED[k] for k in ("smaller effect", "larger effect")] + ["held in one regime only"] + [
        _COUNTED[k] for k in ("mixed", "partly reproduced", "contradicted", "not resolved", "not tested yet")]
    more = [f"{count[w]} {_ONE.get(w, w) if count[w] == 1 else w}" for w in order if count.get(w)]
    if not more:
        return out
    return out + ": " + ", ".join(more[:-1]) + (" and " if len(more) > 1 else "") + more[-1]


def _of(vs: list[dict], key: str) -> dict | None:
    return next((v for v in vs if v["key"] == key), None)


def bottom_line(vs: list[dict], root: str | Path | None = None, questions: list[dict] = ()) -> list[str]:
    """The intro's bottom line, as sentences: the scale tried (the tasks' widths, the machine). The answer
    itself is a card per task (:func:`stiefel_mini.evidence.cards.cards`), under it; the count of claims
    that held (:func:`tally`) goes under the table."""
    sc = scale([*vs, *questions], root)
    cores = " or ".join(f"{c}-core" for c in sc["cores"]) or "an unrecorded"
    widths = sorted({t["width"] for t in sc["tasks"] if t["width"]})
    return [f"Tried small, on a {cores} CPU" + ("" if sc["gpu"] else " with no GPU") + ", with transformers of width "
            f"{', '.join(map(str, widths[:-1])) + ' and ' if len(widths) > 1 else ''}{widths[-1]}; the answer, "
            "task by task:"]


def _row(comp: Comparison, root: str | Path | None) -> dict:
    row = compute(comp, root)
    compare.correct([row])
    return row


_TRY = {"StiefelAdam": "StiefelAdam on the Q/K frames, AdamW on the rest",
        "StiefelMuon": "StiefelMuon: manifold Muon on the Q/K frames, Muon on the other hidden matrices",
        "Manifold Muon on every hidden matrix": "StiefelMuon on every hidden matrix (module-wise manifold Muon), "
                                                "AdamW on the rest"}
"""What :func:`advice` says to try for each Stiefel arm of the language-model studies, by its name."""

_LM4_ADVICE = (("StiefelAdam", "lm4_stiefel_adam", "AdamW"), ("StiefelMuon", "lm4_stiefel_muon", "Muon"),
               ("Manifold Muon on every hidden matrix", "lm4_all_stiefel", "Muon"))
"""The fourth language-model study's rows of :func:`advice`: the arm, its question, its family."""


def advice(vs: list[dict], root: str | Path | None = None) -> list[dict]:
    """Part IV's table: ``[{"situation", "try", "measured", "regime"}]``, each ``measured`` a paired
    row in plain words (:func:`~stiefel_mini.evidence.words.row_phrase`) or a claim's phrase, each
    ``try`` decided by the verdict it rests on; with the language-model questions among ``vs``
    (:func:`stiefel_mini.evidence.judge.questions`), a row for a language model decided by the better
    Muon-family arm against the better AdamW-family arm (:func:`~stiefel_mini.evidence.cards.family_lead`),
    and a row per Stiefel arm, decided by its best configuration against the better arm of its family,
    the weaker beside it (:func:`~stiefel_mini.evidence.cards.configurations`); once the fourth study
    has paired seeds, a row per arm of :data:`_LM4_ADVICE` instead, decided by that study's primary."""
    gain, freeze = _of(vs, "cifar_gain"), _of(vs, "freezing")
    out = []
    if gain and gain["primary"]:
        fit = claim("cifar_gain").primaries[0][0]
        out.append({"situation": "a small vision transformer, trained from scratch, where accuracy matters",
                    "try": "StiefelAdam on the query/key frames (convert_attention), its frame lr tuned like any lr"
                           if gain["status"] in _HELD else "AdamW" if gain["status"] == "contradicted" else
                           "AdamW, measuring StiefelAdam against it",
                    "measured": gain["phrase"], "regime": plain_regime(gain["primary"][0]["regime"])})
        qk = _row(Comparison("QK-norm − A0", fit.regime, fit.files, "A0", "qknorm"), root)
        vs_qk = _row(Comparison("A1 − QK-norm", fit.regime, fit.files, "qknorm", "A1"), root)
        if qk["n"]:
            out.append({"situation": "the same, but you want the smallest change to a standard model",
                        "try": "QK-norm (normalised queries and keys), with AdamW",
                        "measured": row_phrase(qk) + (f"; {row_phrase(vs_qk)}" if vs_qk["n"] else ""),
                        "regime": plain_regime(qk["regime"])})
    if freeze and freeze["primary"]:
        fit = claim("freezing").primaries[0][0]
        a3 = _row(Comparison("A3 − A0", fit.regime, fit.files, "A0", "A3"), root)
        out.append({"situation": "you want to save the query/key updates altogether",
                    "try": "freeze the frames at a random orthonormal start",
                    "measured": row_phrase(a3) + f"; {freeze['phrase']}", "regime": plain_regime(a3["regime"])})
    widen = _of(vs, "cifar_widens")
    if widen and widen["primary"] and widen["primary"][0]["n"]:
        out.append({"situation": "much more data, at a fixed budget of steps",
                    "try": "measure before you switch: the gain shrank with more data here"
                           if widen["status"] == "contradicted" else "measure before you switch",
                    "measured": widen["phrase"], "regime": plain_regime(widen["primary"][0]["regime"])})
    speed = _of(vs, "grokking_sooner")
    if speed and speed["primary"] and speed["primary"][0]["n"]:
        end = _of(vs, "grokking_endpoint")
        out.append({"situation": "a small algorithmic task that groks (weight decay, full batch)",
                    "try": "StiefelAdam" if speed["status"] in _HELD else "plain AdamW" if speed["status"] ==
                           "contradicted" else "plain AdamW, the simpler: no difference was resolved",
                    "measured": speed["phrase"] + (f"; at the end, {end['phrase']}" if end else ""),
                    "regime": plain_regime(speed["primary"][0]["regime"])})
    lead = family_lead(vs)
    if lead:
        m, a = side_names(lead)
        ahead = judged(lead)[1] and lead["wins"] > lead["losses"]
        out.append({"situation": "a small language model (GPT-2-like), trained from scratch",
                    "try": f"{m}: Muon on the hidden matrices, AdamW on the rest" if ahead else a,
                    "measured": row_phrase(lead), "regime": plain_regime(lead["regime"])})
    lm4 = [(name, family, _TRY[name], v["primary"][0]) for name, key, family in _LM4_ADVICE
           if (v := _of(vs, key)) and v["primary"] and v["primary"][0]["n"]]
    for name, family, arm, r in lm4:
        best = side_names(r)[1]
        ahead = judged(r)[1] and r["wins"] > r["losses"]
        out.append({"situation": f"a small language model, against the better {family} (with or without QK-norm), "
                                 "every arm tuned for itself",
                    "try": arm if ahead else best if judged(r)[1] else f"{best} ({name} {open_text(r)})",
                    "measured": f"{name}, trained as the library recommends, {against_text(r)}",
                    "regime": plain_regime(r["regime"])})
    cfg = {c["arm"]: c for c in configurations(vs)} if not lm4 else {}
    for name, family in (("StiefelAdam", "AdamW"), ("StiefelMuon", "Muon")):
        if name not in cfg:
            continue
        arm = _TRY[name]
        r = cfg[name]["best"]
        best, setting = side_names(r)[1], SETTINGS.get(r["arm"], r["arm"])
        ahead = judged(r)[1] and r["wins"] > r["losses"]
        out.append({"situation": f"a small language model, against the better {family} (with or without "
                                 "QK-norm, warm-up and lr tuned)",
                    "try": f"{arm}, with {setting}" if ahead else
                           best if judged(r)[1] else f"{best} ({name}, at its best, {open_text(r)})",
                    "measured": f"{name} " + configuration_text(cfg[name]), "regime": plain_regime(r["regime"])})
    return out

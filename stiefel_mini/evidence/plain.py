"""The book's answer in plain words: what was tried and at what scale, what it gained or lost against
AdamW, which claims held, and what a reader deciding whether to try the method can take from it.

:func:`scale` reads, from the files the primaries rest on, the tasks, the models' sizes and the
machine; :func:`bottom_line` writes the intro's opening paragraph from the verdicts
(:func:`stiefel_mini.evidence.judge.verdicts`) and :func:`scale`; :func:`advice` the rows of Part
IV's table (a situation, what to try, what this book measured for it). Every count, size and
direction comes from the verdicts and the results files; the words around them are fixed.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from stiefel_mini.evidence import compare, runs
from stiefel_mini.evidence.claims import Comparison, claim
from stiefel_mini.evidence.measure import compute
from stiefel_mini.evidence.words import arm_name, gist, row_phrase

__all__ = ["TASKS", "scale", "tally", "bottom_line", "advice"]

TASKS = {"cifar": "CIFAR-10 image classification", "grokking": "grokking of modular addition"}
"""Each experiment chapter's task, for a reader (a chapter not listed is named by its file)."""

_COUNTED = {"reproduced": "held as stated", "smaller effect": "held in direction with a smaller effect",
            "larger effect": "held in direction with a larger effect", "mixed": "held in one regime and not another",
            "partly reproduced": "partly held", "contradicted": "were contradicted",
            "not resolved": "could not be decided", "not tested yet": "are not tested yet",
            "by construction": "are true by the rule's definition"}


def _model(settings: dict) -> str:
    """``"a transformer of width 96, 3 blocks of 4 heads"`` from a results file's settings."""
    depth = settings.get("depth", 1)
    heads = settings.get("n_heads")
    blocks = f"{depth} block{'s' if depth != 1 else ''}" + (f" of {heads} heads" if heads else "")
    return f"a transformer of width {settings.get('d_model')}, {blocks}"


def scale(vs: list[dict], root: str | Path | None = None) -> dict:
    """What was tried: ``{"tasks": [{"chapter", "task", "model", "runs"}], "cores": [..], "gpu": bool}``.

    Per chapter with a tested primary: its task (:data:`TASKS`), the model of its primary's first
    file (``settings`` or ``base_config``) and how many runs that file holds; ``cores``: the CPU core
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
            tasks[v["chapter"]] = {"chapter": v["chapter"], "task": TASKS.get(v["chapter"], v["chapter"].replace("_", " ")),
                                   "model": _model(res.get("settings") or res.get("base_config") or {}),
                                   "runs": len(res["runs"])}
    return {"tasks": list(tasks.values()), "cores": sorted(c for c in cores if c), "gpu": gpu}


def tally(vs: list[dict]) -> str:
    """``"2 held in direction with a smaller effect, 3 were contradicted, ..."``: the verdicts counted."""
    count = Counter(v["status"] for v in vs)
    return ", ".join(f"{k} {_COUNTED.get(s, s)}" for s, k in count.items())


def _of(vs: list[dict], key: str) -> dict | None:
    return next((v for v in vs if v["key"] == key), None)


def _against_adamw(vs: list[dict]) -> list[str]:
    """Per task, the results of its claims whose primary compares StiefelAdam with AdamW, in a few words."""
    out: dict[str, list[str]] = {}
    for v in vs:
        rows = [r for r in v["primary"] if r["n"] and not r.get("ratio")]
        if rows and rows[0]["baseline"] in ("A0", "adamw") and not rows[0]["label"].startswith("("):
            r, pv = rows[0], claim(v["key"]).paper_value
            what = r["label"].split(", ", 1)[1] if ", " in r["label"] else "test accuracy"
            text = gist(r, pv)
            if r["resolved"]:
                text = f"{arm_name(r['arm'])} " + (text.replace(" points ", f" points of {what} ", 1)
                                                   if r.get("unit") == "pp" else text)
            else:
                text = f"{text} in {what}"
            if r["resolved"] and pv is not None:
                text += f" (the paper: {pv:.1f})"
            out.setdefault(v["chapter"], []).append(text)
    return [f"on {TASKS.get(ch, ch.replace('_', ' '))}, {', and '.join(ps)}" for ch, ps in out.items()]


def bottom_line(vs: list[dict], root: str | Path | None = None) -> list[str]:
    """The intro's bottom line, as sentences: the scale tried, the result against AdamW, the claims
    that held (:func:`tally`, with what fresh seeds said), and what it means for a reader."""
    sc = scale(vs, root)
    cores = " or ".join(f"{c}-core" for c in sc["cores"]) or "an unrecorded"
    tried = " and ".join(f"{t['task']} ({t['model']})" for t in sc["tasks"])
    out = [f"This book re-ran the paper's experiments at a small scale: {tried}, on a {cores} CPU"
           + ("" if sc["gpu"] else " with no GPU") + "."]
    against = _against_adamw(vs)
    if against:
        out.append("Against AdamW: " + "; ".join(against) + ".")
    fresh = Counter(v["confirmed"] for v in vs if v["confirmed"])
    conf = ", ".join(f"{k} {w}" for w, k in fresh.items())
    out.append(f"Of the paper's {len(vs)} claims, {tally(vs)}" + (f"; on fresh seeds {conf}" if conf else "") + ".")
    out += _meaning(vs)
    return out


def _meaning(vs: list[dict]) -> list[str]:
    """What the verdicts mean for a reader deciding whether to try the method, rule by rule."""
    out = []
    gain = _of(vs, "cifar_gain")
    if gain and gain["primary"] and gain["primary"][0]["n"]:
        r = gain["primary"][0]
        if gain["status"] in ("reproduced", "smaller effect", "larger effect"):
            qk = next((s for s in gain["secondary"] if s["label"].startswith("QK-norm") and s["regime"] == r["regime"]),
                      None)
            out.append(f"So, on a small vision transformer StiefelAdam is worth a try: expect about "
                       f"{r['mean']:.1f} points, not {claim('cifar_gain').paper_value:.0f}"
                       + (f" (QK-norm, a smaller change, gave {qk['mean']:.1f} in the same runs)" if qk and qk["mean"]
                          is not None and qk["mean"] > 0 else "") + ".")
        elif gain["status"] == "contradicted":
            out.append("So, on these runs AdamW did better: StiefelAdam is not worth switching to here.")
        else:
            out.append("So, these runs cannot say whether StiefelAdam helps accuracy.")
    speed = _of(vs, "grokking_sooner")
    if speed and speed["status"] == "contradicted":
        out.append("Do not expect it to make a model grok sooner: here it was slower"
                   + (", though fresh seeds did not confirm that" if speed["confirmed"] == "not confirmed" else "") + ".")
    return out


def _row(comp: Comparison, root: str | Path | None) -> dict:
    row = compute(comp, root)
    compare.correct([row])
    return row


def advice(vs: list[dict], root: str | Path | None = None) -> list[dict]:
    """Part IV's table: ``[{"situation", "try", "measured", "regime"}]``, each ``measured`` a paired
    row in plain words (:func:`~stiefel_mini.evidence.words.row_phrase`) or a claim's phrase."""
    gain, freeze = _of(vs, "cifar_gain"), _of(vs, "freezing")
    out = []
    if gain and gain["primary"]:
        fit = claim("cifar_gain").primaries[0][0]
        out.append({"situation": "a small vision transformer, trained from scratch, where accuracy matters",
                    "try": "StiefelAdam on the query/key frames (convert_attention), its frame lr tuned like any lr",
                    "measured": gain["phrase"], "regime": gain["primary"][0]["regime"]})
        qk = _row(Comparison("QK-norm − A0", fit.regime, fit.files, "A0", "qknorm"), root)
        vs_qk = _row(Comparison("A1 − QK-norm", fit.regime, fit.files, "qknorm", "A1"), root)
        if qk["n"]:
            out.append({"situation": "the same, but you want the smallest change to a standard model",
                        "try": "QK-norm (normalised queries and keys), with AdamW",
                        "measured": row_phrase(qk) + (f"; {row_phrase(vs_qk)}" if vs_qk["n"] else ""),
                        "regime": qk["regime"]})
    if freeze and freeze["primary"]:
        fit = claim("freezing").primaries[0][0]
        a3 = _row(Comparison("A3 − A0", fit.regime, fit.files, "A0", "A3"), root)
        out.append({"situation": "you want to save the query/key updates altogether",
                    "try": "freeze the frames at a random orthonormal start",
                    "measured": row_phrase(a3) + f"; {freeze['phrase']}", "regime": a3["regime"]})
    widen = _of(vs, "cifar_widens")
    if widen and widen["primary"] and widen["primary"][0]["n"]:
        out.append({"situation": "much more data, at a fixed budget of steps",
                    "try": "measure before you switch: the gain shrank with more data here",
                    "measured": widen["phrase"], "regime": widen["primary"][0]["regime"]})
    speed = _of(vs, "grokking_sooner")
    if speed and speed["primary"] and speed["primary"][0]["n"]:
        end = _of(vs, "grokking_endpoint")
        out.append({"situation": "a small algorithmic task that groks (weight decay, full batch)",
                    "try": "plain AdamW" if speed["status"] == "contradicted" else "StiefelAdam",
                    "measured": speed["phrase"] + (f"; at the end, {end['phrase']}" if end else ""),
                    "regime": speed["primary"][0]["regime"]})
    return out

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
from stiefel_mini.evidence.words import arm_name, gist, plain_regime, row_phrase

__all__ = ["TASKS", "scale", "tally", "bottom_line", "advice"]

TASKS = {"cifar": "CIFAR-10 images", "grokking": "grokking modular addition",
         "language_model": "a language model on State of the Union addresses"}
"""Each experiment chapter's task, for a reader (a chapter not listed is named by its file)."""

_COUNTED = {"reproduced": "held as stated", "smaller effect": "held with a smaller effect",
            "larger effect": "held with a larger effect", "mixed": "held in one regime only",
            "partly reproduced": "partly held", "contradicted": "were contradicted",
            "not resolved": "are undecided", "not tested yet": "are not tested yet",
            "by construction": "are true by definition"}


def _model(settings: dict) -> str:
    """``"a transformer of width 96, 3 blocks of 4 heads"`` from a results file's settings (the
    vision and grokking models' ``depth``, ``n_heads``, or GPT-2's ``n_layer``, ``n_head``)."""
    depth = settings.get("depth", settings.get("n_layer", 1))
    heads = settings.get("n_heads", settings.get("n_head"))
    blocks = f"{depth} block{'s' if depth != 1 else ''}" + (f" of {heads} heads" if heads else "")
    return f"a transformer of width {settings.get('d_model')}, {blocks}"


def scale(vs: list[dict], root: str | Path | None = None) -> dict:
    """What was tried: ``{"tasks": [{"chapter", "task", "model", "width", "runs"}], "cores": [..], "gpu": bool}``.

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
                                   "width": (res.get("settings") or res.get("base_config") or {}).get("d_model"),
                                   "runs": len(res["runs"])}
    return {"tasks": list(tasks.values()), "cores": sorted(c for c in cores if c), "gpu": gpu}


def tally(vs: list[dict]) -> str:
    """``"None of the paper's 9 claims held as stated; 1 held with a smaller effect, 3 were
    contradicted"``: the resolved verdicts counted (the table beside it gives the others)."""
    count = Counter(v["status"] for v in vs)
    held = count.get("reproduced", 0)
    out = f"{'None' if not held else held} of the paper's {len(vs)} claims held as stated"
    more = [f"{count[s]} {_COUNTED[s].replace('were ', 'was ') if count[s] == 1 else _COUNTED[s]}"
            for s in ("smaller effect", "larger effect", "mixed", "partly reproduced", "contradicted") if count.get(s)]
    return out + ("; " + ", ".join(more[:-1]) + (" and " if len(more) > 1 else "") + more[-1] if more else "")


def _of(vs: list[dict], key: str) -> dict | None:
    return next((v for v in vs if v["key"] == key), None)


def _against_adamw(vs: list[dict]) -> str:
    """The results of the claims whose primary compares StiefelAdam with AdamW, task by task, in a few
    words: the resolved ones by their size and direction, the others by what the interval excludes."""
    done: dict[str, list[str]] = {}
    open_: dict[str, list[str]] = {}
    for v in vs:
        rows = [r for r in v["primary"] if r["n"] and not r.get("ratio")]
        if not rows or rows[0]["baseline"] not in ("A0", "adamw") or rows[0]["label"].startswith("("):
            continue
        r, pv = rows[0], claim(v["key"]).paper_value
        what = r["label"].split(", ", 1)[1] if ", " in r["label"] else "test accuracy"
        text = gist(r, pv, seeds=False)
        if r["resolved"]:
            text = text.replace(" points ", f" points of {what} ", 1)
            done.setdefault(v["chapter"], []).append(text)
        else:
            open_.setdefault(v["chapter"], []).append(f"{text} in {what}")
    parts = []
    for ch in dict.fromkeys([*done, *open_]):
        task = TASKS.get(ch, ch.replace("_", " "))
        got = ", and ".join(done.get(ch, []))
        rest = ", ".join(open_.get(ch, []))
        parts.append(f"{got} on {task}" + (f", with {rest}" if rest and got else "") if got else f"on {task}, {rest}")
    return "; ".join(parts)


def bottom_line(vs: list[dict], root: str | Path | None = None) -> list[str]:
    """The intro's bottom line, as sentences: the scale tried, the result against AdamW, the claims
    that held (:func:`tally`, with what fresh seeds said), and what it means for a reader."""
    sc = scale(vs, root)
    cores = " or ".join(f"{c}-core" for c in sc["cores"]) or "an unrecorded"
    widths = sorted({t["width"] for t in sc["tasks"] if t["width"]})
    out = [f"Tried small, on a {cores} CPU" + ("" if sc["gpu"] else " with no GPU") + ": "
           f"{' and '.join(t['task'] for t in sc['tasks'])}, with transformers of width {' and '.join(map(str, widths))}."]
    against = _against_adamw(vs)
    if against:
        out.append(f"Against AdamW, {arm_name('A1')} was {against}.")
    out.append(f"{tally(vs)}.")
    meaning = _meaning(vs)
    if meaning:
        out.append("So " + ", but ".join(meaning) + ".")
    return out


def _meaning(vs: list[dict]) -> list[str]:
    """What the verdicts mean for a reader deciding whether to try the method, as clauses."""
    out = []
    gain = _of(vs, "cifar_gain")
    if gain and gain["primary"] and gain["primary"][0]["n"]:
        r = gain["primary"][0]
        if gain["status"] in ("reproduced", "smaller effect", "larger effect"):
            qk = next((s for s in gain["secondary"] if s["label"].startswith("QK-norm") and s["regime"] == r["regime"]),
                      None)
            out.append(f"StiefelAdam is worth a try on a small vision transformer, expecting about {r['mean']:.1f} "
                       "points" + (f" (QK-norm gave {qk['mean']:.1f})" if qk and qk["mean"] is not None
                                   and qk["mean"] > 0 else ""))
        elif gain["status"] == "contradicted":
            out.append("StiefelAdam is not worth switching to for accuracy: AdamW did better here")
        else:
            out.append("these runs cannot say whether StiefelAdam is worth trying for accuracy")
    speed = _of(vs, "grokking_sooner")
    if speed and speed["status"] == "contradicted":
        out.append("do not expect it to make a model grok sooner")
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
                    "try": "measure before you switch: the gain shrank with more data here",
                    "measured": widen["phrase"], "regime": plain_regime(widen["primary"][0]["regime"])})
    speed = _of(vs, "grokking_sooner")
    if speed and speed["primary"] and speed["primary"][0]["n"]:
        end = _of(vs, "grokking_endpoint")
        out.append({"situation": "a small algorithmic task that groks (weight decay, full batch)",
                    "try": "plain AdamW" if speed["status"] == "contradicted" else "StiefelAdam",
                    "measured": speed["phrase"] + (f"; at the end, {end['phrase']}" if end else ""),
                    "regime": plain_regime(speed["primary"][0]["regime"])})
    return out

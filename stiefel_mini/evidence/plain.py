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
from stiefel_mini.evidence.sentences import flip, fresh_text, versus
from stiefel_mini.evidence.words import arm_name, gist, judged, of_seeds, plain_regime, row_phrase, side_names

__all__ = ["TASKS", "scale", "tally", "language_model", "BOTTOM_LINE_QUESTIONS", "bottom_line", "advice"]

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
            fresh = fresh_text(v)
            if v.get("confirmed") not in ("", "confirmed", None):
                text += f" on {of_seeds(r, max(r['wins'], r['losses']), fresh)}"
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


def _lm_rows(q: dict) -> dict[tuple[str, str], dict]:
    """The language-model question's paired rows in bits per byte, by ``(arm, baseline)``."""
    return {(r["arm"], r["baseline"]): r for r in q["primary"] + q["secondary"]
            if r["n"] and not r.get("ratio") and r.get("unit") == "bpb"}


_LM2_LEAD = {"lm2_stiefel_adam": "In a second study, against stronger baselines",
             "lm2_stiefel_muon": "With manifold Muon on the frames (StiefelMuon)",
             "lm2_long": "Over three times the steps",
             "lm3_scale": "With its logit scale at an lr of its own"}
"""How the one-line answer to each of the second language-model study's questions opens (the chapter's,
and the intro's for those of :data:`BOTTOM_LINE_QUESTIONS`)."""


def language_model(q: dict, root: str | Path | None = None, named: bool = False) -> str:
    """A language-model question (:func:`stiefel_mini.evidence.judge.questions`) in one sentence. The
    first study's: Muon against AdamW, and the declared comparison, StiefelAdam against AdamW, each
    from its own row (:func:`~stiefel_mini.evidence.sentences.versus`); the model's size is in the
    scale note under the intro's table. The second study's: its primary row, after its lead-in
    (:data:`_LM2_LEAD`; ``named``: the caller's text names the second study, so the first question's
    lead-in, which only names it, is left out), the baseline always named; empty until the row has a
    paired seed."""
    if q["key"] in _LM2_LEAD:
        r = q["primary"][0]
        if not r["n"]:
            return ""
        phrase = row_phrase(r, short=True, baseline=True).split(", a mean gap")[0]
        if named and q["key"] == "lm2_stiefel_adam":
            return phrase[0].upper() + phrase[1:]
        return f"{_LM2_LEAD[q['key']]}: {phrase}"
    rows = _lm_rows(q)
    task = next(iter(scale([q], root)["tasks"]), None)
    if not rows or task is None:
        return ""
    text = f"On {task['task']}, in validation bits per byte (lower is better)"
    muon = rows.get(("muon", "adamw"))
    if muon:
        text += ", " + versus(muon, "was")
    prim = rows.get(("stiefel", "adamw"))
    if prim:
        text += f"; StiefelAdam against AdamW, as declared: {row_phrase(prim, short=True).split(', a mean gap')[0]}"
    return text


BOTTOM_LINE_QUESTIONS = ("lm_gain", "lm2_stiefel_adam", "lm3_scale")
"""The reader's questions the intro's bottom line answers (StiefelAdam against AdamW, in each study, the
third's with its logit scale at an lr of its own), each once it has a paired seed; the others have their
rows in the intro's table, and the chapter says them all."""


def bottom_line(vs: list[dict], root: str | Path | None = None, questions: list[dict] = ()) -> list[str]:
    """The intro's bottom line, as sentences: the scale tried, the result against AdamW (with what
    fresh seeds said), the language model's answers (:func:`language_model`, for the questions of
    :data:`BOTTOM_LINE_QUESTIONS` among ``questions``) and what it means for a reader. The count of
    claims that held (:func:`tally`) goes under the table."""
    sc = scale([*vs, *questions], root)
    cores = " or ".join(f"{c}-core" for c in sc["cores"]) or "an unrecorded"
    widths = sorted({t["width"] for t in sc["tasks"] if t["width"]})
    out = [f"Tried small, on a {cores} CPU" + ("" if sc["gpu"] else " with no GPU") + ", with transformers of width "
           f"{', '.join(map(str, widths[:-1])) + ' and ' if len(widths) > 1 else ''}{widths[-1]}."]
    against = _against_adamw(vs)
    if against:
        out.append(f"Against AdamW, {arm_name('A1')} was {against}.")
    for q in questions:
        lm = language_model(q, root) if q["key"] in BOTTOM_LINE_QUESTIONS else ""
        if lm:
            out.append(lm + ".")
    meaning = _meaning([*vs, *questions])
    if meaning:
        out.append("So " + ", but ".join(meaning[:2]) + "".join(f"; {m}" for m in meaning[2:]) + ".")
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
    lm = _of(vs, "lm_gain")
    muon = _lm_rows(lm).get(("muon", "adamw")) if lm else None
    if muon and judged(muon)[1] and muon["wins"] > muon["losses"]:
        out.append("for a small language model try Muon first")
    return out


def _row(comp: Comparison, root: str | Path | None) -> dict:
    row = compute(comp, root)
    compare.correct([row])
    return row


def advice(vs: list[dict], root: str | Path | None = None) -> list[dict]:
    """Part IV's table: ``[{"situation", "try", "measured", "regime"}]``, each ``measured`` a paired
    row in plain words (:func:`~stiefel_mini.evidence.words.row_phrase`) or a claim's phrase; with the
    language-model question among ``vs`` (:func:`stiefel_mini.evidence.judge.questions`), a row for
    a language model, what to try decided by Muon's row against AdamW; with the second study's, a row
    per Stiefel arm against the better arm of its family, decided by its primary (StiefelAdam's by the
    third study's, its logit scale at an lr of its own, once that has a paired seed, the second's
    result beside it)."""
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
    lm = _of(vs, "lm_gain")
    rows = _lm_rows(lm) if lm else {}
    muon, prim = rows.get(("muon", "adamw")), rows.get(("stiefel", "adamw"))
    if muon and prim:
        ahead = judged(muon)[1] and muon["wins"] > muon["losses"]
        vs_muon = rows.get(("stiefel", "muon"))
        out.append({"situation": "a small language model (GPT-2-like), trained from scratch",
                    "try": "Muon on the hidden matrices, AdamW on the rest" if ahead else
                           "AdamW, its lr tuned; measure Muon and StiefelAdam against it",
                    "measured": "; ".join([row_phrase(muon)] + ([row_phrase(flip(vs_muon))] if vs_muon else [])
                                          + [f"StiefelAdam against AdamW, the comparison declared for it: "
                                             f"{row_phrase(prim)}"]),
                    "regime": plain_regime(prim["regime"])})
    for key, family, short, arm in (
            ("lm2_stiefel_adam", "AdamW", "StiefelAdam", "StiefelAdam on the Q/K frames, AdamW on the rest"),
            ("lm2_stiefel_muon", "Muon", "StiefelMuon", "StiefelMuon: manifold Muon on the Q/K frames, Muon on the "
                                                        "other hidden matrices")):
        v = _of(vs, key)
        r = v["primary"][0] if v and v["primary"] else None
        measured = row_phrase(r) if r and r["n"] else ""
        third = _of(vs, "lm3_scale") if key == "lm2_stiefel_adam" else None
        if third and third["primary"] and third["primary"][0]["n"]:
            measured = row_phrase(third["primary"][0]) + (
                f"; with the scale at AdamW's lr (the second study): {measured}" if measured else "")
            r, short = third["primary"][0], "StiefelAdam with its own scale lr"
            arm = "StiefelAdam on the Q/K frames, its logit scale at an lr of its own, AdamW on the rest"
        if r and r["n"]:
            best = side_names(r)[1]
            resolved = judged(r)[1]
            out.append({"situation": f"a small language model, against the better {family} (with or without "
                                     "QK-norm, warm-up and lr tuned)",
                        "try": arm if resolved and r["wins"] > r["losses"] else
                               best if resolved else f"{best} ({short} made no clear difference against it)",
                        "measured": measured, "regime": plain_regime(r["regime"])})
    return out

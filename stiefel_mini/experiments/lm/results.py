"""Reading the language-model study's results: sweeps, curves, samples and costs per arm, and the setup.

Pure functions of the payload :func:`stiefel_mini.experiments.lm.experiment.study` writes (``results/lm/study.json``,
:data:`~stiefel_mini.experiments.lm.studies.ROUND1`),
of the second study's (``results/lm/round2.json``, :data:`~stiefel_mini.experiments.lm.studies.ROUND2`), of the
third's (``results/lm/round3.json``, :data:`~stiefel_mini.experiments.lm.studies.ROUND3`) and of the
benchmark's record (``results/benchmarks/lm_throughput.json``), for the chapter and the
evidence layer; :func:`setup_facts` gathers the numbers that describe a run. No training code. The
comparisons and verdicts are the evidence layer's (:data:`stiefel_mini.evidence.claims.LM_CLAIMS`).
"""

from __future__ import annotations

import math

import numpy as np

from stiefel_mini.experiments.lm.attention import uniform_entropy
from stiefel_mini.experiments.lm.config import LM_ARMS, PRESETS, LMConfig
from stiefel_mini.experiments.lm.model import gpt2_parameter_count, scale_growth_bound
from stiefel_mini.experiments.lm.plans import Study, plan
from stiefel_mini.experiments.lm.studies import ROUND1, ROUND2, ROUND3, ROUND4
from stiefel_mini.experiments.records import load_results
from stiefel_mini.experiments.stats import paired_ratio
from stiefel_mini.resources import results_path

__all__ = ["STUDY_FILE", "THROUGHPUT_FILE", "TOKENIZER_META", "setup_facts", "load_study", "load_throughput",
           "progress_counts", "sweep_rows", "seed_runs", "curve_band", "difference_band", "throughput_rows", "arm_costs",
           "samples", "ROUND2_FILE", "load_round2", "round2_progress", "round2_runs", "round2_sweep_rows",
           "sharpness", "ROUND3_FILE", "load_round3", "round3_runs", "round3_progress", "PHASE_NAMES",
           "progress_sentence", "SHARED_SETTINGS", "chosen_settings", "ROUND4_FILE", "load_round4", "lead_study",
           "SETTING_WORDS", "settings_text", "settled_at"]

STUDY_FILE = "lm/study.json"
"""The study's results file under ``results/``."""
THROUGHPUT_FILE = "benchmarks/lm_throughput.json"
"""The language-model benchmark's record under ``results/``: every study's arms in one run
(``benchmarks/lm_throughput.py --study 1 2 4 --per_head --out``)."""
ROUND2_FILE = "lm/round2.json"
"""Round 2's results file under ``results/``."""
ROUND3_FILE = "lm/round3.json"
"""Round 3's results file under ``results/``."""
ROUND4_FILE = ROUND4.out.removeprefix("results/")
"""The fourth study's results file under ``results/``."""
TOKENIZER_META = "lm/tokenizer_meta.json"
"""The tokenizer's measurements (bytes per token, tokens per split) under ``results/``."""


def setup_facts(cfg: LMConfig = PRESETS["cpu"]) -> dict:
    """The numbers that describe a run of ``cfg``, for the chapter's prose.

    From the tokenizer's record (no corpus needed): ``addresses``, ``val``, ``test`` (counts) and
    ``years``, ``val_years``, ``test_years`` (first, last) of the corpus and its held-out splits,
    ``bytes_per_token`` on validation and ``passes`` over the training tokens. From ``cfg``: the
    model's ``layers``, ``width``, ``heads``, ``head_size``, ``context``, ``vocab`` and ``params``
    (the output layer shares the token embedding); ``steps``, ``batch``, ``tokens``
    (``steps * batch * context``), ``threads`` and ``max_step`` (the frames' trust cap). Then
    ``uniform_bpb``, the bits per byte of a model that gives every token the same probability,
    :math:`\\log_2 V / \\text{bytes per token}`; the study's ``seeds`` and ``sweep_seeds``; Muon's
    ``ns_steps`` (Newton-Schulz iterations per step) and the samples' ``temperature`` and ``top_k``.
    Raises ``ValueError`` when ``cfg``'s vocabulary is not the tokenizer's.
    """
    import inspect

    from stiefel_mini.experiments.lm.experiment import sample
    from stiefel_mini.experiments.reference_optimizers import newton_schulz

    meta = load_results(results_path(TOKENIZER_META))
    m = cfg.model
    if m.vocab_size != meta["vocab_size"]:
        raise ValueError(f"cfg.model.vocab_size={m.vocab_size} but the tokenizer has {meta['vocab_size']} tokens")
    tokens = cfg.steps * cfg.batch_size * m.context
    bpt = meta["bytes_per_token"]["val"]
    years = {k: tuple(v) for k, v in meta["years"].items()}
    defaults = {k: v.default for k, v in inspect.signature(sample).parameters.items()}
    return {"addresses": sum(meta["addresses"].values()),
            "years": (min(y[0] for y in years.values()), max(y[1] for y in years.values())),
            "val": meta["addresses"]["val"], "test": meta["addresses"]["test"],
            "val_years": years["val"], "test_years": years["test"],
            "layers": m.n_layer, "width": m.d_model, "heads": m.n_head, "head_size": m.d_model // m.n_head,
            "context": m.context, "vocab": m.vocab_size,
            "params": gpt2_parameter_count(m),
            "steps": cfg.steps, "batch": cfg.batch_size, "tokens": tokens,
            "passes": tokens / meta["tokens"]["train"], "bytes_per_token": bpt,
            "uniform_bpb": math.log2(m.vocab_size) / bpt, "threads": cfg.threads,
            "max_step": cfg.optimizer.max_step, "seeds": ROUND1.paired_seeds, "sweep_seeds": ROUND1.sweep_seeds,
            "ns_steps": inspect.signature(newton_schulz).parameters["steps"].default,
            "temperature": defaults["temperature"], "top_k": defaults["top_k"]}


def _load(name: str) -> dict | None:
    try:
        return load_results(results_path(name))
    except FileNotFoundError:
        return None


def load_study() -> dict | None:
    """The study's results file (:data:`STUDY_FILE`), or ``None`` where this copy of the results lacks it."""
    return _load(STUDY_FILE)


def load_round2() -> dict | None:
    """Round 2's results file (:data:`ROUND2_FILE`), or ``None`` where this copy of the results lacks it."""
    return _load(ROUND2_FILE)


def load_throughput() -> dict | None:
    """The benchmark's record (:data:`THROUGHPUT_FILE`), or ``None`` where this copy of the results lacks it."""
    return _load(THROUGHPUT_FILE)


def progress_counts(payload: dict | None, study: Study = ROUND1) -> dict:
    """``{"sweep", "seeds", "remaining", "best"}``: finished sweep and seed runs, runs still to go
    (:func:`stiefel_mini.experiments.lm.plans.plan`) and each swept arm's best lr fields."""
    runs = payload["runs"] if payload else []
    state = plan(study, runs)
    return {"sweep": sum(r["phase"] == "sweep" for r in runs), "seeds": sum(r["phase"] == "seeds" for r in runs),
            "remaining": state.remaining, "best": state.best}


def sweep_rows(payload: dict | None) -> list[dict]:
    """One row per (arm, swept value) of the lr sweeps: ``{"arm", "swept", "value", "val_bpb", "n"}``,
    the mean validation bits per byte over the sweep seeds, in study order then by value."""
    if not payload:
        return []
    order = [t.arm for t in ROUND1.tunings]
    rows: dict[tuple, list[float]] = {}
    for r in payload["runs"]:
        if r["phase"] == "sweep":
            (((swept, _),),) = ROUND1.tuning(r["arm"]).stages  # one stage of one axis per arm
            rows.setdefault((r["arm"], swept, r[swept]), []).append(r["val_bpb"])
    out = [{"arm": a, "swept": s, "value": v, "val_bpb": float(np.mean(b)), "n": len(b)}
           for (a, s, v), b in rows.items()]
    return sorted(out, key=lambda row: (order.index(row["arm"]), row["value"]))


def seed_runs(payload: dict | None, arm: str) -> dict[int, dict]:
    """``arm``'s runs of the paired seeds (at its best lr), keyed by seed."""
    if arm not in LM_ARMS:
        raise ValueError(f"unknown arm {arm!r}; choose one of {sorted(LM_ARMS)}")
    if not payload:
        return {}
    return {r["seed"]: r for r in payload["runs"] if r["phase"] == "seeds" and r["arm"] == arm}


def _metric(runs: dict[int, dict], metric: str) -> None:
    if any(metric not in r["history"] for r in runs.values()):
        raise ValueError(f"metric {metric!r} is not in these runs' history; they hold "
                         f"{sorted(next(iter(runs.values()))['history'])}")


def curve_band(runs: dict[int, dict], metric: str = "val_bpb") -> dict | None:
    """The curves of ``metric`` (a key of each run's ``history``: ``val_bpb``, and in round 2
    ``max_logit``, ``min_entropy``) on one token axis: ``{"tokens", "median", "low", "high"}`` (median
    and range over seeds at each evaluation; runs that diverged left out), ``None`` without runs."""
    runs = {s: r for s, r in runs.items() if r.get("diverged_at") is None}
    if not runs:
        return None
    _metric(runs, metric)
    curves = np.array([r["history"][metric] for r in runs.values()], dtype=float)  # (seeds, evals)
    tokens = next(iter(runs.values()))["history"]["tokens"]
    return {"tokens": np.asarray(tokens), "median": np.median(curves, 0), "low": curves.min(0),
            "high": curves.max(0)}


def difference_band(runs: dict[int, dict], baseline: dict[int, dict]) -> dict | None:
    """The paired validation curve ``runs[s] - baseline[s]`` over the seeds both have (runs that
    diverged left out): ``{"tokens", "median", "low", "high", "n"}`` at each evaluation, the median and
    range over seeds; ``None`` without a common seed. Negative: lower bits per byte than the baseline."""
    ok = lambda r: r.get("diverged_at") is None  # noqa: E731
    seeds = sorted(s for s in runs if s in baseline and ok(runs[s]) and ok(baseline[s]))
    if not seeds:
        return None
    d = np.array([np.subtract(runs[s]["history"]["val_bpb"], baseline[s]["history"]["val_bpb"]) for s in seeds])
    return {"tokens": np.asarray(runs[seeds[0]]["history"]["tokens"]), "median": np.median(d, 0),
            "low": d.min(0), "high": d.max(0), "n": len(seeds)}  # d: (seeds, evals)


def settled_at(band: dict) -> dict:
    """Where a paired difference curve (:func:`difference_band`) took the side it ends on and kept it:
    ``{"side", "tokens"}``, ``side`` the sign of the last median (-1 below the baseline, +1 above, 0
    level) and ``tokens`` the first evaluation from which every median is on that side (a level end
    gives the last evaluation's)."""
    side = int(np.sign(band["median"][-1]))
    keeps = np.sign(band["median"]) == side  # (evals,)
    first = len(keeps) - int(np.argmin(keeps[::-1])) if not keeps.all() else 0
    return {"side": side, "tokens": float(band["tokens"][first if side else -1])}


def throughput_rows(record: dict | None) -> list[dict]:
    """The language-model benchmark's rates (``benchmarks/lm_throughput.py --out``), one row per
    (threads, timed arm), in the benchmark's order: ``{"threads", "arm", "stands_for", "tokens_per_s",
    "ratio", "low", "high"}``; ``stands_for``: ``{study: arm}``, the studies' arms it is the computation of.

    ``tokens_per_s`` is the best round's, ``tokens_per_step / min_r t_r``; ``ratio`` the median over
    rounds of the step time over the baseline's (``record["baseline"]``, AdamW) in the same round,
    ``low``-``high`` its range (:func:`stiefel_mini.experiments.stats.paired_ratio`). Empty without a record.
    """
    if not record:
        return []
    stands = {a["name"]: {e["study"]: e["arm"] for e in a["stands_for"]} for a in record["arms"]}
    out = []
    for entry in record["timing"]:
        times = entry["seconds_per_step"]
        for arm in times:  # in the benchmark's order
            r = paired_ratio(times[arm], times[record["baseline"]])
            out.append({"threads": entry["threads"], "arm": arm, "stands_for": stands[arm],
                        "tokens_per_s": entry["tokens_per_step"] / min(times[arm]),
                        "ratio": r["median"], "low": r["low"], "high": r["high"]})
    return out


def arm_costs(record: dict | None, study: int, threads: int = 1) -> dict[str, dict]:
    """Study ``study``'s arms -> their row of :func:`throughput_rows` at ``threads``: the timed arm each
    is the computation of. Empty without a record; an arm the run did not time is left out."""
    return {r["stands_for"][study]: r for r in throughput_rows(record)
            if r["threads"] == threads and study in r["stands_for"]}


def samples(payload: dict | None, seed: int = 0) -> dict[str, list[dict]]:
    """Per arm, the texts its seed-``seed`` model wrote (``[{"prompt", "text"}]``), where that run exists."""
    return {arm: run["samples"] for arm in LM_ARMS if (run := seed_runs(payload, arm).get(seed)) is not None}


def round2_progress(payload: dict | None, study: Study = ROUND2) -> dict:
    """Where round 2 stands: ``{"finished", "done", "remaining", "best", "better"}``: finished runs per
    phase (``{"sweep": 8, ...}``), the finished work and the work left in runs of ``study.steps``
    (a long run counts ``long_steps / steps``; what is left includes runs still waiting on a choice,
    :func:`~stiefel_mini.experiments.lm.plans.plan`), each swept arm's best settings and each
    family's better arm, once known."""
    runs = payload["runs"] if payload else []
    state = plan(study, runs)
    finished: dict[str, int] = {}
    for r in runs:
        finished[r["phase"]] = finished.get(r["phase"], 0) + 1
    done = sum(r["steps"] / study.steps for r in runs)
    return {"finished": finished, "done": done, "remaining": state.remaining, "best": state.best,
            "better": state.better}


def round2_runs(payload: dict | None, arm: str, phase: str = "paired", study: Study = ROUND2) -> dict[int, dict]:
    """``arm``'s round-2 runs of ``phase``, keyed by seed: ``"paired"`` or ``"long"`` (each run at the
    settings the plan chose), or ``"sweep"``: the sweep seeds' runs at the arm's best, empty until
    its grid is complete (:func:`~stiefel_mini.experiments.lm.plans.plan`)."""
    arms = [a for a, _ in study.arms]
    if arm not in arms:
        raise ValueError(f"unknown arm {arm!r}; choose one of {sorted(arms)}")
    if phase not in ("sweep", "paired", "long"):
        raise ValueError(f"phase must be sweep, paired or long; got {phase!r}")
    runs = payload["runs"] if payload else []
    if phase != "sweep":
        return {r["seed"]: r for r in runs if r["arm"] == arm and r["phase"] == phase}
    best = plan(study, runs).best.get(arm)
    if best is None:
        return {}
    return {r["seed"]: r for r in runs if r["arm"] == arm and r["phase"] == "sweep" and r["steps"] == study.steps
            and all(r.get(k) == v for k, v in best.items())}


def round2_sweep_rows(payload: dict | None, study: Study = ROUND2) -> list[dict]:
    """One row per (arm, setting) of round 2's sweeps: ``{"arm", "setting", "val_bpb", "n"}``, the
    setting as ``{field: value}`` of the arm's swept fields and the mean validation bits per byte over
    the sweep seeds that have run (``None`` if one diverged), in the plan's order of arms."""
    if not payload:
        return []
    order = [t.arm for t in study.tunings]
    rows: dict[tuple, list] = {}
    for r in payload["runs"]:
        if r["phase"] == "sweep":
            swept = tuple((f, r[f]) for stage in study.tuning(r["arm"]).stages for f, _ in stage)
            rows.setdefault((r["arm"], swept), []).append(r["val_bpb"])
    out = [{"arm": a, "setting": dict(s), "val_bpb": None if None in v else float(np.mean(v)), "n": len(v)}
           for (a, s), v in rows.items()]
    return sorted(out, key=lambda row: (order.index(row["arm"]), tuple(row["setting"].values())))


def sharpness(runs: dict[int, dict], study: Study = ROUND2) -> dict | None:
    """How far attention sharpened over ``runs`` (seed -> run, e.g. :func:`round2_runs`):
    ``{"n", "growth", "entropy", "uniform", "bound"}``, ``None`` without a finished run.

    ``growth``: the median over seeds of the largest logit at the last evaluation over that at the
    first (the start); ``entropy``: the median lowest entropy at the last evaluation, beside
    ``uniform``, the most it can be (:func:`~stiefel_mini.experiments.lm.attention.uniform_entropy` of
    the preset's context); ``bound``: for runs with a learned frame scale, the most that scale can grow
    over the schedule at the lr that trains it (``scale_lr`` where a run has one, else ``lr``;
    :func:`~stiefel_mini.experiments.lm.model.scale_growth_bound`), else ``None``. Diverged runs are
    left out; ``n`` counts the rest.
    """
    cfg = PRESETS[study.preset]
    runs = [r for r in runs.values() if r["diverged_at"] is None]
    if not runs:
        return None
    h = [r["history"] for r in runs]
    bound = [scale_growth_bound(r["steps"], r.get("scale_lr") or r["lr"], r["warmup_frac"],
                                cfg.optimizer.final_lr_frac) for r in runs if r["logit_scale"] == "learned"]
    return {"n": len(runs), "growth": float(np.median([x["max_logit"][-1] / x["max_logit"][0] for x in h])),
            "entropy": float(np.median([x["min_entropy"][-1] for x in h])),
            "uniform": uniform_entropy(cfg.model.context), "bound": float(np.median(bound)) if bound else None}


def load_round3() -> dict | None:
    """Round 3's results file (:data:`ROUND3_FILE`), or ``None`` where this copy of the results lacks it."""
    return _load(ROUND3_FILE)


def load_round4() -> dict | None:
    """The fourth study's results file (:data:`ROUND4_FILE`), or ``None`` where this copy of the results lacks it."""
    return _load(ROUND4_FILE)


def lead_study(round4: dict | None = None) -> int:
    """The study whose arms the language-model chapter leads with, and prices: ``4`` once the fourth
    study's StiefelAdam and the better AdamW-family arm have run on a common long seed (when its first
    question has a paired seed, and the chapter's card answers from it), else ``2``. ``round4``: that
    study's payload (default: :func:`load_round4`)."""
    payload = load_round4() if round4 is None else round4
    runs = payload["runs"] if payload else []
    base = plan(ROUND4, runs).better.get("adamw")
    long = {(r["arm"], r["seed"]) for r in runs if r["phase"] == "long"}
    return 4 if base and any(("stiefel", s) in long and (base, s) in long for s in ROUND4.long_seeds) else 2


def round3_runs(payload: dict | None, arm: str, phase: str = "paired") -> dict[int, dict]:
    """``arm``'s round-3 runs of ``phase`` (``"sweep"`` or ``"paired"``) keyed by seed; for the sweep,
    those at the arm's best ``scale_lr`` (:func:`~stiefel_mini.experiments.lm.plans.plan`), empty
    until its grid is complete."""
    arms = [a for a, _ in ROUND3.arms]
    if arm not in arms:
        raise ValueError(f"unknown arm {arm!r}; choose one of {sorted(arms)}")
    if phase not in ("sweep", "paired"):
        raise ValueError(f"phase must be sweep or paired; got {phase!r}")
    runs = payload["runs"] if payload else []
    if phase == "paired":
        return {r["seed"]: r for r in runs if r["arm"] == arm and r["phase"] == "paired"}
    best = plan(ROUND3, runs).best.get(arm)
    return {} if best is None else {r["seed"]: r for r in runs if r["arm"] == arm and r["phase"] == "sweep"
                                    and r["scale_lr"] == best["scale_lr"]}


def round3_progress(payload: dict | None) -> dict:
    """Where round 3 stands: ``{"finished", "done", "remaining", "best", "sweep"}``: finished runs per
    phase, the finished work and the runs left in runs of ``ROUND3.steps``
    (:func:`~stiefel_mini.experiments.lm.plans.plan`), each arm's best settings once its sweep is
    complete, and per arm the sweep's mean validation bits per byte by ``scale_lr`` over the seeds that
    have run (``None`` if one diverged), ``{arm: [(scale_lr, val_bpb, n)]}`` in increasing lr."""
    runs = payload["runs"] if payload else []
    state = plan(ROUND3, runs)
    finished: dict[str, int] = {}
    sweep: dict[str, dict[float, list]] = {}
    for r in runs:
        finished[r["phase"]] = finished.get(r["phase"], 0) + 1
        if r["phase"] == "sweep":
            sweep.setdefault(r["arm"], {}).setdefault(r["scale_lr"], []).append(r["val_bpb"])
    rows = {arm: [(lr, None if None in v else float(np.mean(v)), len(v)) for lr, v in sorted(by.items())]
            for arm, by in sweep.items()}
    done = sum(r["steps"] / ROUND3.steps for r in runs)
    return {"finished": finished, "done": done, "remaining": state.remaining, "best": state.best, "sweep": rows}


SHARED_SETTINGS = ("betas", "weight_decay", "momentum", "final_lr_frac", "grad_clip", "steps")
"""The settings every arm of the third study shares (its ``base_config``): the rest of a recipe."""


def chosen_settings(payload: dict | None, study: Study = ROUND3) -> dict[str, dict]:
    """The settings ``study`` chose for each of its arms, as it ran them on the seeds it compares.

    ``{arm: {**best, **shared}}``; ``shared``: the :data:`SHARED_SETTINGS` of the file's ``base_config``.
    The third study (the default): ``best`` the arm's settings at its best ``scale_lr``
    (:func:`~stiefel_mini.experiments.lm.plans.plan` of :data:`~stiefel_mini.experiments.lm.studies.ROUND3`:
    ``lr``, ``warmup_frac``, ``scale_lr`` and ``frame_lr`` with ``max_step`` for ``stiefel_scale``,
    ``muon_lr`` and ``per_head`` for ``stiefel_muon_scale``); an arm whose sweep is not complete is left
    out. A study without paired seeds compares its long runs, the fourth
    (:data:`~stiefel_mini.experiments.lm.studies.ROUND4`): ``best`` the settings of the arm's long
    runs (the plan's ``long_best``: its sweep's best, its main lr re-checked at the long length),
    ``steps`` the long length, for each arm with a long run finished. ``{}`` without the file.
    """
    if not payload:
        return {}
    base = payload["base_config"]
    shared = {k: (tuple(base[k]) if isinstance(base[k], list) else base[k]) for k in SHARED_SETTINGS}
    state = plan(study, payload["runs"])
    if study.paired_seeds:  # compared at the sweep's length, at the sweep's best
        return {arm: {**best, **shared} for arm, best in state.best.items()}
    ran = {r["arm"] for r in payload["runs"] if r["phase"] == "long"}
    return {arm: {**best, **shared, "steps": study.long_steps} for arm, best in state.long_best.items() if arm in ran}


SETTING_WORDS = {"lr": "lr", "warmup_frac": "warm-up", "muon_lr": "Muon lr", "frame_lr": "frame lr",
                 "max_step": "trust cap", "scale_lr": "scale lr", "max_iter": "solver updates per step"}
"""The words for an arm's settings (the fields of :data:`~stiefel_mini.experiments.lm.plans.RECIPES`), in
the order :func:`settings_text` gives them."""


def settings_text(settings: dict) -> str:
    """An arm's settings in words, those of :data:`SETTING_WORDS` it has (``None`` left out), in that order:
    ``"lr 0.002, warm-up 25%, frame lr 0.3, trust cap 1, scale lr 0.1"``."""
    return ", ".join(f"{word} {settings[k]:.0%}" if k == "warmup_frac" else f"{word} {settings[k]:g}"
                     for k, word in SETTING_WORDS.items() if settings.get(k) is not None)


PHASE_NAMES = {"sweep": "sweep runs", "paired": "runs on the paired seeds",
               "check": "learning-rate checks at the longer length", "long": "long runs"}
"""How the chapter names the runs of each ``phase`` of the second and third studies."""


def progress_sentence(progress: dict) -> str:
    """How far a study has run, in one sentence, from :func:`round2_progress` or :func:`round3_progress`.

    ``"All 48 of its runs have finished: 16 sweep runs, 32 runs on the paired seeds."`` once nothing is
    left, else ``"Finished so far: 8 sweep runs, about 17% of its training."``, the share being
    ``done / (done + remaining)`` in runs of the study's short length."""
    done = ", ".join(f"{n} {PHASE_NAMES[phase]}" for phase, n in progress["finished"].items()) or "no run"
    if not progress["remaining"]:
        return f"All {sum(progress['finished'].values())} of its runs have finished: {done}."
    share = progress["done"] / (progress["done"] + progress["remaining"])
    return f"Finished so far: {done}, about {share:.0%} of its training."

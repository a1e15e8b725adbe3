"""``python -m stiefel_mini.evidence [--json] [--cards] [--files] [--ledger] [--root DIR] [--write-ledger]``: the
verdicts and their comparisons.

Without ``--json``: the answer per task (the decision cards of the book's introduction,
:mod:`stiefel_mini.evidence.cards`), then per claim the verdict, how sure, the declared primary
comparison(s), the confirmation seeds and the secondary comparisons, as text; ``--cards``: the cards
only. With ``--json``: a list with one object
per claim (``key``, ``claim``, ``paper``, ``verdict``, ``status``, ``sure``, ``chapter``,
``primary`` rows with ``p`` and ``p_holm``, ...). ``--files``: what each experiment's results file
holds (its runs, and each arm's seeds), the counts the results READMEs leave to this command. ``--root`` reads ``DIR/results/`` instead of the
committed files. ``--write-ledger`` rewrites ``results/ledger.json`` (commit times, from git) first.
"""

from __future__ import annotations

import argparse
import json
import sys

from stiefel_mini.evidence import cards, ledger
from stiefel_mini.evidence.judge import as_data, questions, verdicts
from stiefel_mini.evidence.words import effect_text, sure_text


def _line(r: dict, family: int) -> str:
    return f"    {r['label']} [{r['regime']}]: {effect_text(r)}; {sure_text(r, family)}"


def _seeds(seeds: list[int]) -> str:
    """``[0, 1, 2, 5]`` as ``"0-2, 5"``."""
    out: list[list[int]] = []
    for s in sorted(set(seeds)):
        if out and s == out[-1][-1] + 1:
            out[-1].append(s)
        else:
            out.append([s])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in out)


def holdings(root: str | None = None) -> dict[str, dict]:
    """``{"cifar/r2_fitted.json": {"runs": 50, "arms": {"A0": [0, 1, ...], ...}}}``: every results file
    of an experiment (a file with a list of runs) and what it holds."""
    from pathlib import Path

    from stiefel_mini.evidence import runs
    from stiefel_mini.resources import CHECKOUT_RESULTS

    base = Path(root) / "results" if root else CHECKOUT_RESULTS
    out = {}
    for path in sorted(base.glob("*/*.json")):
        name = path.relative_to(base).as_posix()
        res = runs.load(name, root)
        if not isinstance((res or {}).get("runs"), list):
            continue
        arms: dict[str, list[int]] = {}
        for r in res["runs"]:
            arms.setdefault(r["arm"], []).append(r["seed"])
        out[name] = {"runs": len(res["runs"]), "arms": {a: sorted(set(s)) for a, s in arms.items()}}
    return out


def cards_text(vs: list[dict], qs: list[dict]) -> str:
    """The decision cards (:func:`stiefel_mini.evidence.cards.cards`) as text, one block per task."""
    return "\n".join(f"\n## {c['task']}: {c['answer']}.\n" + "\n".join(f"  {what}: {said}" for what, said in c["lines"])
                     + f"\n  measured: {c['scale']}" for c in cards.cards(vs, qs))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m stiefel_mini.evidence", description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    ap.add_argument("--root", default=None, help="a folder holding results/ (default: the committed files)")
    ap.add_argument("--ledger", action="store_true", help="print only the confirmation ledger, one block per claim")
    ap.add_argument("--files", action="store_true", help="print what each experiment's results file holds")
    ap.add_argument("--cards", action="store_true", help="print only the answer per task (the intro's cards)")
    ap.add_argument("--write-ledger", action="store_true", help="rewrite results/ledger.json from git first")
    args = ap.parse_args(argv)
    if args.write_ledger:
        print(f"wrote {ledger.write()}")
    if args.files:
        for name, h in holdings(args.root).items():
            arms = "; ".join(f"{a} seeds {_seeds(s)}" for a, s in h["arms"].items())
            print(f"{name}: {h['runs']} runs; {arms}")
        return
    paper, qs = verdicts(args.root), questions(args.root)
    vs = paper + qs
    if args.cards or not (args.json or args.ledger):
        print(cards_text(paper, [q for q in qs if q["status"] != "not tested yet"]))
        if args.cards:
            return
    if args.json:
        json.dump(as_data(vs), sys.stdout, indent=1)
        print()
        return
    if args.ledger:
        for v in vs:
            conf = v["confirmation"]
            if conf["status"] == "by construction":
                continue
            print(f"\n## {v['claim']}\n  declared: {conf['commit'] or 'not yet'} at {conf['time'] or '-'}")
            for phase, n in (conf.get("phases") or {"": {}}).items():
                print(f"  runs of both its arms{f' ({phase} phase)' if phase else ''}: {n.get('after', 0)} started "
                      f"after it on unchosen seeds, {n.get('before', 0)} before it, {n.get('on_chosen_seeds', 0)} "
                      "after it on seeds a choice was made on")
            print(f"  {conf['status']}: {conf['text']}")
            for r in conf["rows"]:
                if r["n"]:
                    print(_line(r, len(conf["rows"])))
        return
    for v in vs:
        print(f"\n## {v['claim']} (paper: {v['paper']}; chapter {v['chapter']})")
        print(f"  verdict: {v['verdict']}")
        print(f"  how sure: {v['sure']}")
        if v["primary"]:
            print(f"  primary: {v['declared']}")
            for r in v["primary"]:
                print(_line(r, len(v["primary"])))
        conf = v["confirmation"]
        if conf["status"] != "by construction":
            print(f"  confirmation: {conf['status']}: {conf['text']}")
            for r in conf["rows"]:
                if r["n"]:
                    print(_line(r, len(conf["rows"])))
        if v["scale_note"]:
            print(f"  not tested: {v['scale_note']}")
        if v["secondary"]:
            print("  secondary (no vote):")
            for r in v["secondary"]:
                print(_line(r, 1))


if __name__ == "__main__":
    main()

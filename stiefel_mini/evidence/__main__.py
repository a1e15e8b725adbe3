"""``python -m stiefel_mini.evidence [--json] [--root DIR] [--write-ledger]``: the verdicts and their comparisons.

Without ``--json``: per claim, the verdict, how sure, the declared primary comparison(s), the
confirmation seeds and the secondary comparisons, as text. With ``--json``: a list with one object
per claim (``key``, ``claim``, ``paper``, ``verdict``, ``status``, ``sure``, ``chapter``,
``primary`` rows with ``p`` and ``p_holm``, ...). ``--root`` reads ``DIR/results/`` instead of the
committed files. ``--write-ledger`` rewrites ``results/ledger.json`` (commit times, from git) first.
"""

from __future__ import annotations

import argparse
import json
import sys

from stiefel_mini.evidence import ledger
from stiefel_mini.evidence.judge import as_data, verdicts
from stiefel_mini.evidence.words import effect_text, sure_text


def _line(r: dict, family: int) -> str:
    return f"    {r['label']} [{r['regime']}]: {effect_text(r)}; {sure_text(r, family)}"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m stiefel_mini.evidence", description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    ap.add_argument("--root", default=None, help="a folder holding results/ (default: the committed files)")
    ap.add_argument("--ledger", action="store_true", help="print only the confirmation ledger, one block per claim")
    ap.add_argument("--write-ledger", action="store_true", help="rewrite results/ledger.json from git first")
    args = ap.parse_args(argv)
    if args.write_ledger:
        print(f"wrote {ledger.write()}")
    vs = verdicts(args.root)
    if args.json:
        json.dump(as_data(vs), sys.stdout, indent=1)
        print()
        return
    if args.ledger:
        for v in vs:
            conf = v["confirmation"]
            if conf["status"] == "by construction":
                continue
            counts = conf.get("runs") or {}
            print(f"\n## {v['claim']}\n  declared: {conf['commit'] or 'not yet'} at {conf['time'] or '-'}"
                  f"\n  runs of its arms: {counts.get('after', 0)} started after it on unchosen seeds, "
                  f"{counts.get('before', 0)} before it, {counts.get('on_chosen_seeds', 0)} after it on seeds a "
                  f"choice was made on\n  {conf['status']}: {conf['text']}")
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

"""Print the round-2 tables from whatever the round-2 results files hold so far (partial sweeps too).

    PYTHONPATH=. python3 results/round2_summary.py            # every results/*/r2_*.json present

Grokking: each file's runs (files of one base config are merged, e.g. r2_long.json + r2_long_b.json),
one table per baseline (``adamw``; ``frozen_learned``, the flat-attention confound of issue 17) from
``grokking.paired_table``: each comparison over the seeds both of its arms finished, medians, paired
differences, exact sign / Wilcoxon p-values, both Holm-corrected across the table. CIFAR-10: lr
curves, each arm at its own best lr against A0 at its best, and the summary table.
"""

from __future__ import annotations

import sys
from pathlib import Path

from stiefel_mini.experiments import cifar, grokking
from stiefel_mini.experiments.records import load_results

ROOT = Path(__file__).resolve().parent
GROK_METRICS = ("steps_to_val95", "steps_to_val99", "final_val_acc", "collapses10", "share_above95",
                "entropy_final")


def _fmt(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)


def grokking_tables(paths: list[Path]) -> None:
    groups: dict[str, list[dict]] = {}
    for path in paths:
        res = load_results(path)
        groups.setdefault(repr(res["base_config"]) + repr(res["sweep"].get("weight_decays")), []).append(
            (path.name, res))
    for members in groups.values():
        names = [n for n, _ in members]
        res = grokking.merge_results([r for _, r in members])
        decays = res["sweep"].get("weight_decays") or [None]
        print(f"\n## grokking {' + '.join(names)}: {res['base_config']['steps']} steps, "
              f"{len(res['runs'])} runs, arms {res['sweep']['arms']}")
        for r in res["runs"]:
            m = r["metrics"]
            print(f"  {r['arm']:<16} seed {r['seed']} wd {r.get('weight_decay', '-')}: val95 "
                  f"{_fmt(m['steps_to_val95'])} val99 {_fmt(m['steps_to_val99'])} final {m['final_val_acc']:.3f} "
                  f"collapses10 {m.get('collapses10')} above95 {_fmt(m.get('share_above95'))} "
                  f"entropy {m['entropy_final']:.3f} max_logit {_fmt(m.get('max_logit_final'))} "
                  f"({r['wall_time_s'] / 60:.1f} min)")
        arms = [a for a in res["sweep"]["arms"] if any(r["arm"] == a for r in res["runs"])]
        for wd in decays:
            for baseline in ("adamw", "frozen_learned"):
                pairs = [(a, baseline) for a in arms if a != baseline]
                # each pair over the seeds both arms have (arms may hold different numbers of seeds)
                rows = grokking.paired_table(res, pairs, GROK_METRICS, weight_decay=wd) if baseline in arms else []
                if not rows:
                    continue
                print(f"\n  baseline {baseline}" + ("" if wd is None else f", weight decay {wd}") +
                      " (Holm across every comparison of this table)")
                for row in rows:
                    print(f"  {row['arm']:<16} {row['metric']:<16} n {row['n']} median {_fmt(row['median_arm'])} "
                          f"vs {_fmt(row['median_baseline'])} (never: {row['n_censored_arm']} vs "
                          f"{row['n_censored_baseline']}) diff {_fmt(row['diff_median'])} "
                          f"[{row['diff_interval_name']} {_fmt(row['diff_low'])}, {_fmt(row['diff_high'])}] "
                          f"better/tied/worse {row['wins']}/{row['ties']}/{row['losses']} "
                          f"p_sign {row['p_sign']:.3g} p_wilcoxon {row['p_wilcoxon']:.3g} Holm "
                          f"{row['p_sign_holm']:.3g} / {row['p_wilcoxon_holm']:.3g}"
                          + (" resolved" if row["resolved"] else ""))


def cifar_tables(paths: list[Path]) -> None:
    for path in paths:
        res = load_results(path)
        runs = res["runs"]
        print(f"\n## cifar {path.name}: {len(runs)} runs")
        for c in cifar.lr_curves(runs):
            pts = ", ".join(f"{p['value']:g}: {100 * p['acc_mean']:.2f}% (n {p['n']}, max logit "
                            f"{_fmt(p['max_logit'])})" for p in c["points"])
            print(f"  frac {c['train_fraction']} {c['arm']:<6} {c['swept']:<8} best {c['best']:g} "
                  f"sensitivity {_fmt(c['sensitivity_pp'])} pp | {pts}")
        for r in cifar.best_lr_comparison(runs):
            ci = r["diff_ci_pp"]
            print(f"  best vs best: {r['arm']} ({r['arm_swept']} {r['arm_best']:g}) - A0 (lr "
                  f"{r['baseline_best_lr']:g}) = {r['diff_pp']:+.2f} pp, t interval "
                  f"{'-' if ci is None else f'[{ci[0]:+.2f}, {ci[1]:+.2f}]'}, wins {r['wins']}/{len(r['seeds'])}, "
                  f"p_sign {r['p_sign']:.3g}, p_wilcoxon {r['p_wilcoxon']:.3g}, Holm {r['p_wilcoxon_holm']:.3g}")
        for row in res["summary"]:
            diff = "" if "diff_pp" not in row else (
                f" diff {row['diff_pp']:+.2f} pp wins {row['wins']}/{row['n_pairs']} p_sign {row['p_sign']:.3g} "
                f"Holm {_fmt(row.get('p_wilcoxon_holm'))}")
            print(f"  frac {row['train_fraction']} {row['arm']:<6} lr {row['lr']:g} frame_lr {_fmt(row['frame_lr'])}: "
                  f"test {100 * row['acc_mean']:.2f}% train {_fmt(row['train_acc'])} n {len(row['seeds'])}{diff}")


def main(argv: list[str]) -> None:
    paths = [Path(a) for a in argv] or sorted(ROOT.glob("*/r2_*.json"))
    grokking_tables([p for p in paths if p.parent.name == "grokking"])
    cifar_tables([p for p in paths if p.parent.name == "cifar"])


if __name__ == "__main__":
    main(sys.argv[1:])

"""The evidence as the book shows it: the intro's table, each chapter's box, the comparison tables.

Every function here formats rows computed by :mod:`stiefel_mini.evidence.judge` and
:mod:`stiefel_mini.evidence.compare`; none computes a number. The intro's one-screen table
(:func:`summary_html`) and a chapter's box (:func:`box_html`) print the same ``verdict`` and
``sure`` strings of the same verdict dicts, so they cannot disagree. :func:`details_html` holds the
regimes and the secondary comparisons; :func:`table_html` is one family of comparison rows in the
one row schema (mean [95% t], wins, exact p, corrected p, median and range).
"""

from __future__ import annotations

import html
from typing import Iterable

from stiefel_mini.evidence.judge import effect_text, number_text, sure_text

__all__ = ["summary_html", "box_html", "details_html", "table_html", "ARM_CODES"]

ARM_CODES = {
    "A0": "AdamW", "A1": "StiefelAdam (the paper's rule)", "A3": "frozen random frames",
    "A5": "AdamW followed by the polar projection", "A7": "StiefelAdam with an element-wise second moment",
    "QK-norm": "AdamW on normalised queries and keys",
}
"""The CIFAR arm codes, named where the intro first uses them."""

_E = html.escape


def _link(v: dict, prefix: str) -> str:
    href = f"{prefix}{v['chapter']}.html" + (f"#{v['anchor']}" if v["anchor"] else "")
    return f"<a href='{_E(href)}'>{_E(v['chapter'].replace('_', ' '))}</a>"


def summary_html(vs: list[dict], prefix: str = "") -> str:
    """The intro's table: claim | the paper's number | this book's | how sure | read (one row per claim)."""
    body = "".join(
        f"<tr data-claim='{_E(v['key'])}'><td data-label='claim'>{_E(v['claim'])}</td>"
        f"<td data-label='paper'>{_E(v['paper'])}</td>"
        f"<td data-label='this book'>{_E(v['verdict'])}</td><td data-label='how sure'>{_E(v['sure'])}</td>"
        f"<td data-label='read'>{_link(v, prefix)}</td></tr>" for v in vs)
    codes = "; ".join(f"<b>{_E(k)}</b> {_E(n)}" for k, n in ARM_CODES.items())
    return (f"<p class='verdict-codes'>Arms: {codes}.</p>"
            "<table class='verdict-table'><thead><tr><th>claim</th><th>paper</th><th>this book</th>"
            f"<th>how sure</th><th>read</th></tr></thead><tbody>{body}</tbody></table>")


def box_html(vs: list[dict], chapter: str) -> str:
    """A chapter's verdict box: the verdicts of the claims it tests, as in the intro's table."""
    mine = [v for v in vs if v["chapter"] == chapter]
    if not mine:
        raise ValueError(f"no claim is tested in chapter {chapter!r}; chapters: {sorted({v['chapter'] for v in vs})}")
    items = "".join(f"<li data-claim='{_E(v['key'])}'><b>{_E(v['claim'])}.</b> Paper: {_E(v['paper'])}. "
                    f"This book: <b class='verdict-words'>{_E(v['verdict'])}</b> "
                    f"(<span class='verdict-sure'>{_E(v['sure'])}</span>).</li>" for v in mine)
    return (f"<div class='admonition important verdict-box' id='verdict'><p class='admonition-title'>Verdict</p>"
            f"<ul>{items}</ul><p>Each verdict rests on one comparison declared in advance of the confirming runs "
            "(the primary); the other regimes are shown below it and do not vote. The introduction has the "
            "same table for every claim.</p></div>")


def _row_cells(r: dict, family: int) -> list[str]:
    if r.get("ratio"):
        rng = "" if r["low"] is None else f"{r['low']:.2g} to {r['high']:.2g}"
        return [effect_text(r), "", rng, sure_text(r, family)]
    u = r["unit"]
    rng = "" if r["n"] == 0 else \
        f"{number_text(r['median'], u)} ({number_text(r['low'], u)} to {number_text(r['high'], u)})"
    return [effect_text(r), f"{r['wins']}/{r['n']}" if r["n"] else "", rng, sure_text(r, family)]


def table_html(rows: Iterable[dict], family: bool = True) -> str:
    """One table of comparison rows: label | regime | mean [95% t] | wins | median (range) | test.

    ``family``: the rows were corrected together (:func:`stiefel_mini.evidence.compare.correct`) and
    the last column shows the corrected p; otherwise each row's own p.
    """
    rows = list(rows)
    m = len(rows) if family else 1
    body = "".join("<tr>" + "".join(f"<td>{_E(x)}</td>" for x in [r["label"], r["regime"], *_row_cells(r, m)])
                   + "</tr>" for r in rows)
    return ("<table class='evidence-table'><thead><tr><th>comparison (b − a)</th><th>regime</th>"
            "<th>mean [95% t]</th><th>wins</th><th>median (range)</th><th>test</th></tr></thead>"
            f"<tbody>{body}</tbody></table>")


def details_html(vs: list[dict]) -> str:
    """Per claim: the declared primary, its confirmation seeds and the secondary comparisons."""
    out = []
    for v in vs:
        if not v["primary"] and not v["secondary"]:
            continue
        out.append(f"<h4>{_E(v['claim'])}</h4><p><b>Primary</b>: {_E(v['declared'])}.</p>")
        if v["primary"]:
            out.append(table_html(v["primary"]))
        conf = v["confirmation"]
        if conf:
            have = conf["present"]
            state = (f"present so far: seeds {', '.join(map(str, have))}" if have else "not run yet")
            rows = [r for r in conf["rows"] if r["n"]]
            out.append(f"<p><b>Confirmation</b> ({_E(conf['note'])}): {_E(state)}.</p>")
            if rows:
                out.append(table_html(rows, family=False))
        if v["scale_note"]:
            out.append(f"<p><b>Not tested</b>: {_E(v['scale_note'])}.</p>")
        if v["secondary"]:
            out.append("<p><b>Secondary</b> (shown, no vote; each row its own p):</p>"
                       + table_html(v["secondary"], family=False))
    return "".join(out)

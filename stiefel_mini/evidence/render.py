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

__all__ = ["summary_html", "codes_html", "box_html", "details_html", "table_html", "word_html", "headline",
           "ARM_CODES", "WORDS", "WORD_MEANINGS"]

ARM_CODES = {
    "A0": "AdamW", "A1": "StiefelAdam (the paper's rule)", "A3": "frozen random frames",
    "A5": "AdamW followed by the polar projection", "A7": "StiefelAdam with an element-wise second moment",
    "QK-norm": "AdamW on normalised queries and keys",
}
"""The CIFAR arm codes, named where the intro first uses them."""

_E = html.escape


WORDS: dict[str, tuple[str, str, str]] = {
    "reproduced": ("held", "✔", "held"),
    "smaller effect": ("smaller", "▼", "smaller"),
    "larger effect": ("larger", "▲", "larger"),
    "mixed": ("mixed", "◐", "mixed"),
    "partly reproduced": ("partly", "◐", "mixed"),
    "contradicted": ("contradicted", "✘", "contradicted"),
    "not resolved": ("not resolved", "?", "open"),
    "not tested yet": ("not tested", "–", "open"),
    "by construction": ("by construction", "■", "design"),
}
"""Verdict status -> (the one word the intro's table shows, an icon that does not rely on colour, a
CSS class for its colour)."""

WORD_MEANINGS = {
    "held": "the paper's number lies inside this book's 95% interval",
    "smaller": "the paper's direction, resolved, but the effect is smaller than the paper's",
    "larger": "the paper's direction, resolved, and larger than the paper's",
    "mixed": "the primaries point different ways (the verdict names the regime of each)",
    "contradicted": "resolved against the claim",
    "not resolved": "the runs cannot decide (not the same as no effect)",
    "by construction": "true of the algorithm's definition, checked by tests",
}
"""What each word of the intro's table means (shown under it)."""


def word_html(status: str) -> str:
    """A verdict status as the intro's word, with its icon: ``<span class='verdict-word ...'>``."""
    word, icon, css = WORDS.get(status, (status, "?", "open"))
    return (f"<span class='verdict-word verdict-{css}' data-status='{_E(status)}'>"
            f"<span aria-hidden='true'>{icon}</span> {_E(word)}</span>")


def headline(v: dict) -> str:
    """This book's number for a claim, short: the primary's effect and wins (a ratio family: each)."""
    rows = [r for r in v["primary"] if r["n"]]
    if v["status"] == "by construction" or not rows:
        return "tests of the code" if v["status"] == "by construction" else "no paired runs yet"
    if rows[0].get("ratio"):
        return "; ".join(f"{r['gmean']:.3g}x {r['label'].split(', ', 1)[-1]}" for r in rows)
    r = max(rows, key=lambda r: abs(r["mean"] or 0.0)) if len(rows) > 1 else rows[0]
    prefix = "largest: " if len(rows) > 1 else ""
    return f"{prefix}{effect_text(r)}, n = {r['n']}"


def summary_html(vs: list[dict], prefix: str = "") -> str:
    """The intro's table: claim (linked to its chapter's box) | the paper's number | this book's | verdict.

    One short row per claim, one verdict word each (:data:`WORDS`); the full verdict and how sure
    it is are in the chapter's box (:func:`box_html`), which prints the same strings.
    """
    body = "".join(
        f"<tr data-claim='{_E(v['key'])}'><td data-label='claim'>{_claim_link(v, prefix)}</td>"
        f"<td data-label='paper'>{_E(v['paper'])}</td>"
        f"<td data-label='this book'>{_E(headline(v))}</td>"
        f"<td data-label='verdict'>{word_html(v['status'])}</td></tr>" for v in vs)
    used = {WORDS.get(v["status"], (v["status"],))[0] for v in vs}
    legend = "; ".join(f"{word_html(st)}: {_E(WORD_MEANINGS[w])}" for st, (w, _, _) in WORDS.items()
                       if w in used and w in WORD_MEANINGS and st != "partly reproduced")
    return ("<table class='verdict-table'><thead><tr><th>claim</th><th>paper</th><th>this book</th>"
            f"<th>verdict</th></tr></thead><tbody>{body}</tbody></table>"
            f"<p class='verdict-legend'>{legend}.</p>")


def codes_html() -> str:
    """The CIFAR arm codes the claims use, in one line."""
    codes = "; ".join(f"<b>{_E(k)}</b> {_E(n)}" for k, n in ARM_CODES.items())
    return f"<p class='verdict-codes'>Arms: {codes}.</p>"


def _claim_link(v: dict, prefix: str) -> str:
    href = f"{prefix}{v['chapter']}.html" + (f"#{v['anchor']}" if v["anchor"] else "")
    return f"<a href='{_E(href)}'>{_E(v['claim'])}</a>"


def box_html(vs: list[dict], chapter: str) -> str:
    """A chapter's verdict box: per claim, its verdict word, the verdict, how sure, and its confirmation."""
    mine = [v for v in vs if v["chapter"] == chapter]
    if not mine:
        raise ValueError(f"no claim is tested in chapter {chapter!r}; chapters: {sorted({v['chapter'] for v in vs})}")
    items = "".join(f"<li data-claim='{_E(v['key'])}'><b>{_E(v['claim'])}.</b> Paper: {_E(v['paper'])}. "
                    f"This book: {word_html(v['status'])} <b class='verdict-words'>{_E(v['verdict'])}</b> "
                    f"(<span class='verdict-sure'>{_E(v['sure'])}</span>)."
                    + (f" <span class='verdict-confirmation'>{_E(_cap(v['confirmation']['text']))}.</span>"
                       if v["confirmation"] and v["confirmation"]["text"] else "") + "</li>" for v in mine)
    return (f"<div class='admonition important verdict-box' id='verdict'><p class='admonition-title'>Verdict</p>"
            f"<ul>{items}</ul><p>Each verdict rests on one declared comparison, its primary; the other regimes "
            "are shown below it and do not vote. A primary is confirmed only by runs that started after it was "
            "declared, on seeds no choice was made on, tested on their own. The introduction has one line per "
            "claim.</p></div>")


def confirmation_html(vs: list[dict]) -> str:
    """The intro's confirmation list: per claim with a ledger text, that text, marked with its claim and
    the ledger's status (``data-confirmation``: confirmed, pending, ...)."""
    items = "".join(f"<li class='verdict-confirmation' data-claim='{_E(v['key'])}' "
                    f"data-confirmation='{_E(v['confirmation']['status'])}'><b>{_E(v['claim'])}</b>: "
                    f"{_E(v['confirmation']['text'])}.</li>" for v in vs if v["confirmation"]["text"])
    return (f"<div class='verdict-confirmations'><p><b>Confirmation</b>, claim by claim:</p><ul>{items}</ul></div>"
            if items else "")


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


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


def details_html(vs: list[dict], open_: bool = False) -> str:
    """Per claim: the declared primary, its confirmation and the secondary comparisons, in a closed
    ``<details>`` block (``open_`` opens it)."""
    out = []
    for v in vs:
        if not v["primary"] and not v["secondary"]:
            continue
        out.append(f"<h4>{_E(v['claim'])}</h4>" + (f"<p><b>Primary</b>: {_E(v['declared'])}.</p>" if v["declared"]
                                                   else f"<p><b>No primary</b>: {_E(v['verdict'])}.</p>"))
        if v["primary"]:
            out.append(table_html(v["primary"]))
        conf = v["confirmation"]
        if conf and conf["text"]:
            out.append(f"<p><b>Confirmation</b>: {_E(conf['text'])}.</p>")
            rows = [r for r in conf["rows"] if r["n"]]
            if rows:
                out.append(table_html(rows, family=len(rows) > 1))
        if v["scale_note"]:
            out.append(f"<p><b>Not tested</b>: {_E(v['scale_note'])}.</p>")
        if v["secondary"]:
            out.append("<p><b>Secondary</b> (shown, no vote; each row its own p):</p>"
                       + table_html(v["secondary"], family=False))
    return (f"<details class='evidence-details'{' open' if open_ else ''}><summary>The declared comparisons, their "
            f"confirmation and the other regimes</summary>{''.join(out)}</details>")

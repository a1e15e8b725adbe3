"""The evidence as the book shows it: the intro's table, each chapter's box, the comparison tables.

Every function here formats what :mod:`stiefel_mini.evidence.judge`, :mod:`~stiefel_mini.evidence.compare`
and :mod:`~stiefel_mini.evidence.plain` computed; none computes a number. The intro opens with
:func:`bottom_line_html`, then :func:`summary_html`, :func:`scale_note_html` and :func:`legend_html`;
the appendix shows :func:`ledger_html` and :func:`details_html`. The intro's one-screen table
(:func:`summary_html`) and a chapter's box (:func:`box_html`) print the same verdict word and plain
words (``short_phrase``, ``sentence``) of the same verdict dicts, so they cannot disagree. :func:`details_html` holds the
regimes and the secondary comparisons; :func:`table_html` is one family of comparison rows in the
one row schema (mean [95% t], wins, exact p, corrected p, median and range).
"""

from __future__ import annotations

import html
import re
from typing import Iterable

from stiefel_mini.evidence.cards import beside
from stiefel_mini.evidence.plain import bottom_line, scale, tally
from stiefel_mini.evidence.sentences import fresh_text
from stiefel_mini.evidence.words import effect_text, number_text, plain_regime, sure_text

__all__ = ["summary_html", "legend_html", "bottom_line_html", "scale_note_html", "ledger_html", "title",
           "APPENDIX", "COMPARISONS", "SHORT_TITLES", "advice_html", "cards_html", "cell_phrase", "codes_html", "box_html", "details_html", "table_html", "word_html",
           "ARM_CODES", "WORDS", "WORD_MEANINGS"]

ARM_CODES = {
    "A0": "AdamW", "A1": "StiefelAdam (the paper's rule)", "A3": "frozen random frames",
    "A5": "AdamW followed by the polar projection", "A7": "StiefelAdam with an element-wise second moment",
    "QK-norm": "AdamW on normalised queries and keys",
}
"""The CIFAR arm codes, named where the intro first uses them."""

_E = html.escape

APPENDIX = "how_we_test.html"
"""The appendix page every verdict box links to for how a claim is tested (relative to a chapter's page)."""
COMPARISONS = "appendix_comparisons.html"
"""The appendix page with every comparison and the confirmation ledger, which every verdict box links to."""


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
    "not tested": "its study has no paired seed in the results yet",
}
"""What each word of the intro's table means (shown under it)."""


def word_html(status: str) -> str:
    """A verdict status as the intro's word, with its icon: ``<span class='verdict-word ...'>``."""
    word, icon, css = WORDS.get(status, (status, "?", "open"))
    return (f"<span class='verdict-word verdict-{css}' data-status='{_E(status)}'>"
            f"<span aria-hidden='true'>{icon}</span> {_E(word)}</span>")


SHORT_TITLES = {
    "optimizer": "Update rule", "cifar_gain": "CIFAR-10 gain", "cifar_widens": "Gain vs data",
    "grokking_endpoint": "Grokking endpoint", "grokking_sooner": "Groks sooner", "weight_decay": "Weight decay",
    "step_ratio": "Q/K step size", "freezing": "Freezing cost", "mechanism": "Why it gains",
    "lm_gain": "Language model, first study", "lm2_stiefel_adam": "Language model, StiefelAdam",
    "lm2_stiefel_muon": "Language model, StiefelMuon", "lm2_long": "Language model, 3x the steps",
    "lm3_scale": "Language model, own scale lr",
}
"""The intro's table names each claim in a few words, its full title on hover (a claim not listed: its
:func:`title`)."""


def title(v: dict, short: bool = False) -> str:
    """A claim's title for a reader: the declared title without arm codes ("(A1)", "(A3)"), or, with
    ``short``, its name in :data:`SHORT_TITLES`."""
    if short and v["key"] in SHORT_TITLES:
        return SHORT_TITLES[v["key"]]
    return re.sub(r" \((?:A\d'?|QK-norm)\)", "", v["claim"])


def cell_phrase(v: dict) -> str:
    """The result in plain words as the intro's table shows it beside the verdict word: ``short_phrase``
    without a head that repeats that word (``"not resolved: ..."`` after "? not resolved")."""
    return v["short_phrase"].removeprefix(WORDS.get(v["status"], ("",))[0] + ": ")


def _verdict_cell(v: dict, other: str = "") -> str:
    """The verdict word, the result in plain words, then what fresh seeds said, as its own clause (a
    "not confirmed" read beside "contradicted" once looked like a second verdict), then ``other``: the
    arm's other configuration (:func:`stiefel_mini.evidence.cards.beside`)."""
    conf = v.get("confirmed", "")
    fresh = fresh_text(v) if conf in ("not confirmed", "not re-run", "too few fresh seeds") else ""
    return (word_html(v["status"]) + ("" if v["status"] == "by construction" else f" {_E(cell_phrase(v))}")
            + (f"; <span class='verdict-confirmed' data-confirmed='{_E(conf)}'>{_E(fresh)}</span>" if fresh else "")
            + (f"<span class='verdict-beside'> ({_E(other)})</span>" if other else ""))


def summary_html(vs: list[dict], prefix: str = "") -> str:
    """The intro's table: claim (linked to its chapter's box) | the paper's number | what this book found:
    the verdict word, the result in plain words (``short_phrase``) and, after it, what fresh seeds said
    where they did not confirm it (:func:`~stiefel_mini.evidence.sentences.fresh_text`).

    One short row per claim; the full verdict and how sure it is are in the chapter's box
    (:func:`box_html`) and in the appendix, from the same verdict dicts. A question that tests one
    configuration of a Stiefel arm has the arm's other configuration beside it
    (:func:`stiefel_mini.evidence.cards.beside`).
    """
    other = beside(vs)
    body = "".join(
        f"<tr data-claim='{_E(v['key'])}'><td data-label='claim'>{_claim_link(v, prefix)}</td>"
        f"<td data-label='paper'>{_E(v['paper'])}</td>"
        f"<td data-label='this book found'>{_verdict_cell(v, other.get(v['key'], ''))}</td></tr>" for v in vs)
    return ("<table class='verdict-table'><thead><tr><th>claim</th><th>paper</th><th>this book found</th>"
            f"</tr></thead><tbody>{body}</tbody></table>")


def legend_html(vs: list[dict]) -> str:
    """What each verdict word used in ``vs`` means, in one line."""
    used = {WORDS.get(v["status"], (v["status"],))[0] for v in vs}
    legend = "; ".join(f"{word_html(st)}: {_E(WORD_MEANINGS[w])}" for st, (w, _, _) in WORDS.items()
                       if w in used and w in WORD_MEANINGS and st != "partly reproduced")
    if any(v.get("confirmed") == "not confirmed" for v in vs):
        legend += ("; <i>fresh seeds did not confirm it</i>: seeds run after the comparison was fixed, enough to "
                   "decide, did not show it")
    return f"<p class='verdict-legend'>{legend}.</p>"


def bottom_line_html(vs: list[dict], root=None, questions: list[dict] = ()) -> str:
    """The intro's bottom line (:func:`stiefel_mini.evidence.plain.bottom_line`, the reader's
    ``questions`` included) as one paragraph."""
    return f"<p class='bottom-line'><b>In short.</b> {_E(' '.join(bottom_line(vs, root, questions)))}</p>"


def cards_html(cards: list[dict], prefix: str = "") -> str:
    """The decision cards (:func:`stiefel_mini.evidence.cards.cards`), one per task: the task (linked to its
    chapter), the answer in bold, what decided it as a short list, and the regime it was measured in.
    Side by side on a wide screen, one under another on a phone (``book.css``)."""
    def card(c: dict) -> str:
        lines = "".join(f"<li><span class='card-what'>{_E(what)}</span>: {_E(said)}</li>" for what, said in c["lines"])
        return (f"<div class='decision-card' data-task='{_E(c['key'])}'><p class='card-task'><a href='{prefix}"
                f"{_E(c['chapter'])}.html'>{_E(c['task'])}</a></p><p class='card-answer'>{_E(c['answer'])}.</p>"
                f"<ul>{lines}</ul><p class='card-scale'>Measured: {_E(c['scale'])}.</p></div>")
    return f"<div class='decision-cards'>{''.join(card(c) for c in cards)}</div>"


def tally_html(vs: list[dict]) -> str:
    """The count of the paper's claims by verdict (:func:`stiefel_mini.evidence.plain.tally`), under
    the intro's table."""
    return f"<p class='verdict-tally'>{_E(tally(vs))}.</p>"


def scale_note_html(vs: list[dict], root=None) -> str:
    """The scale under the intro's table: the arms by name, the tasks' models and the machine."""
    sc = scale(vs, root)
    cores = " or ".join(f"{c}-core" for c in sc["cores"]) or "an unrecorded"
    return ("<p class='verdict-scale'>Arms: <b>AdamW</b>; <b>StiefelAdam</b>, the paper's rule on the query/key "
            "frames; <b>frozen frames</b>, never updated. Scale: "
            + _E("; ".join(f"{t['model']} ({t['task']})" for t in sc["tasks"]))
            + f", on a {cores} CPU" + ("" if sc["gpu"] else ", no GPU") + ".</p>")


def codes_html() -> str:
    """The CIFAR arm codes the claims use, in one line."""
    codes = "; ".join(f"<b>{_E(k)}</b> {_E(n)}" for k, n in ARM_CODES.items())
    return f"<p class='verdict-codes'>Arms: {codes}.</p>"


def _claim_link(v: dict, prefix: str) -> str:
    href = f"{prefix}{v['chapter']}.html" + (f"#{v['anchor']}" if v["anchor"] else "")
    return f"<a href='{_E(href)}' title='{_E(title(v))}'>{_E(title(v, short=True))}</a>"


def box_html(vs: list[dict], chapter: str, prefix: str = "") -> str:
    """A chapter's verdict box: per claim, its verdict word and one plain sentence (``sentence``), the
    technical verdict, how sure and the confirmation in a closed block, and links to the appendix pages
    (how a claim is tested, every comparison)."""
    mine = [v for v in vs if v["chapter"] == chapter]
    if not mine:
        raise ValueError(f"no claim is tested in chapter {chapter!r}; chapters: {sorted({v['chapter'] for v in vs})}")
    other = beside(vs)
    items = "".join(
        f"<li data-claim='{_E(v['key'])}'><b>{_E(title(v))}</b> (paper: {_E(v['paper'])}). {word_html(v['status'])} "
        f"<span class='verdict-sentence'>{_E(v['sentence'])}</span>"
        + (f" <span class='verdict-beside'>Its configuration and the arm's others: {_E(other[v['key']])}.</span>"
           if v["key"] in other else "")
        + f"<details class='verdict-details'><summary>The test behind it</summary><p><b class='verdict-words'>"
        f"{_E(v['verdict'])}</b> (<span class='verdict-sure'>{_E(v['sure'])}</span>)."
        + (f" <span class='verdict-confirmation'>{_E(_cap(v['confirmation']['text']))}.</span>"
           if v["confirmation"] and v["confirmation"]["text"] else "") + "</p></details></li>" for v in mine)
    return (f"<div class='admonition important verdict-box' id='verdict'><p class='admonition-title'>Verdict</p>"
            f"<ul>{items}</ul><p class='verdict-how'>How a claim is tested: <a href='{prefix}{APPENDIX}'>How this book "
            f"tests a claim</a>; every comparison and the ledger: <a href='{prefix}{COMPARISONS}'>Every comparison, and "
            "the confirmation ledger</a>.</p></div>")


def confirmation_html(vs: list[dict]) -> str:
    """The intro's confirmation list: per claim with a ledger text, that text, marked with its claim and
    the ledger's status (``data-confirmation``: confirmed, pending, ...)."""
    items = "".join(f"<li class='verdict-confirmation' data-claim='{_E(v['key'])}' "
                    f"data-confirmation='{_E(v['confirmation']['status'])}'><b>{_E(v['claim'])}</b>: "
                    f"{_E(v['confirmation']['text'])}.</li>" for v in vs if v["confirmation"]["text"])
    return (f"<div class='verdict-confirmations'><p><b>Confirmation</b>, claim by claim:</p><ul>{items}</ul></div>"
            if items else "")


def ledger_html(vs: list[dict]) -> str:
    """The confirmation ledger as a table: per claim with a primary, the commit that declared it and its
    time, the runs of both its arms (a family side as the arm it stands for) started after it on
    unchosen seeds / before it / after it on seeds a choice was made on, phase by phase of a study that
    has phases, and what those fresh runs alone give (``data-confirmation``: its status)."""
    rows = []
    for v in vs:
        conf = v["confirmation"]
        if not conf or conf["status"] == "by construction":
            continue
        when = (conf["time"] or "").replace("T", " ")[:16]
        counts = "<br>".join(f"{_E(phase) + ': ' if phase else ''}{n['after']} / {n['before']} / "
                             f"{n['on_chosen_seeds']}" for phase, n in (conf.get("phases") or {}).items()) or "-"
        rows.append(f"<tr data-confirmation='{_E(conf['status'])}'><td data-label='claim'>{_E(title(v))}</td>"
                    f"<td data-label='declared at'><code>{_E(conf['commit'] or '-')}</code> "
                    f"{_E(when + ' UTC' if when else '')}</td>"
                    f"<td data-label='runs after / before / after on chosen seeds'>{counts}</td>"
                    f"<td data-label='the fresh runs alone'><b>{_E(conf['status'])}</b>: {_E(conf['text'])}</td></tr>")
    return ("<table class='ledger-table'><thead><tr><th>claim</th><th>declared at</th><th>runs of both arms: after / "
            "before / after on chosen seeds</th><th>the fresh runs alone</th></tr></thead><tbody>" + "".join(rows)
            + "</tbody></table>")


def advice_html(rows: list[dict]) -> str:
    """Part IV's table (:func:`stiefel_mini.evidence.plain.advice`): your situation | what to try | what
    this book measured | regime; on a phone each row's cells stack under their column names."""
    cols = (("situation", "your situation"), ("try", "what to try"), ("measured", "what this book measured"),
            ("regime", "regime"))
    head = "".join(f"<th>{_E(name)}</th>" for _, name in cols)
    body = "".join("<tr>" + "".join(f"<td data-label='{_E(name)}'>{_E(r[key])}</td>" for key, name in cols) + "</tr>"
                   for r in rows)
    return f"<table class='advice-table'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


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


_COLUMNS = ("comparison (b − a)", "mean [95% t]", "wins", "median (range)", "test")


def table_html(rows: Iterable[dict], family: bool = True) -> str:
    """One table of comparison rows: comparison | mean [95% t] | wins | median (range) | test, the rows
    grouped by regime under one heading row each (a regime is said once, not on every row).

    ``family``: the rows were corrected together (:func:`stiefel_mini.evidence.compare.correct`) and
    the last column shows the corrected p; otherwise each row's own p. Every cell carries its
    column's name (``data-label``), which a phone shows above it when the rows stack as cards.
    """
    rows = list(rows)
    m = len(rows) if family else 1
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(r["regime"], []).append(r)
    body = "".join(
        f"<tr class='regime-row'><th colspan='{len(_COLUMNS)}' scope='rowgroup'>{_E(plain_regime(regime))}</th></tr>"
        + "".join("<tr>" + "".join(f"<td data-label='{_E(name)}'>{_E(x)}</td>"
                                   for name, x in zip(_COLUMNS, [r["label"], *_row_cells(r, m)])) + "</tr>"
                  for r in group)
        for regime, group in groups.items())
    head = "".join(f"<th>{_E(name)}</th>" for name in _COLUMNS)
    return f"<table class='evidence-table'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


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

"""The textbook around the chapters, as a reader sees it: aims, summaries, exercises with executed
solutions, links into the glossary and the references, numbered equations readable on a phone, and
collapsed provenance, code and tables that fit the column in the experiment and usage chapters.

Run after ``bash scripts/build_book.sh``::

    pytest tests/browser/test_textbook.py -m browser
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.browser

# Parts I-II have numbered equations; Part III (the experiments) has the same structure around its studies.
EQUATION_PAGES = [f"book/{name}.html" for name in
                  ("stiefel_manifold", "retractions", "riemannian_adam", "manifold_muon", "stiefel_attention",
                   "weight_decay")]
EXPERIMENT_PAGES = [f"book/{name}.html" for name in ("grokking", "cifar")]
# Each experiment chapter's studies in full, with their provenance, on an appendix page of its own.
APPENDIX_PAGES = [f"book/appendix_{name}.html" for name in ("grokking", "cifar")]
# Part IV (using the library) has the same structure, and reads stored benchmark runs.
USE_PAGES = [f"book/{name}.html" for name in ("use_in_your_model", "which_tool")]
TEXTBOOK_PAGES = EQUATION_PAGES + EXPERIMENT_PAGES + USE_PAGES

STRUCTURE_JS = r"""() => {
    const art = document.querySelector('article.bd-article');
    const aims = art.querySelector('div.admonition.learning-aims');
    const firstH2 = art.querySelector('section section h2, h2');
    const ex = art.querySelector('section#exercises');
    const executed = ex ? Array.from(ex.querySelectorAll('div.cell.tag_hide-input'))
        .filter(c => c.querySelector('.cell_output') && c.querySelector('.cell_output').innerText.trim()) : [];
    return {
        aims: aims ? aims.querySelectorAll('li').length : 0,
        aimsFirst: !!(aims && firstH2 && (aims.compareDocumentPosition(firstH2) & Node.DOCUMENT_POSITION_FOLLOWING)),
        summary: !!art.querySelector('section#summary'),
        exercises: ex ? ex.querySelectorAll(':scope > ol > li').length : 0,
        solutions: ex ? ex.querySelectorAll('div.admonition.dropdown').length : 0,
        solutionsClosed: ex ? Array.from(ex.querySelectorAll('div.admonition.dropdown'))
            .every(d => !d.classList.contains('toggle-shown')) : false,
        executed: executed.length,
        executedInputHidden: executed.every(c => c.querySelector('details.hide') !== null),
        glossary: art.querySelectorAll('a[href^="glossary.html#term-"]').length,
        references: art.querySelectorAll('a[href^="references.html#"]').length,
    };
}"""


@pytest.mark.parametrize("page", TEXTBOOK_PAGES)
def test_chapter_teaches_with_aims_summary_and_exercises(visit, page):
    s = visit(page).page.evaluate(STRUCTURE_JS)
    assert 2 <= s["aims"] <= 4 and s["aimsFirst"], f"{page}: a 'What you will learn' block of 2-4 points first: {s}"
    assert s["summary"], f"{page}: no Summary section"
    assert 3 <= s["exercises"] <= 5, f"{page}: 3-5 exercises expected: {s}"
    assert s["solutions"] >= s["exercises"] and s["solutionsClosed"], f"{page}: a closed solution per exercise: {s}"
    assert s["executed"] >= 1 and s["executedInputHidden"], \
        f"{page}: solution code executed by the build, its input collapsed: {s}"
    assert s["glossary"] >= 1 and s["references"] >= 1, f"{page}: links into the glossary and references: {s}"


def test_glossary_and_references_pages(visit):
    g = visit("book/glossary.html").page.evaluate(
        "() => Array.from(document.querySelectorAll('dl.glossary > dt')).map(dt => dt.id)")
    for term in ("term-frame", "term-arm", "term-paired-start", "term-resolved", "term-Holm", "term-trust-cap",
                 "term-frame-lr", "term-retraction", "term-tangent-space"):
        assert term in g, f"glossary has no {term}: {g}"
    r = visit("book/references.html").page.evaluate(r"""() => ({
        entries: document.querySelectorAll('div.citation, dl.citation > dt').length,
        arxiv: document.querySelectorAll('a[href^="https://arxiv.org/abs/"]').length,
        doi: document.querySelectorAll('a[href^="https://doi.org/"]').length,
        paper: !!document.querySelector('a[href="https://arxiv.org/abs/2609.19363"]'),
    })""")
    assert r["entries"] >= 12 and r["paper"], f"references page: {r}"
    assert r["arxiv"] + r["doi"] >= 10, f"references page: too few arXiv / DOI links: {r}"
    n = visit("book/notation.html").page.evaluate(
        "() => document.querySelectorAll('article table').length")
    assert n >= 3, "notation page: one table each for frames, the optimizer and attention"


# Numbered equations: the box of the number and the box of the equation never overlap, and an
# equation that must scroll gets the full column (its number on a line of its own above it).
NUMBERED_MATH_JS = r"""() => Array.from(document.querySelectorAll('div.math')).filter(d => d.querySelector('span.eqno'))
  .map(d => {
    const e = d.querySelector('span.eqno').getBoundingClientRect();
    const c = d.querySelector('mjx-container');
    const m = c.getBoundingClientRect(), b = d.getBoundingClientRect();
    const overlapX = Math.min(e.right, m.right) - Math.max(e.left, m.left);
    const overlapY = Math.min(e.bottom, m.bottom) - Math.max(e.top, m.top);
    return {id: d.id, overlap: overlapX > 1 && overlapY > 1, scrolls: c.scrollWidth > c.clientWidth + 1,
            share: m.width / b.width};
  })"""


@pytest.mark.parametrize("width", [1280, 400])
@pytest.mark.parametrize("page", EQUATION_PAGES)
def test_equation_numbers_stay_clear_of_the_equation(visit, page, width):
    eqs = visit(page, width).page.evaluate(NUMBERED_MATH_JS)
    assert eqs, f"{page}: no numbered equations found"
    bad = [e for e in eqs if e["overlap"] or (e["scrolls"] and e["share"] < 0.95)]
    assert not bad, f"{page} at {width} px: equation content behind or squeezed by its number: {bad}"


# Part III: provenance collapsed, no process words in the visible text, code that fits the column.
EXPERIMENT_JS = r"""() => {
    const art = document.querySelector('article.bd-article');
    const made = Array.from(art.querySelectorAll('details.how-made'));
    const clone = art.cloneNode(true);
    // Collapsed blocks are not read; the evidence tables' regime labels belong to the evidence layer.
    clone.querySelectorAll('details, table.evidence-table').forEach(d => d.remove());
    // What a reader sees without opening anything: code and output not inside a closed toggle.
    const blocks = Array.from(art.querySelectorAll('div.highlight pre, div.cell_output pre'))
        .filter(p => p.offsetParent !== null && p.innerText.trim());
    return {
        made: made.length,
        closed: made.every(d => !d.open),
        text: clone.innerText,
        blocks: blocks.length,
        scrolling: blocks.filter(p => p.scrollWidth > p.clientWidth + 1).length,
    };
}"""


@pytest.mark.parametrize("page", EXPERIMENT_PAGES + APPENDIX_PAGES + USE_PAGES)
def test_experiment_chapter_collapses_provenance_and_fits_the_column(visit, page):
    import re

    s = visit(page, 1280).page.evaluate(EXPERIMENT_JS)
    assert s["closed"], f"{page}: provenance in closed 'How these numbers were made' blocks"
    if page in APPENDIX_PAGES + ["book/which_tool.html"]:  # the pages that read stored runs' commits
        assert s["made"] >= 1, f"{page}: no 'How these numbers were made' block"
    words = re.findall(r"\b[Rr]ound \d\b|kept as history|git_dirty|\bissue \d+|\.\./shared|/work/", s["text"])
    assert not words, f"{page}: process words in the visible text: {words}"
    assert s["scrolling"] <= s["blocks"] / 10, \
        f"{page}: {s['scrolling']} of {s['blocks']} code or output blocks scroll sideways at 1280 px"


# Tables at 1280 px: each fits the column, so no column is cut off behind a scroll bar. (On a phone
# a wide table may scroll inside its box; book.css keeps it from widening the page.)
TABLES_JS = r"""() => Array.from(document.querySelectorAll('article.bd-article table'))
    .filter(t => t.checkVisibility())
    .map(t => ({head: t.innerText.slice(0, 60).replace(/\s+/g, ' '), sw: t.scrollWidth, cw: t.clientWidth}))"""


@pytest.mark.parametrize("page", ["book/intro.html", *USE_PAGES])
def test_tables_fit_the_column_at_1280(visit, page):
    tables = visit(page, 1280).page.evaluate(TABLES_JS)
    assert tables, f"{page}: no tables found"
    clipped = [t for t in tables if t["sw"] > t["cw"] + 1]
    assert not clipped, f"{page}: tables wider than the column at 1280 px (last columns hidden): {clipped}"

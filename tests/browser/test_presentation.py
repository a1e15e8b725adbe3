"""What a reader sees in the built book: tables rendered, math and pages never clipped, no debris.

Run after ``bash scripts/build_book.sh``::

    pytest tests/browser -m browser

Each page is opened in headless Chromium (network cut, as in ``test_book.py``) at a desktop width
(1280 px) and a phone width (400 px).
"""

from __future__ import annotations

import pytest

from bookpaths import book_pages

pytestmark = pytest.mark.browser

PAGES = book_pages() or ["<no built book>"]
WIDTHS = [1280, 400]

# A Markdown table that reached the page as text: its separator row ("| --- | :---: |") is visible.
RAW_TABLES_JS = r"""() => {
    const sep = /^\s*\|?(\s*:?-{3,}:?\s*\|)+\s*:?-{0,}:?\s*$/m;
    return Array.from(document.querySelectorAll('article p, article pre, .cell_output'))
        .filter(el => !el.closest('.cell_input'))
        .map(el => el.innerText)
        .filter(t => sep.test(t) && t.includes('|'))
        .map(t => t.slice(0, 160));
}"""

# Display equations whose typeset width does not fit their box (clipped, or needing a scroll).
MATH_JS = r"""() => Array.from(document.querySelectorAll('mjx-container[display="true"]')).map(c => {
    const math = c.querySelector('mjx-math');
    const box = c.getBoundingClientRect();
    const inner = math ? math.getBoundingClientRect() : box;
    return {
        tex: (c.closest('.math') || c).textContent.slice(0, 80),
        fits: inner.width <= c.clientWidth + 1, iw: Math.round(inner.width), cw: c.clientWidth, sw: c.scrollWidth,
        scrolls: ['auto', 'scroll'].includes(getComputedStyle(c).overflowX),
        inside: box.right <= document.documentElement.clientWidth + 1 && box.left >= -1,
    };
})"""

# Output blocks a reader should never see: stderr streams, warnings, progress bars.
DEBRIS_JS = r"""() => {
    const bad = [];
    for (const el of document.querySelectorAll('.cell_output .stderr, .cell_output .output.stderr')) {
        bad.push('stderr block: ' + el.innerText.slice(0, 120));
    }
    const pattern = /(\w*Warning:|Traceback \(most recent|\d+%\|[^|]*\||\d+it\/s\]|it\/s\])/;
    for (const el of document.querySelectorAll('.cell_output')) {
        const m = el.innerText.match(pattern);
        if (m) bad.push('debris "' + m[0] + '": ' + el.innerText.slice(0, 120));
    }
    return bad;
}"""


@pytest.mark.parametrize("page", PAGES)
def test_no_raw_markdown_tables(visit, page):
    v = visit(page)
    raw = v.page.evaluate(RAW_TABLES_JS)
    assert not raw, f"{page}: Markdown tables shown as raw text: {raw}"


@pytest.mark.parametrize("page", PAGES)
def test_no_stderr_warnings_or_progress_bars(visit, page):
    v = visit(page)
    bad = v.page.evaluate(DEBRIS_JS)
    assert not bad, f"{page}: {bad}"


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("page", PAGES)
def test_math_and_page_fit_the_screen(visit, page, width):
    v = visit(page, width)
    overflow = v.page.evaluate(
        "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    assert overflow[0] <= overflow[1] + 1, f"{page} at {width} px scrolls sideways: {overflow}"
    equations = v.page.evaluate(MATH_JS)
    outside = [e["tex"] for e in equations if not e["inside"]]
    assert not outside, f"{page} at {width} px: display equations reaching outside the page: {outside}"
    if width >= 1280:  # on a desktop screen every equation fits, split into lines where needed
        clipped = [e["tex"] for e in equations if not e["fits"]]
    else:  # on a phone a long equation may scroll inside its own box, but never be cut off
        clipped = [e["tex"] for e in equations if not (e["fits"] or e["scrolls"])]
    assert not clipped, f"{page} at {width} px: display equations that do not fit: {clipped}"


# Figures and widget frames as drawn at 1280 px: shown width over natural width (for an SVG figure
# the natural width is its size in CSS px). book/matplotlibrc keeps text at >= 9 pt (12 px at natural
# size), so a figure shown at >= 0.85 of its size has text of >= 10 px.
FIGURES_JS = r"""() => Array.from(document.querySelectorAll('.cell_output img'))
    .filter(img => img.checkVisibility() && img.naturalWidth > 0)
    .map(img => ({src: img.src.split('/').pop().slice(0, 24), natural: img.naturalWidth,
                  shown: Math.round(img.getBoundingClientRect().width)}))"""


@pytest.mark.parametrize("page", PAGES)
def test_figures_are_not_shrunk(visit, page):
    v = visit(page)
    figures = v.page.evaluate(FIGURES_JS)
    small = [f for f in figures if f["shown"] < 0.85 * f["natural"]]
    assert not small, f"{page}: figures squeezed below 85% of their size (text under 10 px): {small}"


@pytest.mark.parametrize("width", WIDTHS)
def test_one_search_field_and_no_empty_header_bar(visit, width):
    """pydata-sphinx-theme's header bar (its persistent search button, a second full-width search
    field) stays hidden; the reader searches from the sidebar field (desktop) or the article
    header's button (phone), and the chapter starts at the top of the window."""
    v = visit(book_pages()[0] if book_pages() else "<no built book>", width)
    shown = v.page.evaluate("""() => {
        const header = document.querySelector('header.bd-header');
        const visible = el => el && el.checkVisibility() && el.getBoundingClientRect().height > 0;
        return {header: visible(header),
                sidebar_search: visible(document.querySelector('.bd-sidebar-primary .search-button-field')),
                article_search: visible(document.querySelector('.article-header-buttons .search-button')),
                title_top: Math.round(document.querySelector('article h1').getBoundingClientRect().top)};
    }""")
    assert not shown["header"], f"the theme's header bar is visible at {width} px"
    assert shown["sidebar_search"] if width >= 1280 else shown["article_search"], shown
    assert shown["title_top"] < 150, shown


# Figures on a phone (400 px): a wide figure scales down to the column (tests/browser/test_phone_fit.py
# checks that nothing is wider or cut off); the figures drawn with a narrow variant
# (stiefel_mini.plots.responsive) show it at >= 3/4 of its natural size, so book/matplotlibrc's >= 9 pt
# text (12 px at natural size) stays >= 9 px.
PHONE_FIGURES_JS = r"""() => Array.from(document.querySelectorAll('.cell_output img.sm-narrow'))
    .filter(img => img.checkVisibility() && img.naturalWidth > 0)
    .map(img => ({src: img.src.split('/').pop().slice(0, 24), natural: img.naturalWidth,
                  shown: Math.round(img.getBoundingClientRect().width)}))"""


@pytest.mark.parametrize("page", PAGES)
def test_narrow_figure_text_is_legible_on_a_phone(visit, page):
    figures = visit(page, 400).page.evaluate(PHONE_FIGURES_JS)
    small = [f for f in figures if f["shown"] < 0.75 * f["natural"]]
    assert not small, f"{page} at 400 px: narrow figures shown below 3/4 of their size (text under 9 px): {small}"


# Tables and code blocks at 1280 px, on every page: none wider than its box, so nothing hides behind
# a scroll bar (a long code line wraps; book.css). On a phone they may scroll inside their box.
SCROLLING_JS = r"""() => Array.from(document.querySelectorAll(
        'article.bd-article table, article.bd-article pre, article.bd-article div.highlight'))
    .filter(el => el.checkVisibility() && el.scrollWidth > el.clientWidth + 1)
    .map(el => ({tag: el.tagName, head: el.innerText.slice(0, 60).replace(/\s+/g, ' '),
                 sw: el.scrollWidth, cw: el.clientWidth}))"""


@pytest.mark.parametrize("page", PAGES)
def test_no_table_or_code_block_scrolls_at_1280(visit, page):
    wide = visit(page, 1280).page.evaluate(SCROLLING_JS)
    assert not wide, f"{page} at 1280 px: tables or code blocks wider than their box: {wide}"


# Working names (study presets, plan files, scripts, flags, status phrases of unfinished runs) never
# reach the reader's text. Allowed: closed <details> blocks (provenance, collapsed code) and the
# Reproduce sections, where the commands name files and presets.
WORKING_WORDS = [r"\br[23]_[a-z]\w*", r"\(clean tree\)", r"ROUND2_PLAN", r"gpu_round2", r"--redo_dirty",
                 r"present so far", r"once it has run", r"[Nn]ot run yet: ", r"Primary\s*:\s*\."]
READER_TEXT_JS = r"""() => {
    const art = document.querySelector('article.bd-article');
    if (!art) return '';
    const clone = art.cloneNode(true);
    clone.querySelectorAll('details').forEach(d => d.remove());
    clone.querySelectorAll('section').forEach(s => {
        const h = s.querySelector(':scope > h1, :scope > h2, :scope > h3, :scope > h4');
        if (h && /^([\d.]+\s*)?Reproduc/.test(h.textContent.trim())) s.remove();  // "7.13. Reproduce"
    });
    return clone.innerText;
}"""


@pytest.mark.parametrize("page", PAGES)
def test_no_working_words_in_the_readers_text(visit, page):
    import re

    text = visit(page).page.evaluate(READER_TEXT_JS)
    found = sorted({m.group(0) for w in WORKING_WORDS for m in re.finditer(w, text)})
    assert not found, f"{page}: working names in the reader's text: {found}"

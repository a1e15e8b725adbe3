"""Every figure, widget and table fits its column, on a desktop screen and on a phone.

On every page of the built book, at 1280 px and at 400 px: every visible image (static figures, the
responsive diagrams, the widgets' frames) and every widget lies inside the article's column, is no
wider than it, and is not cut off by a box around it that hides or scrolls its overflow (the manifold
widget's title once read "|norma..." at 400 px). Widgets are rendered from their saved state first.
Every table of every page, its closed blocks opened, fits a 400 px screen without scrolling inside
its own box (tables once ran past their box on five chapters with no cue), and no word or number in
a table is broken unless it is wider than the column ("1024" once read "102 / 4" at 400 px): a table
too wide for a phone becomes cards (book/_static/tables.js), each cell after its column's name.

Run after ``bash scripts/build_book.sh``::

    pytest tests/browser/test_phone_fit.py -m browser
"""

from __future__ import annotations

import pytest

from bookpaths import book_pages

pytestmark = pytest.mark.browser

PAGES = book_pages() or ["<no built book>"]
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"

# For each visible image, svg figure and widget root in the article: its box, the column's box, and
# every ancestor (up to the article) that clips or scrolls what overflows it and does not hold it whole.
FIT_JS = r"""() => {
    const art = document.querySelector('article.bd-article');
    if (!art) return {column: 0, items: []};
    const col = art.getBoundingClientRect();
    const style = getComputedStyle(art);
    const left = col.left + parseFloat(style.paddingLeft), right = col.right - parseFloat(style.paddingRight);
    const items = [];
    const seen = new Set();
    const els = art.querySelectorAll(
        'img, .cell_output svg:not(mjx-container svg), .cell_output .jupyter-widgets.widget-vbox, .cell_output .widget-subarea > .jupyter-widgets');
    for (const el of els) {
        if (seen.has(el) || !el.checkVisibility()) continue;
        if (el.tagName === 'svg' && el.closest('svg') !== el) continue;  // only outermost svg
        seen.add(el);
        const r = el.getBoundingClientRect();
        if (r.width === 0 || r.height === 0) continue;
        const clippers = [];
        for (let a = el.parentElement; a && a !== art.parentElement; a = a.parentElement) {
            const cs = getComputedStyle(a);
            if (cs.overflowX === 'visible' && cs.overflowY === 'visible') continue;
            const b = a.getBoundingClientRect();
            const inside = r.left >= b.left - 1 && r.right <= b.right + 1 && r.top >= b.top - 1 && r.bottom <= b.bottom + 1;
            if (!inside) clippers.push(`${a.tagName.toLowerCase()}.${[...a.classList].slice(0, 2).join('.')} (${cs.overflowX})`);
        }
        items.push({
            what: [el.tagName.toLowerCase(), ...(el.getAttribute('class') || '').split(' ').slice(0, 2)].join('.')
                  + ' ' + (el.getAttribute('alt') || el.getAttribute('src') || '').slice(0, 40),
            left: Math.round(r.left), right: Math.round(r.right), width: Math.round(r.width),
            outside: r.left < left - 1 || r.right > right + 1,
            wider: r.width > right - left + 1,
            inner_overflow: el.scrollWidth > el.clientWidth + 1 && el.tagName !== 'IMG' && el.tagName !== 'svg',
            clippers,
        });
    }
    return {column: Math.round(right - left), items};
}"""

RENDERED_JS = f"""() => Array.from(document.querySelectorAll('script[type="{WIDGET_VIEW}"]')).every(s => {{
    const prev = s.previousElementSibling;
    return !!(prev && prev.classList.contains('widget-subarea') && prev.children.length > 0);
}})"""


def _measure(visit, page: str, width: int) -> dict:
    v = visit(page, width)
    if v.page.locator(f'script[type="{WIDGET_VIEW}"]').count():
        v.page.wait_for_function(RENDERED_JS, timeout=30_000)
    # every image decoded, so that its box has its final size
    v.page.wait_for_function("() => Array.from(document.images).every(i => i.complete)", timeout=30_000)
    v.page.wait_for_timeout(300)
    return v.page.evaluate(FIT_JS)


@pytest.mark.parametrize("width", [1280, 400])
@pytest.mark.parametrize("page", PAGES)
def test_every_image_and_widget_fits_its_column(visit, page, width):
    fit = _measure(visit, page, width)
    bad = [i for i in fit["items"] if i["outside"] or i["wider"] or i["clippers"] or i["inner_overflow"]]
    assert not bad, (f"{page} at {width} px (column {fit['column']} px): images or widgets wider than the "
                     f"column, outside it, or cut off by a box around them: {bad}")


def test_the_check_sees_the_chapters_figures_and_widgets(visit):
    """The measurement finds what it must judge: chapter 1's figures and its widget's frame at 400 px."""
    fit = _measure(visit, "book/stiefel_manifold.html", 400)
    whats = [i["what"] for i in fit["items"]]
    assert sum(w.startswith("img") for w in whats) >= 3, whats
    assert any("widget" in w or "jupyter-widgets" in w for w in whats), whats
    assert 300 <= fit["column"] <= 400, fit["column"]


# Every table in the article, closed blocks opened first: whether its content runs past its own box
# (a table scrolls sideways inside its box, a cue a reader on a phone may miss) or past the column.
OPEN_BLOCKS_JS = r"""
    const closed = Array.from(document.querySelectorAll('article.bd-article details')).filter(d => !d.open);
    const toggled = closed.map(d => new Promise(done => d.addEventListener('toggle', done, {once: true})));
    closed.forEach(d => { d.open = true; });
    await Promise.all(toggled);  // tables.js refits on each toggle, before the block's own listener
"""
TABLES_JS = r"""() => {
    const art = document.querySelector('article.bd-article');
    if (!art) return [];  // a page with no article (search.html while it loads)
    const col = art.getBoundingClientRect();
    const style = getComputedStyle(art);
    const right = col.right - parseFloat(style.paddingRight);
    return Array.from(art.querySelectorAll('table')).filter(t => t.checkVisibility()).map(t => ({
        what: (t.getAttribute('class') || 'table') + ': ' + t.innerText.slice(0, 50).replace(/\s+/g, ' '),
        scroll: t.scrollWidth - t.clientWidth, past: Math.round(t.getBoundingClientRect().right - right)}));
}"""

# Every word of every table cell (runs of text between spaces, hyphens, dashes and slashes, outside
# typeset math), closed blocks opened: one laid out over two lines although it is narrower than the
# column is broken. And the cards: each cell with text under a column name starts with that name.
# The general index is left out: its entries are long names that break anywhere by design (book.css).
BROKEN_JS = r"""() => {
    const broken = [], unlabelled = [];
    const art = document.querySelector('article.bd-article');
    if (!art) return {broken, unlabelled, cards: 0};
    const style = getComputedStyle(art);
    const room = art.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
    const cells = art.querySelectorAll('table:not(.indextable) :is(td, th)');
    for (const cell of Array.from(cells).filter(c => c.checkVisibility())) {
        const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
        for (let node = walker.nextNode(); node; node = walker.nextNode()) {
            if (node.parentElement.closest('mjx-container')) continue;
            for (const m of node.data.matchAll(/[^\s\-\u2010-\u2014\/]+/g)) {
                const range = document.createRange();
                range.setStart(node, m.index);
                range.setEnd(node, m.index + m[0].length);
                const rects = Array.from(range.getClientRects()).filter(r => r.width > 0);
                const width = rects.reduce((sum, r) => sum + r.width, 0);
                if (new Set(rects.map(r => Math.round(r.top))).size > 1 && width <= room + 1)
                    broken.push(`${m[0]} (${Math.round(width)} px, the column ${Math.round(room)} px)`);
            }
        }
    }
    const cards = Array.from(document.querySelectorAll('article.bd-article table.cards'));
    for (const table of cards) {
        const heads = Array.from(table.querySelectorAll('thead tr:last-child th')).map(th => th.innerText.trim());
        for (const row of table.querySelectorAll('tbody tr')) Array.from(row.cells).forEach((cell, i) => {
            const tag = cell.querySelector('.card-label');
            const text = cell.innerText.trim();
            if (heads[i] && text && !(tag && text.startsWith(tag.innerText.trim())))
                unlabelled.push(`${heads[i]}: ${cell.innerText.slice(0, 30)}`);
        });
    }
    return {broken, unlabelled, cards: cards.length};
}"""
CLOSE_BLOCKS_JS = r"""
    const reclosed = closed.map(d => new Promise(done => d.addEventListener('toggle', done, {once: true})));
    closed.forEach(d => { d.open = false; });
    await Promise.all(reclosed);
"""
LAYOUT_JS = ("async () => {" + OPEN_BLOCKS_JS + "const found = {tables: (" + TABLES_JS + ")(), ...(" + BROKEN_JS
             + ")()};" + CLOSE_BLOCKS_JS + "return found; }")


@pytest.fixture(scope="session")
def table_layout(shared_pages):
    """``table_layout(page, width)``: the page's tables with its closed blocks opened, measured once per
    page and width on the shared page (``visit``'s), whose blocks are closed again after:
    ``{"tables": [...], "broken": [...], "unlabelled": [...], "cards": n}``. A page that does not return
    to its ready state (markup, address, viewport) is closed, so that the next test opens it afresh.
    Session-scoped: the browser tests run sorted by page, so a module fixture would be built again at
    each return to this module."""
    measured: dict[tuple[str, int], dict] = {}

    def _measure(page: str, width: int) -> dict:
        if (page, width) not in measured:
            v = shared_pages.get(page, width)
            try:
                measured[(page, width)] = v.page.evaluate(LAYOUT_JS)
            finally:
                if v.state() != v.ready_state:
                    shared_pages.drop(page, width)
        return measured[(page, width)]

    return _measure


@pytest.mark.parametrize("page", PAGES)
def test_every_table_fits_a_phone(table_layout, page):
    """At 400 px no table runs past its box or the column (cards, wrapping, or a caption instead)."""
    bad = [t for t in table_layout(page, 400)["tables"] if t["scroll"] > 1 or t["past"] > 1]
    assert not bad, f"{page} at 400 px: tables wider than their box or the column: {bad}"


def test_the_table_check_sees_the_comparison_tables_in_closed_blocks(table_layout):
    """The measurement opens the closed blocks: the appendix's comparison tables are counted."""
    tables = table_layout("book/appendix_comparisons.html", 400)["tables"]
    assert sum(t["what"].startswith("evidence-table") for t in tables) >= 10, tables


@pytest.mark.parametrize("width", [1280, 400])
@pytest.mark.parametrize("page", PAGES)
def test_no_word_in_a_table_is_broken(table_layout, page, width):
    """No word or number in a table breaks across lines unless wider than the column; cards are labelled."""
    found = table_layout(page, width)
    assert not found["broken"], f"{page} at {width} px: words broken inside table cells: {found['broken'][:10]}"
    assert not found["unlabelled"], f"{page} at {width} px: card cells without their column's name: " \
                                    f"{found['unlabelled'][:10]}"
    if width > 640:
        assert found["cards"] == 0, f"{page} at {width} px: {found['cards']} tables shown as cards"


def test_a_table_too_wide_for_a_phone_becomes_cards(table_layout):
    """The grokking appendix's arms table (four columns of prose) stacks as cards at 400 px only."""
    assert table_layout("book/appendix_grokking.html", 400)["cards"] >= 1


# A figure's text on a phone: the book's figures are SVG drawn with no font under 9 pt (book/matplotlibrc),
# 12 px at natural size; shrunk to the column they may lose at most a third, so that no label falls under
# 8 px. A figure wider than that allows has a narrow variant (plots.responsive), shown below 520 px.
SMALLEST_FONT_PX = 9 * 96 / 72
FIGURES_JS = r"""() => Array.from(document.querySelectorAll('article.bd-article img'))
    .filter(img => img.checkVisibility() && img.naturalWidth > 0
                   && /(\.svg$|^data:image\/svg)/.test(img.getAttribute('src') || ''))
    .map(img => ({alt: img.getAttribute('alt') || (img.getAttribute('src') || '').slice(-40),
                  scale: img.getBoundingClientRect().width / img.naturalWidth}))"""
FIGURE_PAGES = [f"book/{name}.html" for name in
                ("grokking", "cifar", "appendix_grokking", "appendix_cifar", "weight_decay")]


@pytest.mark.parametrize("page", FIGURE_PAGES)
def test_figures_keep_every_label_at_8_px_or_more_on_a_phone(visit, page):
    figures = visit(page, 400).page.evaluate(FIGURES_JS)
    assert figures, f"{page}: no figure found"
    small = [f"{f['alt']} (shown at {f['scale']:.2f}x: {f['scale'] * SMALLEST_FONT_PX:.1f} px)" for f in figures
             if f["scale"] * SMALLEST_FONT_PX < 8]
    assert not small, f"{page} at 400 px: figures whose 9 pt labels fall under 8 px: {small}"

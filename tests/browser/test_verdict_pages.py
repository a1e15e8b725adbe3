"""The verdicts as a reader sees them: the intro's table follows its decision cards, the forest figure
below it, no block of comparisons is open there, and each chapter's box shows the verdict word of the intro's row
for the same claim.

Run after ``bash scripts/build_book.sh``: ``pytest tests/browser -m browser``.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.browser

SECOND_SCREEN = 1600  # px from the top of the intro at 1280 px wide: the verdict table starts above it

ROWS_JS = r"""() => Object.fromEntries(Array.from(document.querySelectorAll('tr[data-claim]')).map(tr =>
    [tr.dataset.claim, tr.querySelector('.verdict-word').dataset.status]))"""
BOX_JS = r"""() => Object.fromEntries(Array.from(document.querySelectorAll('.verdict-box li[data-claim]')).map(li =>
    [li.dataset.claim, li.querySelector('.verdict-word').dataset.status]))"""


def test_intro_table_follows_the_cards_above_the_forest_and_opens_no_comparisons(visit):
    v = visit("book/intro.html", 1280)
    box = v.page.evaluate("""() => {
        const t = document.querySelector('table.verdict-table').getBoundingClientRect();
        return [t.top + window.scrollY, t.bottom + window.scrollY]; }""")
    cards_bottom = v.page.evaluate(
        "() => document.querySelector('.decision-cards').getBoundingClientRect().bottom + window.scrollY")
    # the table starts right after the cards, on the second screen at the latest
    assert cards_bottom <= box[0] < SECOND_SCREEN - 300 and box[0] < box[1], \
        f"the verdict table spans y = {box[0]:.0f}-{box[1]:.0f} px at 1280 px, the cards end at {cards_bottom:.0f}"
    n_rows = v.page.evaluate("() => document.querySelectorAll('table.verdict-table tr[data-claim]').length")
    words = v.page.evaluate("() => document.querySelectorAll('table.verdict-table .verdict-word').length")
    assert n_rows >= 7 and words == n_rows
    forest = v.page.evaluate("""() => Array.from(document.querySelectorAll('.cell_output img, .cell_output svg'))
        .map(e => e.getBoundingClientRect().top + window.scrollY)""")
    assert any(y > box[1] for y in forest), "no figure (the forest plot) below the verdict table"
    opened = v.page.evaluate("""() => Array.from(document.querySelectorAll('details'))
        .filter(d => d.querySelector('table.evidence-table')).map(d => d.open)""")
    assert not any(opened), f"the intro opens no block of comparisons (they are in the appendix): {opened}"


@pytest.mark.parametrize("chapter", ["cifar", "grokking", "language_model"])
def test_chapter_box_says_what_the_intro_says(visit, chapter):
    intro = visit("book/intro.html").page.evaluate(ROWS_JS)
    box = visit(f"book/{chapter}.html").page.evaluate(BOX_JS)
    assert box, f"{chapter}: no verdict box"
    for key, shown in box.items():
        assert intro.get(key) == shown, (chapter, key, shown, intro.get(key))

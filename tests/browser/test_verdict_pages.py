"""The verdicts as a reader sees them: the intro's table fits one screen, its details start closed,
and each chapter's box shows the words and numbers of the intro's row for the same claim.

Run after ``bash scripts/build_book.sh``: ``pytest tests/browser -m browser``.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.browser

SCREEN = 1200  # px: the table and the arm codes above it, at 1280 px wide

ROWS_JS = r"""() => Object.fromEntries(Array.from(document.querySelectorAll('tr[data-claim]')).map(tr =>
    [tr.dataset.claim, [tr.querySelector("td[data-label='this book']").innerText.trim(),
                        tr.querySelector("td[data-label='how sure']").innerText.trim()]]))"""
BOX_JS = r"""() => Object.fromEntries(Array.from(document.querySelectorAll('.verdict-box li[data-claim]')).map(li =>
    [li.dataset.claim, [li.querySelector('.verdict-words').innerText.trim(),
                        li.querySelector('.verdict-sure').innerText.trim()]]))"""


def test_intro_table_fits_one_screen_and_details_start_closed(visit):
    v = visit("book/intro.html", 1280)
    height = v.page.evaluate("""() => {
        const t = document.querySelector('table.verdict-table').getBoundingClientRect();
        const c = document.querySelector('p.verdict-codes').getBoundingClientRect();
        return Math.max(t.bottom, c.bottom) - Math.min(t.top, c.top); }""")
    assert height <= SCREEN, f"the intro's verdict table is {height:.0f} px tall at 1280 px (at most {SCREEN})"
    closed = v.page.evaluate("""() => Array.from(document.querySelectorAll('details'))
        .filter(d => d.querySelector('table.evidence-table')).map(d => d.open)""")
    assert closed and not any(closed), f"the block of declared comparisons should start closed: {closed}"


@pytest.mark.parametrize("chapter", ["cifar", "grokking"])
def test_chapter_box_says_what_the_intro_says(visit, chapter):
    intro = visit("book/intro.html").page.evaluate(ROWS_JS)
    box = visit(f"book/{chapter}.html").page.evaluate(BOX_JS)
    assert box, f"{chapter}: no verdict box"
    for key, shown in box.items():
        assert intro.get(key) == shown, (chapter, key, shown, intro.get(key))

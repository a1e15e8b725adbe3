"""How long each page of the book is, in screens of a 1280 x 800 window, and the length each chapter of
Parts III-IV and the appendix's test page may have.

A screen is the 800 px of the window's height; a page's length is its document's height over 800. Every
page's length is printed (``pytest -m browser tests/browser/test_page_height.py``, shown with or
without ``-s``), and the chapters in :data:`TARGETS` fail above theirs: a chapter tells one answer and its
mechanism, its sweeps and per-seed tables sit on the study's appendix page, one click away.

Run after ``bash scripts/build_book.sh``.
"""

from __future__ import annotations

import pytest

from bookpaths import book_pages

pytestmark = pytest.mark.browser

WIDTH, SCREEN = 1280, 800
"""The window: 1280 px wide, a screen of 800 px."""

TARGETS = {
    "book/language_model.html": 12,
    "book/grokking.html": 18,
    "book/cifar.html": 18,
    "book/use_in_your_model.html": 18,
    "book/how_we_test.html": 18,
}
"""The most screens each of these pages may fill at 1280 x 800."""

PAGES = [p for p in book_pages() if p.startswith("book/")] or ["<no built book>"]
HEIGHT_JS = "() => Math.max(document.documentElement.scrollHeight, document.body.scrollHeight)"


@pytest.fixture(scope="session")  # not "module": the sort by page interleaves this module's tests with others'
def screens(window_visit):
    """``{page: length in screens}`` of every chapter page, each opened once at 1280 x 800 and made ready."""
    out = {}
    for page in PAGES:
        v = window_visit(page, WIDTH, SCREEN)
        try:
            out[page] = v.page.evaluate(HEIGHT_JS) / SCREEN
        finally:
            v.close()
    return out


def test_every_page_length_is_printed(screens, capsys):
    """Each page's length, longest first: the table a reader of the test output sees."""
    assert set(screens) == set(PAGES) and all(s > 0 for s in screens.values()), screens
    with capsys.disabled():
        print(f"\npage lengths at {WIDTH} x {SCREEN} (screens):")
        for page, s in sorted(screens.items(), key=lambda item: -item[1]):
            limit = f" (at most {TARGETS[page]})" if page in TARGETS else ""
            print(f"  {s:5.1f}  {page}{limit}")


@pytest.mark.parametrize("page", list(TARGETS))
def test_chapter_fits_its_length(screens, page):
    assert page in screens, f"{page} is not in the built book"
    assert screens[page] <= TARGETS[page], (
        f"{page} fills {screens[page]:.1f} screens at {WIDTH} x {SCREEN}, more than its {TARGETS[page]}: move "
        "sweeps, secondary comparisons and per-seed tables to the study's appendix page")

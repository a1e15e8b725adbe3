"""How long each page of the book is, in screens of a 1280 x 800 window, and the length each chapter of
Parts III-IV and the appendix's test page may have.

A screen is the 800 px of the window's height; a page's length is its document's height over 800,
measured on the shared 1280 px page (``visit``'s) with its window made 800 px high for the measurement
and its own height again after, so that no page is loaded for this alone. Every page's length is
printed (``pytest -m browser tests/browser/test_page_height.py``, shown with or without ``-s``), and the chapters in :data:`TARGETS` fail above theirs: a chapter tells one answer and its
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
# The height once the window is 800 px high and two frames have been drawn (the theme's resize handlers).
HEIGHT_JS = """async () => {
    await new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)));
    return Math.max(document.documentElement.scrollHeight, document.body.scrollHeight);
}"""


@pytest.fixture(scope="session")  # not "module": the sort by page interleaves this module's tests with others'
def screens(shared_pages):
    """``screens(page)``: the page's length in screens at 1280 x 800, measured once on the shared page (module
    docstring); a page that does not return to its ready state is closed, so the next test opens it afresh."""
    measured: dict[str, float] = {}

    def _of(page: str) -> float:
        if page not in measured:
            v = shared_pages.get(page, WIDTH)
            window = v.page.viewport_size
            try:
                v.page.set_viewport_size({"width": WIDTH, "height": SCREEN})
                measured[page] = v.page.evaluate(HEIGHT_JS) / SCREEN
            finally:
                v.page.set_viewport_size(window)
                if v.state() != v.ready_state:
                    shared_pages.drop(page, WIDTH)
        return measured[page]

    return _of


@pytest.mark.parametrize("page", PAGES)
def test_every_page_length_is_printed(screens, page, capsys):
    """Each page's length: the line a reader of the test output sees (``-s`` or not)."""
    s = screens(page)
    assert s > 0, f"{page}: no length"
    with capsys.disabled():
        limit = f" (at most {TARGETS[page]})" if page in TARGETS else ""
        print(f"\n  {s:5.1f} screens at {WIDTH} x {SCREEN}  {page}{limit}")


@pytest.mark.parametrize("page", list(TARGETS))
def test_chapter_fits_its_length(screens, page):
    assert page in PAGES, f"{page} is not in the built book"
    assert screens(page) <= TARGETS[page], (
        f"{page} fills {screens(page):.1f} screens at {WIDTH} x {SCREEN}, more than its {TARGETS[page]}: move "
        "sweeps, secondary comparisons and per-seed tables to the study's appendix page")

"""Fixtures for the browser tests: serve the built book on 127.0.0.1 and drive Debian's Chromium.

The built book is ``_build/html`` (``bash scripts/build_book.sh``). When it is missing, or when Chromium
or Playwright is not installed, every browser test is skipped with the reason.

Two ways to open a page:

- ``visit(page, width=1280)``: the page at that viewport width, kept open and shared by the tests
  that only read it (one browser context per width). The browser tests run page by page (sorted by
  their ``page`` parameter), so a few open pages per width serve them all. A test must leave a shared
  page as it found it: after the test the fixture compares the page's document, address and viewport
  with what they were when the page became ready, and fails the test that changed them (the page is
  then closed, so that the next test opens it afresh). Scrolling is allowed: each test gets the page
  scrolled to the top.
- ``fresh_visit(page, width=1280)``: a page of the test's own, in its own context, closed after the
  test: for tests that click, type, drag or press keys.

A page is ready when its own signals say so (:func:`wait_until_ready`): the load event, the fonts,
MathJax's startup promise (resolved after its first typeset) and every widget view rendered from the
saved state with its images decoded, the theme's banners revealed; never a network-idle timer, which a busy machine can outlast.
Each wait has its own named timeout, generous for a loaded 2-core machine, and says what it waited for.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import threading
from collections import OrderedDict
from pathlib import Path
from urllib.parse import urlparse

import pytest

from bookpaths import BUILD, CHROMIUM, CHROMIUM_ARGS  # noqa: E402

LOAD_TIMEOUT_MS = 180_000
"""The document and its subresources (the load event); about a second on an idle machine."""
FONTS_TIMEOUT_MS = 120_000
"""``document.fonts.ready``: the web fonts the page uses (MathJax's among them) loaded."""
MATHJAX_TIMEOUT_MS = 180_000
"""MathJax's startup promise: its components loaded and the page's math typeset."""
WIDGETS_TIMEOUT_MS = 180_000
"""Every widget view rendered from the page's saved state, its images decoded."""
ACTION_TIMEOUT_MS = 60_000
"""Playwright's default for the tests' own waits and actions that name no timeout."""
VIEWPORT_HEIGHT = 900
SHARED_PAGES_PER_WIDTH = 2
"""Shared pages kept open per viewport width, the least recently used closed first (a ready page holds
a few hundred MB in Chromium; the tests run page by page, so two serve them)."""
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"

_REDIRECT = re.compile(r"<meta[^>]+http-equiv=[\"']?refresh", re.I)
# The signals, as JavaScript predicates over the page (each polled by wait_for_function).
_LOADED_JS = "() => document.readyState === 'complete'"
_HAS_MATHJAX_JS = "() => !!document.querySelector('script[src*=\"mathjax\"]')"
_MATHJAX_STARTED_JS = "() => !!(window.MathJax && MathJax.startup && MathJax.startup.promise)"
_MATHJAX_DONE_JS = """() => {
    if (window.__bookMathJax === undefined) {
        window.__bookMathJax = 'waiting';
        MathJax.startup.promise.then(() => { window.__bookMathJax = 'done'; },
                                     (e) => { window.__bookMathJax = 'failed: ' + e; });
    }
    return window.__bookMathJax !== 'waiting' && window.__bookMathJax;
}"""
_FONTS_DONE_JS = """() => {
    if (window.__bookFonts === undefined) {
        window.__bookFonts = false;
        document.fonts.ready.then(() => { window.__bookFonts = true; });
    }
    return window.__bookFonts && document.fonts.status === 'loaded';
}"""
_WIDGETS_DONE_JS = f"""() => Array.from(document.querySelectorAll('script[type="{WIDGET_VIEW}"]')).every(s => {{
    const prev = s.previousElementSibling;
    return !!(prev && prev.classList.contains('widget-subarea') && prev.children.length > 0)
        && Array.from(prev.querySelectorAll('img')).every(img => img.complete);
}})"""
_IMAGES_DONE_JS = "() => Array.from(document.images).every(img => img.loading === 'lazy' || img.complete)"
# pydata-sphinx-theme reveals its (async) announcement and version banners by setting the revealer's
# height, then 'auto' 320 ms later: the last change the theme makes to a page by itself.
_THEME_DONE_JS = """() => {
    const r = document.querySelector('.pst-async-banner-revealer');
    return !r || r.style.height === 'auto';
}"""
# What a reading test must leave as it was: the document (a hash of its markup), address and viewport.
_STATE_JS = """() => {
    const html = document.documentElement.outerHTML;
    let h = 0;
    for (let i = 0; i < html.length; i++) h = (Math.imul(h, 31) + html.charCodeAt(i)) | 0;
    return {markup: html.length + '#' + h, href: location.href, width: window.innerWidth};
}"""


def _skip_reason() -> str | None:
    if not (BUILD / "index.html").is_file():
        return f"built book not found at {BUILD}: run `bash scripts/build_book.sh` first"
    if not (os.path.isfile(CHROMIUM) or shutil.which(CHROMIUM)):
        return f"Chromium not found at {CHROMIUM}: run `bash scripts/setup.sh` (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright (python package) is not installed: pip install -e '.[test]'"
    return None


def pytest_collection_modifyitems(config, items):
    """Skip the browser tests, with the reason, where they cannot run; run each page's tests together
    (a stable sort of the browser tests by their ``page`` parameter), so that a few shared pages per
    width serve them all (:data:`SHARED_PAGES_PER_WIDTH`)."""
    reason = _skip_reason()
    for item in items:
        if "browser" in item.keywords and reason:
            item.add_marker(pytest.mark.skip(reason=reason))
    here = Path(__file__).parent
    slots = [i for i, item in enumerate(items) if here in Path(item.path).parents]
    ordered = sorted((items[i] for i in slots),
                     key=lambda item: str(getattr(item, "callspec", None) and item.callspec.params.get("page", "")))
    for i, item in zip(slots, ordered):
        items[i] = item


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - signature from the base class
        pass


@pytest.fixture(scope="session")
def book_url():
    """Base URL (ending in '/') of _build/html served by a local http.server on a free port."""
    handler = functools.partial(_QuietHandler, directory=str(BUILD))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="session")
def browser():
    """Headless Debian Chromium driven by Playwright (never `playwright install`)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


def new_context(browser, width: int = 1280):
    """A browser context with a ``width`` x 900 px viewport and the named default timeout."""
    context = browser.new_context(viewport={"width": width, "height": VIEWPORT_HEIGHT})
    context.set_default_timeout(ACTION_TIMEOUT_MS)
    return context


def _wait(page, js: str, timeout_ms: int, what: str):
    try:
        return page.wait_for_function(js, timeout=timeout_ms, polling=100).json_value()
    except Exception as exc:  # playwright TimeoutError
        raise AssertionError(f"{page.url}: {what} not within {timeout_ms / 1000:.0f} s") from exc


def wait_until_ready(page) -> None:
    """Return once ``page`` (after its load event) says it is ready: the document complete, fonts
    loaded, MathJax's startup promise resolved (pages that load MathJax), every widget view rendered
    from the saved state, every image that is not lazy decoded, the theme's banners revealed. Each
    wait has its own timeout; one that runs out raises an AssertionError naming the signal."""
    _wait(page, _LOADED_JS, LOAD_TIMEOUT_MS, "document.readyState 'complete'")
    _wait(page, _FONTS_DONE_JS, FONTS_TIMEOUT_MS, "document.fonts.ready")
    if page.evaluate(_HAS_MATHJAX_JS):
        _wait(page, _MATHJAX_STARTED_JS, MATHJAX_TIMEOUT_MS, "MathJax.startup.promise (MathJax started)")
        status = _wait(page, _MATHJAX_DONE_JS, MATHJAX_TIMEOUT_MS, "MathJax.startup.promise resolved")
        assert status == "done", f"{page.url}: MathJax's startup promise was rejected: {status}"
        _wait(page, _FONTS_DONE_JS, FONTS_TIMEOUT_MS, "document.fonts.ready after typesetting")
    _wait(page, _WIDGETS_DONE_JS, WIDGETS_TIMEOUT_MS, "every widget view rendered from the saved state")
    _wait(page, _IMAGES_DONE_JS, LOAD_TIMEOUT_MS, "every (not lazy) image decoded")
    _wait(page, _THEME_DONE_JS, LOAD_TIMEOUT_MS, "the theme's banner revealer settled (height: auto)")


def _served_file(url: str) -> str:
    """The text of the built file the local server sends for ``url`` ('' for anything else)."""
    path = BUILD / urlparse(url).path.lstrip("/")
    return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""


class Visit:
    """One page of the book opened and made ready (:func:`wait_until_ready`), with everything it did
    recorded: ``errors`` (JavaScript errors, console errors), ``outside`` (requests to hosts other
    than 127.0.0.1, blocked) and ``failed`` (failed requests, HTTP >= 400). Opens its own context
    unless given one."""

    def __init__(self, browser, url: str, width: int = 1280, context=None):
        self.own_context = context is None
        self.context = new_context(browser, width) if context is None else context
        self.width = width
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.outside: list[str] = []
        self.failed: list[str] = []
        self.page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))
        self.page.on(
            "console",
            lambda msg: self.errors.append(f"console.{msg.type}: {msg.text} @ {msg.location}")
            if msg.type == "error"
            else None,
        )
        self.page.on("requestfailed", lambda req: self.failed.append(f"{req.url} ({req.failure})"))
        self.page.on(
            "response",
            lambda resp: self.failed.append(f"{resp.url} (HTTP {resp.status})") if resp.status >= 400 else None,
        )
        self.page.route("**/*", self._route)
        self.page.goto(url, wait_until="load", timeout=LOAD_TIMEOUT_MS)
        if _REDIRECT.search(_served_file(url)):
            # A redirect page (the book's index.html): the page to wait for is its target, whose
            # navigation may start, or end, only after the redirect page's own load event.
            self.page.wait_for_url(lambda u: u != url, timeout=LOAD_TIMEOUT_MS)
            self.page.wait_for_load_state("load", timeout=LOAD_TIMEOUT_MS)
        wait_until_ready(self.page)
        self.ready_state = self.state()

    def _route(self, route):
        parsed = urlparse(route.request.url)
        if parsed.hostname == "127.0.0.1" and parsed.path == "/favicon.ico":
            route.fulfill(status=204, body=b"")  # the browser's own request; the book has no favicon
            return
        if parsed.scheme in ("http", "https", "ws", "wss") and parsed.hostname != "127.0.0.1":
            self.outside.append(route.request.url)
            route.abort()
        else:
            route.continue_()

    def state(self) -> dict:
        """The page's markup hash, address and viewport width (what a reading test must not change)."""
        return self.page.evaluate(_STATE_JS)

    def close(self):
        if self.own_context:
            self.context.close()
        else:
            self.page.close()


class _SharedPages:
    """Pages opened once for the tests that read them: one browser context per viewport width, in it the
    :data:`SHARED_PAGES_PER_WIDTH` pages used last, keyed by (page, width)."""

    def __init__(self, browser, book_url: str):
        self.browser, self.book_url = browser, book_url
        self.contexts: dict[int, object] = {}
        self.pages: dict[int, OrderedDict[str, Visit]] = {}

    def get(self, page: str, width: int, keep: frozenset = frozenset()) -> Visit:
        """The ready page; closes the least recently used pages beyond the limit, except those in
        ``keep`` (the pages the running test holds)."""
        if width not in self.contexts:
            self.contexts[width] = new_context(self.browser, width)
            self.pages[width] = OrderedDict()
        open_ = self.pages[width]
        if page not in open_:
            for old in [p for p in open_ if p not in keep][:max(0, len(open_) + 1 - SHARED_PAGES_PER_WIDTH)]:
                open_.pop(old).close()
            open_[page] = Visit(self.browser, self.book_url + page, width, context=self.contexts[width])
        open_.move_to_end(page)
        v = open_[page]
        v.page.evaluate("() => window.scrollTo(0, 0)")
        return v

    def drop(self, page: str, width: int) -> None:
        """Close a page (a test changed it): the next test that asks for it gets it opened afresh."""
        v = self.pages[width].pop(page, None)
        if v is not None:
            v.close()

    def close(self):
        for context in self.contexts.values():
            context.close()


@pytest.fixture(scope="session")
def shared_pages(browser, book_url):
    pages = _SharedPages(browser, book_url)
    yield pages
    pages.close()


@pytest.fixture
def visit(shared_pages):
    """``visit(page, width=1280)``: the shared, ready page (module docstring); the test must only read it."""
    handed: dict[tuple[str, int], Visit] = {}

    def _open(page: str, width: int = 1280) -> Visit:
        held = frozenset(p for p, w in handed if w == width)
        handed[(page, width)] = v = shared_pages.get(page, width, keep=held)
        return v

    yield _open
    changed = []
    for key, v in handed.items():
        now = v.state()
        if now != v.ready_state:
            changed.append(f"{key[0]} at {key[1]} px: {v.ready_state} -> {now}")
            shared_pages.drop(*key)
    if changed:
        pytest.fail("this test changed a shared page (use the fresh_visit fixture for a page of its own): "
                    + "; ".join(changed), pytrace=False)


@pytest.fixture
def fresh_visit(browser, book_url):
    """``fresh_visit(page, width=1280)``: a ready page in a context of the test's own, closed after it."""
    opened: list[Visit] = []

    def _open(page: str, width: int = 1280) -> Visit:
        v = Visit(browser, book_url + page, width)
        opened.append(v)
        return v

    yield _open
    for v in opened:
        v.close()

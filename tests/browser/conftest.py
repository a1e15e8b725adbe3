"""Fixtures for the browser tests: serve the built book on 127.0.0.1 and drive Debian's Chromium.

The built book is ``_build/html`` (``bash scripts/build_book.sh``). When it is missing, or when Chromium
or Playwright is not installed, every browser test is skipped with the reason.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import threading

import pytest

from bookpaths import BUILD, CHROMIUM, CHROMIUM_ARGS  # noqa: E402


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
    reason = _skip_reason()
    for item in items:
        if "browser" in item.keywords and reason:
            item.add_marker(pytest.mark.skip(reason=reason))


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

"""The book answers in plain words first: the intro's first screen (1280 x 800) holds the bottom line
and the decision cards, with no commit hash, correction method or arm code, and the verdict table
follows them; no chapter's main text shows a commit hash; every verdict box says its claim in the
evidence layer's sentence and links to the appendix pages, which hold the rule, the ledger and every
comparison; Part IV has its measured table.

Run after ``bash scripts/build_book.sh``: ``pytest tests/browser -m browser``.
"""

from __future__ import annotations

import re

import pytest

from bookpaths import BUILD, book_pages

from stiefel_mini import evidence
from stiefel_mini.evidence import runs

pytestmark = pytest.mark.browser

SCREEN = 800  # px: the first screen of a 1280 x 800 window
COMMIT = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")
ARM_CODE = re.compile(r"\bA\d'?(?!\w)")
METHOD = re.compile(r"\b(Holm|Tarone|Bonferroni|Wilcoxon|p = \d)", re.I)

# The text of the page's main article above ``limit`` px (from the top of the page), details excluded.
ABOVE_JS = r"""(limit) => {
    const main = document.querySelector('main') || document.body;
    const walker = document.createTreeWalker(main, NodeFilter.SHOW_TEXT);
    const out = [];
    while (walker.nextNode()) {
        const n = walker.currentNode;
        if (!n.textContent.trim() || n.parentElement.closest('details, script, style, .headerlink')) continue;
        const r = document.createRange(); r.selectNodeContents(n);
        const box = r.getBoundingClientRect();
        if (box.height && box.top + window.scrollY < limit) out.push(n.textContent);
    }
    return out.join(' ').replace(/\s+/g, ' ');
}"""
# The main article's visible text, without closed blocks, code and widgets (a widget's weight
# fingerprint is hexadecimal too).
MAIN_JS = r"""() => {
    const main = (document.querySelector('main') || document.body).cloneNode(true);
    main.querySelectorAll('details, pre, script, style, .cell_input, nav, .headerlink, .jupyter-widgets, [data-key]')
        .forEach(e => e.remove());
    return main.innerText;
}"""


@pytest.fixture(scope="session")  # not "module": the sort by page interleaves this module's tests with others'
def verdicts():
    return {v["key"]: v for v in evidence.verdicts() + evidence.questions(untested=False)}  # as the intro shows them


@pytest.fixture(scope="session")
def every_verdict():
    return {v["key"]: v for v in evidence.verdicts() + evidence.questions()}  # as the appendix lists them


def test_the_intro_first_screen_holds_the_bottom_line_and_the_cards_and_no_audit_words(visit, verdicts):
    from stiefel_mini.evidence import cards

    v = visit("book/intro.html", 1280)
    spans = v.page.evaluate("""() => ['.bottom-line', '.decision-cards', 'table.verdict-table'].map(s => {
        const r = document.querySelector(s).getBoundingClientRect();
        return [r.top + window.scrollY, r.bottom + window.scrollY]; })""")
    (line_top, line_bottom), (cards_top, cards_bottom), (table_top, _) = spans
    # The answer and the cards begin on the first screen (each card's answer on it, below); the table of
    # claims after the cards.
    assert 0 < line_top < line_bottom <= cards_top < SCREEN - 200 and cards_bottom <= table_top, (
        f"bottom line at y = {line_top:.0f}-{line_bottom:.0f}, cards at {cards_top:.0f}-{cards_bottom:.0f}, table "
        f"from {table_top:.0f} px: the bottom line and the cards must begin within the first {SCREEN} px")
    shown = v.page.evaluate("() => Array.from(document.querySelectorAll('.decision-card')).map(c => c.dataset.task)")
    vs, qs = evidence.verdicts(), evidence.questions(untested=False)
    assert shown == [c["key"] for c in cards.cards(vs, qs)] == ["cifar", "grokking", "language_model"]
    first = v.page.evaluate(ABOVE_JS, SCREEN)
    assert "CPU" in first and "AdamW" in first and "StiefelAdam" in first, first[:400]
    for c in cards.cards(vs, qs):
        assert " ".join(c["answer"].split()) in first, c["answer"]
    for rx, what in ((COMMIT, "a commit hash"), (ARM_CODE, "an arm code"), (METHOD, "a test or correction")):
        assert not rx.search(first), f"the intro's first screen shows {what}: {rx.search(first).group(0)!r}"
    rows = v.page.evaluate("""() => Object.fromEntries(Array.from(document.querySelectorAll('tr[data-claim]'))
        .map(tr => [tr.dataset.claim, tr.innerText.replace(/\\s+/g, ' ')]))""")
    assert set(rows) == set(verdicts)
    for key, text in rows.items():
        assert verdicts[key]["status"] == "by construction" or evidence.render.cell_phrase(verdicts[key]) in text, (
            key, text)
        said = "not confirmed" in text or "did not confirm" in text
        assert said == (verdicts[key]["confirmed"] == "not confirmed"), (key, text)


def test_the_grokking_verdicts_say_the_sign_and_the_papers_number_in_words(visit, verdicts):
    page = visit("book/grokking.html").page
    said = page.evaluate("""() => Object.fromEntries(Array.from(document.querySelectorAll('.verdict-box li[data-claim]'))
        .map(li => [li.dataset.claim, li.querySelector('.verdict-sentence').innerText]))""")
    assert said == {k: verdicts[k]["sentence"] for k in said} and set(said) == {"grokking_endpoint", "grokking_sooner"}
    end = verdicts["grokking_endpoint"]["primary"][0]
    lo, hi = end["ci"]
    if not lo <= evidence.claim("grokking_endpoint").paper_value <= hi:
        assert "no gap like the paper's" in said["grokking_endpoint"].lower() or end["resolved"]
    speed = verdicts["grokking_sooner"]["primary"][0]
    if speed["resolved"]:
        word = "slower" if (speed["wins"] < speed["losses"]) else "faster"
        assert f"StiefelAdam {word} than AdamW" in said["grokking_sooner"]


def test_the_peer_curve_says_how_many_seeds_never_reached_95(visit):
    nanda = runs.load("grokking/nanda.json")
    if nanda is None:
        pytest.skip("no peer-curve file in this checkout")
    by = {a: {r["seed"]: r["metrics"]["steps_to_val95"] for r in nanda["runs"] if r["arm"] == a}
          for a in ("adamw", "stiefel_learned")}
    seeds = sorted(set(by["adamw"]) & set(by["stiefel_learned"]))
    never = sum(by["stiefel_learned"][s] is None for s in seeds)
    text = " ".join(visit("book/appendix_grokking.html").page.evaluate(MAIN_JS).split())
    want = (f"stiefel_learned never reached 95% test accuracy within {nanda['base_config']['steps']:,} steps on "
            f"{never} of {len(seeds)} seeds")
    assert (want in text) == (never > 0), want


@pytest.mark.parametrize("chapter", ["cifar", "grokking"])
def test_every_verdict_box_links_to_the_appendix(visit, chapter):
    page = visit(f"book/{chapter}.html").page
    links = page.evaluate("""() => Array.from(document.querySelectorAll('.verdict-box'))
        .map(b => Array.from(b.querySelectorAll('a')).map(a => a.getAttribute('href')))""")
    assert links and all(any(h.endswith("how_we_test.html") for h in box) and any(
        h.endswith("appendix_comparisons.html") for h in box) for box in links), links
    closed = page.evaluate("() => Array.from(document.querySelectorAll('.verdict-box details')).map(d => d.open)")
    assert closed and not any(closed), "the test behind each verdict starts closed"
    assert (BUILD / "book" / "how_we_test.html").is_file() and (BUILD / "book" / "appendix_comparisons.html").is_file()


def test_the_appendix_holds_the_ledger_and_every_comparison(visit, every_verdict):
    verdicts = every_verdict
    page = visit("book/appendix_comparisons.html").page
    ledger = page.evaluate("() => Array.from(document.querySelectorAll('table.ledger-table tbody tr'))"
                           ".map(tr => tr.dataset.confirmation)")
    assert ledger == [v["confirmation"]["status"] for v in verdicts.values()
                      if v["confirmation"] and v["confirmation"]["status"] != "by construction"]
    assert page.evaluate("() => document.querySelectorAll('table.evidence-table').length") >= len(
        [v for v in verdicts.values() if v["primary"]])
    assert COMMIT.search(page.evaluate("() => document.querySelector('table.ledger-table').innerText"))


CHAPTERS = [p for p in book_pages() if p.startswith("book/") and not p.startswith("book/appendix_")
            and not p.endswith(("how_we_test.html", "genindex.html", "search.html"))]
"""The chapters, without the appendix pages, whose ledgers and provenance name commits by design."""


@pytest.mark.parametrize("page", CHAPTERS)
def test_no_chapter_main_text_shows_a_commit_hash(visit, page):
    text = visit(page).page.evaluate(MAIN_JS)
    found = COMMIT.findall(text)
    assert not found, f"{page}: commit hashes in the main text (move them into a closed block): {found}"


def test_part_four_has_the_measured_table_and_it_fits_the_column(visit):
    page = visit("book/which_tool.html", 1280).page
    table = page.evaluate("""() => {
        const t = document.querySelector('table.advice-table');
        if (!t) return null;
        const col = t.closest('article, main').getBoundingClientRect();
        return {rows: t.querySelectorAll('tbody tr').length, right: t.getBoundingClientRect().right,
                col: col.right, text: t.innerText};
    }""")
    assert table is not None, "which_tool: no table of situations (table.advice-table)"
    assert table["rows"] >= 3 and "AdamW" in table["text"] and "QK-norm" in table["text"]
    assert table["right"] <= table["col"] + 1, table

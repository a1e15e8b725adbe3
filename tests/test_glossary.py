"""The book's words: every glossary term linked where a reader first meets it, no cross-reference
rendered as plain text. Read from the sources (no build needed).

Reading order is ``_toc.yml``'s order, from the first chapter of Part I through the appendix
(:data:`PARTS`); the intro, which only names the claims, and the reference pages are not read. The text read is the Markdown a reader sees: the Markdown
cells of the chapters, without headings, code, math, labels and directive options (Markdown printed by
a code cell is not read).
"""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GLOSSARY = ROOT / "book" / "glossary.md"
ROLE = re.compile(r"\{([\w:-]+)\}`([^`]*)`")
# the parts read, by the start of their caption in _toc.yml
PARTS = ("Part I:", "Part II:", "Part III:", "Part IV:", "Appendix")


def reading_order() -> list[Path]:
    """The chapters of :data:`PARTS` in the order of ``_toc.yml``."""
    pages, part = [], None
    for line in (ROOT / "_toc.yml").read_text().splitlines():
        caption = re.match(r'\s*- caption:\s*"?([^"]*)', line)
        if caption:
            part = caption.group(1)
        entry = re.match(r"\s*- file:\s*(\S+)", line)
        if entry and part and part.startswith(PARTS):
            pages.append(next(p for p in (ROOT / f"{entry.group(1)}.ipynb", ROOT / f"{entry.group(1)}.md")
                              if p.is_file()))
    return pages


def page_text(page: Path) -> str:
    """The Markdown of ``page``: an ``.md`` file whole, a notebook's Markdown cells joined."""
    if page.suffix == ".md":
        return page.read_text()
    cells = json.loads(page.read_text())["cells"]
    return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def glossary_terms() -> dict[str, list[str]]:
    """Each glossary entry's first name -> all its names (a name on the line right after another is
    an alias of the same entry)."""
    body = GLOSSARY.read_text().split("```{glossary}", 1)[1].rsplit("```", 1)[0]
    terms: dict[str, list[str]] = {}
    last = None
    for line in body.splitlines():
        if line and not line.startswith(" "):
            if last is not None and terms.get(last) is not None and prev_was_name:
                terms[last].append(line.strip())
            else:
                last = line.strip()
                terms[last] = [last]
            prev_was_name = True
        else:
            prev_was_name = False
    return terms


def _prose(text: str) -> str:
    """``text`` with what a reader does not read as words blanked (same length, so positions hold):
    fenced blocks, math, labels, directive options, inline code, and every role but ``{term}``."""
    def blank(m: re.Match) -> str:
        return re.sub(r"[^\n]", " ", m.group(0))

    for pattern in (r"```.*?```", r"\$\$.*?\$\$"):  # blocks, across lines
        text = re.sub(pattern, blank, text, flags=re.S)
    for pattern in (r"^#+ .*$", r"\$[^$\n]+\$", r"^\([\w-]+\)=$", r"^:[\w-]+:.*$", r"^:::\{?[\w-]*\}?.*$"):
        text = re.sub(pattern, blank, text, flags=re.M)  # within a line
    # a role and inline code, matched together so that a role's backticks are never read as code
    return re.sub(r"\{([\w:-]+)\}`[^`]*`|`[^`\n]*`",
                  lambda m: m.group(0) if m.group(1) == "term" else blank(m), text)


def _uses(text: str, name: str) -> list[tuple[int, bool]]:
    """Where ``name`` is used in ``text``: ``(position, linked)`` for each {term} role that names it
    and each plain occurrence outside a role (plurals count; lower-case names match any case)."""
    uses, roles = [], []
    for m in ROLE.finditer(text):
        if m.group(1) != "term":
            continue
        target = re.search(r"<([^>]+)>\s*$", m.group(2))
        roles.append((m.start(), m.end()))
        if (target.group(1) if target else m.group(2)).strip().lower() == name.lower():
            uses.append((m.start(), True))
    flags = re.I if name == name.lower() else 0
    for m in re.finditer(rf"(?<![\w-]){re.escape(name)}(?:s|es)?(?![\w-])", text, flags):
        if not any(a <= m.start() < b for a, b in roles):
            uses.append((m.start(), False))
    return sorted(uses)


def first_uses() -> dict[str, tuple[str, bool, str]]:
    """Per glossary entry: the page, whether linked, and the words around its first use in reading order."""
    found: dict[str, tuple[str, bool, str]] = {}
    for page in reading_order():
        text = _prose(page_text(page))
        for entry, names in glossary_terms().items():
            if entry in found:
                continue
            uses = sorted((pos, linked) for name in names for pos, linked in _uses(text, name))
            if uses:
                pos, linked = uses[0]
                found[entry] = (page.name, linked, " ".join(text[max(0, pos - 60):pos + 60].split()))
    return found


def test_reading_order_is_the_parts_and_the_appendix():
    assert [p.stem for p in reading_order()] == ["stiefel_manifold", "retractions", "riemannian_adam", "manifold_muon",
                                                 "stiefel_attention", "weight_decay", "grokking", "cifar",
                                                 "language_model", "use_in_your_model", "production", "which_tool",
                                                 "api", "how_we_test", "appendix_grokking", "appendix_cifar",
                                                 "appendix_language_model", "appendix_comparisons"]


def test_the_glossary_reader_finds_entries_and_aliases():
    terms = glossary_terms()
    assert terms["exact sign test"] == ["exact sign test", "sign test"]
    assert terms["paired start"] == ["paired start", "paired seed"]
    for entry in ("embedded metric", "canonical metric", "primary comparison", "ledger", "regime", "censored",
                  "untied", "AdamW", "StiefelAdam", "frozen frames", "QK-norm", "Muon"):
        assert entry in terms, f"the glossary has no entry {entry!r}"


def test_uses_tell_a_link_from_plain_text():
    text = _prose("# The frame\nA {term}`frame <frame>` is ... `frame` in code ... $frame$ ... two frames, "
                  "and {ref}`a frame <x>`.")
    assert [linked for _, linked in _uses(text, "frame")] == [True, False]
    assert _uses(_prose("{term}`StiefelAdam`, then stiefeladam"), "StiefelAdam") == [(0, True)]


def test_every_glossary_term_is_linked_where_a_reader_first_meets_it():
    unlinked = {entry: (page, around) for entry, (page, linked, around) in first_uses().items() if not linked}
    assert not unlinked, ("glossary terms first used without a {term} link (entry: page, words around it): "
                          f"{unlinked}")


@pytest.mark.parametrize("page", reading_order(), ids=lambda p: p.name)
def test_no_cross_reference_renders_as_text(page):
    """A ``{ref}`` without its own words shows the target section's whole title mid-sentence ("the loss
    of On real tokens: the constraint on, off, and QK-norm"); a role without its backticks shows as
    its raw source. Both are refused."""
    text = page_text(page)
    bare = [m.group(0) for m in ROLE.finditer(text) if m.group(1) == "ref" and not re.search(r"<[^>]+>\s*$", m.group(2))]
    assert not bare, f"{page.name}: {{ref}} without its own words (write {{ref}}`words <label>`): {bare}"
    raw = re.findall(r"\{(?:ref|term|doc|eq|numref|cite:[pt])\}(?!`)", text)
    assert not raw, f"{page.name}: roles without their backticks, shown as text: {raw}"

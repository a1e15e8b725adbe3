"""The book's results prose against counterfactual results: the chapters that state results are
executed on the committed files and on copies with two arms' outcomes exchanged
(:mod:`tests.counterfactual`), and every verdict box and every computed sentence that states a
direction or a status must change with them.

Two counterfactuals: **swapped** (every seed: each difference changes sign, so the direction words
of every sentence that has any must change) and **mixed** (odd seeds only: the differences scatter
around zero and the resolved verdicts fall to "not resolved", so a sentence that states a status
cannot stay word for word the same). A sentence written into the code as a fixed string, or whose
words do not follow the data, stays the same and fails here.

A sentence can follow the data and still say the opposite of its verdict ("the runs lean ... without
resolving it" beside "contradicted"): on each of the three results, every computed sentence that
names a claim must state the status of that claim's verdict on the same page (:func:`disagreements`).
The markdown cells are checked for result vocabulary (:data:`RESULT_WORDS`): results belong in
computed output.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path

import nbformat
import pytest
from bs4 import BeautifulSoup

from stiefel_mini import evidence
from stiefel_mini.evidence import CLAIMS
from stiefel_mini.resources import CHECKOUT_RESULTS, RESULTS_ENV
from tests.counterfactual import PAIRS, built_chapter, execute_chapters, swap_outcomes

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
CHAPTERS = ("intro", "grokking", "cifar", "appendix_grokking", "appendix_cifar")
"""The chapters that state results, and the appendix pages that hold the rest of their studies."""

DIRECTION = re.compile(r"\b(higher|lower|sooner|later|earlier|faster|slower|fewer|larger|smaller|better|worse|"
                       r"beats?|trails?|leads?|lags?|ahead|behind|gains?|loses?|towards|exceeds?|helps?|hurts?|narrows?|"
                       r"widens?|wider|narrower|farther|further)\b", re.I)
SAME = {"earlier": "sooner"}
OPPOSITE = {a: b for x, y in (("higher", "lower"), ("sooner", "later"), ("faster", "slower"),
                              ("larger", "smaller"), ("better", "worse"), ("beat", "trail"), ("beats", "trails"),
                              ("lead", "lag"), ("leads", "lags"), ("ahead", "behind"), ("gain", "lose"),
                              ("gains", "loses"), ("help", "hurt"), ("helps", "hurts"), ("narrows", "widens"),
                              ("wider", "narrower")) for a, b in ((x, y), (y, x))}
"""Each direction word's opposite: a sentence that says both ("ahead on 4 and behind on 4 of 8 seeds",
"sooner on 2, later on 12") maps onto itself when the outcomes are exchanged and may keep its words.
:data:`SAME` reads a synonym as the word its opposite is paired with."""
NAMES = {"cifar": (("A0", "AdamW"), ("A1", "StiefelAdam")), "grokking": (("adamw", "AdamW"), ("stiefel_learned",))}
"""How each exchanged arm is named in prose: a sentence naming both arms of a pair is about them (the
language model's pair, exchanged too, is named in prose as CIFAR-10's is)."""
STATUS = re.compile(r"\b(resolved|resolves?|resolving|leans?|confirm(?:ed|s)?|contradict(?:ed|s)?|needs?|held|"
                    r"reproduced?|decides?|settles?)\b", re.I)
RESULT_WORDS = re.compile(r"(\b\d+\s*/\s*\d+ wins\b|\bthe runs (?:lean|show|favour) (?:against|towards|that)\b|"
                          r"\bresolved once corrected\b|\bgroks? (?:sooner|later) than\b)", re.I)
"""A first layer for markdown that reports this book's results: win counts, leanings, what the runs
show. Teaching examples and the paper's own numbers are markdown's; the counterfactual run is the test
that must catch the rest."""

SENTENCE = re.compile(r"(?<=[.;:!?])\s+(?=[A-Z(])")
ITEM = re.compile(r"\n\s*(?:[-*]|\d+\.)\s+")
"""Where a markdown list item starts: each item is its own piece of prose."""


# Structured output the verdict test checks, or that names claims rather than states results: boxes,
# the verdict and evidence tables, closed blocks, legends.
STRUCTURED = ".verdict-box, table, details, .verdict-legend, .verdict-codes, .how-made"
FIXED = sorted({x for c in CLAIMS for x in (c.claim, c.paper, evidence.render.title({"key": c.key, "claim": c.claim}))
                if x and not DIRECTION.fullmatch(x)}, key=len, reverse=True)
"""The claims' own words (as declared, and as the chapters show them, without arm codes) and the paper's
numbers: they name what is tested, whatever the data. A paper's value that is one direction word
("sooner") stays: blanked, it would blank that word wherever the data says it."""


CALLED = {"grokking_sooner": ("speed claim",), "grokking_endpoint": ("endpoint claim",)}
"""The chapters' names for claims, besides each claim's title and short name."""
OPEN_WORDS = (r"not resolved|unresolved|without resolving|(?:cannot|can't|does not|do not|did not) (?:resolve|decide)|"
              r"decides? nothing|lean(?:s|ing)?")
VERDICT_WORDS = re.compile(rf"\b(?:(?P<open>{OPEN_WORDS})|(?P<shut>resolved|contradicted|reproduced|smaller effect|"
                           r"larger effect))\b", re.I)
"""A sentence's first status: ``open`` (the runs cannot decide) or ``shut`` (resolved, one way)."""
STATUSES = sorted(evidence.render.WORDS, key=len, reverse=True)
OPEN_BOX, SHUT_BOX = {"not resolved", "not tested yet"}, {"reproduced", "smaller effect", "larger effect", "contradicted"}
"""Verdict statuses by what they say; a mixed family, a partial one and a design claim can carry either."""
FOR_CLAIM = "[data-claim], .verdict-confirmations"
"""Prose the consistency check leaves out: the boxes and table rows it checks against, and the ledger's
lines, which judge the fresh seeds alone and may differ from the box."""
_MENTION = sorted({(re.escape(name), c.key) for c in CLAIMS
                   for name in (c.claim, c.short, evidence.render.title({"key": c.key, "claim": c.claim}),
                                *CALLED.get(c.key, ())) if name}, key=lambda t: len(t[0]), reverse=True)
MENTION = re.compile("|".join(f"(?P<c{i}>{rx})" for i, (rx, _) in enumerate(_MENTION)), re.I)


def _visible(cell: dict, drop: str = STRUCTURED) -> list[str]:
    """A code cell's visible prose as text: HTML without the parts ``drop`` selects, markdown, printed text."""
    out = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            out.append(o.get("text", ""))
            continue
        data = o.get("data", {})
        if "text/html" in data:
            soup = BeautifulSoup(data["text/html"], "html.parser")
            for el in soup.select(drop):
                el.decompose()
            out.append(soup.get_text(" "))
        elif "text/markdown" in data:
            out.append(data["text/markdown"])
        elif "text/plain" in data and "image/svg+xml" not in data and "image/png" not in data:
            out.append(data["text/plain"])
    return out


def _blanked(cell: dict) -> list[str]:
    """:func:`_visible` with the claims' titles and the paper's numbers blanked out (:data:`FIXED`)."""
    out = _visible(cell)
    for fixed in FIXED:
        out = [t.replace(fixed, "…") for t in out]
    return out


def _named(cell: dict) -> list[str]:
    """:func:`_visible` without the per-claim parts, each name of a claim replaced by its key as
    ``⟦key⟧`` (:data:`MENTION`)."""
    return [MENTION.sub(lambda m: f"⟦{_MENTION[int(m.lastgroup[1:])][1]}⟧", t)
            for t in _visible(cell, drop=f"{STRUCTURED}, {FOR_CLAIM}")]


def _boxes(cell: dict) -> dict[str, tuple[str, str]]:
    """``{claim key: (status, the row's text)}`` of the verdict boxes and tables a cell shows: the status
    of the verdict word or, in a box without one, the status its verdict opens with."""
    out = {}
    for o in cell.get("outputs", []):
        html = o.get("data", {}).get("text/html")
        if not html:
            continue
        for el in BeautifulSoup(html, "html.parser").select("[data-claim]"):
            word, words = el.select_one(".verdict-word"), el.select_one(".verdict-words")
            status = word["data-status"] if word is not None else next(
                (st for st in STATUSES if words is not None and words.get_text().startswith(st)), None)
            if status is not None:
                out[el["data-claim"]] = (status, " ".join(el.get_text(" ").split()))
    return out


CONDITIONS = ("real", "swapped", "mixed")


@pytest.fixture(scope="module")
def runs(request, tmp_path_factory):
    """``runs(chapter)``: ``{condition: executed notebook}`` on the committed files ("real") and the two
    counterfactuals. Every chapter the collected tests ask for is executed once per condition, all of
    them before the first test reads one, as many kernels at once as there are CPUs
    (:func:`tests.counterfactual.execute_chapters`), except the "real" one where the book build's copy
    is current (:func:`tests.counterfactual.built_chapter`)."""
    base = tmp_path_factory.mktemp("counterfactual")
    folders = {"real": None, "swapped": base / "swapped", "mixed": base / "mixed"}
    assert swap_outcomes(CHECKOUT_RESULTS, folders["swapped"]), "nothing was exchanged: the arm pairs are missing"
    swap_outcomes(CHECKOUT_RESULTS, folders["mixed"], seeds=range(1, 100, 2))
    params = [item.callspec.params for item in request.session.items
              if "runs" in item.fixturenames and hasattr(item, "callspec")]
    done = {}

    def execute(chapters) -> None:
        # The build executed each chapter on the committed results already: its copy is the "real"
        # one where it is current (tests.counterfactual.built_chapter).
        done.update({(c, "real"): nb for c in chapters if (nb := built_chapter(c, BOOK)) is not None})
        done.update(execute_chapters({(c, w): (c, folders[w]) for c in chapters for w in CONDITIONS
                                      if (c, w) not in done}, BOOK))

    execute(sorted({p["chapter"] for p in params if "chapter" in p}))

    def of(chapter: str) -> dict:
        if (chapter, "swapped") not in done:
            execute([chapter])
        return {w: done[(chapter, w)] for w in CONDITIONS}
    return of


def _flipping_claims() -> set[str]:
    """Claims whose primary compares an exchanged pair: their verdicts must follow the exchange."""
    pairs = {frozenset(p) for p in PAIRS.values()}
    return {c.key for c in CLAIMS for fam in c.primaries[:1] for comp in fam if frozenset((comp.a, comp.b)) in pairs}


ARM_NAMES = sorted({n for pair in NAMES.values() for side in pair for n in side}, key=len, reverse=True)
ARM_RX = re.compile(r"(?<![\w'])(" + "|".join(map(re.escape, ARM_NAMES)) + r")(?![\w'])")


def _words(text: str, rx: re.Pattern) -> list[str]:
    """The words of ``rx`` in ``text`` and, for direction words, the arm names among them in order
    ("`adamw` ahead" and "`stiefel_learned` ahead" differ)."""
    if rx is DIRECTION:
        found = sorted([(m.start(), m.group(0).lower()) for m in rx.finditer(text)]
                       + [(m.start(), m.group(0)) for m in ARM_RX.finditer(text)])
        return [w for _, w in found] if any(rx.fullmatch(w) for _, w in found) else []
    return sorted(m.group(0).lower() for m in rx.finditer(text))


def _sentences(nb, texts=_blanked) -> list[tuple[int, int, str]]:
    """``(cell, place, sentence)`` of the computed prose of ``nb``, read by ``texts`` (a cell's texts)."""
    out = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or cell.source.startswith("# Solution"):
            continue  # exercise solutions compute made-up examples
        for j, s in enumerate(s for t in texts(cell) for item in ITEM.split(t)
                              for s in SENTENCE.split(" ".join(item.split()))):
            out.append((i, j, s))
    return out


def _about_pair(sentence: str) -> bool:
    """Does the sentence name both arms of an exchanged pair (and say something of one against the
    other: a statement of both arms alike, "for both arms", holds whichever is which)?"""
    if re.search(r"\b(?:both|either) arms?\b", sentence):
        return False
    has = lambda names: any(re.search(rf"(?<![\w']){re.escape(n)}(?![\w'])", sentence) for n in names)  # noqa: E731
    return any(has(a) and has(b) for a, b in NAMES.values())


def _both_ways(words: list[str]) -> bool:
    """Whether direction words map onto themselves under the exchange (:data:`OPPOSITE`): every word's
    opposite is said as often as the word. A word with no opposite ("towards") never does."""
    said = Counter(SAME.get(w, w) for w in words if DIRECTION.fullmatch(w))
    return all(said[OPPOSITE.get(w, "")] == k for w, k in said.items())


def _unchanged(real, other, rx: re.Pattern, whole: bool = False) -> list[str]:
    """Sentences of ``real`` about an exchanged pair with words of ``rx`` whose counterpart in ``other``
    (same cell, same place) has the same such words (``whole``: is the same sentence)."""
    theirs = {(i, j): s for i, j, s in _sentences(other)}
    stuck = []
    for i, j, s in _sentences(real):
        mine = _words(s, rx)
        if not mine or (i, j) not in theirs or not _about_pair(s):
            continue
        if (theirs[(i, j)] == s) if whole else (_words(theirs[(i, j)], rx) == mine and not _both_ways(mine)):
            stuck.append(f"cell {i}: {s[:240]}")
    return stuck


def _segments(sentence: str) -> list[tuple[str, str]]:
    """``(claim key, text)``: the sentence cut at each ``⟦key⟧``, each piece given to the claim named at
    its start (the words before the first mention to the first claim)."""
    hits = [(m.start(), m.end(), m.group(1)) for m in re.finditer(r"⟦(\w+)⟧", sentence)]
    if not hits:
        return []
    ends = [h[0] for h in hits[1:]] + [len(sentence)]
    pieces = [(key, sentence[end:stop]) for (_, end, key), stop in zip(hits, ends)]
    return [(pieces[0][0], sentence[:hits[0][0]] + pieces[0][1])] + pieces[1:]


def disagreements(nb) -> list[str]:
    """Computed sentences whose status about a claim says the opposite of that claim's verdict on the same
    page: "lean ... without resolving" beside a resolved box, "contradicted" beside "not resolved", or a
    resolved word that points the other way ("contradicted" beside "held")."""
    boxes = {k: v[0] for c in nb.cells if c.cell_type == "code" for k, v in _boxes(c).items()}
    bad = []
    for i, _, sentence in _sentences(nb, texts=_named):
        for key, text in _segments(sentence):
            m, status = VERDICT_WORDS.search(text), boxes.get(key)
            if m is None or status is None:
                continue
            said = m.group(0).lower()
            if ((m.group("open") and status in SHUT_BOX) or (m.group("shut") and status in OPEN_BOX)
                    or (status in SHUT_BOX and "contradicted" in (said, status) and said in SHUT_BOX | {"resolved"}
                        and said not in (status, "resolved"))):
                bad.append(f"cell {i}: says '{said}' of {key}, whose verdict is '{status}': {sentence[:240]}")
    return bad


def test_a_status_sentence_that_contradicts_its_box_is_caught():
    """The grokking chapter's old reading ("lean ... without resolving it") beside its box "contradicted"."""
    def verdict(key, status):
        c = next(c for c in CLAIMS if c.key == key)
        return {"key": key, "chapter": c.chapter, "claim": c.claim, "paper": c.paper, "status": status,
                "verdict": f"{status}: to 95%: +802 steps [+349, +1,256]", "sure": "exact sign test, 0/8 wins, p = 0.0078",
                "confirmation": {"status": "pending", "text": ""}, "confirmed": "",
                "sentence": "StiefelAdam slower than AdamW to reach 95% validation on 8 of 8 seeds."}

    def page(status, *said):
        box = {"output_type": "display_data", "metadata": {},
               "data": {"text/html": evidence.box_html([verdict("grokking_sooner", status)], "grokking")}}
        prose = [{"output_type": "display_data", "metadata": {}, "data": {"text/markdown": s}} for s in said]
        return nbformat.from_dict({"cells": [{"cell_type": "code", "source": "", "outputs": [box]},
                                             {"cell_type": "code", "source": "", "outputs": prose}]})

    old = ("No row has an exact p below 0.00781, the least that 8 seeds allow, so the runs lean against the paper's "
           "speed claim without resolving it.")
    now = ("The speed claim's declared comparison is this study's steps to 95%: **contradicted** (exact sign test, "
           "0/8 wins, p = 0.0078), as in the box at the top.")
    assert len(disagreements(page("contradicted", old))) == 1
    assert disagreements(page("contradicted", now)) == [] and disagreements(page("not resolved", old)) == []
    assert len(disagreements(page("not resolved", now))) == 1
    assert len(disagreements(page("reproduced", now))) == 1  # resolved, the other way


@pytest.mark.slow
@pytest.mark.parametrize("results", ("real", "swapped", "mixed"))
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_status_sentence_agrees_with_its_claims_verdict(runs, chapter, results):
    bad = disagreements(runs(chapter)[results])
    assert not bad, f"{chapter} on the {results} results: sentences that contradict the verdict on the page:\n" + "\n".join(bad)


@pytest.mark.slow
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_verdicts_follow_the_exchanged_outcomes(runs, chapter):
    r = runs(chapter)
    real, swapped = ({k: v for c in r[w].cells if c.cell_type == "code" for k, v in _boxes(c).items()}
                     for w in ("real", "swapped"))
    must = _flipping_claims() & set(real)
    assert must or chapter == "intro" or chapter.startswith("appendix_"), f"{chapter}: no verdict about an exchanged pair"
    # a verdict changes its word, or, where the word stays (not resolved, mixed), its numbers
    same = [k for k in must if real[k][0] == swapped[k][0] and (real[k][0] not in ("not resolved", "mixed")
                                                                or real[k][1] == swapped[k][1])]
    assert not same, f"{chapter}: verdicts that did not change when the outcomes were exchanged: " + ", ".join(
        f"{k} ({real[k][0]})" for k in same)


@pytest.mark.slow
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_computed_sentences_change_their_direction_and_status_words(runs, chapter):
    r = runs(chapter)
    flat = _unchanged(r["real"], r["swapped"], DIRECTION)
    fixed = _unchanged(r["real"], r["mixed"], STATUS, whole=True)
    assert not flat and not fixed, (
        f"{chapter}: sentences whose direction words stay the same when the outcomes are exchanged (write them "
        "from the data, or drop them):\n" + "\n".join(flat) + "\nsentences stating a status that stay word for "
        "word the same when half the seeds are exchanged and the verdicts fall to 'not resolved':\n"
        + "\n".join(fixed))


@pytest.mark.parametrize("chapter", CHAPTERS + ("weight_decay",))
def test_markdown_states_no_result_of_this_book(chapter):
    nb = nbformat.read(BOOK / f"{chapter}.ipynb", 4)
    bad = [f"cell {i}: …{' '.join(c.source[max(m.start() - 60, 0):m.end() + 60].split())}…" for i, c in enumerate(nb.cells)
           if c.cell_type == "markdown" and not c.source.lstrip().startswith(":::{admonition} Solution")
           for m in RESULT_WORDS.finditer(c.source)]
    assert not bad, f"{chapter}: markdown that reports results (compute them in a cell):\n" + "\n".join(bad)


def test_the_builds_copy_stands_for_the_real_run_only_while_it_is_current(tmp_path, monkeypatch):
    """A built chapter counts as executed on the committed results only when it has the chapter's cells
    and is newer than the chapter, every results file and the package's files."""
    root, built = tmp_path / "repo", tmp_path / "built"
    for d in ("book", "results/lm", "stiefel_mini", "built"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "results/lm/x.json").write_text("{}")
    (root / "stiefel_mini/m.py").write_text("")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# A"), nbformat.v4.new_code_cell("1 + 1")])
    nbformat.write(nb, root / "book/ch.ipynb")
    built.mkdir()
    nbformat.write(nb, built / "ch.ipynb")
    monkeypatch.delenv(RESULTS_ENV, raising=False)

    def age(path, seconds):
        os.utime(path, (path.stat().st_atime, path.stat().st_mtime - seconds))

    for p in (root / "book/ch.ipynb", root / "results/lm/x.json", root / "stiefel_mini/m.py"):
        age(p, 100)
    assert built_chapter("ch", root / "book", built) is not None
    assert built_chapter("other", root / "book", built) is None
    monkeypatch.setenv(RESULTS_ENV, str(tmp_path))
    assert built_chapter("ch", root / "book", built) is None, "another results folder than the build's"
    monkeypatch.delenv(RESULTS_ENV)
    (root / "results/lm/x.json").write_text("{ }")  # a result changed after the build
    assert built_chapter("ch", root / "book", built) is None
    age(root / "results/lm/x.json", 100)
    nb.cells[1].source = "1 + 2"
    nbformat.write(nb, root / "book/ch.ipynb")
    age(root / "book/ch.ipynb", 100)
    assert built_chapter("ch", root / "book", built) is None, "the chapter's cells changed"


def test_swap_exchanges_measurements_keeps_identity_and_undoes_itself(tmp_path):
    from tests.counterfactual import read, swap_payload

    payload = {"runs": [{"arm": "A0", "seed": 0, "lr": 3e-3, "frame_lr": None, "test_acc": 0.6, "hist": [1]},
                        {"arm": "A1", "seed": 0, "lr": 3e-3, "frame_lr": 1.0, "test_acc": 0.62, "hist": [2]},
                        {"arm": "A1", "seed": 1, "lr": 3e-3, "frame_lr": 1.0, "test_acc": 0.7},
                        {"arm": "A3", "seed": 0, "lr": 3e-3, "frame_lr": None, "test_acc": 0.5}]}
    import copy

    before = copy.deepcopy(payload)
    assert swap_payload(payload, "A0", "A1") == 1  # seed 1 has no A0 to pair with
    a0, a1, lone, a3 = payload["runs"]
    assert (a0["test_acc"], a0["hist"], a0["frame_lr"]) == (0.62, [2], None)
    assert (a1["test_acc"], a1["hist"], a1["frame_lr"]) == (0.6, [1], 1.0)
    assert lone == before["runs"][2] and a3 == before["runs"][3]
    swap_payload(payload, "A0", "A1")
    assert payload == before
    changed = swap_outcomes(CHECKOUT_RESULTS, tmp_path / "r")
    def paired_seeds(name, a, b):  # seeds on which the committed file holds both arms
        runs = read(CHECKOUT_RESULTS / name)["runs"]
        return len({r["seed"] for r in runs if r["arm"] == a} & {r["seed"] for r in runs if r["arm"] == b})

    assert changed["cifar/r2_fitted.json"] == paired_seeds("cifar/r2_fitted.json", *PAIRS["cifar"]) >= 12
    assert changed["grokking/r2_long.json"] == paired_seeds("grokking/r2_long.json", *PAIRS["grokking"]) >= 8
    fitted = read(tmp_path / "r" / "cifar" / "r2_fitted.json")["runs"]
    assert len(fitted) == len(read(CHECKOUT_RESULTS / "cifar" / "r2_fitted.json")["runs"])


def test_only_a_sentence_that_says_both_directions_equally_may_keep_its_words():
    assert _both_ways(["stiefel_learned", "adamw", "sooner", "later"]) and _both_ways(["ahead", "behind"])
    assert _both_ways(["earlier", "later"])  # a synonym counts as its word
    assert not _both_ways(["sooner"]) and not _both_ways(["ahead", "behind", "ahead"])
    assert not _both_ways(["towards"])  # no opposite: a fixed "towards" must follow the data

"""The book's sources: chapters committed without outputs, the toc consistent, no CDN assets.

These run with the unit tests (no build needed); the built HTML is checked by tests/browser.
"""

import ast
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
NOTEBOOKS = sorted(BOOK.glob("*.ipynb"))


def _toc_files() -> list[str]:
    text = (ROOT / "_toc.yml").read_text()
    entries = re.findall(r"^\s*(?:root:|- file:)\s*(\S+)", text, flags=re.M)
    return entries


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_committed_without_outputs(path):
    nb = json.loads(path.read_text())
    with_outputs = [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code" and c.get("outputs")]
    counted = [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code" and c.get("execution_count")]
    assert not with_outputs, f"{path.name}: cells {with_outputs} have outputs; clear them before committing"
    assert not counted, f"{path.name}: cells {counted} have execution counts; clear them before committing"
    assert "widgets" not in nb.get("metadata", {}), f"{path.name}: saved widget state; clear it"


def test_every_toc_entry_exists():
    missing = []
    for entry in _toc_files():
        stem = ROOT / entry
        if not any(stem.with_suffix(s).is_file() for s in (".ipynb", ".md")):
            missing.append(entry)
    assert not missing, f"_toc.yml lists chapters that do not exist: {missing}"


def test_part_one_is_in_the_toc():
    entries = _toc_files()
    assert entries[0] == "book/intro"
    for chapter in ("book/stiefel_manifold", "book/retractions", "book/riemannian_adam", "book/manifold_muon"):
        assert chapter in entries


def test_assets_are_local_and_pinned():
    config = (ROOT / "_config.yml").read_text()
    assert "mathjax_path" in config and "offline/mathjax/" in config
    assert "offline/jupyter-widgets/embed.js" in config
    assert not re.search(r"(cdn\.|unpkg\.com|jsdelivr)", config), "_config.yml must not load assets from a CDN"
    package = json.loads((ROOT / "package.json").read_text())
    lock = json.loads((ROOT / "package-lock.json").read_text())
    for name, version in package["dependencies"].items():
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), f"{name} must be pinned exactly, got {version}"
        assert lock["packages"][f"node_modules/{name}"]["version"] == version


# Parts I-IV: the chapters that teach the geometry and the module, the experiments, and their use.
EXPERIMENT_CHAPTERS = ["grokking", "cifar", "language_model"]
APPENDIX = {"grokking": "appendix_grokking", "cifar": "appendix_cifar"}
"""A study's appendix page: its sweeps, secondary comparisons, per-seed tables, Reproduce and provenance."""
USE_CHAPTERS = ["use_in_your_model", "which_tool"]
TEXTBOOK_CHAPTERS = ["stiefel_manifold", "retractions", "riemannian_adam", "manifold_muon", "stiefel_attention",
                     "weight_decay",
                     *EXPERIMENT_CHAPTERS, *USE_CHAPTERS]
HIDDEN_INPUT_TAGS = {"hide-input", "remove-input", "remove-cell"}
MAX_CODE_LINE = 88


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_visible_code_lines_fit_the_page(path):
    """Code a reader sees (cells not tagged hide-input/remove-input) wraps at 88 characters."""
    nb = json.loads(path.read_text())
    long = [
        (i, j + 1, len(line))
        for i, c in enumerate(nb["cells"])
        if c["cell_type"] == "code"
        and not HIDDEN_INPUT_TAGS & set(c.get("metadata", {}).get("tags", []))
        for j, line in enumerate("".join(c["source"]).splitlines())
        if len(line) > MAX_CODE_LINE
    ]
    assert not long, (
        f"{path.name}: (cell, line, width) over {MAX_CODE_LINE} characters: {long}; "
        "rewrap them (PEP 8 continuation lines)"
    )


# At 1280 px the column holds about 85 characters of code (the browser checks measure it); the
# experiment chapters, written for it, keep their visible code within 84.
EXPERIMENT_CODE_LINE = 84


@pytest.mark.parametrize("name", [*EXPERIMENT_CHAPTERS, *USE_CHAPTERS, "production"])
def test_visible_code_of_the_experiment_chapters_fits_the_column(name):
    nb = json.loads((BOOK / f"{name}.ipynb").read_text())
    long = [
        (i, len(line))
        for i, c in enumerate(nb["cells"])
        if c["cell_type"] == "code"
        and not HIDDEN_INPUT_TAGS & set(c.get("metadata", {}).get("tags", []))
        for line in "".join(c["source"]).splitlines()
        if len(line) > EXPERIMENT_CODE_LINE
    ]
    assert not long, f"{name}: (cell, width) of visible code over {EXPERIMENT_CODE_LINE} characters: {long}"


# A collapsed provenance block ("How these numbers were made") may name commits and trees.
PROVENANCE_CELL = "# How these numbers were made"


def _cells(name: str) -> list[dict]:
    return json.loads((BOOK / f"{name}.ipynb").read_text())["cells"]


def _source(cell: dict) -> str:
    return "".join(cell["source"])


@pytest.mark.parametrize("name", TEXTBOOK_CHAPTERS)
def test_chapter_has_aims_summary_exercises_and_executed_solutions(name):
    """Aims first, then a summary, 3-5 exercises, and solutions whose code the build runs."""
    cells = _cells(name)
    assert ":class: tip learning-aims" in _source(cells[0]), f"{name}: no 'What you will learn' block in the first cell"
    aims = re.search(r":class: tip learning-aims\n\n((?:- .+\n)+):::", _source(cells[0]))
    assert aims and 2 <= aims.group(1).count("\n- ") + 1 <= 4, f"{name}: the aims block needs 2-4 points"
    text = [_source(c) for c in cells if c["cell_type"] == "markdown"]
    summary = [i for i, t in enumerate(text) if re.search(r"^## Summary$", t, re.M)]
    exercises = [t for t in text if re.search(r"^## Exercises$", t, re.M)]
    assert summary and exercises, f"{name}: needs a '## Summary' and an '## Exercises' section"
    listed = re.findall(r"^(\d+)\. ", exercises[0].split("## Exercises", 1)[1], re.M)
    assert 3 <= len(listed) <= 5 and listed == [str(i + 1) for i in range(len(listed))], \
        f"{name}: 3-5 exercises numbered 1..n, found {listed}"
    dropdowns = re.findall(r":::\{admonition\} Solution (\d+)\n:class: dropdown", "\n".join(text))
    assert sorted(set(dropdowns), key=int) == listed, f"{name}: one collapsed solution per exercise, found {dropdowns}"
    checked = [
        _source(c) for c in cells
        if c["cell_type"] == "code" and _source(c).startswith("# Solution")
        and "hide-input" in c.get("metadata", {}).get("tags", [])
    ]
    assert checked, f"{name}: no solution code cell (tagged hide-input) that the build executes"
    for src in checked:
        assert "assert" in src, f"{name}: a solution cell checks nothing (no assert): {src.splitlines()[0]}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_solution_cells_fit_the_column(path):
    """A solution's check, which a reader opens to compare with their own work, reads unwrapped at 1280 px."""
    cells = json.loads(path.read_text())["cells"]
    long = [
        (i, j + 1, len(line))
        for i, c in enumerate(cells)
        if c["cell_type"] == "code" and _source(c).startswith("# Solution")
        for j, line in enumerate(_source(c).splitlines())
        if len(line) > EXPERIMENT_CODE_LINE
    ]
    assert not long, f"{path.name}: (cell, line, width) over {EXPERIMENT_CODE_LINE} characters: {long}"


def _solution_cells_out_of_place(cells: list[dict]) -> list[str]:
    """The solution code cells (``# Solution 3`` or ``# Solutions 2 and 3``) that check a solution not yet
    written above them, or that stand after written solutions none of which they check."""
    seen, latest, wrong = set(), set(), []
    for c in cells:
        src = _source(c)
        if c["cell_type"] == "markdown":
            written = {int(n) for n in re.findall(r":::\{admonition\} Solutions? (\d+)", src)}
            seen |= written
            latest = written or latest
        elif head := re.match(r"# Solutions? (\d+(?:(?:, | and )\d+)*)", src):
            checks = {int(n) for n in re.findall(r"\d+", head.group(1))}
            if not checks <= seen or not checks & latest:
                wrong.append(f"'{src.splitlines()[0]}' stands after solution(s) {sorted(latest)}")
    return wrong


@pytest.mark.parametrize("name", TEXTBOOK_CHAPTERS)
def test_each_solution_cell_follows_the_solutions_it_checks(name):
    """A reader meets the written solution first, then the cell that checks it, before the next one."""
    assert not _solution_cells_out_of_place(_cells(name)), f"{name}: {_solution_cells_out_of_place(_cells(name))}"


def test_the_solution_order_rule_catches_a_misnamed_and_an_early_cell():
    def md(*n):
        return {"cell_type": "markdown", "source": [f":::{{admonition}} Solution {k}\n:class: dropdown\n:::\n" for k in n]}

    def code(head):
        return {"cell_type": "code", "source": [head + "\nassert True"]}

    assert not _solution_cells_out_of_place([md(1, 2, 3), code("# Solution 1"), code("# Solution 3"), md(4),
                                             code("# Solution 4")])
    assert _solution_cells_out_of_place([md(1, 2, 3), code("# Solution 3"), md(4), code("# Solution 3")])
    assert _solution_cells_out_of_place([md(1, 2), code("# Solutions 2 and 3"), md(3, 4)])


PROCESS_WORDS = re.compile(
    r"\bissues?\s*#?\d+|\bround\s+\d+\b|\brounds?\s+\d|kept as history|git_dirty"
    r"|(?<![\w/])(?:\.\./)+shared|/work/|/home/|/tmp/"
    r"|\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b",
    re.I,
)


@pytest.mark.parametrize("name", ["intro", *TEXTBOOK_CHAPTERS, *APPENDIX.values()])
def test_no_process_words_in_the_reader_text(name):
    """No issue numbers, rounds, commit hashes or machine paths in what a reader sees, outside the
    collapsed provenance blocks."""
    found = [
        (i, m.group(0))
        for i, c in enumerate(_cells(name))
        if not _source(c).startswith(PROVENANCE_CELL)
        for m in PROCESS_WORDS.finditer(_source(c))
    ]
    assert not found, f"{name}: process words (cell, text): {found}"


def _assert_collapsed_provenance(name: str, cells: list) -> None:
    """Commits and trees only in hidden provenance cells whose output is a closed <details>."""
    prov = [c for c in cells if c["cell_type"] == "code" and _source(c).startswith(PROVENANCE_CELL)]
    assert prov, f"{name}: no '{PROVENANCE_CELL}' cell"
    for c in prov:
        assert "remove-input" in c["metadata"].get("tags", []), f"{name}: provenance code must be hidden"
        assert "<details class='how-made'>" in _source(c) and " open" not in _source(c)
    others = "\n".join(_source(c) for c in cells if c not in prov)
    assert "git_commit" not in others and "git_dirty" not in others, \
        f"{name}: commits are read outside the provenance block"


@pytest.mark.parametrize("name", EXPERIMENT_CHAPTERS)
def test_experiment_chapter_keeps_provenance_in_a_collapsed_block(name):
    """Commits and commands of the results files: in a provenance cell whose input is removed and
    whose output is a closed <details>, not in sentences (on the study's appendix page where it has
    one, with its Reproduce section); the step-length question is answered."""
    cells = _cells(name) + (_cells(APPENDIX[name]) if name in APPENDIX else [])
    _assert_collapsed_provenance(name, cells)
    reproduce = [_source(c) for c in cells if c["cell_type"] == "markdown" and "## Reproduce" in _source(c)]
    assert reproduce, f"{name}: no Reproduce section"
    for block in re.findall(r"```\w*\n(.*?)```", reproduce[0], flags=re.S):
        wide = [line for line in block.splitlines() if len(line) > MAX_CODE_LINE]
        assert not wide, f"{name}: reproduce commands over {MAX_CODE_LINE} characters: {wide}"
    if name == "grokking":
        text = "\n".join(_source(c) for c in cells)
        assert "(grok-step-length)=" in text and "step_q" in text, "grokking: the step-length question"
        assert ":name: grok-read-row" in text, "grokking: the worked example of reading a row"


PART_FOUR = [*USE_CHAPTERS, "production"]


@pytest.mark.parametrize("name", PART_FOUR)
def test_use_chapter_keeps_benchmark_provenance_in_a_collapsed_block(name):
    """Part IV reads stored benchmark runs: their commits and trees only in a hidden provenance cell
    whose output is a closed <details> (on each page that reads one); the tables are rendered, not
    printed as aligned text."""
    cells = _cells(name)
    if any("load_results(" in _source(c) for c in cells):
        _assert_collapsed_provenance(name, cells)
    # A table printed with aligned format specs, e.g. print(f"{x:>9}{y:>13}"), instead of show_table.
    printed = [i for i, c in enumerate(cells) if c["cell_type"] == "code"
               and re.search(r"print\(f[\"'][^\n]*\{[^}\n]*:[<>]\d+[^}\n]*\}[^\n]*\{[^}\n]*:[<>]\d+", _source(c))]
    assert not printed, f"{name}: cells {printed} print a table as text; render it with show_table"
    for text in (_source(c) for c in cells if c["cell_type"] == "markdown"):
        for block in re.findall(r"```\w*\n(.*?)```", text, flags=re.S):
            wide = [line for line in block.splitlines() if len(line) > EXPERIMENT_CODE_LINE]
            assert not wide, f"{name}: commands over {EXPERIMENT_CODE_LINE} characters: {wide}"


def test_intro_states_aims_links_the_paper_and_promises_only_what_is_true():
    cells = _cells("intro")
    first = _source(cells[0])
    assert "https://arxiv.org/abs/2609.19363" in first and "{cite" in first, "intro: the paper, linked and cited"
    # The verdict table and its figure come first (the first screen answers the question); the aims
    # open the section that follows them.
    md = [i for i, c in enumerate(cells) if c["cell_type"] == "markdown"]
    aims = next((i for i in md if ":class: tip learning-aims" in _source(cells[i])), None)
    table = next(i for i, c in enumerate(cells) if "evidence.summary_html(VERDICTS" in _source(c))
    assert aims is not None and table < aims <= table + 8, "intro: no aims block right after the verdicts"
    text = "\n".join(_source(c) for c in cells)
    with_exercises = {
        p.stem for p in NOTEBOOKS
        if any(re.search(r"^## Exercises$", _source(c), re.M) for c in _cells(p.stem))
    }
    if "Exercises end each chapter" in text:
        assert with_exercises >= {p.stem for p in NOTEBOOKS}, \
            f"intro promises exercises in every chapter; these have none: {sorted({p.stem for p in NOTEBOOKS} - with_exercises)}"
    assert set(TEXTBOOK_CHAPTERS) <= with_exercises
    for chapter in TEXTBOOK_CHAPTERS:
        assert f"{{doc}}`{chapter}`" in text, f"intro: the map of the book does not name {chapter}"


def test_process_word_pattern_catches_what_it_should():
    for bad in ("(issue 16)", "Round 1, kept as history", "at commit 820842e", "../shared/data/x", "git_dirty"):
        assert PROCESS_WORDS.search(bad), bad
    for fine in ("round-off", "rounded", "the decay", "a facade", "issues a warning", "1e-12"):
        assert not PROCESS_WORDS.search(fine), fine


def _glossary_terms() -> set[str]:
    text = (BOOK / "glossary.md").read_text()
    block = text.split("```{glossary}", 1)[1].split("```", 1)[0]
    return {line.strip().lower() for line in block.splitlines() if line and not line.startswith(" ")}


def _book_texts() -> dict[str, str]:
    texts = {p.name: "\n".join(_source(c) for c in json.loads(p.read_text())["cells"]) for p in NOTEBOOKS}
    texts.update({p.name: p.read_text() for p in BOOK.glob("*.md")})
    return texts


def test_every_term_link_names_a_glossary_entry():
    terms = _glossary_terms()
    assert {"frame", "arm", "paired start", "resolved", "holm", "trust cap", "frame lr", "retraction",
            "tangent space"} <= terms
    missing = [
        (name, target)
        for name, text in _book_texts().items()
        for label in re.findall(r"\{term\}`([^`]+)`", text)
        for target in [re.sub(r"^.*<(.+)>$", r"\1", label).strip().lower()]
        if target not in terms
    ]
    assert not missing, f"{{term}} links to no glossary entry: {missing}"


def test_every_citation_is_in_the_bibliography_with_a_checked_identifier_format():
    bib = (BOOK / "references.bib").read_text()
    keys = set(re.findall(r"^@\w+\{([^,]+),", bib, flags=re.M))
    cited = {
        key.strip()
        for text in _book_texts().values()
        for group in re.findall(r"\{cite(?::[tp])?\}`([^`]+)`", text)
        for key in group.split(",")
    }
    assert cited and cited <= keys, f"cited but not in book/references.bib: {sorted(cited - keys)}"
    for eprint in re.findall(r"eprint\s*=\s*\{([^}]*)\}", bib):
        assert re.fullmatch(r"\d{4}\.\d{4,5}", eprint), f"not an arXiv id: {eprint}"
    for doi in re.findall(r"doi\s*=\s*\{([^}]*)\}", bib):
        assert re.fullmatch(r"10\.\d{4,9}/\S+", doi), f"not a DOI: {doi}"
    for chapter in TEXTBOOK_CHAPTERS:
        assert "{cite" in _book_texts()[f"{chapter}.ipynb"], f"{chapter} cites nothing"


def _discarded_displays(source: str) -> list[int]:
    """Lines where an ``HTML(...)`` or ``Markdown(...)`` is built and dropped: only a cell's last
    top-level expression is shown, so one inside an ``if`` or a loop never reaches the page."""
    code = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())
    tree = ast.parse(code)
    shown = tree.body[-1] if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and node is not shown and isinstance(node.value, ast.Call)
            and getattr(node.value.func, "id", getattr(node.value.func, "attr", None)) in ("HTML", "Markdown")]


def test_the_display_rule_catches_a_dropped_html():
    assert _discarded_displays('if ok:\n    HTML("<p>")') == [2]
    assert _discarded_displays('HTML("<p>")\nx = 1') == [1]
    assert _discarded_displays('x = 1\nHTML("<p>")') == []
    assert _discarded_displays('if ok:\n    display(HTML("<p>"))') == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_cell_builds_a_display_and_drops_it(path):
    cells = json.loads(path.read_text())["cells"]
    dropped = [(i, line) for i, c in enumerate(cells) if c["cell_type"] == "code"
               for line in _discarded_displays(_source(c))]
    assert not dropped, f"{path.name}: (cell, line) of HTML/Markdown never shown; wrap them in display(): {dropped}"


@pytest.mark.parametrize("chapter, appendix", APPENDIX.items())
def test_an_experiment_chapter_links_its_appendix_which_the_toc_lists(chapter, appendix):
    """One click away: the chapter names its appendix page in its first cell, and the table of
    contents lists the page under "Appendix"."""
    assert f"{{doc}}`{appendix}`" in _source(_cells(chapter)[0]), f"{chapter}: no link to {appendix} at the top"
    toc = (ROOT / "_toc.yml").read_text()
    assert f"- file: book/{appendix}" in toc.split('caption: "Appendix"', 1)[1].split("caption:", 1)[0]



def test_the_use_chapter_opens_with_the_studies_recipe_and_types_no_setting_of_it():
    """The "If you try it" card comes before the first section that converts a model, is read from the
    results files (``recipe.card_html``), and the code that builds the chapter's optimizer takes the
    card's settings instead of typing a frame lr (``tests/test_recipe.py`` checks the card itself)."""
    cells = _cells("use_in_your_model")
    card = next(i for i, c in enumerate(cells) if "recipe.card_html(recipe.recipes())" in _source(c)
                or "recipe.card_html(RECIPES)" in _source(c))
    convert = next(i for i, c in enumerate(cells) if re.search(r"^## Convert$", _source(c), re.M))
    assert card < convert, "use_in_your_model: the card must come before the first section"
    built = next(_source(c) for c in cells if "optimizer = StiefelAdam(groups" in _source(c))
    assert "VIT.frame_lr" in built and not re.search(r'"lr":\s*[0-9.]', built), built


def test_the_tool_chapter_shows_the_same_card_where_it_says_which_to_use():
    """``which_tool``'s advice is followed by the card the use chapter opens with, read from the results
    files, not a typed setting."""
    cells = _cells("which_tool")
    advice = next(i for i, c in enumerate(cells) if re.search(r"^## Which to use$", _source(c), re.M))
    card = next(i for i, c in enumerate(cells) if "recipe.card_html(recipe.recipes())" in _source(c))
    summary = next(i for i, c in enumerate(cells) if re.search(r"^## Summary$", _source(c), re.M))
    assert advice < card < summary, "which_tool: the card belongs in 'Which to use'"


def test_both_chapters_price_a_training_step_from_one_benchmark_run_of_the_same_studys_arms():
    """The language-model and manifold-Muon chapters give the same training-step ratios: each reads
    ``lm_throughput.json`` through ``arm_costs``, none types or re-times them, and the manifold-Muon
    chapter prices the study the language-model chapter leads with (``lead_study``: the fourth once it
    answers, the second before), the one switch that chapter turns on."""
    def studies(name):
        return {m for c in _cells(name) for m in re.findall(r"arm_costs\(.*?study=([\w.()]+)", _source(c))}

    assert studies("manifold_muon") == {"lm_results.lead_study()"}
    assert studies("language_model") == {"2", "4"}
    assert any("LM4_TESTED = lm_results.lead_study() == 4" in _source(c) for c in _cells("language_model"))
    assert all("study=4" not in _source(c) or "if GAPS:" in _source(c) for c in _cells("language_model"))

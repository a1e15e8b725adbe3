"""The package's layers, enforced: a module imports only from its own layer or the layers below.

geometry -> optim -> attention / mha / vit -> experiments -> evidence -> chapter helpers (the book).
Imports are read with ``ast`` (relative ones resolved), including those inside functions, so a lazy
import cannot hide an upward dependency. CONTRIBUTING.md explains the layers.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from torch import nn

PACKAGE = Path(__file__).resolve().parents[1] / "stiefel_mini"

# Layer of each top-level module or subpackage of stiefel_mini; lower numbers sit below.
LAYERS = {
    "geometry": 0, "_numerics": 0, "_distributed": 0, "resources": 0,
    "optim": 1, "groups": 1, "manifold_muon": 1, "muon": 1,
    "attention": 2, "mha": 2, "_mha_inputs": 2, "conversion_report": 2, "vit": 2,
    "projection": 2, "convert": 2, "hf": 2,
    "experiments": 3,
    "evidence": 4,
    "widgets": 5, "plots": 5, "forest": 5, "retraction_view": 5, "muon_view": 5, "recipe": 5, "study_figures": 5,
}
PRIVATE_LAYER = 1  # a private module not in the table (``_name``) is a kernel beside the optimizer


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(path: Path) -> set[str]:
    """The stiefel_mini modules ``path`` imports (``from X import name``: ``X.name`` when that is a module)."""
    name = _module_name(path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                out.add(f"{mod}.{alias.name}" if f"{mod}.{alias.name}" in MODULES else mod)
        elif isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
    return {m for m in out if m.startswith("stiefel_mini.")}


def _layer(module: str) -> int:
    top = module.split(".")[1]
    if top in LAYERS:
        return LAYERS[top]
    if top.startswith("_"):
        return PRIVATE_LAYER
    raise AssertionError(f"stiefel_mini.{top} has no layer: add it to LAYERS here and to CONTRIBUTING.md")


@pytest.mark.parametrize("module", [m for m in MODULES if m != "stiefel_mini"])
def test_imports_go_down_the_layers(module):
    mine = _layer(module)
    upward = sorted(m for m in _imports(MODULES[module]) if _layer(m) > mine)
    assert not upward, f"{module} (layer {mine}) imports from a higher layer: {upward}"


def test_experiments_never_import_evidence_and_geometry_only_its_numerics():
    for module, path in MODULES.items():
        if module.startswith("stiefel_mini.experiments"):
            assert not any(m.startswith("stiefel_mini.evidence") for m in _imports(path)), module
    assert _imports(MODULES["stiefel_mini.geometry"]) == {"stiefel_mini._numerics"}
    assert _imports(MODULES["stiefel_mini._numerics"]) == set()


def test_the_import_reader_resolves_relative_and_absolute_imports():
    assert "stiefel_mini.geometry" in _imports(MODULES["stiefel_mini.attention"])
    assert "stiefel_mini.experiments.cifar.results" in _imports(MODULES["stiefel_mini.evidence.runs"])


# Within experiments: the shared modules and the one-module experiments at the top, one package per study.
SHARED = {"arms", "config", "records", "runtime", "runner", "stats", "train", "reference_optimizers", "machine_load"}
SINGLE = {"compare_tools", "patch_attention", "fsdp_example"}
STUDIES = {"cifar", "grokking", "lm", "weight_decay"}
EXPERIMENTS = PACKAGE / "experiments"


def test_experiments_hold_the_shared_modules_and_one_package_per_study():
    top = {m.split(".")[2] for m in MODULES if m.startswith("stiefel_mini.experiments.")}
    assert top == SHARED | SINGLE | STUDIES, f"unplaced: {sorted(top ^ (SHARED | SINGLE | STUDIES))}: add it here"
    assert {p.parent.name for p in EXPERIMENTS.glob("*/__init__.py")} == STUDIES
    for study in STUDIES:  # python -m stiefel_mini.experiments.<study>
        assert (EXPERIMENTS / study / "__main__.py").is_file(), study


@pytest.mark.parametrize("study", sorted(STUDIES))
def test_a_study_package_imports_nothing(study):
    """Reading one module of a study (the evidence reads ``cifar.results``) loads none of its training code."""
    assert not _imports(MODULES[f"stiefel_mini.experiments.{study}"]), study


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("stiefel_mini.experiments.")))
def test_an_experiment_imports_the_shared_modules_and_its_own(module):
    name = module.split(".")[2]
    allowed = SHARED if name in SHARED else SHARED | {name}
    used = {m.split(".")[2] for m in _imports(MODULES[module]) if m.startswith("stiefel_mini.experiments.")}
    assert used <= allowed, f"{module} imports another experiment's modules: {sorted(used - allowed)}"


def test_the_experiment_tests_mirror_the_modules():
    """``tests/experiments/<study>/test_<module>.py`` tests ``stiefel_mini/experiments/<study>/<module>.py``."""
    tests = Path(__file__).resolve().parent / "experiments"
    for path in sorted(tests.rglob("test_*.py")):
        rel = path.relative_to(tests)
        module = EXPERIMENTS / rel.parent / (rel.name.removeprefix("test_"))
        assert module.is_file(), f"{path.relative_to(tests.parents[1])} tests no module (no {module.name} there)"


def test_importing_the_library_loads_no_experiment_evidence_or_chapter_helper():
    code = "import sys, stiefel_mini; print(' '.join(m for m in sys.modules if m.startswith('stiefel_mini.')))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            cwd=PACKAGE.parent).stdout.split()
    upper = {m for m in loaded if _layer(m) >= LAYERS["experiments"]}
    assert loaded and not upper, f"import stiefel_mini loads {sorted(upper)}"


# --------------------------------------------------------------------------------------------------
# no leftovers: one job per module, every public module says what it exports, nothing deprecated


@pytest.mark.parametrize("module", list(MODULES))
def test_no_module_is_over_450_lines(module):
    lines = len(MODULES[module].read_text().splitlines())
    assert lines <= 450, f"{module} has {lines} lines; split it by job (CONTRIBUTING.md)"


PUBLIC = [m for m in MODULES if not any(part.startswith("_") for part in m.split(".")[1:])]


@pytest.mark.parametrize("module", PUBLIC)
def test_every_public_module_has_all_and_exports_only_what_it_defines(module):
    path = MODULES[module]
    tree = ast.parse(path.read_text())
    exported = next((ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                     and any(getattr(t, "id", None) == "__all__" for t in node.targets)), None)
    if path.name == "__init__.py" and exported is None:
        return  # a package that exports nothing itself (experiments: one module per job)
    assert exported is not None, f"{module} has no __all__"
    if path.name == "__init__.py" or module.count(".") > 1:
        return  # a package gathers names from its modules; an experiment's facade names its parts
    # A name exported from a private module (optim's SECOND_MOMENTS from _checks) lives here publicly;
    # one from a public module has a home already, and a second import path is a leftover.
    public_imports = {alias.asname or alias.name for node in tree.body if isinstance(node, ast.ImportFrom)
                      and not (node.module or "").split(".")[-1].startswith("_") for alias in node.names}
    assert not set(exported) & public_imports, f"{module} re-exports {sorted(set(exported) & public_imports)}"


@pytest.mark.parametrize("module", list(MODULES))
def test_no_deprecated_names(module):
    tree = ast.parse(MODULES[module].read_text())
    assert not any(isinstance(n, ast.Name) and n.id == "DeprecationWarning" for n in ast.walk(tree)), module
    assert not any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in tree.body), module


def test_public_types_live_in_public_modules():
    import stiefel_mini
    from stiefel_mini import conversion_report, convert

    for obj in [getattr(stiefel_mini, name) for name in stiefel_mini.__all__] + [conversion_report.ConversionReport,
                                                                              conversion_report.ConvertedLayer]:
        where = getattr(obj, "__module__", "stiefel_mini")
        assert not any(part.startswith("_") for part in where.split(".")), (obj, where)
    assert type(convert.convert_attention(nn.Linear(2, 2))) is conversion_report.ConversionReport


def test_the_evidence_layer_loads_no_language_model_runner():
    """The evidence reads plans and results: importing it loads no module that builds or trains an arm."""
    import subprocess
    import sys

    runners = ["stiefel_mini.experiments.lm." + m for m in ("experiment", "run_study", "arms", "model")]
    code = ("import sys, stiefel_mini.evidence, stiefel_mini.evidence.claims_lm4\n"
            f"print([m for m in {runners!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_the_language_model_modules_import_no_cycle():
    """The studies are data (plans, studies) read by one runner (run_study): no module of the
    language-model package imports, directly or through others, one that imports it back."""
    lm = {m: {i for i in _imports(MODULES[m]) if i.startswith("stiefel_mini.experiments.lm.")} for m in MODULES
          if m.startswith("stiefel_mini.experiments.lm.")}

    def reach(m: str, seen: set[str]) -> set[str]:
        for i in lm.get(m, ()):
            if i not in seen:
                seen.add(i)
                reach(i, seen)
        return seen
    assert [m for m in lm if m in reach(m, set())] == []


def test_the_book_reads_the_language_model_studies_through_plans_and_results():
    """A chapter imports the studies' plans (lm.plans, lm.studies) and results (lm.results), never the
    modules that run them or build their arms by recipe."""
    import json

    runners = ("stiefel_mini.experiments.lm.experiment", "stiefel_mini.experiments.lm.run_study",
               "stiefel_mini.experiments.lm.arms")
    found = []
    for path in sorted((PACKAGE.parent / "book").glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] != "code":
                continue
            source = "".join(cell["source"])
            lines = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
            try:
                tree = ast.parse(lines)
            except SyntaxError:
                continue
            for node in ast.walk(tree):
                names = ([node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
                         if isinstance(node, ast.ImportFrom) else
                         [a.name for a in node.names] if isinstance(node, ast.Import) else [])
                found += [(path.name, n) for n in names if n in runners]
    assert found == []


"""The package's layers, enforced: a module imports only from its own layer or the layers below.

geometry -> optim -> attention / mha / vit -> experiments -> evidence -> chapter helpers (the book).
Imports are read with ``ast`` (relative ones resolved), including those inside functions, so a lazy
import cannot hide an upward dependency. CONTRIBUTING.md explains the layers.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "stiefel_mini"

# Layer of each top-level module or subpackage of stiefel_mini; lower numbers sit below.
LAYERS = {
    "geometry": 0, "_numerics": 0, "_distributed": 0, "resources": 0,
    "optim": 1, "groups": 1,
    "attention": 2, "mha": 2, "_mha_inputs": 2, "_mha_report": 2, "vit": 2,
    "projection": 2, "convert": 2, "hf": 2,
    "experiments": 3,
    "evidence": 4,
    "verdicts": 5, "widgets": 5, "plots": 5, "retraction_view": 5,
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
    assert "stiefel_mini.experiments.cifar_results" in _imports(MODULES["stiefel_mini.evidence.runs"])


# Within experiments: the shared modules, and each experiment's own.
SHARED = {"arms", "config", "records", "runtime", "runner", "stats", "train", "reference_optimizers"}
EXPERIMENTS = {
    "cifar": {"cifar", "cifar_config", "cifar_data", "cifar_run", "cifar_results"},
    "grokking": {"grokking", "grokking_config", "grokking_model", "grokking_metrics", "one_run", "peer_curve"},
    "weight_decay": {"weight_decay", "weight_decay_config", "readouts"},
    "compare_tools": {"compare_tools", "orthogonal_decay"},
    "lm": {"lm", "lm_config", "lm_data", "lm_model", "lm_plan", "lm_results"},
    "patch_attention": {"patch_attention"},
    "fsdp_example": {"fsdp_example"},
}


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("stiefel_mini.experiments.")))
def test_an_experiment_imports_the_shared_modules_and_its_own(module):
    name = module.split(".")[2]
    if name in SHARED:
        allowed = SHARED
    else:
        owner = [mods for mods in EXPERIMENTS.values() if name in mods]
        assert owner, f"{module} belongs to no experiment: add it to SHARED or EXPERIMENTS here"
        allowed = SHARED | owner[0]
    used = {m.split(".")[2] for m in _imports(MODULES[module]) if m.startswith("stiefel_mini.experiments.")}
    assert used <= allowed, f"{module} imports another experiment's modules: {sorted(used - allowed)}"

"""Build hook: ship the committed results (``results/**/*.json``) inside the wheel.

The experiments write into ``results/`` at the repository root, outside the package. A wheel
(``pip install git+URL``, ``pip install .``) copies them to ``stiefel_mini/_results/`` so that the
chapters find them from any working directory through ``stiefel_mini.resources.results_path``. An
editable install needs no copy: the package is imported from the checkout, whose ``results/`` is
read directly. Everything else is configured in pyproject.toml.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class build_py_with_results(build_py):
    """``build_py`` that also copies ``results/**/*.json`` into ``<build>/stiefel_mini/_results/``."""

    def run(self):
        super().run()
        if self.editable_mode:
            return
        src_root = Path(__file__).resolve().parent / "results"
        dst_root = Path(self.build_lib) / "stiefel_mini" / "_results"
        for src in sorted(src_root.rglob("*.json")):
            dst = dst_root / src.relative_to(src_root)
            self.mkpath(str(dst.parent))
            self.copy_file(str(src), str(dst))


setup(cmdclass={"build_py": build_py_with_results})

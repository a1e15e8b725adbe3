"""Point the book's Binder/Colab buttons, the chapters' install cells and the README at a repository.

    python scripts/set_repository.py https://github.com/YOU/stiefel-mini [--branch main]
    python scripts/set_repository.py --check      # exit 1 if a copy disagrees with _config.yml

The repository is one setting: ``repository.url`` and ``repository.branch`` in ``_config.yml``. The
built book's Binder and Colab buttons read it there. Two places cannot read it at run time and carry
a copy that this script rewrites (and ``--check``, run by tests/test_repository.py, compares):

- the first code cell of every chapter, which in Colab pip-installs ``git+URL@BRANCH`` (Colab opens
  the notebook alone, without the repository);
- README.md: the pip line and the Binder and Colab links.

Binder's ``gh`` provider and Colab's ``github`` paths need a GitHub repository, so the URL must be
``https://github.com/OWNER/NAME``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
URL_RE = re.compile(r"https://github\.com/([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+)")


def read_setting(root: Path = ROOT) -> tuple[str, str]:
    """(url, branch) from the ``repository:`` block of ``root/_config.yml``."""
    text = (root / "_config.yml").read_text()
    block = re.search(r"^repository:\n((?:[ \t]+.*\n?)+)", text, flags=re.M)
    if block is None:
        raise ValueError("_config.yml has no `repository:` block with `url:` and `branch:`")
    url = re.search(r"^\s+url:\s*(\S+)", block.group(1), flags=re.M)
    branch = re.search(r"^\s+branch:\s*(\S+)", block.group(1), flags=re.M)
    if url is None or branch is None:
        raise ValueError("_config.yml's `repository:` block needs both `url:` and `branch:`")
    return url.group(1), branch.group(1)


def _forms(url: str, branch: str) -> list[str]:
    """The spellings of (url, branch) that appear in the copies, most specific first."""
    owner, name = URL_RE.fullmatch(url).groups()
    return [
        f"git+{url}@{branch}",                                 # pip (install cells, README)
        f"mybinder.org/v2/gh/{owner}/{name}/{branch}",         # Binder link (README)
        f"colab.research.google.com/github/{owner}/{name}/blob/{branch}",  # Colab link (README)
    ]


def _install_cells(root: Path):
    """(notebook path, its parsed JSON, the install cell) for every chapter in book/."""
    for path in sorted((root / "book").glob("*.ipynb")):
        nb = json.loads(path.read_text())
        cells = [c for c in nb["cells"] if c["cell_type"] == "code" and "google.colab" in "".join(c["source"])]
        yield path, nb, cells[0] if cells else None


def check(root: Path = ROOT) -> list[str]:
    """Every place that disagrees with _config.yml's repository setting, as readable lines."""
    url, branch = read_setting(root)
    if URL_RE.fullmatch(url) is None:
        return [f"_config.yml: repository.url {url!r} is not https://github.com/OWNER/NAME"]
    pip_form, binder_form, colab_form = _forms(url, branch)
    problems = []
    for path, _, cell in _install_cells(root):
        source = "" if cell is None else "".join(cell["source"])
        if pip_form not in source:
            problems.append(f"{path.relative_to(root)}: the first cell does not install {pip_form}")
    readme = (root / "README.md").read_text()
    for form in (pip_form, binder_form, colab_form):
        if form not in readme:
            problems.append(f"README.md: missing {form}")
    return problems


def set_repository(url: str, branch: str, root: Path = ROOT) -> None:
    """Rewrite _config.yml, every chapter's install cell and README.md to (url, branch)."""
    url = url.rstrip("/").removesuffix(".git")
    if URL_RE.fullmatch(url) is None:
        raise ValueError(f"expected a GitHub URL like https://github.com/OWNER/NAME, got {url!r}")
    if not re.fullmatch(r"[A-Za-z0-9_./-]+", branch):
        raise ValueError(f"branch {branch!r} has characters that a URL path cannot carry as they are")
    old_url, old_branch = read_setting(root)
    pairs = list(zip(_forms(old_url, old_branch), _forms(url, branch)))

    for path, nb, cell in _install_cells(root):
        if cell is None:
            continue
        source = "".join(cell["source"])
        for old, new in pairs:
            source = source.replace(old, new)
        cell["source"] = source.splitlines(keepends=True)
        path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")

    readme = root / "README.md"
    text = readme.read_text()
    for old, new in pairs:
        text = text.replace(old, new)
    readme.write_text(text)

    config = root / "_config.yml"
    text = config.read_text()
    block = re.search(r"^repository:\n((?:[ \t]+.*\n?)+)", text, flags=re.M)
    body = re.sub(r"^(\s+url:\s*)\S+", lambda m: m.group(1) + url, block.group(1), count=1, flags=re.M)
    body = re.sub(r"^(\s+branch:\s*)\S+", lambda m: m.group(1) + branch, body, count=1, flags=re.M)
    config.write_text(text[: block.start(1)] + body + text[block.end(1) :])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", nargs="?", help="https://github.com/OWNER/NAME")
    parser.add_argument("--branch", help="branch the buttons and install cells use (default: keep the current one)")
    parser.add_argument("--check", action="store_true", help="only report copies that disagree with _config.yml")
    args = parser.parse_args(argv)
    if not args.check:
        if args.url is None:
            parser.error("give the repository URL, or --check")
        set_repository(args.url, args.branch or read_setting()[1])
    problems = check()
    for line in problems:
        print(line, file=sys.stderr)
    if not problems:
        url, branch = read_setting()
        print(f"repository {url}, branch {branch}: _config.yml, {len(list(_install_cells(ROOT)))} chapters and README.md agree")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

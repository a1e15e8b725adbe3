"""Time and memory that executing each chapter takes: the numbers of the introduction's "Run it yourself".

    python scripts/measure_chapters.py --out results/chapters/cpu.json            # every chapter
    python scripts/measure_chapters.py --chapters grokking cifar --out /tmp/x.json

Each notebook chapter of ``_toc.yml`` is executed top to bottom in a fresh kernel (nbclient, working
directory ``book/``, as the book build runs it), one chapter at a time, in a child process. For each
chapter the file records the wall-clock time, the CPU time (user + system, of the child and its
kernel) and the peak resident memory of the largest process in that tree (the kernel), all from
``os.wait4``. ``OMP_NUM_THREADS`` is ``--threads`` (2: the book's reference machine). The machine's
1-minute load average before and after each chapter is recorded too: a wall time measured while
other work shared the cores is longer than on an idle machine, the CPU time much less so.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

RUN_ONE = """
import sys, nbformat, nbclient
nb = nbformat.read(sys.argv[1], as_version=4)
nbclient.NotebookClient(nb, timeout=1800, kernel_name="python3", resources={"metadata": {"path": sys.argv[2]}}).execute()
"""


def toc_chapters(root: Path = ROOT) -> list[str]:
    """Stems of the notebook chapters listed in ``_toc.yml``, in book order."""
    entries = re.findall(r"^\s*(?:root:|- file:)\s*(\S+)", (root / "_toc.yml").read_text(), flags=re.M)
    return [Path(e).name for e in entries if (root / e).with_suffix(".ipynb").is_file()]


def measure(chapter: str, threads: int) -> dict:
    """Execute book/<chapter>.ipynb in a child process; its wall time, CPU time and peak memory."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MPLBACKEND": "Agg", "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", RUN_ONE, str(ROOT / "book" / f"{chapter}.ipynb"), str(ROOT / "book")],
                            env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{chapter}: execution failed (see the traceback above)")
    # ru_maxrss is in KiB on Linux and in bytes on macOS.
    peak_mib = usage.ru_maxrss / (1024 * 1024 if sys.platform == "darwin" else 1024)
    return {
        "chapter": chapter,
        "wall_s": round(wall, 1),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
        "peak_rss_mib": round(peak_mib),
        "load_1min_before": round(load_before, 2),
        "load_1min_after": round(os.getloadavg()[0], 2),
    }


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def provenance(threads: int) -> dict:
    """Command, commit, versions and machine (no host name) of this measurement."""
    return {
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "versions": {name: metadata.version(name) for name in ("torch", "stiefel-mini", "nbclient", "ipykernel")}
        | {"python": platform.python_version()},
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "omp_num_threads": threads,
        "timestamp_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chapters", nargs="+", help="chapter stems (default: every notebook in _toc.yml)")
    parser.add_argument("--threads", type=int, default=2, help="OMP_NUM_THREADS for the kernels (default 2)")
    parser.add_argument("--out", required=True, help="results file to write, e.g. results/chapters/cpu.json")
    args = parser.parse_args(argv)
    chapters = args.chapters or toc_chapters()
    unknown = [c for c in chapters if not (ROOT / "book" / f"{c}.ipynb").is_file()]
    if unknown:
        parser.error(f"no notebook book/<name>.ipynb for {unknown}; choices: {toc_chapters()}")
    rows = []
    for chapter in chapters:
        rows.append(measure(chapter, args.threads))
        print(rows[-1], flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"provenance": provenance(args.threads), "chapters": rows}, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

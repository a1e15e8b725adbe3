"""The rendezvous of the multi-process (gloo) tests: a file, not a TCP port.

A port found free and released can be taken by any other process before the group binds it (a
chapter kernel, Chromium, another test's group), which fails a test at random under a loaded
parallel run; a file in the test's own folder cannot be taken.
"""

from __future__ import annotations

import uuid
from pathlib import Path


def rendezvous(folder: str | Path) -> str:
    """``init_method`` for ``torch.distributed.init_process_group``: a new file in ``folder``
    (which must exist), named uniquely, for one group."""
    return (Path(folder).resolve() / f"rendezvous-{uuid.uuid4().hex}").as_uri()

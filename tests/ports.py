"""A free TCP port on the loopback interface, for the rendezvous of the multi-process tests."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port the OS reports free now (bound to port 0, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

"""A free loopback port, for the local stand-ins, ``casekeeper chaos``, the benchmarks and the tests."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listened on a moment ago.

    The socket is closed before the port is returned, so another process could take it before the
    caller binds it; callers on loopback in a test or a local run accept that small race. Nothing
    listens on it when this returns, which is also what a test of a refused connection wants."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])

"""A leading companion against the fake kube-apiserver, for the attacks on what it writes."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from pathlib import Path

from koordlet.companion.app import Companion, CompanionOptions
from koordlet.companion.kube import make_api_client
from tests.fixtures.fakeapiserver import FakeApiServer, make_node


@contextlib.contextmanager
def leading_companion(apiserver: FakeApiServer, nodes: Iterable[str],
                      token_file: Path | None = None) -> Iterator[Companion]:
    """A companion on loopback ports, leading at once, with ``nodes`` seeded as Node objects; it authenticates
    with ``token_file`` (default: the fake's administrator token)."""
    for node in nodes:
        apiserver.seed(make_node(node))
    api = make_api_client(apiserver.host, token_file or apiserver.token_file, apiserver.ca_file)
    instance = Companion(CompanionOptions(grpc_addr="127.0.0.1:0", extender_addr="127.0.0.1:0",
                                          leader_elect=False), api)
    instance.start()
    try:
        yield instance
    finally:
        instance.stop()
        api.close()

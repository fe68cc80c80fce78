"""The listener plumbing the bridge and ``kms serve`` share (:mod:`pyiceberg_crypto.listener`): the
old ``bridge.files`` / ``bridge.tls`` paths still answer for one release, and the service no longer
takes that plumbing from the bridge."""

from __future__ import annotations

import ast
import importlib
import warnings
from pathlib import Path

import pytest

from pyiceberg_crypto import listener
from pyiceberg_crypto.listener import files, sockets, tls

SERVE = Path(listener.__file__).resolve().parent.parent / "serve"

MOVED = [
    ("pyiceberg_crypto.bridge.files", files, ["check_operator_directory", "read_operator_file", "write_private_file"]),
    ("pyiceberg_crypto.bridge.tls", tls, ["TLS_HANDSHAKE_TIMEOUT_SECONDS", "TlsIdentity", "server_context"]),
]


@pytest.mark.parametrize(("old", "new", "names"), MOVED, ids=[old for old, _, _ in MOVED])
def test_the_old_paths_are_the_same_objects_with_a_deprecation_warning(old, new, names):
    module = importlib.import_module(old)
    for name in names:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            value = getattr(module, name)
        assert value is getattr(new, name) is getattr(listener, name)
        assert [w.category for w in caught] == [DeprecationWarning], caught
        assert str(caught[0].message) == (f"{old}.{name} is deprecated: use {new.__name__}.{name} "
                                          "(the old path goes in the next release)")
        assert caught[0].filename == __file__  # it points at the code that used the old path
    with pytest.warns(DeprecationWarning, match=f"use {new.__name__}.{names[0]}"):
        exec(f"from {old} import {names[0]}", {})  # noqa: S102 - the import statement itself
    with pytest.raises(AttributeError, match="has no attribute 'nothing_here'"):
        module.nothing_here  # noqa: B018


def test_the_listeners_share_one_loopback_and_one_backlog():
    from pyiceberg_crypto.bridge import callback_server, py4j_server
    from pyiceberg_crypto.serve.aws import api, http

    assert callback_server.LOOPBACK is api.LOOPBACK is sockets.LOOPBACK == "127.0.0.1"
    assert py4j_server.LISTEN_BACKLOG is http.LISTEN_BACKLOG is sockets.LISTEN_BACKLOG >= 128


def test_the_service_takes_no_listener_plumbing_from_the_bridge():
    """serve/ reuses the bridge's Py4J server (its adapter, callback server, limits, handshake), never
    its files, TLS or socket constants: those are listener's."""
    allowed = {"pyiceberg_crypto.bridge.adapter", "pyiceberg_crypto.bridge.callback_server",
               "pyiceberg_crypto.bridge.handshake", "pyiceberg_crypto.bridge.py4j_server"}
    found = set()
    for path in SERVE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pyiceberg_crypto.bridge"):
                found.add(node.module)
                if node.module == "pyiceberg_crypto.bridge.callback_server":
                    assert [a.name for a in node.names] == ["KmsCallbackServer"], path
    assert found and found <= allowed, sorted(found - allowed)

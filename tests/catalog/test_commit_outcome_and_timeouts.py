"""Issue 49, smaller findings: a commit answered with a redirect is never success, and
``--metastore-timeout`` bounds every catalog call of the key commands (load, list, commit).

Real HTTP on 127.0.0.1 (the peer, a tiny server in a thread; not the thing under test), the real
REST client, the real commit path and the real command line. A Hive metastore that never answers
is a listening socket that accepts and stays silent.
"""

from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager

import pytest

from pyiceberg_crypto.catalog.rest import CommitOutcomeUnknownError, RestCatalog
from pyiceberg_crypto.cli.main import main
from pyiceberg_crypto.errors import CatalogError, OperationError, PyicebergCryptoError
from pyiceberg_crypto.keys.prune import prune_keys_in_catalog
from tests.rest.test_rest_client_hostile import CONFIG, ok, serving

TABLE_PATH = "/v1/namespaces/db/tables/t"
LOCATION = "file:/nowhere/db/t/metadata/00001-a.metadata.json"
#: A table without snapshots whose manifest-list key entry ``ml1`` no snapshot needs: a prune commits.
METADATA = {"format-version": 2, "table-uuid": "u-1", "location": "file:/nowhere/db/t",
            "properties": {"encryption.key-id": "k"}, "current-snapshot-id": -1, "snapshots": [], "refs": {},
            "encryption-keys": [{"key-id": "kek1", "encrypted-key-metadata": "AAAA", "encrypted-by-id": "k",
                                 "properties": {"KEY_TIMESTAMP": "1"}},
                                {"key-id": "ml1", "encrypted-key-metadata": "AAAA", "encrypted-by-id": "kek1"}]}
LOADED = {"metadata-location": LOCATION, "metadata": METADATA}
#: The seconds a command may take beyond its --metastore-timeout (start-up, a loaded machine).
SLACK = 10


def redirecting(code: int):
    """A catalog that serves the table and answers its commit (POST) with ``code`` to the table
    itself: urllib's default handler re-sends the POST as a GET and reads the table back."""

    def route(handler):
        if handler.path.startswith("/v1/config"):
            return ok(CONFIG)
        if handler.command == "POST":
            return code, b"", {"Location": TABLE_PATH}
        return ok(LOADED)

    return route


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_a_redirected_commit_is_outcome_unknown_and_never_followed(code):
    with serving(redirecting(code)) as (uri, seen):
        client = RestCatalog(uri, timeout=10)
        with pytest.raises(CommitOutcomeUnknownError) as caught:
            client.commit_table("db", "t", [{"type": "assert-table-uuid", "uuid": "u-1"}],
                                [{"action": "remove-encryption-key", "key-id": "ml1"}])
    message = str(caught.value)
    assert caught.value.status == code
    assert "outcome of the commit of table db.t is unknown" in message and f"HTTP {code}" in message
    assert "reload the table" in message
    assert isinstance(caught.value, PyicebergCryptoError) and isinstance(caught.value, RuntimeError)
    assert isinstance(caught.value, CatalogError)
    posts = [i for i, request in enumerate(seen.requests) if request[0] == "POST"]
    assert len(posts) == 1 and posts[0] == len(seen.requests) - 1, seen.requests  # nothing followed the POST


def test_a_get_is_still_followed_within_its_origin():
    def route(handler):
        if handler.path.startswith("/v1/config"):
            return ok(CONFIG)
        if handler.path == TABLE_PATH:
            return 302, b"", {"Location": TABLE_PATH + "-moved"}
        return ok(LOADED)

    with serving(route) as (uri, _):
        assert RestCatalog(uri, timeout=10).load_table("db", "t").metadata_location == LOCATION


@pytest.mark.parametrize("code", [302, 307])
def test_a_redirected_key_commit_is_reported_as_outcome_unknown(code, tmp_path, capsys):
    """The JVM-free commit path (catalog/commit.py) and the command: exit 2, one line, never "removed"."""
    with serving(redirecting(code)) as (uri, _):
        with pytest.raises(OperationError, match=r"outcome of the commit of table db\.t is unknown .*reload the table"):
            prune_keys_in_catalog({"type": "rest", "uri": uri}, "lake.db.t", timeout=10)
        status = main(["keys", "prune", "lake.db.t", *_kms(tmp_path), "--rest-uri", uri, "--metastore-timeout", "10"])
    out, err = capsys.readouterr()
    assert status == 2 and "removed" not in out and "Traceback" not in err
    assert "is unknown" in err and "reload the table" in err and f"HTTP {code}" in err


# --- --metastore-timeout ----------------------------------------------------------------------------

@contextmanager
def silent_server():
    """A TCP server on 127.0.0.1 that accepts connections and never answers; yields its port."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept():
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        for connection in held:
            connection.close()
        listener.close()


def hanging_commit(handler):
    """A REST catalog that serves the table at once and never answers its commit."""
    if handler.command == "POST":
        time.sleep(60)
        return None
    return ok(CONFIG) if handler.path.startswith("/v1/config") else ok(LOADED)


def _kms(tmp_path) -> list[str]:
    keystore = tmp_path / "keys.json"
    if not keystore.exists():
        assert main(["keystore", "create", str(keystore)]) == 0
        assert main(["keystore", "add", str(keystore), "k"]) == 0
    return ["--kms", "keystore", "--kms-property", f"keystore.path={keystore}"]


def _timed(argv: list[str], capsys) -> tuple[int, str, float]:
    capsys.readouterr()
    started = time.monotonic()
    status = main(argv)
    return status, capsys.readouterr().err, time.monotonic() - started


COMMANDS = {
    "keys list": lambda kms: ["keys", "list", "lake.db.t"],
    "keys where-used": lambda kms: ["keys", "where-used", "k", "1", *kms, "--catalog", "lake"],
    "keys prune": lambda kms: ["keys", "prune", "lake.db.t", *kms],
    "keys rewrap": lambda kms: ["keys", "rewrap", "lake.db.t", *kms],
}


@pytest.mark.parametrize("catalog", ["hive", "rest"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_catalog_that_never_answers_fails_the_command_at_the_metastore_timeout(catalog, command, tmp_path, capsys):
    """Loading and listing: the first call never returns; the command fails at about the timeout
    (the default is 30 s), exit 2, one line naming the catalog, no traceback. (Half a second: no
    answer ever comes, so a short timeout cannot fail a call that would have succeeded.)"""
    with silent_server() as port:
        where = (["--metastore-uri", f"thrift://127.0.0.1:{port}"] if catalog == "hive"
                 else ["--rest-uri", f"http://127.0.0.1:{port}"])
        status, err, elapsed = _timed([*COMMANDS[command](_kms(tmp_path)), *where, "--metastore-timeout", "0.5"],
                                      capsys)
    assert status == 2 and "Traceback" not in err, err
    assert elapsed < 0.5 + SLACK, f"{command} over {catalog} took {elapsed:.1f} s with --metastore-timeout 0.5"
    assert f"127.0.0.1:{port}" in err and ("0.5 s" in err or "timed out" in err or "within" in err), err


def test_a_rest_commit_that_never_returns_fails_at_the_metastore_timeout(tmp_path, capsys):
    """The commit itself (the table was loaded at once): outcome unknown at about the timeout."""
    with serving(hanging_commit) as (uri, seen):
        status, err, elapsed = _timed(["keys", "prune", "lake.db.t", *_kms(tmp_path), "--rest-uri", uri,
                                       "--metastore-timeout", "1"], capsys)
    assert [request[0] for request in seen.requests].count("POST") == 1
    assert status == 2 and "Traceback" not in err, err
    assert elapsed < 1 + SLACK, f"the commit took {elapsed:.1f} s with --metastore-timeout 1"
    assert "did not answer the commit of table db.t within 1 s" in err and "is unknown" in err, err

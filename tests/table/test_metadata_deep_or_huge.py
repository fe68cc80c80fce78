"""Issue 49, smaller: a metadata.json nested 200,000 levels deep, or larger than the limit (64 MiB),
is a clear error naming the file and the reason everywhere one is parsed (the key inventory, the
verifier, the reader, the JVM-free commit, a REST catalog's answer), and on the command line exit
2 with one line, never a RecursionError traceback."""

from __future__ import annotations

import os

import pytest

from pyiceberg_crypto.catalog.rest import RestCatalog
from pyiceberg_crypto.cli.main import main
from pyiceberg_crypto.errors import CatalogError, TableInputError
from pyiceberg_crypto.io import DEFAULT_MAX_METADATA_BYTES
from pyiceberg_crypto.keys.inventory import inventory_from_metadata
from pyiceberg_crypto.read import read_table
from pyiceberg_crypto.table.metadata import load_document
from pyiceberg_crypto.verify import verify_metadata
from tests.rest.test_rest_client_hostile import CONFIG, ok, serving

DEPTH = 200_000


def deep_json(depth: int = DEPTH) -> bytes:
    """Table metadata whose ``properties`` hold an array nested ``depth`` levels deep."""
    return b'{"format-version": 2, "properties": {"x": ' + b"[" * depth + b"]" * depth + b"}}"


@pytest.fixture
def deep(tmp_path) -> str:
    path = tmp_path / "00001-deep.metadata.json"
    path.write_bytes(deep_json())
    return str(path)


@pytest.fixture
def huge(tmp_path) -> str:
    """One byte over the limit (sparse: costs nothing on disk)."""
    path = tmp_path / "00001-huge.metadata.json"
    with open(path, "wb") as out:
        out.truncate(DEFAULT_MAX_METADATA_BYTES + 1)
    return str(path)


ENTRY_POINTS = {
    "inventory_from_metadata": lambda location: inventory_from_metadata(location, None),
    "verify_metadata": lambda location: verify_metadata(location, None),
    "read_table": lambda location: read_table(location, None),
    "load_document": lambda location: load_document(open(location, "rb").read(), location),  # noqa: SIM115
}


@pytest.mark.parametrize("entry_point", sorted(ENTRY_POINTS))
def test_deep_metadata_is_table_input_naming_the_file_and_the_reason(deep, entry_point):
    with pytest.raises(TableInputError) as caught:
        ENTRY_POINTS[entry_point](deep)
    assert deep in str(caught.value) and "nested too deeply" in str(caught.value)


@pytest.mark.parametrize("entry_point", sorted(set(ENTRY_POINTS) - {"load_document"}))
def test_huge_metadata_is_refused_before_it_is_read_naming_the_limit(huge, entry_point):
    with pytest.raises(TableInputError) as caught:
        ENTRY_POINTS[entry_point](huge)
    message = str(caught.value)
    assert huge in message and "too large" in message and "64 MiB" in message, message


def test_metadata_nested_as_iceberg_nests_it_still_parses():
    assert load_document(deep_json(200), "x")["format-version"] == 2


@pytest.mark.parametrize("which", ["deep", "huge"])
def test_keys_list_and_verify_fail_with_one_line_and_exit_2(which, request, tmp_path, capsys):
    location = request.getfixturevalue(which)
    keystore = tmp_path / "keys.json"
    assert main(["keystore", "create", str(keystore)]) == 0
    kms = ["--kms", "keystore", "--kms-property", f"keystore.path={keystore}"]
    for argv in (["keys", "list", location], ["keys", "list", location, *kms], ["verify", location, *kms]):
        capsys.readouterr()
        status = main(argv)
        err = capsys.readouterr().err
        assert status == 2, (argv, err)
        assert "Traceback" not in err and "RecursionError" not in err and len(err.strip().splitlines()) == 1, err
        assert os.path.basename(location) in err, err
        assert ("nested too deeply" if which == "deep" else "64 MiB") in err, err


def test_a_rest_catalog_serving_deep_metadata_is_a_clear_error(capsys):
    """The served answer is parsed by the REST client: the same clear error, over the command too."""
    deep = b'{"metadata-location": "file:/x/00001-a.metadata.json", "metadata": ' + deep_json() + b"}"

    def route(handler):
        return ok(CONFIG) if handler.path.startswith("/v1/config") else (200, deep, {})

    with serving(route) as (uri, _):
        with pytest.raises(CatalogError, match=r"the answer for table db\.t is JSON nested too deeply"):
            RestCatalog(uri, timeout=10).load_table("db", "t")
        status = main(["keys", "list", "lake.db.t", "--rest-uri", uri, "--metastore-timeout", "10"])
    err = capsys.readouterr().err
    assert status == 2 and "Traceback" not in err and "nested too deeply" in err and "lake.db.t" in err, err


@pytest.mark.parametrize("which", ["deep", "huge"])
def test_where_used_names_the_table_not_checked_and_why(which, request, tmp_path, capsys):
    """where-used goes on with the other tables: this one is NOT CHECKED, with the reason."""
    location = request.getfixturevalue(which)
    keystore = tmp_path / "keys.json"
    assert main(["keystore", "create", str(keystore)]) == 0
    capsys.readouterr()
    main(["keys", "where-used", "k", "--kms", "keystore", "--kms-property", f"keystore.path={keystore}",
          "--table", location])
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "RecursionError" not in out + err
    assert f"{location}: NOT CHECKED" in out and ("nested too deeply" if which == "deep" else "64 MiB") in out, out

"""No catalog name is made up (issue 48, item 5): a ``db.table`` name needs the catalog's name,
given as ``catalog=``; the JVM-free where-used listing needs ``catalog`` to name its tables. Before
this, ``db.table`` meant ``lake.db.table`` (the demo's catalog), and a user whose catalog is
``prod`` saw ``lake.db.orders`` in outputs, ledgers and reports. No JVM, no catalog service: every
refusal here comes before any catalog is asked (an address nothing listens on)."""

from __future__ import annotations

import inspect

import pytest

from pyiceberg_crypto.catalog.commit import commit_key_change, current_metadata
from pyiceberg_crypto.catalog.entry import catalog_entry, split_catalog_name
from pyiceberg_crypto.verify import verify_catalog_table
from pyiceberg_crypto.errors import InvalidArgumentError, OperationError, TableInputError
from pyiceberg_crypto.keys import prune_keys_in_catalog, rewrap_keks_in_catalog, where_used_in_listing

NOWHERE = {"uri": "thrift://127.0.0.1:1"}  # nothing listens: a call that reaches it fails at once


def test_a_db_table_name_needs_the_catalog():
    with pytest.raises(InvalidArgumentError, match=r"name the catalog: CATALOG\.DB\.TABLE") as raised:
        split_catalog_name("db.t")
    assert "'db.t'" in str(raised.value) and "lake" not in str(raised.value)
    assert split_catalog_name("db.t", "prod") == ("prod", ("db",), "t")
    assert split_catalog_name("prod.db.t") == ("prod", ("db",), "t")
    assert split_catalog_name("prod.db.t", "prod") == ("prod", ("db",), "t")
    assert split_catalog_name("prod.a.b.t") == ("prod", ("a", "b"), "t")  # a REST catalog's nested namespace
    with pytest.raises(InvalidArgumentError, match="not in catalog 'prod'"):
        split_catalog_name("lake.db.t", "prod")
    with pytest.raises(InvalidArgumentError, match="name the catalog"):
        split_catalog_name("db.t", "")  # an empty name is no name


@pytest.mark.parametrize("call", [
    lambda: catalog_entry(NOWHERE, "db.t"),
    lambda: current_metadata(NOWHERE, "db.t"),
    lambda: commit_key_change(NOWHERE, "db.t", lambda meta, doc: None, what="prune", error=OperationError),
    lambda: rewrap_keks_in_catalog(NOWHERE, "db.t", None),
    lambda: prune_keys_in_catalog(NOWHERE, "db.t"),
    lambda: verify_catalog_table(NOWHERE, "db.t", None),
], ids=["catalog_entry", "current_metadata", "commit_key_change", "rewrap_keks_in_catalog", "prune_keys_in_catalog",
        "verify_catalog_table"])
def test_every_function_taking_a_table_name_refuses_db_table_without_a_catalog(call):
    with pytest.raises(InvalidArgumentError, match=r"name the catalog: CATALOG\.DB\.TABLE"):
        call()


@pytest.mark.parametrize("call", [
    lambda: catalog_entry(NOWHERE, "db.t", catalog="prod", timeout=2),
    lambda: current_metadata(NOWHERE, "db.t", 2, catalog="prod"),
    lambda: prune_keys_in_catalog(NOWHERE, "db.t", catalog="prod", timeout=2),
    lambda: verify_catalog_table(NOWHERE, "db.t", None, catalog="prod", timeout=2),
], ids=["catalog_entry", "current_metadata", "prune_keys_in_catalog", "verify_catalog_table"])
def test_with_catalog_a_db_table_name_is_that_catalogs_table(call):
    """``db.t`` with ``catalog="prod"`` is ``prod.db.t``: the failure (nothing listens) names it so."""
    with pytest.raises((TableInputError, OperationError)) as raised:
        call()
    assert "prod.db.t" in str(raised.value) and "lake" not in str(raised.value)


def test_where_used_in_listing_needs_the_catalogs_name():
    assert inspect.signature(where_used_in_listing).parameters["catalog"].default is inspect.Parameter.empty
    with pytest.raises(TypeError, match="catalog"):
        where_used_in_listing(NOWHERE, "k", None, None)  # type: ignore[call-arg]
    for bad in ("", "prod.db"):
        with pytest.raises(InvalidArgumentError, match="catalog must be the catalog's name"):
            where_used_in_listing(NOWHERE, "k", None, None, catalog=bad)
    with pytest.raises(TableInputError, match="catalog 'prod'"):  # named, then the listing fails (nothing listens)
        where_used_in_listing(NOWHERE, "k", None, None, catalog="prod", timeout=2)

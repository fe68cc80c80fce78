"""The docs' "Read without Spark" block (docs/how-to/read.md), run as written against a real table (pandas,
DuckDB, Polars), and the ``head`` command."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pytest

from pyiceberg_crypto import config
from pyiceberg_crypto.cli.main import main
from tests.conftest import CATALOG
from tests.read.kms_factory import VARIABLE
from tests.read.test_read_integrity import flip, tampered
from tests.read.test_read_vs_spark import metadata_location

ROOT = Path(__file__).resolve().parents[2]
KMS_SPEC = "tests.read.kms_factory:from_environment"


@pytest.fixture(scope="module")
def orders(spark, kms_registration):
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.db")
    name = f"{CATALOG}.db.orders_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE TABLE {name} (id bigint, category string, amount decimal(10,2)) USING iceberg "
              + config.tblproperties_sql(config.table_properties("k1")))
    spark.sql(f"INSERT INTO {name} SELECT id, element_at(array('books', 'games', 'tools'), CAST(id % 3 AS int) + 1), "
              f"CAST(id * 1.5 AS decimal(10,2)) FROM range(0, 120)")
    return name


@pytest.fixture
def kms_env(monkeypatch, master_keys):
    monkeypatch.setenv(VARIABLE, json.dumps({k: v.hex() for k, v in master_keys.items()}))


@pytest.fixture(scope="module")
def getting_started_shaped(spark, kms_registration):
    """A table shaped like the getting-started table (id bigint, item string), more rows."""
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.db")
    name = f"{CATALOG}.db.items_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE TABLE {name} (id bigint, item string) USING iceberg "
              + config.tblproperties_sql(config.table_properties("k1")))
    spark.sql(f"INSERT INTO {name} SELECT id, element_at(array('apple', 'pear', 'plum'), CAST(id % 3 AS int) + 1) "
              f"FROM range(1, 40)")
    return name


def test_the_read_page_block_runs_as_written(spark, getting_started_shaped, master_keys):
    # docs/how-to/read.md reads the getting-started table; tests/docs/test_docs_walk.py runs the page
    # itself from the installed wheel; here the same block against Spark's own answers.
    orders = getting_started_shaped
    page = (ROOT / "docs" / "how-to" / "read.md").read_text()
    block = re.search(r"^# Read without Spark.*?```python\n(.*?)```", page, re.S | re.M).group(1)
    block = re.sub(r"^kms = .*$", "kms = test_kms", block, count=1, flags=re.M)
    block = re.sub(r"^metadata_json = .*$", "metadata_json = test_metadata", block, count=1, flags=re.M)
    from pyiceberg_crypto.kms import InMemoryKms

    scope = {"test_kms": InMemoryKms(master_keys), "test_metadata": metadata_location(spark, orders)}
    exec(compile(block, "docs/how-to/read.md", "exec"), scope)  # noqa: S102 - the docs' own example

    expected = {r[0]: r[1] for r in spark.sql(f"SELECT item, count(id) FROM {orders} GROUP BY item").collect()}
    assert scope["per_item"].to_dict() == expected                                           # pandas
    assert sorted(scope["top"]) == sorted(tuple(r) for r in spark.sql(
        f"SELECT item, count(*) FROM {orders} GROUP BY item").collect())                     # DuckDB
    assert scope["after_first"] == spark.sql(f"SELECT * FROM {orders} WHERE id > 1").count()  # Polars
    assert scope["ids"].column_names == ["id"] and scope["ids"].num_rows == 39
    assert scope["pears"].num_rows == spark.sql(                                           # row filter
        f"SELECT * FROM {orders} WHERE item = 'pear' AND id > 1").count() > 0


def _head(capsys, *argv):
    code = main(["head", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_head_prints_rows_text_and_json(spark, orders, kms_env, capsys):
    location = metadata_location(spark, orders)
    code, out, err = _head(capsys, location, "--kms", KMS_SPEC, "-n", "5")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["id", "category", "amount"] and lines[-1] == "(5 rows)" and len(lines) == 8
    code, out, _ = _head(capsys, location, "--kms", KMS_SPEC, "-n", "3", "--columns", "amount,id", "--json")
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(rows) == 3 and list(rows[0]) == ["amount", "id"]
    ids = {r[0]: str(r[1]) for r in spark.sql(f"SELECT id, amount FROM {orders}").collect()}
    assert all(ids[row["id"]] == row["amount"] for row in rows)


def test_head_exit_statuses(spark, orders, kms_env, capsys, tmp_path):
    location = metadata_location(spark, orders)
    code, _, err = _head(capsys, location, "--kms", KMS_SPEC, "--columns", "nope")
    assert code == 2 and "no column 'nope'" in err
    code, _, err = _head(capsys, str(tmp_path / "missing.metadata.json"), "--kms", KMS_SPEC)
    assert code == 2 and "table metadata not found" in err
    code, _, err = _head(capsys, location, "--kms", KMS_SPEC, "--io-property", "no-equals-sign")
    assert code == 2 and "--io-property" in err
    data_file = spark.sql(f"SELECT file_path FROM {orders}.files").first()[0]
    with tampered(Path(data_file.removeprefix("file:")), flip(60)):
        code, out, err = _head(capsys, location, "--kms", KMS_SPEC)
    assert code == 1 and out == "" and "not authentic" in err and data_file in err

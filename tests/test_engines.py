"""The engine facts (pyiceberg_crypto.engines) and the reader-set profile built on them, without Spark."""

from __future__ import annotations

import pytest

from pyiceberg_crypto import config, engines
from pyiceberg_crypto.errors import InvalidArgumentError
from pyiceberg_crypto.properties import READERS_PROPERTY
from pyiceberg_crypto.table import file_kinds

COW = {mode: "copy-on-write" for mode in engines.ROW_LEVEL_MODES}


def test_the_kinds_are_the_table_models():
    assert set(engines._KIND_WORDS) <= set(file_kinds.KINDS)
    for engine in engines.ENGINES.values():
        assert set(engine.encrypted) <= set(file_kinds.KINDS)


def test_the_trino_profile_is_format_3_copy_on_write_and_declared():
    props = config.table_properties("k1", readers=("trino",))
    assert props == {"encryption.key-id": "k1", "format-version": "3", **COW, READERS_PROPERTY: "trino"}
    assert config.table_properties("k1", readers="spark, jvm-free")[READERS_PROPERTY] == "spark,jvm-free"
    assert "write.delete.mode" not in config.table_properties("k1", readers=["spark"])  # Iceberg's default stays
    assert READERS_PROPERTY not in config.table_properties("k1")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"readers": ("presto",)}, "unknown reader 'presto': known engines are spark, trino, jvm-free"),
    ({"readers": ""}, "name at least one reader"),
    ({"readers": ("trino",), "extra": {"write.merge.mode": "merge-on-read"}},
     "write.merge.mode=merge-on-read writes encrypted deletion vectors on format 3, which Trino 483 cannot read"),
    ({"readers": ("trino",), "extra": {READERS_PROPERTY: "spark"}}, "extra property 'pyiceberg-crypto.readers' conflicts with readers="),
    ({"readers": ("trino",), "format_version": 2}, "encryption needs format-version >= 3"),
])
def test_a_profile_that_would_not_keep_its_readers_is_refused(kwargs, message):
    with pytest.raises(InvalidArgumentError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        config.table_properties("k1", **kwargs)


def test_readable_by_names_each_blocker_with_the_engines_rule():
    census = {("data", "PARQUET", True): 12, ("deletion-vector", "PUFFIN", True): 3}
    answers = {a.engine: a for a in engines.readable_by(census, encrypted_table=True)}
    assert answers["spark"].readable and answers["jvm-free"].readable
    assert answers["trino"].readable is False
    assert answers["trino"].reasons == ("3 encrypted deletion vectors (Puffin): Trino 483 reads only Parquet when "
                                        "encrypted",)
    plain = {a.engine: a for a in engines.readable_by({("data", "PARQUET", False): 1}, encrypted_table=False)}
    assert plain["trino"].readable and not plain["jvm-free"].readable
    partial = {a.engine: a for a in engines.readable_by({("data", "PARQUET", True): 1}, encrypted_table=True,
                                                        complete=False)}
    assert partial["trino"].readable is None and "not known" in partial["trino"].reasons[0]


def test_a_declared_reader_that_cannot_read_is_a_check():
    answers = engines.readable_by({("deletion-vector", "PUFFIN", True): 1}, encrypted_table=True)
    name, detail = engines.readers_check({READERS_PROPERTY: "spark,trino"}, answers)
    assert name == "declared-reader-blocked"
    assert detail.startswith("pyiceberg-crypto.readers names trino, which cannot read the current snapshot: "
                             "1 encrypted deletion vector (Puffin)")
    assert detail.endswith("fix: ALTER TABLE <table> SET TBLPROPERTIES ('write.delete.mode'='copy-on-write', "
                           "'write.update.mode'='copy-on-write', 'write.merge.mode'='copy-on-write'), then CALL "
                           "<catalog>.system.rewrite_data_files(table => '<db.table>', options => "
                           "map('delete-file-threshold', '1')) to fold the deletion vectors in "
                           "(config.declare_readers(spark, TABLE, ['spark', 'trino'], set_modes=True, convert=True) "
                           "does it in one step; docs/how-to/trino.md)"), detail
    assert "write.delete.mode=merge-on-read" in engines.readers_check(
        {READERS_PROPERTY: "trino", "write.delete.mode": "merge-on-read"},
        engines.readable_by({}, encrypted_table=True))[1]
    assert engines.readers_check({READERS_PROPERTY: "spark"}, answers) is None
    assert engines.readers_check({}, answers) is None


def test_the_docs_table_is_generated_from_the_facts():
    table = engines.engine_table_markdown()
    assert table.count("\n") == 1 + len(engines.ENGINES)
    trino_row = next(line for line in table.splitlines() if "(`trino`)" in line)
    assert "| Parquet | Parquet | Parquet | no |" in trino_row and "copy-on-write" in trino_row


def test_an_engine_blocked_in_some_partitions_names_them():
    key = ("deletion-vector", "PUFFIN", True)
    answers = {a.engine: a for a in engines.readable_by({key: 2, ("data", "PARQUET", True): 4}, encrypted_table=True,
                                                        partitions={key: ["grp=1", "grp=3"]})}
    assert answers["trino"].blocked_partitions == ("grp=1", "grp=3")
    assert answers["trino"].to_dict()["blocked_partitions"] == ["grp=1", "grp=3"]
    assert answers["spark"].blocked_partitions is None and "blocked_partitions" not in answers["spark"].to_dict()
    # one file of an unpartitioned table among what it cannot read: every query is blocked, none named
    mixed = {a.engine: a for a in engines.readable_by({key: 2}, encrypted_table=True, partitions={key: ["grp=1", None]})}
    assert mixed["trino"].readable is False and mixed["trino"].blocked_partitions is None
    assert "in partition(s)" not in mixed["trino"].reasons[0]

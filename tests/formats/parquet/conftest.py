"""Session fixtures: encrypted Parquet files written by parquet-java and by Iceberg (see vectors.py).

    parquet_vectors         list[ParquetVector], one per mode in vectors.MODES: the files parquet-java
                            wrote, committed (tests/formats/fixtures/java/parquet), so no JVM
                            (test_java_fixtures.py checks them against parquet-java again)
    parquet_vector_by_name  dict[str, ParquetVector]
    iceberg_data_files      list[IcebergDataFile] of an encrypted Iceberg table written by Spark
"""

from __future__ import annotations

import pytest

from tests.formats import java_fixtures
from tests.formats.parquet.vectors import IcebergDataFile, ParquetVector, create_iceberg_data_files


@pytest.fixture(scope="session")
def parquet_vectors(tmp_path_factory) -> list[ParquetVector]:
    return java_fixtures.parquet_vectors(tmp_path_factory.mktemp("parquet-vectors"))


@pytest.fixture(scope="session")
def parquet_vector_by_name(parquet_vectors) -> dict[str, ParquetVector]:
    return {vector.name: vector for vector in parquet_vectors}


@pytest.fixture(scope="session")
def iceberg_data_files(spark, jvm, tmp_path_factory) -> list[IcebergDataFile]:
    return create_iceberg_data_files(spark, jvm, tmp_path_factory.mktemp("iceberg-parquet-warehouse"))

"""Settings rendered for where they go: ``--conf`` arguments and lines for ``spark-sql`` /
``spark-submit``, ``spark-defaults.conf`` lines, and table properties as a ``TBLPROPERTIES (...)``
SQL fragment with quoted literals::

    from pyiceberg_crypto import config

    settings = config.spark_settings("lake", warehouse="/data/warehouse")
    print(config.spark_conf_lines(settings))            # to paste after spark-sql
    print(config.spark_defaults_lines(settings))        # or into spark-defaults.conf
    spark.sql("CREATE TABLE lake.db.t (id bigint) USING iceberg "
              + config.tblproperties_sql(config.table_properties("orders-master-key")))

A setting no command line or defaults file can carry (an empty key, a key with whitespace or ``=``,
a value with a line break) is refused with InvalidArgumentError, never rendered wrong.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping

from pyiceberg_crypto.errors import InvalidArgumentError

__all__ = ["spark_conf_args", "spark_conf_lines", "spark_defaults_lines", "tblproperties_sql"]


def tblproperties_sql(props: Mapping[str, str]) -> str:
    """Render properties as a ``TBLPROPERTIES (...)`` SQL fragment with quoted literals.

    >>> tblproperties_sql({"encryption.key-id": "k1", "format-version": "3"})
    "TBLPROPERTIES ('encryption.key-id'='k1', 'format-version'='3')"
    """
    body = ", ".join(f"{_sql_string(k)}={_sql_string(v)}" for k, v in props.items())
    return f"TBLPROPERTIES ({body})"


def spark_conf_args(settings: Mapping[str, str]) -> list[str]:
    """``["--conf", "k=v", ...]`` arguments for ``spark-sql`` / ``spark-submit``."""
    _check_renderable(settings)
    args: list[str] = []
    for key, value in settings.items():
        args += ["--conf", f"{key}={value}"]
    return args


def spark_conf_lines(settings: Mapping[str, str]) -> str:
    """Shell-quoted ``--conf k=v`` lines, one per setting, to paste after ``spark-sql``."""
    _check_renderable(settings)
    return " \\\n".join(f"  --conf {shlex.quote(f'{k}={v}')}" for k, v in settings.items())


def spark_defaults_lines(settings: Mapping[str, str]) -> str:
    """The settings as ``spark-defaults.conf`` lines."""
    _check_renderable(settings)
    return "\n".join(f"{k} {v}" for k, v in settings.items())


def _check_renderable(settings: Mapping[str, str]) -> None:
    """InvalidArgumentError for a setting no Spark command line or ``spark-defaults.conf`` can carry: an
    empty key, a key with whitespace or ``=``, a value with a line break."""
    for key, value in settings.items():
        if not isinstance(key, str) or not key or any(c.isspace() or c == "=" for c in key):
            raise InvalidArgumentError(f"setting names are non-empty, without spaces or '=', got {key!r}")
        if "\n" in str(value) or "\r" in str(value):
            raise InvalidArgumentError(f"the value of {key} has a line break: no Spark command line or defaults file carries it")


def _sql_string(text: str) -> str:
    return "'" + str(text).replace("\\", "\\\\").replace("'", "\\'") + "'"

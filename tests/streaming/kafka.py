"""Producing to and streaming from the test broker with Spark's own Kafka connector (the shared
session has it: ``spark_settings(kafka=True)`` in tests/conftest.py), so no Python Kafka client."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping


def new_topic(prefix: str) -> str:
    """A topic name no other test uses (topics live as long as the session's broker)."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def produce(spark, bootstrap_servers: str, topic: str, events: Iterable[Mapping]) -> int:
    """Write ``events`` as JSON values (key: ``id``) to ``topic``, in order (one partition)."""
    rows = [(str(event.get("id")), json.dumps(event)) for event in events]
    (spark.createDataFrame(rows, "key string, value string").coalesce(1)
     .write.format("kafka").option("kafka.bootstrap.servers", bootstrap_servers).option("topic", topic).save())
    return len(rows)


def json_stream(spark, bootstrap_servers: str, topic: str, schema: str, *, per_trigger: int | None = None):
    """A streaming DataFrame of ``topic``'s JSON values parsed with ``schema``, from the earliest
    offset (``per_trigger``: at most that many records per micro-batch)."""
    reader = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap_servers)
              .option("subscribe", topic).option("startingOffsets", "earliest"))
    if per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(per_trigger))
    return reader.load().selectExpr(f"from_json(CAST(value AS STRING), '{schema}') AS event").select("event.*")

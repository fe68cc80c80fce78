"""The audit trail's group commit (issue 50, item 2: the audit's cost), on the real AuditTrail and
real files: lines written by many threads at once are one intact chain, every call returns only
once its line is in the file, and a batch that cannot be written refuses every call in it (fail
closed), the chain resuming after the last line written."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from pyiceberg_crypto.errors import FileAccessError
from pyiceberg_crypto.serve.audit_trail import AuditTrail, verify_trail

KEY = bytes(range(32))
RECORD = {"face": "py4j", "principal": "py4j:spark", "peer": "127.0.0.1", "operation": "unwrap", "key_id": "k1",
          "result": "ok"}


def _hammer(trail: AuditTrail, threads: int, per_thread: int, check=None) -> list[BaseException]:
    """``threads`` threads writing ``per_thread`` lines each, started together; the errors raised."""
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def work(n: int) -> None:
        start.wait()
        for i in range(per_thread):
            try:
                digest = trail.write(dict(RECORD, request_id=f"{n}-{i}"))
            except FileAccessError as exc:
                errors.append(exc)
                continue
            if check is not None:
                check(n, i, digest)

    workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return errors


def _records(path: Path) -> list[dict]:
    files = sorted(path.parent.glob(path.name + ".*"), key=lambda p: int(p.suffix[1:])) + [path]
    return [json.loads(line) for p in files if p.exists() for line in p.read_text().splitlines()]


def test_audit_trail_group_commit_chains_concurrent_writers(tmp_path):
    path = tmp_path / "trail.jsonl"
    trail = AuditTrail(path, KEY, digest_every=50).open()
    written_when_returned = []

    def check(n, i, digest):  # the line is in the file when write() returns
        written_when_returned.append(f'"request_id":"{n}-{i}"'.encode() in path.read_bytes())

    errors = _hammer(trail, 8, 60, check)
    trail.close()
    assert errors == []
    assert written_when_returned and all(written_when_returned)
    report = verify_trail(path, key=KEY)
    assert report.ok, report.problem
    ids = [r["request_id"] for r in _records(path) if r.get("operation") == "unwrap"]
    assert sorted(ids) == sorted(f"{n}-{i}" for n in range(8) for i in range(60))
    assert report.digests >= 480 // 50


def test_audit_trail_group_commit_rotates_under_concurrent_writers(tmp_path):
    path = tmp_path / "trail.jsonl"
    trail = AuditTrail(path, KEY, max_bytes=4096, digest_every=7).open()
    assert _hammer(trail, 8, 40) == []
    trail.close()
    report = verify_trail(path, key=KEY)
    assert report.ok, report.problem
    assert report.files >= 5
    assert sum(1 for r in _records(path) if r.get("operation") == "unwrap") == 320


def test_audit_trail_group_commit_fails_closed_for_every_line_of_a_failed_batch(tmp_path):
    """The trail's descriptor is replaced by a read-only one (EBADF on write, as a revoked
    permission): every writer is refused, none gets a digest back, nothing partial is left, and
    once the descriptor is writable again the chain continues after the last line written."""
    path = tmp_path / "trail.jsonl"
    trail = AuditTrail(path, KEY).open()
    assert _hammer(trail, 4, 10) == []
    before = path.read_bytes()
    writable = os.dup(trail._fd)
    read_only = os.open(path, os.O_RDONLY)
    os.dup2(read_only, trail._fd)
    try:
        returned = []
        errors = _hammer(trail, 8, 5, lambda n, i, digest: returned.append(digest))
        assert returned == [] and len(errors) == 40
        assert all("cannot write to the audit trail" in str(e) for e in errors)
        assert trail.failures >= 40
        assert path.read_bytes() == before
    finally:
        os.dup2(writable, trail._fd)
        os.close(writable)
        os.close(read_only)
    assert _hammer(trail, 4, 10) == []
    trail.close()
    report = verify_trail(path, key=KEY)
    assert report.ok, report.problem
    assert sum(1 for r in _records(path) if r.get("operation") == "unwrap") == 80


def test_audit_trail_group_commit_refuses_after_close(tmp_path):
    trail = AuditTrail(tmp_path / "trail.jsonl", KEY).open()
    trail.write(dict(RECORD))
    trail.close()
    with pytest.raises(FileAccessError, match="not open"):
        trail.write(dict(RECORD))
    assert verify_trail(tmp_path / "trail.jsonl", key=KEY).ok


@pytest.mark.parametrize("fields", [
    ("py4j", "py4j:spark", "127.0.0.1:40000", "unwrap", "orders-key", "2", None, "ok", None, "abc-1", None),
    ("aws", "aws:trino", "10.0.0.5:1234", "unwrap", "analytics-\"1\"\n\u00e9", None, "db.t\u2603", "refused",
     "not granted", "abc-2", {"table": "db.t", "x": "\u00e9\""}),
    ("aws", "aws:loader", "[::1]:99", "describe", None, None, None, "error", "KmsTimeoutError", "abc-3", {}),
])
def test_audit_trail_operation_lines_are_the_records_lines(tmp_path, fields):
    """``write_operation`` (the served KMS's fast path) writes exactly the line ``write`` writes for
    the same record (escaping, left-out unknowns, field order), so ``audit-log verify`` and readers
    see one format."""
    names = ("face", "principal", "peer", "operation", "key_id", "key_version", "table", "result", "reason",
             "request_id")
    record = dict(zip(names, fields[:10]))
    if fields[10]:
        record["encryption_context"] = fields[10]
    fast, slow = AuditTrail(tmp_path / "fast.jsonl", KEY).open(), AuditTrail(tmp_path / "slow.jsonl", KEY).open()
    fast.write_operation(*fields)
    slow.write(record)
    fast.close(), slow.close()
    lines = [(tmp_path / name).read_text().splitlines()[2] for name in ("fast.jsonl", "slow.jsonl")]
    strip = [json.loads(line) for line in lines]
    for parsed in strip:
        parsed.pop("time"), parsed.pop("prev")
    assert strip[0] == strip[1] == {"seq": 3, **{k: v for k, v in record.items() if v is not None}}
    assert lines[0].split(',"prev"')[0].split('Z"', 1)[1] == lines[1].split(',"prev"')[0].split('Z"', 1)[1]

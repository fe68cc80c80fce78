"""A trail whose gaps are evident (issue 61, item 1): the audit trail of ``kms serve`` cannot be
rewritten, cut or thinned without the key and without ``kms audit-log verify`` naming the gap.

Each finding of the issue's trail section has a test here that fails on the trail of before (format
1), on real service processes where the finding was: a trail rebuilt without digests, a digest
removed, a middle rotated file removed, a tail cut after the last digest (a witness finds it), a
restart on such a tail (recorded, never adopted in silence), refusals before the policy check
recorded, unsafe key and trail files refused, a failed rotation (inodes exhausted) reopened, and
verify without a key never reported as verified.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from pyiceberg_crypto.errors import FileAccessError
from pyiceberg_crypto.serve.audit_trail import AuditTrail, load_or_create_audit_key, verify_trail
from tests.serve.test_governance import (
    KEY,
    _error,
    _governed,
    _loader,
    _named_token,
    _ops,
    _py4j,
    _trail,
    _verify,
)
from tests.testkit import eventually

pytestmark = pytest.mark.balance

AUDIT_KEY = b"a" * 32


def _key_file(tmp_path: Path) -> Path:
    return tmp_path / "config" / "audit.key"


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().split(b"\n")[:-1]


def _all_records(tmp_path: Path) -> list[dict]:
    trail = _trail(tmp_path)
    files = sorted(trail.parent.glob(trail.name + ".*"), key=lambda p: int(p.suffix[1:])) + [trail]
    return [json.loads(line) for p in files if p.exists() for line in _lines(p)]


def _rechain(records: list[dict]) -> bytes:
    """``records`` as a trail with fresh ``seq`` and ``prev`` (what anyone can do without the key)."""
    out, prev = [], "0" * 64
    for seq, record in enumerate(records, start=1):
        record = dict(record, seq=seq, prev=prev)
        line = json.dumps(record, separators=(",", ":")).encode()
        prev = hashlib.sha256(line).hexdigest()
        out.append(line)
    return b"\n".join(out) + b"\n"


def _restart(face) -> None:
    """Start the stopped (or killed) service again with the same arguments; the AWS face's new endpoint."""
    face.service.restart(listen=face.service.args[face.service.args.index("--listen") + 1])
    found = eventually(lambda: re.search(r"AWS KMS API: (https?://127\.0\.0\.1:\d+)",
                                         face.service.log(since_launch=True)), 30, message="the face's endpoint")
    face.endpoint = found.group(1)


def _governed_run(tmp_path: Path, *, ops: int = 12, extra: list[str] = (), max_bytes: int | None = None):
    face = _governed(tmp_path, extra=["--audit-digest-every", "4", *extra], max_bytes=max_bytes)
    try:
        _ops(face, ops)
        with pytest.raises(ClientError):
            face.client().decrypt(CiphertextBlob=b"x" * 40, KeyId="finance-key")  # refused: not granted
        _ops(face, ops)
    finally:
        face.stop()
    return face


# --- the key-less rebuilds: verify names the gap -------------------------------------------------


def test_audit_trail_rebuilt_without_digests_and_relabelled_fails_verify(tmp_path):
    """The issue's first try: no digest lines, fresh seq/prev, aws:trino relabelled aws:loader."""
    _governed_run(tmp_path)
    trail = _trail(tmp_path)
    records = [r for r in _all_records(tmp_path) if r.get("kind") != "digest"]
    for record in records:
        if record.get("principal") == "aws:trino":
            record["principal"] = "aws:loader"
    trail.write_bytes(_rechain(records))
    result = _verify(trail, _key_file(tmp_path))
    assert result.returncode == 1, result.stdout
    assert "line 1: the start line before it" in result.stdout or "not followed by its signed digest" in result.stdout
    # ... and as a format 1 trail (start lines without their format): no digest at all is a gap too
    for record in records:
        if record.get("kind") == "start":
            for field in ("format", "digest_every", "digest_seconds", "digest_at", "after_digest", "previous_stop",
                          "unsigned_lines"):
                record.pop(field, None)
    trail.write_bytes(_rechain(records))
    result = _verify(trail, _key_file(tmp_path))
    assert result.returncode == 1 and "not followed by its signed digest" in result.stdout, result.stdout


def test_audit_trail_refused_record_and_every_digest_after_it_deleted_fails_verify(tmp_path):
    """The issue's second try: the refused record and every digest after it deleted, re-chained."""
    _governed_run(tmp_path)
    trail = _trail(tmp_path)
    records = _all_records(tmp_path)
    refused = next(i for i, r in enumerate(records) if r.get("result") == "refused")
    kept = records[:refused] + [r for r in records[refused + 1:] if r.get("kind") != "digest"]
    trail.write_bytes(_rechain(kept))
    result = _verify(trail, _key_file(tmp_path))
    assert result.returncode == 1, result.stdout
    last = [r for r in records[:refused] if r.get("kind") == "digest"][-1]["n"]
    assert f"the trail ends {len(kept) - 1 - max(i for i, r in enumerate(kept) if r.get('kind') == 'digest')} " \
           f"line(s) after digest {last}" in result.stdout, result.stdout
    assert "digests after it were removed" in result.stdout


def test_audit_trail_one_digest_deleted_fails_verify_naming_it(tmp_path):
    _governed_run(tmp_path)
    trail = _trail(tmp_path)
    records = _all_records(tmp_path)
    digests = [i for i, r in enumerate(records) if r.get("kind") == "digest"]
    gone = digests[3]
    number = records[gone]["n"]
    trail.write_bytes(_rechain(records[:gone] + records[gone + 1:]))
    result = _verify(trail, _key_file(tmp_path))
    assert result.returncode == 1, result.stdout
    assert f"digest {number} missing (removed) between" in result.stdout, result.stdout
    # without the key the gap is found too (the numbers are in the clear), and the first line says what was not checked
    unsigned = _verify(trail)
    assert unsigned.returncode == 1 and f"digest {number} missing" in unsigned.stdout
    assert unsigned.stdout.split(": ", 1)[1].startswith("signatures NOT checked")


def test_audit_trail_middle_rotated_file_deleted_fails_verify(tmp_path):
    _governed_run(tmp_path, ops=30, max_bytes=4096)
    trail = _trail(tmp_path)
    rotated = sorted(trail.parent.glob(trail.name + ".*"), key=lambda p: int(p.suffix[1:]))
    assert len(rotated) >= 3
    rotated[1].unlink()
    result = _verify(trail, _key_file(tmp_path))
    assert result.returncode == 1 and f"rotated file {rotated[1].name} is missing" in result.stdout, result.stdout
    for later in rotated[2:]:  # renumbered so that no number is missing: the chain and the digests name the gap
        later.rename(later.with_name(f"{trail.name}.{int(later.suffix[1:]) - 1}"))
    result = _verify(trail, _key_file(tmp_path))
    assert result.returncode == 1 and re.search(r"line\(s\) removed before it \(seq \d+\.\.\d+ missing\)",
                                                result.stdout), result.stdout
    # ... and re-chained from the gap on, every digest after it dropped (what a format 1 trail accepted)
    files = sorted(trail.parent.glob(trail.name + ".*"), key=lambda p: int(p.suffix[1:])) + [trail]
    first = [json.loads(line) for line in _lines(files[0])]
    later = [r for p in files[1:] for r in map(json.loads, _lines(p)) if r.get("kind") != "digest"]
    for p in files:
        p.unlink()
    trail.write_bytes(_rechain(first + later))
    result = _verify(trail, _key_file(tmp_path))
    assert result.returncode == 1, result.stdout
    last = [r for r in first if r.get("kind") == "digest"][-1]["n"]
    assert f"line(s) after digest {last}" in result.stdout and "digests after it were removed" in result.stdout


def test_audit_trail_tail_cut_after_the_last_digest_is_found_with_the_witness(tmp_path):
    face, witness = _witnessed(tmp_path)
    try:
        _ops(face, 8)
        _restart(face)  # two runs: the cut below ends at the first run's stop digest, a trail that looks whole
        _ops(face, 8)
    finally:
        face.stop()
    trail = _trail(tmp_path)
    assert _verify(trail, _key_file(tmp_path)).returncode == 0
    whole = _verify(trail, _key_file(tmp_path), witness)
    assert whole.returncode == 0 and "reaches the witness's last digest" in whole.stdout, whole.stdout
    lines = _lines(trail)
    records = [json.loads(line) for line in lines]
    first_stop = next(i for i, r in enumerate(records) if r.get("reason") == "stop")
    trail.write_bytes(b"\n".join(lines[:first_stop + 1]) + b"\n")
    assert _verify(trail, _key_file(tmp_path)).returncode == 0  # without the witness: undetectable (documented)
    result = _verify(trail, _key_file(tmp_path), witness)
    last = json.loads(witness.read_bytes().split(b"\n")[-2])
    assert result.returncode == 1, result.stdout
    assert f"the trail is cut: the witness {witness} holds digest {last['n']}" in result.stdout, result.stdout
    # a cut right after a digest of the middle of a run: the missing stop digest says so even without a witness
    middle = next(i for i, r in enumerate(records) if r.get("reason") == "lines")
    trail.write_bytes(b"\n".join(lines[:middle + 1]) + b"\n")
    result = _verify(trail, _key_file(tmp_path))
    assert result.returncode == 1 and "does not end with a stop digest" in result.stdout, result.stdout


def _witnessed(tmp_path: Path):
    """A governed service (a digest every 4 lines) whose witness is in a directory of its own: (face, witness)."""
    witness_dir = tmp_path / "elsewhere"
    witness_dir.mkdir(mode=0o700)
    witness = witness_dir / "kms-audit.witness"
    return _governed(tmp_path, extra=["--audit-digest-every", "4", "--audit-witness", str(witness)]), witness


# --- restarts: the tail is checked before anything is appended ------------------------------------


def test_audit_trail_restart_on_a_cut_tail_records_it_in_a_signed_line(tmp_path):
    face, witness = _witnessed(tmp_path)
    try:
        _ops(face, 10)
        face.stop()
        trail = _trail(tmp_path)
        lines = _lines(trail)
        records = [json.loads(line) for line in lines]
        cut = max(i for i, r in enumerate(records) if r.get("reason") == "lines")
        number = records[cut]["n"]
        trail.write_bytes(b"\n".join(lines[:cut + 1]) + b"\n")  # the stop digest and the lines before it: gone
        _restart(face)
        _ops(face, 2)
    finally:
        face.stop()
    start = [r for r in map(json.loads, _lines(trail)) if r.get("kind") == "start"][-1]
    assert start["tail_mismatch"].startswith(f"resumed after a tail that does not match digest {number}: the witness")
    assert start["previous_stop"] is False
    assert "resumed after a tail that does not match" in face.service.log()
    result = _verify(trail, _key_file(tmp_path))
    assert result.returncode == 1, result.stdout
    assert f"the service resumed after a tail that does not match digest {number}" in result.stdout


def test_audit_trail_restart_after_a_kill_records_the_unsigned_tail(tmp_path):
    face = _governed(tmp_path, extra=["--audit-digest-every", "50"])
    trail = _trail(tmp_path)
    try:
        _ops(face, 5)
        running = _verify(trail, _key_file(tmp_path))
        assert running.returncode == 0 and "still running" in running.stdout, running.stdout
        face.service.process.send_signal(signal.SIGKILL)
        face.service.process.wait(30)
        killed = _verify(trail, _key_file(tmp_path))
        assert killed.returncode == 1, killed.stdout
        after = len(_lines(trail)) - 2  # every line after the start digest (the policy's, the 5 operations')
        assert f"does not end with a stop digest: it ends {after} line(s) after digest 1" in killed.stdout
        _restart(face)
        _ops(face, 1)
    finally:
        face.stop()
    start = [r for r in map(json.loads, _lines(trail)) if r.get("kind") == "start"][-1]
    assert (start["previous_stop"], start["unsigned_lines"], start["after_digest"]) == (False, after, 1)
    assert "tail_mismatch" not in start
    result = _verify(trail, _key_file(tmp_path))
    assert result.returncode == 0 and "verified" in result.stdout, result.stdout
    assert "ended without a stop digest (killed?)" in result.stdout


def test_audit_trail_restart_on_a_tail_that_does_not_chain_records_it(tmp_path):
    face = _governed(tmp_path, extra=["--audit-digest-every", "50"])
    trail = _trail(tmp_path)
    try:
        _ops(face, 4)
        face.service.process.send_signal(signal.SIGKILL)
        face.service.process.wait(30)
        lines = _lines(trail)
        lines[-2] = lines[-2].replace(b'"aws:loader"', b'"aws:trino"')  # an unsigned line altered while stopped
        trail.write_bytes(b"\n".join(lines) + b"\n")
        _restart(face)
    finally:
        face.stop()
    start = [r for r in map(json.loads, _lines(trail)) if r.get("kind") == "start"][-1]
    assert start["tail_mismatch"] == ("resumed after a tail that does not match digest 1: the lines after it do not "
                                      f"chain to it (at seq {json.loads(lines[-1])['seq']} in {trail.name})")


# --- every request of an authenticated principal is recorded --------------------------------------


def test_audit_trail_records_refusals_before_the_policy_check(tmp_path):
    face = _governed(tmp_path)
    try:
        loader = _loader(face)
        other_region = "arn:aws:kms:eu-west-3:000000000000:key/analytics-1"
        other_account = "arn:aws:kms:us-east-1:111111111111:key/analytics-1"
        long_id = "k" * 3000
        for key_id in (other_region, other_account, long_id):
            with pytest.raises(ClientError) as excinfo:
                loader.describe_key(KeyId=key_id)
            assert _error(excinfo)[0] in ("NotFoundException", "ValidationException")
        with _py4j(face, _named_token(tmp_path), "spark-writers") as writer:
            reply = writer.call("wrapKey", KEY, "@i7")  # a key id of the wrong type: refused by the adapter
            assert reply.startswith(b"!x")
    finally:
        face.stop()
    refused = [r for r in _all_records(tmp_path) if r.get("result") == "refused"]
    assert [(r["face"], r["principal"], r["operation"], r["reason"]) for r in refused] == [
        ("aws", "aws:loader", "describe", "NotFoundException"),
        ("aws", "aws:loader", "describe", "NotFoundException"),
        ("aws", "aws:loader", "describe", "ValidationException"),
        ("py4j", "py4j:spark-writers", "wrap", "refused by the bridge"),
    ]
    assert refused[0]["key_id"] == other_region and refused[1]["key_id"] == other_account
    assert refused[2]["key_id"] == "k" * 256 + "... (3000 characters)"
    assert _verify(_trail(tmp_path), _key_file(tmp_path)).returncode == 0


# --- operator-file checks -------------------------------------------------------------------------


def _start_fails(tmp_path: Path, *, audit_dir: Path, key_file: Path) -> subprocess.CompletedProcess:
    import sys

    from tests.serve.service_process import ROOT, make_keystore

    keystore = tmp_path / "keys.json"
    if not keystore.exists():
        make_keystore(keystore, "k1")
    (tmp_path / "run").mkdir(mode=0o700, exist_ok=True)
    args = [sys.executable, "-m", "pyiceberg_crypto.cli.main", "kms", "serve", "--kms", "keystore",
            f"--kms-property=keystore.path={keystore}", "--listen", "127.0.0.1:0",
            "--token-file", str(tmp_path / "run" / "kms.token"), "--audit-log", str(audit_dir / "trail.jsonl"),
            "--audit-key-file", str(key_file)]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        out, err = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:  # it started: the unsafe file was accepted
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=30)
        return subprocess.CompletedProcess(args, None, out, "the service started and served: " + err)
    return subprocess.CompletedProcess(args, process.returncode, out, err)


@pytest.mark.skipif(os.geteuid() != 0, reason="planting another user's file needs root (chown)")
def test_audit_trail_refuses_a_key_or_trail_file_of_another_user(tmp_path):
    nobody = 65534
    keys = tmp_path / "keys"
    keys.mkdir(mode=0o700)
    audit = tmp_path / "audit"
    audit.mkdir(mode=0o700)
    key_file = keys / "audit.key"
    key_file.write_text("ab" * 32 + "\n")
    key_file.chmod(0o600)
    os.chown(key_file, nobody, nobody)
    result = _start_fails(tmp_path, audit_dir=audit, key_file=key_file)
    assert result.returncode == 2 and "belongs to uid 65534" in result.stderr and "audit key" in result.stderr, \
        result.stderr
    os.chown(key_file, 0, 0)
    planted = audit / "trail.jsonl"
    planted.write_text("")
    planted.chmod(0o600)
    os.chown(planted, nobody, nobody)
    result = _start_fails(tmp_path, audit_dir=audit, key_file=key_file)
    assert result.returncode == 2 and "the audit trail" in result.stderr and "belongs to uid 65534" in result.stderr, \
        result.stderr


def test_audit_trail_refuses_a_directory_others_can_write_and_symlinks(tmp_path):
    keys = tmp_path / "keys"
    keys.mkdir(mode=0o700)
    audit = tmp_path / "audit"
    audit.mkdir()
    audit.chmod(0o777)  # writable by everyone, no sticky bit: anyone could swap the trail
    result = _start_fails(tmp_path, audit_dir=audit, key_file=keys / "audit.key")
    assert result.returncode == 2 and "audit trail directory" in result.stderr and "writable by everyone" in \
        result.stderr, result.stderr
    keys.chmod(0o777)
    audit.chmod(0o700)
    result = _start_fails(tmp_path, audit_dir=audit, key_file=keys / "audit.key")
    assert result.returncode == 2 and "audit key directory" in result.stderr, result.stderr
    keys.chmod(0o700)
    real = tmp_path / "real.key"
    real.write_text("ab" * 32 + "\n")
    real.chmod(0o600)
    (keys / "link.key").symlink_to(real)
    result = _start_fails(tmp_path, audit_dir=audit, key_file=keys / "link.key")
    assert result.returncode == 2 and "symlink" in result.stderr, result.stderr
    sticky = tmp_path / "shared"
    sticky.mkdir()
    sticky.chmod(0o1777)  # like /tmp: others cannot rename or remove this user's files
    trail = AuditTrail(sticky / "trail.jsonl", AUDIT_KEY).open()
    trail.close()
    assert verify_trail(sticky / "trail.jsonl", AUDIT_KEY).verified


# --- a failed rotation reopens as soon as it can ---------------------------------------------------


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("mount"), reason="a small tmpfs needs root (mount)")
def test_audit_trail_reopens_after_a_rotation_that_could_not_create_its_file(tmp_path):
    """The issue's try: inodes exhausted on a small tmpfs when the new live file is created."""
    audit = tmp_path / "audit"
    audit.mkdir(mode=0o700)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,nr_inodes=2,mode=0700", "tmpfs", str(audit)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        face = _governed(tmp_path, max_bytes=4096)
        try:
            loader = _loader(face)
            with pytest.raises(ClientError) as excinfo:
                for _ in range(60):  # until the trail rotates: its next file needs an inode the tmpfs has not
                    loader.encrypt(KeyId="analytics-1", Plaintext=os.urandom(32))
            assert _error(excinfo)[0] == "KMSInternalException"
            with pytest.raises(ClientError):  # fail closed meanwhile
                loader.encrypt(KeyId="analytics-1", Plaintext=os.urandom(32))
            assert "ENOSPC" in face.service.log() and "retried at each operation" in face.service.log()
            subprocess.run(["mount", "-o", "remount,nr_inodes=64", str(audit)], check=True)
            assert loader.encrypt(KeyId="analytics-1", Plaintext=os.urandom(32))["CiphertextBlob"]
        finally:
            face.stop()
        records = _all_records(tmp_path)
        reopened = [r for r in records if r.get("kind") == "rotated" and r.get("refused_while_closed")]
        assert reopened and reopened[0]["refused_while_closed"] >= 2
        assert any(r.get("reason") == "reopen" for r in records)
        result = _verify(_trail(tmp_path), _key_file(tmp_path))
        assert result.returncode == 0, result.stdout
    finally:
        subprocess.run(["umount", "-l", str(audit)], capture_output=True)


def test_audit_trail_reopens_at_the_next_tick_too(tmp_path, monkeypatch):
    """The same fault in process (no root needed): the tick reopens the trail without an operation."""
    path = tmp_path / "trail.jsonl"
    trail = AuditTrail(path, AUDIT_KEY, max_bytes=1024, digest_every=1000).open()
    real_open = os.open
    broken = {"on": True}

    def failing_open(name, flags, *args, **kwargs):
        if broken["on"] and str(name) == str(path) and flags & os.O_CREAT:
            raise OSError(28, "No space left on device")
        return real_open(name, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", failing_open)
    with pytest.raises(FileAccessError, match="retried at each operation"):
        for i in range(40):
            trail.write({"op": i})
    with pytest.raises(FileAccessError):
        trail.write({"op": "refused"})
    broken["on"] = False
    trail.tick()
    trail.write({"op": "after"})
    trail.close()
    assert verify_trail(path, AUDIT_KEY).verified


# --- without a key: never "verified" ---------------------------------------------------------------


def test_audit_trail_verify_without_a_key_exits_3_and_says_so_first(tmp_path):
    _governed_run(tmp_path, ops=3)
    trail = _trail(tmp_path)
    result = _verify(trail)
    assert result.returncode == 3, result.stdout
    first = result.stdout.splitlines()[0]
    assert first == f"{trail}: signatures NOT checked (no --key-file): NOT verified; anyone can rebuild a trail " \
                    "that passes the checks below without the key"
    assert not re.search(r"(?<!NOT )verified", result.stdout)
    # a trail rebuilt from scratch (format 2 lines, forged digests): consistent, exit 3, never 0
    records = _all_records(tmp_path)
    for record in records:
        if record.get("kind") == "digest":
            record["hmac"] = "f" * 64
    forged, prev_mac = [], "0" * 64
    for record in records:
        if record.get("kind") == "digest":
            record["prev_digest"], prev_mac = prev_mac, record["hmac"]
        forged.append(record)
    trail.write_bytes(_rechain(forged))
    assert _verify(trail).returncode == 3
    assert _verify(trail, _key_file(tmp_path)).returncode == 1


# --- the older format -------------------------------------------------------------------------------


def _format_1_trail(path: Path, key: bytes, operations: int) -> None:
    """A trail as the previous version wrote it: start, digest, lines, digest at close (hmac of seq:prev)."""
    lines, prev = [], "0" * 64

    def add(record: dict) -> None:
        nonlocal prev
        seq = len(lines) + 1
        if record.get("kind") == "digest":
            record = dict(record, hmac=hmac.new(key, f"{seq}:{prev}".encode(), hashlib.sha256).hexdigest())
        body = json.dumps(record, separators=(",", ":"))[1:-1]
        line = f'{{"seq":{seq},"time":"2026-11-01T00:00:00.000000Z",{body},"prev":"{prev}"}}'.encode()
        prev = hashlib.sha256(line).hexdigest()
        lines.append(line)

    add({"kind": "start", "pid": 1})
    add({"kind": "digest"})
    for i in range(operations):
        add({"face": "aws", "principal": "aws:loader", "operation": "wrap", "result": "ok", "request_id": str(i)})
    add({"kind": "digest"})
    path.write_bytes(b"\n".join(lines) + b"\n")
    path.chmod(0o600)


def test_audit_trail_older_format_is_reported_as_such_and_continued(tmp_path):
    path = tmp_path / "trail.jsonl"
    _format_1_trail(path, AUDIT_KEY, 5)
    report = verify_trail(path, AUDIT_KEY)
    assert report.ok and report.older_format and not report.verified
    assert report.summary().startswith("older format (format 1")
    trail = AuditTrail(path, AUDIT_KEY).open()  # this version continues it in format 2
    trail.write({"op": 1})
    trail.close()
    report = verify_trail(path, AUDIT_KEY)
    assert report.verified, report.summary()


def test_audit_trail_key_for_verify_is_read_not_created(tmp_path):
    with pytest.raises(Exception, match="cannot read the audit key file"):
        load_or_create_audit_key(tmp_path / "absent.key", create=False)
    assert not (tmp_path / "absent.key").exists()


def test_audit_trail_a_failed_batch_with_a_digest_keeps_the_cadence(tmp_path):
    """A batch holding a digest fails (EBADF, as a revoked permission): the lines since the digest
    before it are counted again, so the next digest comes within ``digest_every`` lines of it."""
    path = tmp_path / "trail.jsonl"
    trail = AuditTrail(path, AUDIT_KEY, digest_every=3).open()
    trail.write({"op": 1})
    trail.write({"op": 2})
    writable = os.dup(trail._fd)
    read_only = os.open(path, os.O_RDONLY)
    os.dup2(read_only, trail._fd)
    try:
        with pytest.raises(FileAccessError):
            trail.write({"op": 3})  # its line and the digest after it: refused together
    finally:
        os.dup2(writable, trail._fd)
        os.close(writable)
        os.close(read_only)
    for op in range(4, 9):
        trail.write({"op": op})
    trail.close()
    report = verify_trail(path, AUDIT_KEY)
    assert report.verified, report.summary()


def test_audit_trail_witness_that_fails_gets_the_digests_later(tmp_path):
    """A witness that cannot be written (EBADF, as an unmounted share) is counted and logged; the
    digests it missed are delivered with the next one, and verify --witness then proves them."""
    (tmp_path / "audit").mkdir(mode=0o700)
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    path, witness = tmp_path / "audit" / "trail.jsonl", tmp_path / "elsewhere" / "witness"
    trail = AuditTrail(path, AUDIT_KEY, digest_every=2, witness=witness).open()
    writable = os.dup(trail._witness_fd)
    read_only = os.open(witness, os.O_RDONLY)
    os.dup2(read_only, trail._witness_fd)
    try:
        for op in range(4):
            trail.write({"op": op})  # the trail takes them: the witness is not on the operations' path
        assert trail.witness_failures >= 2  # each write that found digests waiting tried again
        assert len(witness.read_bytes().split(b"\n")[:-1]) == 1  # the start digest only
    finally:
        os.dup2(writable, trail._witness_fd)
        os.close(writable)
        os.close(read_only)
    trail.write({"op": 4})
    trail.close()
    assert len(witness.read_bytes().split(b"\n")[:-1]) == 4  # start, the 2 missed (delivered late), stop
    report = verify_trail(path, AUDIT_KEY, witness=witness)
    assert report.verified and report.witnessed == 4, report.summary()


def test_audit_trail_a_second_service_on_the_same_trail_is_refused(tmp_path):
    path = tmp_path / "trail.jsonl"
    first = AuditTrail(path, AUDIT_KEY).open()
    before = path.read_bytes()
    with pytest.raises(FileAccessError, match="being written by another running service"):
        AuditTrail(path, AUDIT_KEY).open()
    assert path.read_bytes() == before  # nothing appended by the refused one
    first.close()
    assert verify_trail(path, AUDIT_KEY).verified

"""Grants per principal and the audit trail of ``kms serve`` (issue 50, items 1 and 2), on both faces:
real service processes, boto3 against the AWS face, the Py4J face through the raw client and the
bridge's Java client.

The policy of the documented example (docs/how-to/govern-keys.md): Trino may only Decrypt
``analytics-*``; the Spark writers (a named Py4J token) may wrap and unwrap ``orders-key``; a loader
(another credentials section) makes the analytics blobs Trino reads.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import re
import resource
import signal
import stat
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from botocore.exceptions import ClientError
from py4j.protocol import Py4JJavaError

from pyiceberg_crypto.cli.main import main
from pyiceberg_crypto.kms.keystore import KeystoreKms
from tests.serve.aws_face import ACCESS_KEY_ID, SECRET, FaceProcess, write_credentials
from tests.serve.raw_client import RawClient
from tests.serve.service_process import ROOT, make_keystore
from tests.serve.test_service import java_client, java_error, unwrap, wrap
from tests.testkit import eventually

pytestmark = pytest.mark.balance  # in the cluster lane (make test): the lanes even out

KEY = bytes(range(32))
LOADER_KEY_ID, LOADER_SECRET = "AKIDLAKELOADER000001", "loader-secret-0123456789abcdef"
CREDENTIALS = (f"[trino]\naws_access_key_id = {ACCESS_KEY_ID}\naws_secret_access_key = {SECRET}\n"
               f"[loader]\naws_access_key_id = {LOADER_KEY_ID}\naws_secret_access_key = {LOADER_SECRET}\n")
POLICY = {
    "version": 1,
    "principals": {
        "aws:trino": {"grants": [{"keys": ["alias/analytics-*"], "operations": ["Decrypt"]}]},
        "aws:loader": {"grants": [{"keys": ["analytics-*"], "operations": ["Encrypt", "GenerateDataKey",
                                                                            "DescribeKey"]}]},
        "py4j:spark-writers": {"token_file": "tokens/spark-writers.token",
                               "grants": [{"keys": ["orders-key"], "operations": ["wrap", "unwrap"]}]},
    },
}


# --- helpers ---------------------------------------------------------------------------------


def _governed(tmp_path: Path, *, policy: dict | None = POLICY, audit: bool = True, extra: list[str] = (),
              max_bytes: int | None = None) -> FaceProcess:
    """Both faces of one service, with the example policy and an audit trail in a directory of its own."""
    keystore = make_keystore(tmp_path / "keys.json", "analytics-1", "orders-key", "finance-key")
    config = tmp_path / "config"
    config.mkdir(mode=0o700, exist_ok=True)
    (config / "tokens").mkdir(mode=0o700, exist_ok=True)
    credentials = write_credentials(config / "aws.credentials", CREDENTIALS)
    args = ["--aws-kms-api-credentials", str(credentials), "--metrics", "127.0.0.1:0"]
    if policy is not None:
        (config / "policy.json").write_text(json.dumps(policy))
        args += ["--policy", str(config / "policy.json")]
    if audit:
        (tmp_path / "audit").mkdir(mode=0o700, exist_ok=True)
        args += ["--audit-log", str(_trail(tmp_path)), "--audit-key-file", str(config / "audit.key")]
        if max_bytes:
            args += ["--audit-log-max-bytes", str(max_bytes)]
    return FaceProcess.start(tmp_path / "face", keystore, extra=[*args, *extra])


def _trail(tmp_path: Path) -> Path:
    return tmp_path / "audit" / "kms-audit.jsonl"


def _loader(face: FaceProcess):
    return face.client(access_key_id=LOADER_KEY_ID, secret=LOADER_SECRET)


def _named_token(tmp_path: Path) -> str:
    return (tmp_path / "config" / "tokens" / "spark-writers.token").read_text().strip()


def _py4j(face: FaceProcess, token: str, role: str) -> RawClient:
    host, port = face.service.address.rsplit(":", 1)
    client = RawClient(host, int(port))
    assert client.handshake(token, role) == b"!yv"
    return client


def _error(excinfo) -> tuple[str, str]:
    error = excinfo.value.response["Error"]
    return error["Code"], error["Message"]


def _records(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in _trail(tmp_path).read_text().splitlines()]


def _verify(path: Path, key_file: Path | None = None, witness: Path | None = None) -> subprocess.CompletedProcess:
    """``pyiceberg-crypto kms audit-log verify`` run by the CLI's ``main`` in this process (its exit
    status and output): the verification is under test here, not the process boundary (the console
    script's own process: tests/cli/test_inspect_ags1.py); a process each cost ~0.4 s."""
    args = ["kms", "audit-log", "verify", str(path)]
    if key_file is not None:
        args += ["--key-file", str(key_file)]
    if witness is not None:
        args += ["--witness", str(witness)]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(args)
    return subprocess.CompletedProcess(args, status, out.getvalue(), err.getvalue())


def _metrics(face: FaceProcess) -> str:
    with urllib.request.urlopen(face.metrics_url(), timeout=10) as answer:
        return answer.read().decode()


def _sample(text: str, name: str, **labels: str) -> float:
    for match in re.finditer(r"^(\w+)(?:\{(.*)\})? (\S+)$", text, re.M):
        found = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(2) or ""))
        if match.group(1) == name and found == labels:
            return float(match.group(3))
    return 0.0


def _ops(face: FaceProcess, count: int) -> None:
    loader = _loader(face)
    for _ in range(count):  # distinct requests: the face refuses a repeated signature as a replay (for now)
        loader.encrypt(KeyId="analytics-1", Plaintext=os.urandom(32))


# --- grants ----------------------------------------------------------------------------------


def test_grants_trino_may_only_decrypt_analytics_keys_through_the_aws_face(tmp_path):
    face = _governed(tmp_path, audit=False)
    try:
        blob = _loader(face).encrypt(KeyId="analytics-1", Plaintext=KEY)["CiphertextBlob"]
        trino = face.client()
        assert trino.decrypt(CiphertextBlob=blob)["Plaintext"] == KEY
        assert trino.decrypt(CiphertextBlob=blob, KeyId="analytics-1")["Plaintext"] == KEY
        for call in (lambda: trino.encrypt(KeyId="analytics-1", Plaintext=KEY),
                     lambda: trino.generate_data_key(KeyId="analytics-1", KeySpec="AES_256"),
                     lambda: trino.describe_key(KeyId="analytics-1")):
            with pytest.raises(ClientError) as excinfo:
                call()
            assert _error(excinfo)[0] == "AccessDeniedException"
        # A blob of a key Trino has no grant for: refused, although the key exists.
        finance = KeystoreKms(tmp_path / "keys.json").wrap_key(KEY, "finance-key")
        with pytest.raises(ClientError) as excinfo:
            trino.decrypt(CiphertextBlob=finance, KeyId="finance-key")
        assert _error(excinfo)[0] == "AccessDeniedException"
    finally:
        face.stop()


def test_grants_a_refused_key_and_an_unknown_key_get_one_answer_on_the_aws_face(tmp_path):
    face = _governed(tmp_path, audit=False)
    try:
        loader = _loader(face)
        assert loader.describe_key(KeyId="analytics-1")["KeyMetadata"]["KeyId"] == "analytics-1"
        answers = {}
        for key_id in ("analytics-missing", "orders-key", "no-such-key"):
            with pytest.raises(ClientError) as excinfo:
                loader.describe_key(KeyId=key_id)
            code, message = _error(excinfo)
            answers[key_id] = (code, message.replace(repr(key_id), "KEY"))
        assert len(set(answers.values())) == 1, answers  # no key-id enumeration
        assert answers["orders-key"][0] == "AccessDeniedException"
        status = excinfo.value.response["ResponseMetadata"]["HTTPStatusCode"]
        assert status == 400
    finally:
        face.stop()


def test_grants_alias_and_arn_forms_name_the_same_key(tmp_path):
    face = _governed(tmp_path, audit=False)
    try:
        blob = _loader(face).encrypt(KeyId="alias/analytics-1", Plaintext=KEY)["CiphertextBlob"]
        trino = face.client()
        for key_id in ("analytics-1", "alias/analytics-1", "arn:aws:kms:eu-west-1:000000000000:key/analytics-1",
                       "arn:aws:kms:eu-west-1:000000000000:alias/analytics-1"):
            assert trino.decrypt(CiphertextBlob=blob, KeyId=key_id)["Plaintext"] == KEY, key_id
        with pytest.raises(ClientError) as excinfo:
            trino.decrypt(CiphertextBlob=blob, KeyId="alias/orders-key")
        assert _error(excinfo)[0] in ("AccessDeniedException", "IncorrectKeyException")
    finally:
        face.stop()


def test_grants_named_py4j_token_wraps_and_unwraps_only_its_key(tmp_path):
    face = _governed(tmp_path, audit=False)
    try:
        token_file = tmp_path / "config" / "tokens" / "spark-writers.token"
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        token = _named_token(tmp_path)
        assert token.startswith("spark-writers:")
        with _py4j(face, token, "spark-writers") as writer:
            wrapped = RawClient.bytes_of(writer.call("wrapKey", KEY, "orders-key"))
            assert RawClient.bytes_of(writer.call("unwrapKey", wrapped, "orders-key")) == KEY
            assert writer.call("wrapKey", KEY, "analytics-1").startswith(b"!x")
        # The --token-file token is py4j:default, which this policy grants nothing.
        with _py4j(face, face.service.token_file.read_text().strip(), "client") as default:
            reply = default.call("wrapKey", KEY, "orders-key")
            assert reply.startswith(b"!x") and b"UnknownKeyError" in reply
        assert token not in face.service.log()
    finally:
        face.stop()


def test_grants_a_refused_key_and_an_unknown_key_get_one_answer_on_the_py4j_face(tmp_path):
    face = _governed(tmp_path, audit=False)
    try:
        with _py4j(face, _named_token(tmp_path), "spark-writers") as writer:
            refused = writer.call("wrapKey", KEY, "finance-key")
            unknown = writer.call("wrapKey", KEY, "no-such-key")
            allowed_but_unknown_version = writer.call("unwrapKey", b"\x00" * 40, "finance-key")
        assert refused.replace(b"finance-key", b"KEY") == unknown.replace(b"no-such-key", b"KEY")
        assert allowed_but_unknown_version.startswith(b"!x")
        assert b"not known to this KMS service, or this client may not" in refused
    finally:
        face.stop()


def test_grants_the_java_client_authenticates_with_a_named_token(jvm, tmp_path):
    face = _governed(tmp_path, audit=False)
    try:
        token_file = tmp_path / "config" / "tokens" / "spark-writers.token"
        client = java_client(jvm, kms_service=face.service.address, kms_token_file=str(token_file))
        wrapped = wrap(jvm, client, key_id="orders-key", key=KEY[:16])
        assert unwrap(jvm, client, wrapped, key_id="orders-key") == KEY[:16]
        with pytest.raises(Py4JJavaError) as excinfo:
            wrap(jvm, client, key_id="analytics-1", key=KEY[:16])
        assert "not known to this KMS service, or this client may not wrap with it" in java_error(excinfo)
    finally:
        face.stop()


def test_grants_sighup_reloads_the_policy_and_revokes_a_named_token(tmp_path):
    face = _governed(tmp_path, audit=False)
    try:
        token = _named_token(tmp_path)
        held = _py4j(face, token, "spark-writers")
        assert RawClient.bytes_of(held.call("wrapKey", KEY, "orders-key"))
        trino = face.client()
        with pytest.raises(ClientError):
            trino.encrypt(KeyId="analytics-1", Plaintext=KEY)
        changed = json.loads(json.dumps(POLICY))
        del changed["principals"]["py4j:spark-writers"]
        changed["principals"]["aws:trino"]["grants"].append({"keys": ["analytics-1"], "operations": ["Encrypt"]})
        (tmp_path / "config" / "policy.json").write_text(json.dumps(changed))
        face.service.signal(signal.SIGHUP)
        eventually(lambda: "revoked" in face.service.log(), 30, message=lambda: face.service.log())
        assert trino.encrypt(KeyId="analytics-1", Plaintext=os.urandom(32))["CiphertextBlob"]
        # The revoked token: refused at the handshake, and its open connection may do nothing more.
        host, port = face.service.address.rsplit(":", 1)
        with RawClient(host, int(port)) as late:
            assert late.handshake(token, "spark-writers") != b"!yv"
        assert held.call("wrapKey", KEY, "orders-key").startswith(b"!x")
        held.close()
        assert not (tmp_path / "config" / "tokens" / "spark-writers.token").exists()
    finally:
        face.stop()


def test_grants_a_policy_that_does_not_parse_keeps_the_old_one(tmp_path):
    face = _governed(tmp_path, audit=False)
    try:
        (tmp_path / "config" / "policy.json").write_text('{"principals": {"aws:trino": ')
        face.service.signal(signal.SIGHUP)
        eventually(lambda: "policy reload failed" in face.service.log(), 30, message=lambda: face.service.log())
        assert face.service.log().count("policy reload failed") == 1
        blob = _loader(face).encrypt(KeyId="analytics-1", Plaintext=KEY)["CiphertextBlob"]
        assert face.client().decrypt(CiphertextBlob=blob)["Plaintext"] == KEY
        with pytest.raises(ClientError):
            face.client().encrypt(KeyId="analytics-1", Plaintext=KEY)
        with _py4j(face, _named_token(tmp_path), "spark-writers") as writer:
            assert RawClient.bytes_of(writer.call("wrapKey", KEY, "orders-key"))
    finally:
        face.stop()


def test_grants_without_a_policy_every_principal_uses_every_key_and_the_log_says_so(tmp_path):
    face = _governed(tmp_path, policy=None, audit=False)
    try:
        assert "no policy (kms serve --policy): every principal may use every key" in face.service.log()
        trino = face.client()
        blob = trino.encrypt(KeyId="finance-key", Plaintext=KEY)["CiphertextBlob"]
        assert trino.decrypt(CiphertextBlob=blob)["Plaintext"] == KEY
        with pytest.raises(ClientError) as excinfo:
            trino.describe_key(KeyId="no-such-key")
        assert _error(excinfo)[0] == "NotFoundException"  # as before issue 50
    finally:
        face.stop()


def test_grants_a_malformed_policy_stops_the_start_with_one_line(tmp_path):
    keystore = make_keystore(tmp_path / "keys.json", "k1")
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"principals": {"trino": {"grants": []}}}))
    result = subprocess.run([sys.executable, "-m", "pyiceberg_crypto.cli.main", "kms", "serve", "--kms", "keystore",
                             f"--kms-property=keystore.path={keystore}", "--listen", "127.0.0.1:0",
                             "--token-file", str(tmp_path / "kms.token"), "--policy", str(policy)],
                            capture_output=True, text=True, timeout=60, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert result.returncode == 2
    assert "aws:SECTION" in result.stderr and "Traceback" not in result.stderr


def _calls(text: str, face: str, principal: str, operation: str) -> float:
    return _sample(text, "pyiceberg_crypto_kms_calls_total", face=face, principal=principal, operation=operation)


def test_grants_calls_of_both_faces_are_counted_with_face_and_principal_labels(tmp_path):
    face = _governed(tmp_path, audit=False)
    try:
        blob = _loader(face).encrypt(KeyId="analytics-1", Plaintext=KEY)["CiphertextBlob"]
        face.client().decrypt(CiphertextBlob=blob)
        with pytest.raises(ClientError):
            face.client().encrypt(KeyId="analytics-1", Plaintext=KEY)
        with _py4j(face, _named_token(tmp_path), "spark-writers") as writer:
            wrapped = RawClient.bytes_of(writer.call("wrapKey", KEY, "orders-key"))
            writer.call("unwrapKey", wrapped, "orders-key")
        text = _metrics(face)
        assert _calls(text, "aws", "aws:loader", "wrap") == 1
        assert _calls(text, "aws", "aws:trino", "wrap") == 1  # refused: counted all the same
        assert _calls(text, "aws", "aws:trino", "unwrap") == 1
        assert _calls(text, "py4j", "py4j:spark-writers", "wrap") == 1
        assert _calls(text, "py4j", "py4j:spark-writers", "unwrap") == 1
        assert "unknown" not in re.findall(r'principal="([^"]*)"', text)
        assert _sample(text, "pyiceberg_crypto_kms_refused_operations_total", face="aws", operation="wrap",
                       reason="not granted") == 1
        assert _sample(text, "pyiceberg_crypto_kms_policy_in_force") == 1
    finally:
        face.stop()


# --- the audit trail -------------------------------------------------------------------------


def test_audit_trail_records_every_operation_of_both_faces_without_secrets(tmp_path):
    face = _governed(tmp_path)
    try:
        loader = _loader(face)
        answer = loader.encrypt(KeyId="analytics-1", Plaintext=KEY, EncryptionContext={"table": "lake.db.events"})
        blob = answer["CiphertextBlob"]
        face.client().decrypt(CiphertextBlob=blob, EncryptionContext={"table": "lake.db.events"})
        with pytest.raises(ClientError):
            face.client().describe_key(KeyId="finance-key")
        with _py4j(face, _named_token(tmp_path), "spark-writers") as writer:
            wrapped = RawClient.bytes_of(writer.call("wrapKey", KEY, "orders-key"))
            writer.call("unwrapKey", wrapped, "orders-key")
        trail = _trail(tmp_path)
        assert stat.S_IMODE(trail.stat().st_mode) == 0o600
        operations = [r for r in _records(tmp_path) if r.get("face")]
        assert [(r["face"], r["principal"], r["operation"], r["key_id"], r["result"]) for r in operations] == [
            ("aws", "aws:loader", "wrap", "analytics-1", "ok"),
            ("aws", "aws:trino", "unwrap", "analytics-1", "ok"),
            ("aws", "aws:trino", "describe", "finance-key", "refused"),
            ("py4j", "py4j:spark-writers", "wrap", "orders-key", "ok"),
            ("py4j", "py4j:spark-writers", "unwrap", "orders-key", "ok"),
        ]
        assert operations[0]["table"] == "lake.db.events" and operations[1]["table"] == "lake.db.events"
        assert operations[2]["reason"] == "not granted"
        assert all(r["peer"] == "127.0.0.1" and r["request_id"] and r["time"].endswith("Z") for r in operations)
        assert operations[3]["key_version"] == operations[4]["key_version"] == "1"
        assert len({r["request_id"] for r in operations}) == len(operations)
        text = trail.read_text()
        for secret in (base64.b64encode(KEY).decode(), KEY.hex(), base64.b64encode(blob).decode(),
                       base64.b64encode(wrapped).decode(), SECRET, LOADER_SECRET, _named_token(tmp_path)):
            assert secret not in text
        result = _verify(trail, tmp_path / "config" / "audit.key")
        assert result.returncode == 0 and "verified" in result.stdout and "signatures checked" in result.stdout
        assert "still running" in result.stdout  # the live trail ends before its stop digest: said, not failed
    finally:
        face.stop()


def test_audit_trail_chain_runs_across_rotations_and_restarts(tmp_path):
    face = _governed(tmp_path, max_bytes=4096)
    try:
        _ops(face, 30)
        face.service.restart()  # the Py4J face keeps its address (the AWS face's port is a new free one)
        with _py4j(face, _named_token(tmp_path), "spark-writers") as writer:
            for _ in range(10):
                assert RawClient.bytes_of(writer.call("wrapKey", KEY, "orders-key"))
    finally:
        face.stop()
    rotated = sorted(_trail(tmp_path).parent.glob("kms-audit.jsonl.*"))
    assert len(rotated) >= 3
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in rotated)
    first = json.loads(_trail(tmp_path).read_text().splitlines()[0])
    assert first["kind"] == "rotated" or first["seq"] > 1
    result = _verify(_trail(tmp_path), tmp_path / "config" / "audit.key")
    assert result.returncode == 0, result.stdout + result.stderr
    starts = [r for p in [*rotated, _trail(tmp_path)] for r in map(json.loads, p.read_text().splitlines())
              if r.get("kind") == "start"]
    assert len(starts) == 2  # one chain across both runs


def _tampered(tmp_path: Path, change) -> subprocess.CompletedProcess:
    face = _governed(tmp_path)
    try:
        _ops(face, 6)
    finally:
        face.stop()
    trail = _trail(tmp_path)
    assert _verify(trail, tmp_path / "config" / "audit.key").returncode == 0
    lines = trail.read_bytes().split(b"\n")[:-1]
    trail.write_bytes(change(lines))
    return _verify(trail, tmp_path / "config" / "audit.key")


def test_audit_trail_verify_reports_a_removed_line(tmp_path):
    result = _tampered(tmp_path, lambda lines: b"\n".join(lines[:4] + lines[5:]) + b"\n")
    assert result.returncode == 1 and "line 5: 1 line(s) removed before it" in result.stdout, result.stdout


def test_audit_trail_verify_reports_an_altered_line(tmp_path):
    result = _tampered(tmp_path, lambda lines: b"\n".join(
        lines[:5] + [lines[5].replace(b'"aws:loader"', b'"aws:trino"')] + lines[6:]) + b"\n")
    assert result.returncode == 1 and "line 6: altered" in result.stdout, result.stdout


def test_audit_trail_verify_reports_reordered_lines(tmp_path):
    result = _tampered(tmp_path, lambda lines: b"\n".join(lines[:4] + [lines[5], lines[4]] + lines[6:]) + b"\n")
    assert result.returncode == 1 and "line 5: reordered" in result.stdout, result.stdout


def test_audit_trail_verify_reports_a_truncated_trail(tmp_path):
    result = _tampered(tmp_path, lambda lines: (b"\n".join(lines) + b"\n")[:-25])
    assert result.returncode == 1 and "truncated" in result.stdout, result.stdout


def test_audit_trail_signed_digests_catch_a_rewritten_chain(tmp_path):
    import hashlib

    def rewrite(lines):  # alter a line, then recompute every later hash: the chain alone looks intact
        records = [json.loads(line) for line in lines]
        records[4]["principal"] = "aws:someone-else"
        out, prev = [], None
        for record in records:
            if prev is not None:
                record["prev"] = prev
            line = json.dumps(record, separators=(",", ":")).encode()
            prev = hashlib.sha256(line).hexdigest()
            out.append(line)
        return b"\n".join(out) + b"\n"

    result = _tampered(tmp_path, rewrite)
    assert result.returncode == 1 and "signed digest does not match" in result.stdout, result.stdout
    unsigned = _verify(_trail(tmp_path))
    assert unsigned.returncode == 3 and unsigned.stdout.split(": ", 1)[1].startswith("signatures NOT checked")
    assert "verified" not in unsigned.stdout.replace("NOT verified", "")


def test_audit_trail_fails_closed_on_a_full_disk(tmp_path):
    """RLIMIT_FSIZE on the running service stands in for a full disk (EFBIG like ENOSPC: the write fails)."""
    face = _governed(tmp_path)
    try:
        _ops(face, 30)
        pid = face.service.process.pid
        size = _trail(tmp_path).stat().st_size
        hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)[1]
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (size + 100, hard))  # the soft limit: raised again below
        loader = _loader(face)
        with pytest.raises(ClientError) as excinfo:
            for _ in range(5):
                loader.encrypt(KeyId="analytics-1", Plaintext=os.urandom(32))
        code, message = _error(excinfo)
        assert code == "KMSInternalException" and "audit trail" in message
        with _py4j(face, _named_token(tmp_path), "spark-writers") as writer:
            reply = writer.call("wrapKey", KEY, "orders-key")
            assert reply.startswith(b"!x") and b"KmsError" in reply
        assert _sample(_metrics(face), "pyiceberg_crypto_kms_audit_write_failures_total") >= 2
        assert "refuses operations: cannot write to the audit trail" in face.service.log()
        assert face.service.log().count("refuses operations") == 1  # one clear line, rate-limited
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (hard, hard))
        assert loader.encrypt(KeyId="analytics-1", Plaintext=os.urandom(32))["CiphertextBlob"]
    finally:
        face.stop()
    result = _verify(_trail(tmp_path), tmp_path / "config" / "audit.key")
    assert result.returncode == 0, result.stdout  # no partial line was left behind


def _read_only(directory: Path) -> bool:
    """Make ``directory`` read-only even for root (chattr +i), else by its mode; False if impossible."""
    if os.geteuid() == 0:
        return subprocess.run(["chattr", "+i", str(directory)], capture_output=True).returncode == 0
    directory.chmod(0o500)
    return True


def _writable(directory: Path) -> None:
    if os.geteuid() == 0:
        subprocess.run(["chattr", "-i", str(directory)], capture_output=True)
    directory.chmod(0o700)


def test_audit_trail_fails_closed_in_a_read_only_directory(tmp_path):
    face = _governed(tmp_path, max_bytes=4096)
    directory = _trail(tmp_path).parent
    try:
        if not _read_only(directory):
            pytest.skip("chattr +i is not supported on this file system")
        loader = _loader(face)
        with pytest.raises(ClientError) as excinfo:
            for _ in range(40):  # until the trail must rotate: a new file in the directory
                loader.encrypt(KeyId="analytics-1", Plaintext=os.urandom(32))
        assert _error(excinfo)[0] == "KMSInternalException"
        assert re.search(r"cannot rotate the audit trail .*(EPERM|EACCES|EROFS)", face.service.log())
        _writable(directory)
        assert loader.encrypt(KeyId="analytics-1", Plaintext=os.urandom(32))["CiphertextBlob"]
    finally:
        _writable(directory)
        face.stop()
    assert _verify(_trail(tmp_path), tmp_path / "config" / "audit.key").returncode == 0


def test_audit_trail_in_a_read_only_directory_stops_the_start(tmp_path):
    keystore = make_keystore(tmp_path / "keys.json", "k1")
    directory = tmp_path / "audit"
    directory.mkdir(mode=0o700)
    if not _read_only(directory):
        pytest.skip("chattr +i is not supported on this file system")
    try:
        result = subprocess.run(
            [sys.executable, "-m", "pyiceberg_crypto.cli.main", "kms", "serve", "--kms", "keystore",
             f"--kms-property=keystore.path={keystore}", "--listen", "127.0.0.1:0",
             "--token-file", str(tmp_path / "kms.token"), "--audit-log", str(directory / "trail.jsonl")],
            capture_output=True, text=True, timeout=60, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    finally:
        _writable(directory)
    assert result.returncode == 2
    assert "cannot open the audit trail" in result.stderr and "Traceback" not in result.stderr


def test_grants_principal_label_is_unknown_for_a_principal_the_policy_does_not_name(tmp_path):
    """The default token and a credentials section the policy leaves out may still connect and sign,
    and every call of theirs is refused: on the call metric they are one series, ``unknown``."""
    extra = (f"[intruder]\naws_access_key_id = AKIDLAKEINTRUDER0001\naws_secret_access_key = "
             "intruder-secret-0123456789abcdef\n")
    face = _governed(tmp_path, audit=False)
    try:
        write_credentials(tmp_path / "config" / "aws.credentials", CREDENTIALS + extra)
        intruder = face.client(access_key_id="AKIDLAKEINTRUDER0001", secret="intruder-secret-0123456789abcdef")

        def signed_in():  # the face follows its credentials file (a section added or removed)
            try:
                intruder.encrypt(KeyId="analytics-1", Plaintext=KEY)
            except ClientError as exc:
                return _error_code(exc) == "AccessDeniedException" or None
            return None

        eventually(signed_in, message="the new credentials section signing in")
        for key_id in ("analytics-1", "finance-key", "no-such-key"):
            with pytest.raises(ClientError):
                intruder.decrypt(CiphertextBlob=os.urandom(64), KeyId=key_id)
        host, port = face.service.address.rsplit(":", 1)
        with RawClient(host, int(port)) as default:
            assert default.handshake(face.service.token_file.read_text().strip()) == b"!yv"
            assert b"UnknownKeyError" in default.call("wrapKey", KEY, "orders-key")
        text = _metrics(face)
        assert _calls(text, "aws", "unknown", "wrap") >= 1
        assert _calls(text, "aws", "unknown", "unwrap") == 3
        assert _calls(text, "py4j", "unknown", "wrap") == 1
        principals = set(re.findall(r'pyiceberg_crypto_kms_calls_total\{[^}]*principal="([^"]*)"', text))
        assert principals == {"unknown"}
        assert "intruder" not in text and "default" not in text
    finally:
        face.stop()


def _error_code(exc: ClientError) -> str:
    return exc.response["Error"]["Code"]


def test_grants_principal_label_without_a_policy_is_bounded():
    """Without a policy every authenticated principal is labelled (sections of the credentials file,
    ``py4j:default``), up to MAX_PRINCIPAL_LABELS; past that, ``unknown``: the series stay bounded."""
    from pyiceberg_crypto.kms import InMemoryKms
    from pyiceberg_crypto.serve.served_kms import MAX_PRINCIPAL_LABELS, ServedKms

    served = ServedKms(lambda: InMemoryKms({"k1": bytes(16)})).start()
    for n in range(MAX_PRINCIPAL_LABELS + 5):
        served.perform("aws", f"aws:section-{n}", "127.0.0.1:1", "describe", "k1", lambda: None)
    text = served.render_metrics()
    labels = re.findall(r'pyiceberg_crypto_kms_calls_total\{[^}]*principal="([^"]*)"', text)
    assert len(labels) == MAX_PRINCIPAL_LABELS + 1
    assert _calls(text, "aws", "aws:section-0", "describe") == 1
    assert _calls(text, "aws", "unknown", "describe") == 5

"""Issue 62, first slice: ``kms serve --replica`` processes that serve the same clients with one
identity (the operator's token file, read and never rewritten; one TLS key and certificate, so one
pin), and the bridge's Java client that fails over between the replicas that
``pyiceberg-crypto.kms-service=HOST:PORT,HOST:PORT`` lists.

Everything on loopback: 2-3 ``kms serve`` processes of their own (``tests/serve/service_process.py``)
beside the test session's Spark driver, whose JVM is the client (``PythonKmsClient`` made directly,
or a catalog of its own). A replica is killed with SIGKILL (no clean stop: its connections die with
it, as when a machine is lost)."""

from __future__ import annotations

import json
import secrets
import signal
import struct
import time
import uuid
from pathlib import Path

import pytest
from py4j.protocol import Py4JJavaError

from pyiceberg_crypto import config
from pyiceberg_crypto.kms.keystore import Keystore, KeystoreKms
from pyiceberg_crypto.listener.tls import TlsIdentity
from pyiceberg_crypto.testing.ports import reserve_port
from tests.conftest import add_catalog
from tests.serve.service_process import ServiceProcess, make_keystore
from tests.serve.test_revocation_spark import _error_text, _ids, _snapshot
from tests.serve.test_service import KEY, java_client, java_error, unwrap, wrap
from tests.testkit import eventually, load_factor

pytestmark = [pytest.mark.loopback]

KEY_ID = "orders-key"


def _shared_files(tmp_path: Path, *, tls: bool = False) -> dict[str, Path]:
    """What the operator gives every replica: a keystore, a token file (0600), a TLS key and
    certificate (made once, copied to each replica)."""
    config_dir = tmp_path / "shared"
    config_dir.mkdir(mode=0o700, exist_ok=True)
    files = {"keystore": make_keystore(config_dir / "keys.json", KEY_ID, "finance-key"),
             "token": config_dir / "kms.token"}
    files["token"].write_text(secrets.token_hex(32) + "\n")
    files["token"].chmod(0o600)
    if tls:
        files["tls_key"], files["tls_certificate"] = config_dir / "tls-key.pem", config_dir / "tls-cert.pem"
        TlsIdentity.load_or_create(files["tls_key"], files["tls_certificate"])
    return files


def _replicas(tmp_path: Path, files: dict[str, Path], count: int, *, host: str = "127.0.0.1",
              extra: list[str] = ()) -> list[ServiceProcess]:
    args = ["--replica", *extra]
    if "tls_key" in files:
        args += ["--tls-key-file", str(files["tls_key"]), "--tls-certificate-file", str(files["tls_certificate"])]
    started = []
    try:
        for index in range(count):
            started.append(ServiceProcess.start(
                tmp_path / f"replica{index}", files["keystore"], listen=f"{host}:{reserve_port(host)}",
                token_file=files["token"], name=f"replica{index}", extra=args))
    except BaseException:
        _stop(started)
        raise
    return started


def _stop(replicas: list[ServiceProcess]) -> None:
    for replica in replicas:
        if replica.process is not None and replica.process.poll() is None:
            replica.stop()


def _kill(replica: ServiceProcess) -> None:
    replica.process.send_signal(signal.SIGKILL)
    replica.process.wait(30)


def _calls(replica: ServiceProcess) -> int:
    """Wrap and unwrap calls the replica served so far (a fresh status)."""
    operations = replica.refresh_status()["operations"]
    return sum(operations.get(op, {}).get("calls", 0) for op in ("wrap", "unwrap", "generate"))


def _version(wrapped: bytes) -> int:
    """The master key version a keystore wrap used (the blob's bytes 4-8)."""
    assert wrapped[:4] == b"PKW1"
    return struct.unpack(">I", wrapped[4:8])[0]


def _failover_log(jvm):
    """A handler on the client's java.util.logging logger, and a function that returns its text."""
    logger = jvm.java.util.logging.Logger.getLogger("io.pyicebergcrypto.bridge.PythonKmsClient")
    out = jvm.java.io.ByteArrayOutputStream()
    handler = jvm.java.util.logging.StreamHandler(out, jvm.java.util.logging.SimpleFormatter())
    logger.addHandler(handler)

    def text() -> str:
        handler.flush()
        return str(out.toString("UTF-8"))

    return logger, handler, text


def test_replicas_share_one_token_and_one_pin(jvm, tmp_path):
    """Two replicas given the same token and TLS files: the same pin, the token file untouched at
    start and at stop, and a JVM configured with one pin and the token file works against each alone
    (the certificate names no host: the pin is the identity, whatever address a client uses)."""
    files = _shared_files(tmp_path, tls=True)
    token = files["token"].read_text()
    pin = TlsIdentity.load_or_create(files["tls_key"], files["tls_certificate"]).sha256
    replicas = _replicas(tmp_path, files, 2, host="127.0.0.2")
    try:
        assert [replica.certificate_sha256 for replica in replicas] == [pin, pin]
        assert all(replica.status()["replica"] for replica in replicas)
        assert files["token"].read_text() == token  # read, not rewritten
        assert "read from (replica)" in replicas[0].log()
        wrapped = []
        for replica in replicas:
            client = java_client(jvm, kms_service=replica.address, kms_token_file=str(files["token"]),
                                 kms_certificate_sha256=pin)
            wrapped.append(wrap(jvm, client, KEY_ID))
            assert unwrap(jvm, client, wrapped[-1], KEY_ID) == KEY
        # What one replica wrapped, the other unwraps: one key service.
        other = java_client(jvm, kms_service=replicas[1].address, kms_token_file=str(files["token"]),
                            kms_certificate_sha256=pin)
        assert unwrap(jvm, other, wrapped[0], KEY_ID) == KEY
        # A replica stops cleanly and leaves the shared token file to the others.
        replicas[0].stop()
        assert files["token"].read_text() == token
        assert unwrap(jvm, other, wrapped[0], KEY_ID) == KEY
    finally:
        _stop(replicas)


def test_replica_refuses_a_token_file_other_users_could_read(tmp_path):
    """--replica reads the operator's file only if it passes the operator-file checks (0600 here),
    and never makes a TLS identity of its own (each replica would have another pin)."""
    files = _shared_files(tmp_path)
    files["token"].chmod(0o644)
    with pytest.raises(BaseException, match="exited"):
        _replicas(tmp_path, files, 1)
    assert "readable by other users" in (tmp_path / "replica0" / "replica0.log").read_text()
    files["token"].chmod(0o600)
    with pytest.raises(BaseException, match="exited"):
        _replicas(tmp_path / "tls", files, 1, host="127.0.0.2")
    assert "a replica never makes its own" in (tmp_path / "tls" / "replica0" / "replica0.log").read_text()


def test_failover_when_a_replica_is_killed_between_writes_loses_no_commit(spark, tmp_path):
    """A catalog listing three replicas; INSERTs in a loop; the replica this JVM was using is killed
    with SIGKILL after the third: every INSERT commits, every row reads back (in this catalog and in a
    fresh one), and the client logged the failover."""
    files = _shared_files(tmp_path)
    replicas = _replicas(tmp_path, files, 3)
    catalog, fresh = f"rep_{uuid.uuid4().hex[:6]}", f"rep_{uuid.uuid4().hex[:6]}"
    namespace = f"replicas_{uuid.uuid4().hex[:6]}"
    table = f"{catalog}.{namespace}.orders"
    logger, handler, failover_log = _failover_log(spark.sparkContext._jvm)
    try:
        addresses = [replica.address for replica in replicas]
        for name in (catalog, fresh):
            add_catalog(spark, name, tmp_path / "warehouse", kms_service=addresses, kms_token_file=str(files["token"]))
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.{namespace}")
        spark.sql(f"CREATE TABLE {table} (id bigint, item string) USING iceberg "
                  f"TBLPROPERTIES ('encryption.key-id'='{KEY_ID}', 'format-version'='3')")
        failed, killed = [], None
        for row in range(1, 9):
            if row == 4:
                busy = max(replicas, key=_calls)  # the replica this driver JVM calls
                assert _calls(busy) > 0
                _kill(busy)
                killed = busy
            try:
                spark.sql(f"INSERT INTO {table} VALUES ({row}, 'item-{row}')")
            except Exception as exc:  # noqa: BLE001 - counted: the goal is none
                failed.append((row, _error_text(exc)))
        assert failed == []
        assert _ids(spark, table) == list(range(1, 9))
        assert _ids(spark, f"{fresh}.{namespace}.orders") == list(range(1, 9))  # unwraps again, at a live replica
        assert sum(_calls(replica) for replica in replicas if replica is not killed) > 0
        logged = failover_log()
        assert f"KMS service replica {killed.address} failed to" in logged and "failing over to" in logged
        assert files["token"].read_text().strip() not in logged
    finally:
        logger.removeHandler(handler)
        _stop(replicas)


def test_failover_all_replicas_down_names_each_and_keeps_the_snapshot(spark, tmp_path):
    """Every replica killed: the INSERT fails with one error that names each replica and why; the
    table stays at its snapshot (read back once one replica is started again, same token)."""
    files = _shared_files(tmp_path)
    replicas = _replicas(tmp_path, files, 2)
    catalog = f"rep_{uuid.uuid4().hex[:6]}"
    namespace = f"replicas_{uuid.uuid4().hex[:6]}"
    table = f"{catalog}.{namespace}.orders"
    try:
        addresses = [replica.address for replica in replicas]
        add_catalog(spark, catalog, tmp_path / "warehouse", kms_service=addresses, kms_token_file=str(files["token"]),
                    extra_catalog_properties={"pyiceberg-crypto.kms-service.timeout-ms": "10000"})
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.{namespace}")
        spark.sql(f"CREATE TABLE {table} (id bigint) USING iceberg "
                  f"TBLPROPERTIES ('encryption.key-id'='{KEY_ID}', 'format-version'='3')")
        spark.sql(f"INSERT INTO {table} VALUES (1), (2)")
        before = _snapshot(spark, table)
        for replica in replicas:
            _kill(replica)
        started = time.monotonic()
        with pytest.raises(Exception) as excinfo:  # noqa: PT011 - the driver's error, whatever wraps it
            spark.sql(f"INSERT INTO {table} VALUES (3)").collect()
        elapsed = time.monotonic() - started
        error = _error_text(excinfo.value)
        assert "no replica of the KMS service answered (2 replicas" in error, error
        for address in addresses:
            assert f"{address}: the Python KMS is unreachable" in error, error
        assert files["token"].read_text().strip() not in error
        assert elapsed < 60 * load_factor(), elapsed
        replicas[1].restart(listen=addresses[1])  # --replica: the same token, read again
        assert eventually(lambda: _snapshot(spark, table), 30, interval=0.5,
                          message="the table readable again") == before
    finally:
        _stop(replicas)


def test_a_hung_replica_holds_a_call_for_one_attempt_timeout_then_the_next_answers(jvm, tmp_path):
    """A replica that stops answering (SIGSTOP: its sockets stay open, nothing reads them) holds a
    call for the attempt timeout (``pyiceberg-crypto.kms-service.attempt-timeout-ms``), not for the
    call's whole timeout; the next replica answers, and the log names the hung one."""
    files = _shared_files(tmp_path)
    replicas = _replicas(tmp_path, files, 2)
    logger, handler, log_text = _failover_log(jvm)
    try:
        client = java_client(jvm, kms_service=[replica.address for replica in replicas],
                             kms_token_file=str(files["token"]), kms_timeout=60, kms_attempt_timeout=1.5)
        wrapped = wrap(jvm, client, KEY_ID)  # connects to the replica this JVM prefers
        calls = [_calls(replica) for replica in replicas]
        hung = replicas[calls.index(1)]
        hung.process.send_signal(signal.SIGSTOP)
        try:
            started = time.monotonic()
            assert unwrap(jvm, client, wrapped, KEY_ID) == KEY
            took = time.monotonic() - started
        finally:
            hung.process.send_signal(signal.SIGCONT)
        assert 1.4 <= took < 30, took  # the attempt timeout (1.5 s), far from the call's 60 s
        assert f"KMS service replica {hung.address} failed to unwrap" in log_text(), log_text()
    finally:
        logger.removeHandler(handler)
        _stop(replicas)
    with pytest.raises(ValueError, match="kms_attempt_timeout must be positive"):
        config.kms_service_properties("127.0.0.1:1,127.0.0.1:2", files["token"], kms_attempt_timeout=0)


def test_replica_picks_up_a_rotated_shared_keystore(jvm, tmp_path):
    """Two replicas on one keystore file: a rotate there is what both wrap with, within seconds and
    without a restart or a signal; what either wrapped before still unwraps at both."""
    files = _shared_files(tmp_path)
    replicas = _replicas(tmp_path, files, 2)
    try:
        clients = [java_client(jvm, kms_service=replica.address, kms_token_file=str(files["token"]))
                   for replica in replicas]
        before = [wrap(jvm, client, KEY_ID) for client in clients]
        assert [_version(wrapped) for wrapped in before] == [1, 1]
        rotated = time.monotonic()
        Keystore(files["keystore"]).rotate_key(KEY_ID)
        for client in clients:
            eventually(lambda client=client: _version(wrap(jvm, client, KEY_ID)) == 2, 10, interval=0.1,
                       message="a replica wrapping with the rotated version")
        assert time.monotonic() - rotated < 10 * load_factor()
        for client in clients:
            assert [unwrap(jvm, client, wrapped, KEY_ID) for wrapped in before] == [KEY, KEY]
        assert all(replica.status()["reloads"] == 0 for replica in replicas)  # no SIGHUP was needed
        assert KeystoreKms(files["keystore"]).unwrap_key(wrap(jvm, clients[1], KEY_ID), KEY_ID) == KEY
    finally:
        _stop(replicas)


def test_replica_refusal_is_not_retried_elsewhere(jvm, tmp_path):
    """A policy's refusal at one replica is the answer: the client does not try the other, and the
    error is the policy's, not "no replica answered". The named token of the policy's principal is
    read from the operator's file too (``NAME:SECRET``)."""
    files = _shared_files(tmp_path)
    named = files["token"].parent / "writers.token"
    named.write_text(f"writers:{secrets.token_hex(32)}\n")
    named.chmod(0o600)
    policy = files["token"].parent / "policy.json"
    policy.write_text(json.dumps({"version": 1, "principals": {"py4j:writers": {
        "token_file": str(named), "grants": [{"keys": [KEY_ID], "operations": ["wrap", "unwrap"]}]}}}))
    policy.chmod(0o600)
    replicas = _replicas(tmp_path, files, 2, extra=["--policy", str(policy)])
    try:
        client = java_client(jvm, kms_service=[replica.address for replica in replicas], kms_token_file=str(named))
        assert unwrap(jvm, client, wrap(jvm, client, KEY_ID), KEY_ID) == KEY  # the named token works
        before = [_calls(replica) for replica in replicas]
        with pytest.raises(Py4JJavaError) as excinfo:
            wrap(jvm, client, "finance-key")
        error = java_error(excinfo)
        assert "this client may not wrap" in error and "no replica" not in error, error
        after = [_calls(replica) for replica in replicas]
        assert sum(after) - sum(before) == 1, (before, after)  # one replica asked, once
        assert named.exists() and files["token"].exists()
    finally:
        _stop(replicas)
    assert named.exists()  # the operator's files stay when replicas stop


def test_replica_list_in_the_java_client_and_the_settings(jvm, tmp_path):
    """The address list as the Java client parses it (there are no Java unit tests in this repo):
    one entry is today's single service; a list of replicas; a replica listed twice, a bad entry, an
    entry off loopback without a pin are refused, naming the entry."""
    token = tmp_path / "kms.token"
    token.write_text("x" * 64)

    def initialize(value: str):
        java_map = jvm.java.util.HashMap()
        java_map.put("pyiceberg-crypto.kms-service", value)
        java_map.put("pyiceberg-crypto.kms-service.token-file", str(token))
        client = jvm.io.pyicebergcrypto.bridge.PythonKmsClient()
        client.initialize(java_map)
        return str(client.toString())

    assert initialize("127.0.0.1:9600") == "PythonKmsClient{service=127.0.0.1:9600}"
    assert initialize(" 127.0.0.1:9600, localhost:9700 ") == "PythonKmsClient{service=127.0.0.1:9600,localhost:9700}"
    for bad, message in [("127.0.0.1:9600,127.0.0.1:9600", "lists the replica 127.0.0.1:9600 twice"),
                         ("127.0.0.1:9600,nohost", "got 'nohost' in"),
                         ("127.0.0.1:9600,", "got '' in"),
                         ("127.0.0.1:9600,10.0.0.7:9600", "10.0.0.7:9600 is not on loopback"),
                         ("127.0.0.1:9600,127.0.0.1:70000", "invalid port: 70000")]:
        with pytest.raises(Exception, match=message):  # noqa: PT011 - PySpark converts it
            initialize(bad)
    assert config.kms_service_properties(("127.0.0.1:1", "127.0.0.1:2"), token)[
        "pyiceberg-crypto.kms-service"] == "127.0.0.1:1,127.0.0.1:2"
    settings = config.catalog_settings("lake", warehouse=str(tmp_path), kms_service="127.0.0.1:1, 127.0.0.1:2",
                                       kms_token_file=str(token))
    assert settings["spark.sql.catalog.lake.pyiceberg-crypto.kms-service"] == "127.0.0.1:1,127.0.0.1:2"
    with pytest.raises(Exception, match="twice"):  # noqa: PT011
        config.kms_service_properties("127.0.0.1:1,127.0.0.1:1", token)


def test_replica_token_rotation_sigusr2_rereads_the_shared_file(jvm, tmp_path):
    """The operator writes a new token to the shared file and sends SIGUSR2 to each replica: each
    re-reads it (never writes one), refuses the old one, and a JVM listing both replicas keeps
    working (it re-reads the file, and fails over past a replica still on the old token)."""
    files = _shared_files(tmp_path)
    replicas = _replicas(tmp_path, files, 2)
    try:
        client = java_client(jvm, kms_service=[replica.address for replica in replicas],
                             kms_token_file=str(files["token"]))
        wrapped = wrap(jvm, client, KEY_ID)
        new_token = secrets.token_hex(32)
        files["token"].write_text(new_token + "\n")  # the operator's rotation (mode stays 0600)
        replicas[0].signal(signal.SIGUSR2)  # one replica rotated, the other not yet
        eventually(lambda: "re-read its token" in replicas[0].log(), 10, interval=0.05,
                   message="the first replica re-reading the token file")
        assert unwrap(jvm, client, wrapped, KEY_ID) == KEY  # whichever replica it asks
        replicas[1].signal(signal.SIGUSR2)
        eventually(lambda: "re-read its token" in replicas[1].log(), 10, interval=0.05,
                   message="the second replica re-reading the token file")
        for replica in replicas:
            alone = java_client(jvm, kms_service=replica.address, kms_token_file=str(files["token"]))
            assert unwrap(jvm, alone, wrapped, KEY_ID) == KEY
        assert files["token"].read_text().strip() == new_token  # read, never rewritten
        assert new_token not in replicas[0].log() + replicas[1].log()
    finally:
        _stop(replicas)


def test_replica_trails_verify_each_and_make_one_account(jvm, tmp_path):
    """Each replica keeps its own signed trail with its id on every operation line
    (``--replica-id``); ``kms audit-log verify`` given every trail verifies each chain and prints one
    account: per principal, key, operation and result, the count of each replica."""
    from pyiceberg_crypto.serve.audit_trail import load_or_create_audit_key

    files = _shared_files(tmp_path)
    audit = tmp_path / "audit"
    audit.mkdir(mode=0o700)
    key_file = tmp_path / "audit-key" / "kms-audit.key"
    key_file.parent.mkdir(mode=0o700)
    load_or_create_audit_key(key_file)  # one audit key for the replicas: one verify command for all
    replicas = []
    try:
        for index in range(2):
            replicas += _replicas(tmp_path / f"r{index}", files, 1, extra=[
                "--replica-id", f"replica-{index}", "--audit-log", str(audit / f"replica-{index}.jsonl"),
                "--audit-key-file", str(key_file)])
        clients = [java_client(jvm, kms_service=replica.address, kms_token_file=str(files["token"]))
                   for replica in replicas]
        wrapped = [wrap(jvm, clients[0], KEY_ID), wrap(jvm, clients[0], KEY_ID)]
        assert unwrap(jvm, clients[1], wrapped[0], KEY_ID) == KEY
    finally:
        _stop(replicas)  # a clean stop: each trail ends with its stop digest
    trails = [audit / "replica-0.jsonl", audit / "replica-1.jsonl"]
    lines = [json.loads(line) for line in trails[1].read_text().splitlines()]
    assert [r["replica"] for r in lines if r.get("operation")] == ["replica-1"]
    done = _verify_all(trails, key_file)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count(": verified: ") == 2, done.stdout
    assert "account of 2 trail(s), replicas replica-0, replica-1:" in done.stdout
    assert f"  py4j:default  {KEY_ID}  wrap  ok: 2 (replica-0 2)" in done.stdout, done.stdout
    assert f"  py4j:default  {KEY_ID}  unwrap  ok: 1 (replica-1 1)" in done.stdout, done.stdout
    # A trail that does not verify makes the whole command fail, and the account says so.
    text = trails[1].read_text().replace('"operation":"unwrap"', '"operation":"wrap"')
    trails[1].write_text(text)
    done = _verify_all(trails, key_file)
    assert done.returncode == 1 and "NOT INTACT" in done.stdout
    assert "(NOT every trail is verified: the counts are what the lines say)" in done.stdout


def _verify_all(trails: list[Path], key_file: Path):
    """``kms audit-log verify TRAIL TRAIL --key-file KEY`` by the CLI's main in this process."""
    import contextlib
    import io
    import subprocess

    from pyiceberg_crypto.cli.main import main

    args = ["kms", "audit-log", "verify", *map(str, trails), "--key-file", str(key_file)]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(args)
    return subprocess.CompletedProcess(args, status, out.getvalue(), err.getvalue())

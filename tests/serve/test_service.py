"""``pyiceberg-crypto kms serve`` called by the bridge's Java client, configured by catalog
properties only (the driver JVM of the test session stands in for any JVM: no registration).

Each test starts a real service process; the Java side is the real ``PythonKmsClient``.
"""

from __future__ import annotations

import re
import signal
import socket
import stat
import time

import pytest
from py4j.protocol import Py4JJavaError

from pyiceberg_crypto import config
from pyiceberg_crypto.errors import InvalidArgumentError
from pyiceberg_crypto.kms.keystore import KeystoreKms
from pyiceberg_crypto.testing.ports import reserve_port
from tests.serve.service_process import ServiceProcess, make_keystore
from tests.testkit import eventually, load_factor

KEY = b"d" * 16


def java_client(jvm, **settings):
    """A PythonKmsClient initialized with the catalog properties config renders for a service."""
    properties = config.kms_service_properties(settings["kms_service"], settings["kms_token_file"],
                                               settings.get("kms_certificate_sha256"), settings.get("kms_timeout"),
                                               settings.get("kms_attempt_timeout"))
    java_map = jvm.java.util.HashMap()
    for key, value in properties.items():
        java_map.put(key, value)
    client = jvm.io.pyicebergcrypto.bridge.PythonKmsClient()
    client.initialize(java_map)
    return client


def wrap(jvm, client, key_id="k1", key=KEY):
    return bytes(_array(jvm, client.wrapKey(jvm.java.nio.ByteBuffer.wrap(bytearray(key)), key_id)))


def unwrap(jvm, client, wrapped, key_id="k1"):
    return bytes(_array(jvm, client.unwrapKey(jvm.java.nio.ByteBuffer.wrap(bytearray(wrapped)), key_id)))


def _array(jvm, buffer):
    out = jvm.java.util.Arrays.copyOfRange(buffer.array(), buffer.arrayOffset() + buffer.position(),
                                           buffer.arrayOffset() + buffer.limit())
    return out


def java_error(excinfo) -> str:
    return str(excinfo.value.java_exception.getMessage())


def test_service_round_trip_token_file_and_counts_per_client(jvm, kms_service, keystore):
    token_file = kms_service.token_file
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600 and len(token_file.read_text().strip()) == 64
    client = java_client(jvm, **kms_service.client_settings())
    wrapped = wrap(jvm, client)
    assert unwrap(jvm, client, wrapped) == KEY
    assert KeystoreKms(keystore).unwrap_key(wrapped, "k1") == KEY  # the served KMS did the wrap
    status = kms_service.refresh_status()
    assert status["operations"]["wrap"]["calls"] == 1 and status["operations"]["unwrap"]["calls"] == 1
    assert status["clients"] == {"127.0.0.1": {"wrap": 1, "unwrap": 1}}
    assert "token" not in str(client.toString()).lower() and kms_service.address in str(client.toString())
    # What clients need is printed at start; the token never is (nor logged).
    log = kms_service.log()
    assert f"pyiceberg-crypto.kms-service={kms_service.address}" in log
    assert token_file.read_text().strip() not in log


def test_kms_errors_reach_the_jvm_as_one_line_naming_the_service(jvm, kms_service):
    client = java_client(jvm, **kms_service.client_settings())
    with pytest.raises(Py4JJavaError) as excinfo:
        wrap(jvm, client, key_id="missing")
    message = java_error(excinfo)
    assert message.startswith(f"KMS service {kms_service.address} (pyiceberg-crypto kms serve) failed to wrap a key "
                              "with key id 'missing': ")
    assert "missing" in message and "Traceback" not in message


def test_a_wrong_token_is_refused_and_logged_without_the_token(kms_service):
    host, port = kms_service.address.rsplit(":", 1)
    guess = "0" * 64
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(f"A\n{guess}\ne\n".encode())
        assert sock.recv(64).startswith(b"!")
        try:  # and the connection is closed (reset)
            assert sock.recv(64) == b""
        except ConnectionResetError:
            pass
    status = kms_service.refresh_status()
    assert status["refused"] == {"127.0.0.1": 1} and status["clients"] == {}
    log = kms_service.log()
    assert "refused a connection from 127.0.0.1: wrong or old token" in log and guess not in log


def test_a_restarted_service_has_a_new_token_and_clients_recover_by_re_reading_the_file(jvm, kms_service):
    client = java_client(jvm, **kms_service.client_settings())
    wrapped = wrap(jvm, client)
    old_token = kms_service.token_file.read_text()
    kms_service.restart()
    assert kms_service.token_file.read_text() != old_token
    # The same client object: its call is refused once, it re-reads the file and succeeds.
    assert unwrap(jvm, client, wrapped) == KEY
    assert kms_service.refresh_status()["operations"]["unwrap"]["calls"] == 1  # the new process answered


def test_a_stale_token_file_is_refused_clearly_then_recovers_when_the_file_is_right(jvm, kms_service):
    client = java_client(jvm, **kms_service.client_settings())
    wrapped = wrap(jvm, client)
    token = kms_service.token_file.read_text()
    kms_service.token_file.write_text("f" * 64 + "\n")  # e.g. a secret mount not yet updated
    # The sleeps are the behaviour: a JVM looks at the file at most once a second (RECHECK_MILLIS in
    # KmsServiceConnections.java); polling with calls would add refusals to the count asserted below.
    time.sleep(1.1)
    with pytest.raises(Py4JJavaError) as excinfo:
        unwrap(jvm, client, wrapped)
    message = java_error(excinfo)
    assert "failed to unwrap a key with key id 'k1': the service refused this JVM's token" in message
    assert str(kms_service.token_file) in message and "f" * 64 not in message and token.strip() not in message
    kms_service.token_file.write_text(token)
    time.sleep(1.1)  # past the JVM's next look at the file (see above)
    assert unwrap(jvm, client, wrapped) == KEY
    assert kms_service.refresh_status()["refused"] == {"127.0.0.1": 2}  # the first try and the re-read


def test_a_service_that_is_down_fails_the_call_naming_it(jvm, kms_service):
    client = java_client(jvm, **kms_service.client_settings())
    wrap(jvm, client)
    address = kms_service.address
    assert kms_service.stop() == 0
    assert not kms_service.token_file.exists()  # a clean stop removes the token file
    with pytest.raises(Py4JJavaError) as excinfo:
        wrap(jvm, client)
    message = java_error(excinfo)
    assert f"KMS service {address} (pyiceberg-crypto kms serve) failed to wrap a key with key id 'k1'" in message
    # The file is gone, but this client keeps the token it used (PythonKmsClient.serviceToken): it
    # connects with it, and nobody listens ("cannot read the token" is for a client that never had one).
    assert "Is pyiceberg-crypto kms serve running there" in message and "cannot read the token" not in message


def test_a_slow_kms_is_bounded_by_the_call_timeout(jvm, tmp_path):
    service = ServiceProcess.start(tmp_path / "slow", kms="tests.serve.factories:slow_kms",
                                   properties={"slow.seconds": "30"}, extra=["--kms-timeout", "0.5"])
    try:
        client = java_client(jvm, **service.client_settings())
        started = time.monotonic()
        with pytest.raises(Py4JJavaError) as excinfo:
            wrap(jvm, client)
        # At most 16 s on a loaded machine, still short of the KMS's 30 s (a daemon thread sleeps it out).
        assert time.monotonic() - started < 4 * load_factor()
        assert "KmsTimeoutError: the KMS call wrap_key did not return within 0.5 s" in java_error(excinfo)
    finally:
        service.stop()


def test_a_client_whose_jvm_times_out_first_says_so(jvm, tmp_path):
    service = ServiceProcess.start(tmp_path / "slow", kms="tests.serve.factories:slow_kms",
                                   properties={"slow.seconds": "5"})
    try:
        client = java_client(jvm, kms_timeout=0.5, **service.client_settings())
        with pytest.raises(Py4JJavaError) as excinfo:
            wrap(jvm, client)
        assert "no answer from the Python KMS within its timeout" in java_error(excinfo)
    finally:
        service.stop()


@pytest.mark.parametrize("problem", ["missing", "a directory", "empty"])
def test_an_unreadable_token_file_fails_at_the_first_key_operation(jvm, kms_service, tmp_path, problem):
    token_file = tmp_path / "elsewhere" / "kms.token"
    if problem == "a directory":
        token_file.mkdir(parents=True)
    elif problem == "empty":
        token_file.parent.mkdir(parents=True)
        token_file.write_text("")
    client = java_client(jvm, kms_service=kms_service.address, kms_token_file=str(token_file))  # no error yet
    with pytest.raises(Py4JJavaError) as excinfo:
        wrap(jvm, client)
    message = java_error(excinfo)
    reason = {"missing": "no such file", "a directory": "IOException", "empty": "the file is empty"}[problem]
    assert f"cannot read the token of the KMS service {kms_service.address} from {token_file} on this host ({reason})" \
        in message


def test_sighup_reloads_the_kms_without_dropping_clients(jvm, tmp_path, keystore):
    second = make_keystore(tmp_path / "second.json", "k2")
    selector = tmp_path / "selected"
    selector.write_text(str(keystore))
    service = ServiceProcess.start(tmp_path / "reload", kms="tests.serve.factories:selected_keystore_kms",
                                   properties={"selector": str(selector)})
    try:
        client = java_client(jvm, **service.client_settings())
        wrapped = wrap(jvm, client, "k1")
        with pytest.raises(Py4JJavaError):
            wrap(jvm, client, "k2")
        selector.write_text(str(second))
        service.signal(signal.SIGHUP)
        service.wait_for_status(lambda s: s["reloads"] == 1, 30, "the reload")
        assert KeystoreKms(second).unwrap_key(wrap(jvm, client, "k2"), "k2") == KEY  # same connection
        selector.write_text(str(tmp_path / "absent.json"))  # a broken reload keeps the previous KMS
        service.signal(signal.SIGHUP)
        eventually(lambda: "reload failed, still serving the previous KMS" in service.log(),
                   message=lambda: f"the failed reload in the log:\n{service.log()}")
        assert wrap(jvm, client, "k2")
        del wrapped
    finally:
        service.stop()


def test_tls_off_loopback_pins_the_certificate_and_keeps_it_across_restarts(jvm, tmp_path, keystore):
    # A reserved port: the restart takes it again, and no other process is handed it meanwhile.
    service = ServiceProcess.start(tmp_path / "tls", keystore, listen=f"127.0.0.2:{reserve_port('127.0.0.2')}")
    try:
        pin = service.certificate_sha256
        assert service.status()["tls"] and len(pin) == 64
        key_file = service.token_file.with_name(service.token_file.name + ".tls-key.pem")
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        client = java_client(jvm, **service.client_settings())
        wrapped = wrap(jvm, client)
        service.restart()
        assert service.certificate_sha256 == pin  # the pin clients were given still holds
        assert unwrap(jvm, client, wrapped) == KEY

        # A client pinning another certificate refuses the listener.
        impostor = java_client(jvm, kms_service=service.address, kms_token_file=str(service.token_file),
                               kms_certificate_sha256="ab" * 32)
        with pytest.raises(Py4JJavaError) as excinfo:
            wrap(jvm, impostor)
        assert "the TLS handshake with the Python KMS failed" in java_error(excinfo)
        # Without a pin, off loopback: refused by the builders and by the Java client.
        with pytest.raises(InvalidArgumentError, match="kms_certificate_sha256"):
            config.kms_service_properties(service.address, service.token_file)
        java_map = jvm.java.util.HashMap()
        java_map.put("pyiceberg-crypto.kms-service", service.address)
        java_map.put("pyiceberg-crypto.kms-service.token-file", str(service.token_file))
        with pytest.raises(Exception, match="clients must pin its certificate"):  # PySpark converts it
            jvm.io.pyicebergcrypto.bridge.PythonKmsClient().initialize(java_map)
    finally:
        service.stop()


def test_serve_refuses_bad_arguments_with_one_line(tmp_path, keystore):
    import subprocess
    import sys

    def serve(*args):
        return subprocess.run([sys.executable, "-m", "pyiceberg_crypto.cli.main", "kms", "serve", *args],
                              capture_output=True, text=True, timeout=60, cwd=tmp_path)

    bad_listen = serve("--kms", "keystore", f"--kms-property=keystore.path={keystore}", "--listen", "nowhere",
                       "--token-file", str(tmp_path / "t"))
    assert bad_listen.returncode == 2 and "--listen must be HOST:PORT" in bad_listen.stderr
    no_keystore = serve("--kms", "keystore", f"--kms-property=keystore.path={tmp_path / 'absent.json'}",
                        "--token-file", str(tmp_path / "t"))
    assert no_keystore.returncode == 2 and "does not exist" in no_keystore.stderr
    assert "Traceback" not in bad_listen.stderr + no_keystore.stderr and not (tmp_path / "t").exists()


def test_config_renders_the_service_instead_of_a_registered_name(tmp_path):
    settings = config.catalog_settings("lake", warehouse=tmp_path, kms_service="127.0.0.1:9600",
                                       kms_token_file=tmp_path / "kms.token")
    assert settings["spark.sql.catalog.lake.pyiceberg-crypto.kms-service"] == "127.0.0.1:9600"
    assert settings["spark.sql.catalog.lake.pyiceberg-crypto.kms-service.token-file"] == str(tmp_path / "kms.token")
    assert "spark.sql.catalog.lake.pyiceberg-crypto.kms-name" not in settings
    assert not any(re.search(r"\b[0-9a-f]{64}\b", value) for value in settings.values())  # no token inlined
    with pytest.raises(InvalidArgumentError, match="go together"):
        config.catalog_settings("lake", warehouse=tmp_path, kms_service="127.0.0.1:9600")
    with pytest.raises(InvalidArgumentError, match="HOST:PORT"):
        config.kms_service_properties("127.0.0.1", tmp_path / "t")



def test_verify_table_on_a_service_catalog_asks_for_the_kms_in_python():
    from pyiceberg_crypto.errors import TableInputError
    from pyiceberg_crypto.catalog.spark import registered_kms

    with pytest.raises(TableInputError, match=r"catalog 'lake' uses the KMS service 127.0.0.1:9600 .* kms=load_kms"):
        registered_kms({"pyiceberg-crypto.kms-service": "127.0.0.1:9600"}, "lake")

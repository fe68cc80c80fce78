"""The key service as a library object (``serve.supervisor.KmsService``), without the CLI: start,
describe, reload, revoke, stop; and a start that fails leaves nothing listening."""

from __future__ import annotations

import json
import queue
import socket
import threading

import pytest

from pyiceberg_crypto.errors import InvalidArgumentError, PyicebergCryptoError
from pyiceberg_crypto.kms.keystore import Keystore
from pyiceberg_crypto.errors import SetupError
from pyiceberg_crypto.serve.supervisor import KmsService, ServiceOptions
from tests.testkit import eventually
from pyiceberg_crypto.testing.ports import reserve_port


@pytest.fixture
def options(tmp_path):
    keystore = Keystore(tmp_path / "keys.json")
    keystore.create()
    keystore.add_key("orders-key")
    return ServiceOptions(kms="keystore", kms_properties={"keystore.path": str(tmp_path / "keys.json")},
                          token_file=str(tmp_path / "kms.token"), listen=f"127.0.0.1:{reserve_port()}",
                          status_file=str(tmp_path / "status.json"))


def _listening(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
        return True
    except OSError:
        return False


def test_the_service_starts_serves_requests_and_stops_clean(options, tmp_path):
    service = KmsService(options).start()
    lines = service.describe()
    assert lines[0] == f"KMS service 'keystore' on {options.listen}"
    assert f"  token file: {options.token_file} (rewritten at each start)" in lines
    assert any(line.strip().startswith("encryption.kms-impl=") for line in lines)
    token = (tmp_path / "kms.token").read_text()
    assert _listening(options.listen)

    requests: queue.SimpleQueue[str] = queue.SimpleQueue()
    done: list[int] = []
    serving = threading.Thread(target=lambda: done.append(service.serve(requests, interval=0.05)))
    serving.start()
    requests.put("revoke")  # a fresh token in the file
    eventually(lambda: (tmp_path / "kms.token").read_text() != token, message="a fresh token in the token file")
    requests.put("reload")  # the keystore read again; still serving
    requests.put("counts")
    assert eventually(lambda: json.loads((tmp_path / "status.json").read_text())["running"])
    assert _listening(options.listen)
    requests.put("stop")
    serving.join(timeout=30)
    assert not serving.is_alive() and done == [0]
    assert not _listening(options.listen)
    assert not (tmp_path / "kms.token").exists(), "a clean stop removes the token file it wrote"
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["listen"] == options.listen and status["running"] is False, "the last status says it stopped"
    assert token not in (tmp_path / "status.json").read_text()


def broken_factory(properties=None):
    """A user's KMS factory with a bug (``load_kms("tests.serve.test_supervisor:broken_factory")``)."""
    raise RuntimeError("cannot reach hsm-7")


def test_a_factory_that_fails_is_one_error_and_nothing_is_left_listening(options, tmp_path):
    missing = ServiceOptions(**{**options.__dict__, "kms_properties": {"keystore.path": str(tmp_path / "none.json")}})
    with pytest.raises(PyicebergCryptoError, match="none.json does not exist"):
        KmsService(missing).start()
    assert not _listening(options.listen)
    broken = ServiceOptions(**{**options.__dict__, "kms": "tests.serve.test_supervisor:broken_factory"})
    with pytest.raises(SetupError, match="the KMS factory 'tests.serve.test_supervisor:broken_factory' failed: "
                                              "RuntimeError: cannot reach hsm-7"):
        KmsService(broken).start()
    assert not _listening(options.listen)


def test_metrics_beyond_loopback_are_refused_before_anything_starts(options):
    remote = ServiceOptions(**{**options.__dict__, "metrics": "10.1.2.3:9601"})
    with pytest.raises(InvalidArgumentError, match="--metrics-allow-remote"):
        KmsService(remote).start()
    assert not _listening(options.listen)

"""Fixtures of the KMS service tests: a keystore and a ``kms serve`` process per test."""

from __future__ import annotations

import pytest

from tests.serve.service_process import ServiceProcess, make_keystore


@pytest.fixture
def keystore(tmp_path):
    return make_keystore(tmp_path / "keys.json", "k1")


@pytest.fixture
def kms_service(tmp_path, keystore):
    service = ServiceProcess.start(tmp_path / "service", keystore)
    try:
        yield service
    finally:
        service.stop()

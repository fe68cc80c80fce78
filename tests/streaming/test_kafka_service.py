"""``python -m pyiceberg_crypto.testing kafka``: the broker for trying a stream by hand starts from
the pinned jars, says where it listens, binds loopback only, and stops cleanly on SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest

from pyiceberg_crypto.testing._process import port_open
from tests.testing.test_services import is_loopback, listening_addresses
from tests.testkit import ROOT, eventually

pytestmark = [pytest.mark.slow, pytest.mark.jvm]  # the Kafka broker (a JVM), started by hand


def test_kafka_service_by_hand_listens_on_loopback_and_stops_on_sigterm(tmp_path):
    directory = tmp_path / "kafka"
    process = subprocess.Popen([sys.executable, "-m", "pyiceberg_crypto.testing", "kafka", "--directory",
                                str(directory)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)), start_new_session=True)
    try:
        line = process.stdout.readline()
        found = re.match(r"Kafka broker ready at 127\.0\.0\.1:(\d+) \(kafka\.bootstrap\.servers\) \(log: (.+)\)$",
                         line.strip())
        assert found, line + process.stdout.read() if process.poll() is not None else line
        port = int(found.group(1))
        assert port_open("127.0.0.1", port)
        properties = dict(line.split("=", 1) for line in (directory / "server.properties").read_text().splitlines())
        listeners = re.fullmatch(r"PLAINTEXT://127\.0\.0\.1:(\d+),CONTROLLER://127\.0\.0\.1:(\d+)", properties["listeners"])
        assert listeners and int(listeners.group(1)) == port
        for listener_port in map(int, listeners.groups()):  # the client and the controller listener
            addresses = listening_addresses(listener_port)
            assert addresses and all(is_loopback(a) for a in addresses), (listener_port, addresses)
        assert (directory / "data" / "meta.properties").is_file(), "the storage was formatted"
        process.send_signal(signal.SIGTERM)
        assert process.wait(120) == 0
        eventually(lambda: not port_open("127.0.0.1", port), 30, interval=0.2,
                   message="the broker JVM to end with the launcher (its port closed)")
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

"""What each public import pulls in, measured in a fresh interpreter.

``import pyiceberg_crypto.verify`` or ``.read`` must not start loading Py4J, PySpark, the lake
audit or the test kit: a verifier in a small container, or a reader in a notebook without Spark,
pays only for what it uses. The table below is the contract; a change to it is a decision, made
here, with a reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.testkit import ROOT

#: The heavy or optional modules watched (top-level names, and the package's own apps and bridge).
WATCHED = ("py4j", "pyspark", "pyarrow", "fastavro", "cryptography", "boto3", "botocore", "hvac",
           "pytest", "pyiceberg_crypto.audit", "pyiceberg_crypto.testing", "pyiceberg_crypto.bridge")

#: public package -> the watched modules importing it loads (nothing else of WATCHED).
EXPECTED = {
    "pyiceberg_crypto": set(),
    "pyiceberg_crypto.formats": set(),
    "pyiceberg_crypto.io": set(),
    "pyiceberg_crypto.config": set(),                      # pyspark only inside the functions that need a session
    "pyiceberg_crypto.kms": {"cryptography"},             # the cloud KMS clients load their SDKs when used
    "pyiceberg_crypto.table": {"cryptography"},
    "pyiceberg_crypto.verify": {"cryptography", "fastavro"},  # each_commit (pyspark) only when used
    "pyiceberg_crypto.read": {"cryptography", "fastavro", "pyarrow"},
    "pyiceberg_crypto.keys": {"cryptography"},
    "pyiceberg_crypto.adopt": {"cryptography"},          # pyspark only inside the functions that need a session
    "pyiceberg_crypto.audit": {"cryptography", "fastavro", "pyiceberg_crypto.audit"},
    "pyiceberg_crypto.bridge": {"cryptography", "py4j", "pyiceberg_crypto.bridge"},
    "pyiceberg_crypto.catalog": set(),                      # a map: each module is imported on its own
    "pyiceberg_crypto.listener": set(),                     # cryptography only when a certificate is made or read
    "pyiceberg_crypto.serve": set(),
    "pyiceberg_crypto.spark": set(),                        # a map: py4j only when a collection is read
}

PROBE = """
import importlib, json, sys
importlib.import_module(sys.argv[1])
watched = json.loads(sys.argv[2])
print(json.dumps(sorted(m for m in watched if m in sys.modules)))
"""


def loaded_by(package: str) -> set[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", PROBE, package, json.dumps(WATCHED)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout))


@pytest.mark.parametrize("package", sorted(EXPECTED))
def test_what_a_public_import_loads(package):
    assert loaded_by(package) == EXPECTED[package]


def test_verify_and_read_load_neither_py4j_nor_pyspark_nor_the_audit_nor_the_test_kit():
    light = {"py4j", "pyspark", "pyiceberg_crypto.audit", "pyiceberg_crypto.testing", "pyiceberg_crypto.bridge"}
    assert not (EXPECTED["pyiceberg_crypto.verify"] | EXPECTED["pyiceberg_crypto.read"]) & light


def test_the_table_covers_every_public_package():
    public = {f"pyiceberg_crypto.{p.name}" for p in (ROOT / "pyiceberg_crypto").iterdir()
              if (p / "__init__.py").is_file() and not p.name.startswith("_")
              and p.name not in ("cli", "demo", "testing")}  # the command, the demo jobs, the test kit
    public |= {"pyiceberg_crypto", "pyiceberg_crypto.config"}
    assert public == set(EXPECTED)

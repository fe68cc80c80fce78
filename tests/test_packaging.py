"""Only runtime code ships at run time: the production jar has no test kit and Java 11 bytecode;
importing any public module of the package loads no test library."""

from __future__ import annotations

import pkgutil
import struct
import subprocess
import sys
import zipfile

import pyiceberg_crypto
from pyiceberg_crypto import jars

EXTRA_ONLY_LIBRARIES = ("pytest", "_pytest", "moto", "hypothesis", "testcontainers", "boto3")  # test libraries, and boto3 (the [aws] extra) imported lazily
#: The one module that is a pytest plugin by nature (behind the [services] / [test] extras).
PYTEST_ONLY = {"pyiceberg_crypto.services.pytest_plugin"}


def test_production_jar_holds_no_test_kit_and_targets_java_11():
    with zipfile.ZipFile(jars.bridge_jar()) as archive:
        names = archive.namelist()
        classes = [n for n in names if n.endswith(".class")]
        assert classes and not [n for n in names if "testkit" in n]
        assert {n.split("/")[2] for n in classes} == {"bridge", "services"}
        for name in classes:
            magic, _minor, major = struct.unpack(">IHH", archive.read(name)[:8])
            assert (magic, major) == (0xCAFEBABE, 55), f"{name}: class file major {major}, want 55 (Java 11)"


def test_runtime_modules_import_no_test_library_and_no_extra():
    modules = sorted(
        info.name for info in pkgutil.walk_packages(pyiceberg_crypto.__path__, "pyiceberg_crypto.")
        if info.name not in PYTEST_ONLY and not info.name.endswith("__main__")
    )
    assert "pyiceberg_crypto.verify.spark_job" in modules and "pyiceberg_crypto.services.s3" in modules
    probe = (
        "import importlib, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        f"print(sorted(m for m in {EXTRA_ONLY_LIBRARIES!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"

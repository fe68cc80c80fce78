"""Build hook of pyiceberg-crypto-testing (metadata in pyproject.toml): the wheel holds the checkout's
``pyiceberg_crypto/testing/`` (one copy of the code, no second tree to keep in step) and the test
kit's jar, ``pyiceberg-crypto-testing.jar`` (from ``make jars``, else built here with Maven).

    python -m build --wheel testkit      # dist/pyiceberg_crypto_testing-0.1.0-py3-none-any.whl

The package is staged under ``testkit/build/stage`` (inside this project, as setuptools wants) and
built from there; ``pyiceberg_crypto/__init__.py`` is the main distribution's and is not in this wheel.
"""

import shutil
import sys
from pathlib import Path

from setuptools import find_namespace_packages, setup

HERE = Path(__file__).resolve().parent
CHECKOUT = HERE.parent
SOURCE = CHECKOUT / "pyiceberg_crypto" / "testing"
STAGE = HERE / "build" / "stage"
sys.path.insert(0, str(CHECKOUT / "jars"))

import build_bridge  # noqa: E402  (jars/build_bridge.py, standard library only)


def stage() -> None:
    """Copy the test kit and its jar from the checkout into :data:`STAGE`."""
    if not (SOURCE / "__init__.py").is_file():
        raise SystemExit(f"error: {SOURCE} is missing: build pyiceberg-crypto-testing from a checkout")
    target = STAGE / "pyiceberg_crypto" / "testing"
    if STAGE.exists():
        shutil.rmtree(STAGE)
    shutil.copytree(SOURCE, target, ignore=shutil.ignore_patterns("__pycache__", "*.py[cod]", "*.tmp"))
    jar = target / "_jars" / build_bridge.TESTING_JAR_NAME
    if not jar.is_file():
        try:
            build_bridge.build(quiet=True)
        except build_bridge.BuildError as exc:
            raise SystemExit(f"error: {exc}") from None
        jar.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(build_bridge.TARGET / build_bridge.TESTING_BUILT_NAME, jar)


stage()
setup(
    package_dir={"": "build/stage"},
    packages=find_namespace_packages(where=str(STAGE), include=["pyiceberg_crypto.testing", "pyiceberg_crypto.testing.*"]),
    package_data={"pyiceberg_crypto.testing": ["_jars/*.jar", "trino_harness/*.java"]},
)

"""Build the bridge jar with Maven: the one build step behind the wheel, the sdist and ``make jars``.

Used by ``setup.py`` (every ``python -m build`` / ``pip install .`` / ``pip install git+URL`` runs it)
and by the Makefile. Standard library only: it runs inside pip's isolated build environment.

    python jars/build_bridge.py                     # production jar -> pyiceberg_crypto/_jars/,
                                                    # test kit servers -> pyiceberg_crypto/testing/_jars/
    python jars/build_bridge.py --testkit           # also target/pyiceberg-crypto-bridge-tests.jar
    python jars/build_bridge.py --into DIR          # copy the production jar into DIR instead

The production jar holds ``io.pyicebergcrypto.bridge``, ``io.pyicebergcrypto.rest`` and Iceberg's
``org.apache.iceberg.rest`` additions only. The loopback servers of the Python test kit
(``io.pyicebergcrypto.testing``) are packaged apart, as ``pyiceberg-crypto-testing.jar`` in
``pyiceberg_crypto/testing/_jars/``; the Java test kit (``src/test/java``: vector makers, benches,
a Java KMS) is compiled and packaged only with ``--testkit``.

Beside the jar, ``install`` lays out the same bytes as a one-artifact Maven repository
(``_jars/maven/io/pyicebergcrypto/pyiceberg-crypto-bridge/<version>-<sha256 prefix>/``), so that a
session can take the bridge from ``spark.jars.packages`` like the Iceberg runtime: one channel for
every jar, which Spark ships to executors (``pyiceberg_crypto/jars.py`` says why). The content
digest in the version keeps Ivy's cache from serving an older build under the same version.

``PYICEBERG_CRYPTO_BRIDGE_JAR=/path/to/pyiceberg-crypto-bridge.jar`` skips Maven and uses that
jar (for packagers who build the Java side elsewhere); it must hold no test-kit class.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

JARS_DIR = Path(__file__).resolve().parent
POM = JARS_DIR / "pom.xml"
TARGET = JARS_DIR / "target"
BRIDGE_JAR_NAME = "pyiceberg-crypto-bridge.jar"
TESTKIT_JAR_NAME = "pyiceberg-crypto-bridge-tests.jar"
#: The loopback servers (Maven's ``testing`` classifier), shipped by the Python test kit.
TESTING_BUILT_NAME = "pyiceberg-crypto-bridge-testing.jar"
TESTING_JAR_NAME = "pyiceberg-crypto-testing.jar"
DEFAULT_INTO = JARS_DIR.parent / "pyiceberg_crypto" / "_jars"
#: The bridge as a Maven artifact (the repository layout ``install`` writes under ``_jars/maven``).
MAVEN_DIR_NAME = "maven"
BRIDGE_GROUP = "io.pyicebergcrypto"
BRIDGE_ARTIFACT = "pyiceberg-crypto-bridge"
#: javac must accept ``--release 11`` (pom.xml); JDK 11 or newer does.
MIN_JDK = 11
TESTKIT_PACKAGE = "io/pyicebergcrypto/testkit/"
#: What the production jar may hold (class files and Maven's own metadata aside).
PRODUCTION_PACKAGES = ("io/pyicebergcrypto/bridge/", "io/pyicebergcrypto/rest/", "org/apache/iceberg/rest/")
PREBUILT_ENV = "PYICEBERG_CRYPTO_BRIDGE_JAR"


class BuildError(RuntimeError):
    """The Java side cannot be built here; the message says what is missing and what to do."""


def check_toolchain() -> None:
    """Raise :class:`BuildError` unless ``mvn`` and a JDK >= 11 ``javac`` are on the PATH."""
    missing = [tool for tool in ("mvn", "javac") if shutil.which(tool) is None]
    if missing:
        raise BuildError(
            f"building pyiceberg-crypto needs {' and '.join(missing)} on the PATH: the wheel carries a small "
            f"Java jar (the KMS bridge) that Maven compiles during the build. Install a JDK >= {MIN_JDK} and "
            f"Apache Maven >= 3.6, or install a pre-built wheel, or set {PREBUILT_ENV} to a built "
            f"{BRIDGE_JAR_NAME}."
        )
    result = subprocess.run(["javac", "-version"], capture_output=True, text=True)
    version = javac_major_version(result.stdout + result.stderr)
    if version is not None and version < MIN_JDK:
        raise BuildError(
            f"javac is JDK {version}: building the bridge jar needs JDK >= {MIN_JDK} (it compiles with "
            f"--release {MIN_JDK}); point JAVA_HOME and the PATH at a newer JDK"
        )


def javac_major_version(text: str) -> int | None:
    """``"javac 17.0.15"`` -> 17, ``"javac 1.8.0_402"`` -> 8; None when unrecognised."""
    match = re.search(r"javac\s+(\d+)(?:\.(\d+))?", text)
    if not match:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def build(*, testkit: bool = False, quiet: bool = True) -> Path:
    """Run Maven and return the production jar in ``jars/target``; raise :class:`BuildError`."""
    check_toolchain()
    command = ["mvn", "-B", "-f", str(POM), "package"]
    if quiet:
        command.insert(2, "-q")
    if not testkit:
        command.append("-Dmaven.test.skip=true")
    with _build_lock():
        result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-25:])
        raise BuildError(f"Maven failed to build the bridge jar ({' '.join(command)}):\n{tail}")
    jar = TARGET / BRIDGE_JAR_NAME
    check_production_jar(jar)
    return jar


def check_production_jar(jar: Path) -> None:
    """Refuse a production jar that holds anything but the bridge and the encrypting REST catalog:
    the Java test kit reads master keys from properties, the loopback servers have no authentication."""
    with zipfile.ZipFile(jar) as archive:
        leaked = [name for name in archive.namelist()
                  if name.endswith(".class") and not name.startswith(PRODUCTION_PACKAGES)]
    if leaked:
        raise BuildError(f"{jar} holds classes that must not ship in the production jar ({leaked[0]}, ...)")


def install(into: Path = DEFAULT_INTO, *, testkit: bool = False, quiet: bool = True) -> Path:
    """Build (or take ``$PYICEBERG_CRYPTO_BRIDGE_JAR``) and copy the jar into ``into`` atomically."""
    prebuilt = os.environ.get(PREBUILT_ENV)
    if prebuilt:
        source = Path(prebuilt)
        if not source.is_file():
            raise BuildError(f"{PREBUILT_ENV}={prebuilt} is not a file")
        check_production_jar(source)
    else:
        source = build(testkit=testkit, quiet=quiet)
    _copy_atomically(source, into / BRIDGE_JAR_NAME)
    testing = TARGET / TESTING_BUILT_NAME
    if not prebuilt and testing.is_file():
        _copy_atomically(testing, testing_into(into) / TESTING_JAR_NAME)
    write_maven_repository(into / MAVEN_DIR_NAME, (into / BRIDGE_JAR_NAME).read_bytes(), pom_version())
    return into / BRIDGE_JAR_NAME


def testing_into(into: Path) -> Path:
    """Where the test kit's jar goes for a production jar installed into ``into`` (``.../_jars``)."""
    return into.parent / "testing" / "_jars"


def _copy_atomically(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=target.parent, suffix=".tmp", delete=False) as tmp:
        try:
            tmp.write(source.read_bytes())
            tmp.flush()
            os.fsync(tmp.fileno())
        except BaseException:
            os.unlink(tmp.name)
            raise
    os.chmod(tmp.name, 0o644)
    os.replace(tmp.name, target)


def pom_version() -> str:
    """The bridge's version in ``pom.xml`` (``0.1.0``)."""
    match = re.search(rf"<artifactId>{BRIDGE_ARTIFACT}</artifactId>\s*<version>([^<]+)</version>", POM.read_text())
    if not match:
        raise BuildError(f"{POM} has no <version> after <artifactId>{BRIDGE_ARTIFACT}</artifactId>")
    return match.group(1).strip()


def write_maven_repository(root: Path, jar: bytes, version: str) -> Path:
    """Replace ``root`` with a Maven repository holding only the bridge ``jar`` and a minimal pom.

    The artifact's version is ``<version>-<first 16 hex digits of the jar's SHA-256>``. Returns the
    version directory. Written beside ``root`` and renamed into place, so a reader never sees half.
    """
    full_version = f"{version}-{hashlib.sha256(jar).hexdigest()[:16]}"
    staging = Path(tempfile.mkdtemp(dir=root.parent, prefix=".maven-"))
    directory = staging.joinpath(*BRIDGE_GROUP.split("."), BRIDGE_ARTIFACT, full_version)
    directory.mkdir(parents=True)
    stem = f"{BRIDGE_ARTIFACT}-{full_version}"
    (directory / f"{stem}.jar").write_bytes(jar)
    (directory / f"{stem}.pom").write_text(
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        f"<groupId>{BRIDGE_GROUP}</groupId><artifactId>{BRIDGE_ARTIFACT}</artifactId>"
        f"<version>{full_version}</version><packaging>jar</packaging></project>\n"
    )
    for path in [staging, *staging.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    if root.exists():
        shutil.rmtree(root)
    os.replace(staging, root)
    return root.joinpath(*BRIDGE_GROUP.split("."), BRIDGE_ARTIFACT, full_version)


class _build_lock:
    """Serialise Maven runs of one checkout (parallel ``make`` targets, parallel pip builds)."""

    def __enter__(self):
        TARGET.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(JARS_DIR / ".build.lock", "w")
        try:
            import fcntl

            fcntl.flock(self._file, fcntl.LOCK_EX)
        except ImportError:  # Windows: no concurrent builds expected
            pass
        return self

    def __exit__(self, *exc):
        self._file.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the pyiceberg-crypto bridge jar with Maven.")
    parser.add_argument("--testkit", action="store_true", help=f"also build target/{TESTKIT_JAR_NAME}")
    parser.add_argument("--into", type=Path, default=DEFAULT_INTO, help="where the production jar goes")
    parser.add_argument("--verbose", action="store_true", help="show Maven's output")
    args = parser.parse_args(argv)
    try:
        jar = install(args.into, testkit=args.testkit, quiet=not args.verbose)
    except BuildError as exc:
        print(f"build_bridge: {exc}", file=sys.stderr)
        return 1
    print(f"built {jar}" + (f" and {TARGET / TESTKIT_JAR_NAME}" if args.testkit else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Trino 483 in one JVM, started by the tests themselves: its Iceberg connector reads the tables
PySpark wrote (``tests/trino``).

    with TrinoHarness(hive_catalog_properties(metastore.uri), env=aws_environment(face)) as trino:
        trino.query("SELECT * FROM db.orders ORDER BY id")["rows"]

The harness is ``trino_harness/TrinoHarness.java``, run as a single-file source program by Java
25 (Trino 483 needs it) with the jars ``make trino-jars`` resolves from Maven Central into
``.cache/trino`` (``tests/trino/pom.xml``; ~475 jars, ~510 MB). Java 25 is found at
``$PYICEBERG_CRYPTO_JAVA25`` or under ``/usr/lib/jvm`` (where this project's machines keep the
Temurin 25 JDK beside Java 17); :func:`missing` says what is not there.

Trino reaches a KMS only through the AWS SDK's own settings (one endpoint and one credential per
JVM): ``AWS_ENDPOINT_URL_KMS``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``,
and the CA it trusts through ``-Djavax.net.ssl.trustStore``.

Each start costs CPU the tests' two cores share, so the JVM compiles with C1 only and maps Trino's
classes from a class-data sharing archive (JEP 350) that the first start writes at its exit
(:func:`archive_path`; measured on an idle 2-core machine, start and one query: 26 CPU-s with the
defaults, 8.7 with both). A JVM checks the archive against its own build and class path and
ignores one that does not match; a start whose JVM did not exit cleanly leaves none.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import subprocess
import threading

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pyiceberg_crypto.errors import InvalidArgumentError
from pyiceberg_crypto.testing.errors import TestKitError

HARNESS = Path(__file__).with_name("trino_harness") / "TrinoHarness.java"
PROJECT_ROOT = Path(__file__).resolve().parents[2]
TRINO_VERSION = "483"
JAVA_FEATURE = 25
#: JVM options Trino 483 ran with in one JVM on these machines (Java 25): C1 only (a test's queries
#: are small; C2 took half of a start's CPU).
JVM_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx2g", "--add-modules=jdk.incubator.vector",
               "--sun-misc-unsafe-memory-access=allow", "--enable-native-access=ALL-UNNAMED",
               "--add-opens=java.base/java.nio=ALL-UNNAMED", "-Dairlift.quiet=true", "-Dfile.encoding=UTF-8")
STARTUP_TIMEOUT_SECONDS = 300.0
#: Where the class-data sharing archive is kept (default: ``.jvm`` in :func:`trino_jars_dir`).
ARCHIVE_DIR_ENV = "PYICEBERG_CRYPTO_TRINO_ARCHIVE_DIR"
#: Keeps the JVM quiet about its archive (used, missing, written): the harness reads its stdout.
QUIET_ARCHIVE_OPTIONS = "-Xlog:cds=off,cds+dynamic=off"


class TrinoHarnessError(TestKitError, RuntimeError):
    """Trino did not start or stopped answering."""


def trino_jars_dir() -> Path:
    """Where ``make trino-jars`` put Trino's jars (``$PYICEBERG_CRYPTO_TRINO_JARS`` overrides)."""
    return Path(os.environ.get("PYICEBERG_CRYPTO_TRINO_JARS") or PROJECT_ROOT / ".cache" / "trino")


def archive_path() -> Path:
    """The class-data sharing archive for this Java and these jars: its name carries a digest of
    the ``java``'s path and release and of every jar's name, size and time, so a changed JDK or a
    re-resolved jar gets a new archive rather than a rejected one."""
    java = java25()
    digest = hashlib.sha256(str(java).encode())
    java_home = Path(str(java)).resolve().parents[1]
    try:
        digest.update((java_home / "release").read_bytes())
    except OSError:
        pass
    jars = trino_jars_dir()
    for jar in sorted(jars.glob("*.jar")):
        stat = jar.stat()
        digest.update(f"{jar.name}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    directory = Path(os.environ.get(ARCHIVE_DIR_ENV) or jars / ".jvm")
    return directory / f"trino-{TRINO_VERSION}-{digest.hexdigest()[:16]}.jsa"


def _archive_options() -> tuple[tuple[str, ...], Path, Path | None]:
    """The JVM options that map the archive, or that write it at exit (to a file of this start's
    own, renamed into place by :meth:`TrinoHarness.close`), the archive's path and that file; no
    options where the directory cannot be made."""
    archive = archive_path()
    if archive.exists():
        return (f"-XX:SharedArchiveFile={archive}", QUIET_ARCHIVE_OPTIONS), archive, None
    try:
        archive.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return (), archive, None
    written = archive.with_name(f"{archive.name}.{os.getpid()}.{threading.get_ident()}.partial")
    return (f"-XX:ArchiveClassesAtExit={written}", QUIET_ARCHIVE_OPTIONS), archive, written


def _java_feature(java_home: Path) -> int:
    try:
        for line in (java_home / "release").read_text().splitlines():
            if line.startswith("JAVA_VERSION="):
                return int(line.split("=", 1)[1].strip('"').split(".")[0])
    except (OSError, ValueError):
        pass
    return 0


def java25() -> Path | None:
    """The ``java`` of a JDK 25 or newer: ``$PYICEBERG_CRYPTO_JAVA25`` (a JDK home or its java),
    else the newest under ``/usr/lib/jvm``; None if there is none."""
    configured = os.environ.get("PYICEBERG_CRYPTO_JAVA25")
    if configured:
        path = Path(configured)
        java = path if path.name == "java" else path / "bin" / "java"
        return java if java.exists() else None
    homes = [p for p in Path("/usr/lib/jvm").glob("*") if p.is_dir() and not p.is_symlink()] \
        if Path("/usr/lib/jvm").is_dir() else []
    candidates = sorted(((_java_feature(h), h) for h in homes), reverse=True)
    for feature, home in candidates:
        if feature >= JAVA_FEATURE and (home / "bin" / "java").exists():
            return home / "bin" / "java"
    return None


def missing() -> str | None:
    """Why the harness cannot run here (None when it can)."""
    if java25() is None:
        return f"no Java {JAVA_FEATURE}+ (Trino {TRINO_VERSION} needs it): set PYICEBERG_CRYPTO_JAVA25 or install a JDK 25"
    jars = trino_jars_dir()
    if not (jars / f"trino-iceberg-{TRINO_VERSION}.jar").exists():
        return f"Trino's jars are not in {jars}: run `make trino-jars`"
    return None


def hive_catalog_properties(metastore_uri: str, *, kms_type: str | None = "AWS",
                            extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Trino Iceberg catalog properties for tables PySpark wrote through a Hive metastore with
    ``file:`` locations (``kms_type=None``: no encryption settings)."""
    properties = {"iceberg.catalog.type": "hive_metastore", "hive.metastore.uri": metastore_uri,
                  "fs.local.enabled": "true", "local.location": "/"}
    if kms_type:
        properties["iceberg.encryption.kms-type"] = kms_type
    properties.update(extra or {})
    return properties


def aws_environment(endpoint: str, access_key_id: str, secret_access_key: str, region: str) -> dict[str, str]:
    """The AWS SDK settings Trino's KMS client takes (its only way to be pointed at a KMS)."""
    return {"AWS_ENDPOINT_URL_KMS": endpoint, "AWS_ACCESS_KEY_ID": access_key_id,
            "AWS_SECRET_ACCESS_KEY": secret_access_key, "AWS_REGION": region}


def truststore_options(truststore_file: str | os.PathLike) -> tuple[str, ...]:
    """JVM options that make Java (and the AWS SDK in it) trust the CA in a PKCS#12 truststore."""
    return (f"-Djavax.net.ssl.trustStore={truststore_file}", "-Djavax.net.ssl.trustStoreType=PKCS12")


class TrinoHarness:
    """One Trino JVM with one Iceberg catalog named ``iceberg``; :meth:`query` runs SQL in it."""

    def __init__(self, catalog_properties: Mapping[str, str], *, workdir: str | os.PathLike,
                 env: Mapping[str, str] | None = None, jvm_options: Sequence[str] = ()):
        reason = missing()
        if reason:
            raise TrinoHarnessError(reason)
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.properties_file = self.workdir / "iceberg.properties"
        self.properties_file.write_text("".join(f"{k}={_escape(v)}\n" for k, v in catalog_properties.items()))
        self.log_file = self.workdir / "trino.log"
        environment = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        environment.update(env or {})
        scratch = self.workdir / "tmp"  # Trino's own temporary directories (TrinoTest*): not left in /tmp
        scratch.mkdir(exist_ok=True)
        archive_options, self.archive, self._archive_written = _archive_options()
        command = [str(java25()), *JVM_OPTIONS, *archive_options, f"-Djava.io.tmpdir={scratch}", *jvm_options, "-cp",
                   f"{trino_jars_dir()}/*", str(HARNESS), str(self.properties_file)]
        self._log = self.log_file.open("wb")
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                                        env=environment, cwd=self.workdir, text=True, bufsize=1)
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        ready = self._next(STARTUP_TIMEOUT_SECONDS)
        if not ready.get("ready"):
            self.close()
            raise TrinoHarnessError(f"Trino did not start: {ready} (log: {self.log_file}: {self.log_tail()})")
        self.startup_ms = ready["startup_ms"]

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("{"):
                self._lines.put(line)
        self._lines.put(None)

    def _next(self, timeout: float) -> dict[str, Any]:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise TrinoHarnessError(f"Trino gave no answer within {timeout:g} s (log: {self.log_file})") from None
        if line is None:
            raise TrinoHarnessError(f"Trino exited ({self.process.poll()}): {self.log_tail()}")
        return json.loads(line)

    def query(self, sql: str, timeout: float = 300.0) -> dict[str, Any]:
        """``{"columns": [...], "rows": [[...]], "ms": N}`` or ``{"error": "..."}`` (one line of SQL)."""
        if "\n" in sql:
            raise InvalidArgumentError("one line of SQL per query")
        assert self.process.stdin is not None
        self.process.stdin.write(sql + "\n")
        self.process.stdin.flush()
        return self._next(timeout)

    def rows(self, sql: str) -> list[list[Any]]:
        """The rows of ``sql``; :class:`TrinoHarnessError` with Trino's error if it failed."""
        answer = self.query(sql)
        if "error" in answer:
            raise TrinoHarnessError(f"{sql}: {answer['error']}")
        return answer["rows"]

    def log_tail(self, limit: int = 3000) -> str:
        try:
            return self.log_file.read_text(errors="replace")[-limit:]
        except OSError:
            return ""

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                assert self.process.stdin is not None
                self.process.stdin.close()
                self.process.wait(timeout=30 if self._archive_written is None else 120)  # writing it: ~10 s
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait(timeout=30)
        self._log.close()
        self._keep_archive()

    def _keep_archive(self) -> None:
        """Put the archive this JVM wrote at its exit in place, if it exited cleanly (one a killed
        JVM left half written is removed, never used)."""
        written, self._archive_written = self._archive_written, None
        if written is None:
            return
        try:
            if self.process.returncode == 0 and written.exists() and not self.archive.exists():
                os.replace(written, self.archive)
        finally:
            written.unlink(missing_ok=True)

    def __enter__(self) -> TrinoHarness:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _escape(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace(":", "\\:").replace("=", "\\=")



"""The test kit's servers' class-data sharing archives (pyiceberg_crypto/testing/_jvm.py): written by
a JVM that found none as the service's stop ends it (SIGTERM), put in place whole, mapped by the
next start; nothing left by a JVM killed with SIGKILL; keyed so that another class path gets its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyiceberg_crypto.testing import RestCatalogServer
from pyiceberg_crypto.testing._class_archive import JVM_CACHE_ENV, class_archive_options
from pyiceberg_crypto.testing._jvm import java_command, java_executable
from pyiceberg_crypto.testing.rest import SERVER_CLASS


def archive_option(args: list[str], name: str) -> str | None:
    return next((a.split("=", 1)[1] for a in args if a.startswith(f"-XX:{name}=")), None)


def test_a_server_writes_its_archive_at_stop_and_the_next_start_maps_its_classes(tmp_path, monkeypatch):
    cache = tmp_path / "jvm-cache"
    monkeypatch.setenv(JVM_CACHE_ENV, str(cache))

    killed = RestCatalogServer(tmp_path / "killed").start()
    assert archive_option(killed._process.args, "ArchiveClassesAtExit")  # none there yet: this JVM writes one
    killed.kill()  # SIGKILL: the JVM writes nothing, and nothing it began is left or put in place
    assert sorted(p.name for p in cache.iterdir()) == []

    first = RestCatalogServer(tmp_path / "first").start()
    partial = Path(archive_option(first._process.args, "ArchiveClassesAtExit"))
    first.stop()  # SIGTERM: the JVM's shutdown writes the archive; the stop puts it in place
    archives = sorted(cache.iterdir())
    assert [p.suffix for p in archives] == [".jsa"] and not partial.exists(), archives
    assert archives[0].name.startswith("LoopbackRestCatalog-")

    loaded = tmp_path / "class-load.txt"
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", f"-Xlog:class+load=info:file={loaded}")
    second = RestCatalogServer(tmp_path / "second").start()
    try:
        assert archive_option(second._process.args, "SharedArchiveFile") == str(archives[0])
        assert archive_option(second._process.args, "ArchiveClassesAtExit") is None
    finally:
        second.stop()
    lines = loaded.read_text().splitlines()
    assert any(f"{SERVER_CLASS} source: shared objects file (top)" in line for line in lines), lines[-20:]
    from_archive = sum("source: shared objects file (top)" in line for line in lines)
    assert from_archive > 1000, from_archive  # the server's libraries too, not the JDK's own archive only
    assert sorted(cache.iterdir()) == archives  # used, not written again
    assert "-Xlog:cds=off,cds+dynamic=off" in second._process.args  # quiet: tests read servers' output


def test_the_archive_is_keyed_by_the_class_path_and_needs_the_directories_last(tmp_path, monkeypatch):
    monkeypatch.setenv(JVM_CACHE_ENV, str(tmp_path / "cache"))
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "a.jar").write_bytes(b"PK\x05\x06" + bytes(18))
    conf_a, conf_b = tmp_path / "conf-a", tmp_path / "conf-b"
    for conf in (conf_a, conf_b):
        conf.mkdir()
        (conf / "site.xml").write_text("<configuration/>")

    def dump_target(*classpath) -> str | None:
        options = class_archive_options("x.Main", [str(p) for p in classpath], ["-Xmx64m"], java_executable())
        return archive_option(options, "ArchiveClassesAtExit")

    # Java 17 refuses to write an archive for a class path with a non-empty directory before a jar
    # ("Cannot have non-empty directory in paths"): no archive options, rather than a JVM that fails.
    assert dump_target(conf_a, f"{jars}/*") is None
    # A trailing directory (another per cluster) is no part of the key: the JVM does not check it.
    with_a, with_b = dump_target(f"{jars}/*", conf_a), dump_target(f"{jars}/*", conf_b)
    assert with_a and with_b and with_a.split(".jsa.")[0] == with_b.split(".jsa.")[0]
    # Another jar, or the same jar changed: another archive.
    (jars / "b.jar").write_bytes(b"PK\x05\x06" + bytes(18))
    with_two = dump_target(f"{jars}/*", conf_a)
    assert with_two.split(".jsa.")[0] != with_a.split(".jsa.")[0]


def test_archives_off_leave_the_command_as_it_was(monkeypatch, tmp_path):
    monkeypatch.setenv(JVM_CACHE_ENV, "off")
    command = java_command("x.Main", classpath=[tmp_path / "a.jar"], heap="64m")
    assert not any(a.startswith(("-XX:SharedArchiveFile", "-XX:ArchiveClassesAtExit", "-Xlog:cds")) for a in command)

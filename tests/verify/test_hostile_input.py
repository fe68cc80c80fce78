"""The verifier under attack (issue 15): hostile files, hostile paths and a hostile KMS end in a
finding or an exit-2 error within seconds, never a hang, a huge read, a traceback or raw bytes.

Every case uses real files (``os.mkfifo``, a sparse file, ``/dev/zero``, a directory, a Unix
socket). Whatever could hang or read without end on a regression runs in a subprocess with a
timeout, or in a watchdog thread that releases the FIFO and fails the test.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from pyiceberg_crypto.errors import FileAccessError, TableInputError
from pyiceberg_crypto.cli.main import main
from pyiceberg_crypto.formats.key_metadata import StandardKeyMetadata
from pyiceberg_crypto.io import LocalFileIO, open_regular_file, read_bounded
from pyiceberg_crypto.kms import InMemoryKms
from pyiceberg_crypto.verify import verify_metadata
from pyiceberg_crypto.verify.report import KEY_ERROR, MANIFEST_LIST, MISSING, STATISTICS, TAMPERED, UNVERIFIABLE
from pyiceberg_crypto.safe_text import escape_text, exception_line, quote_bytes
from pyiceberg_crypto.table import Limits
from tests.testkit import load_factor
from tests.verify import kms_factory

REPO = Path(__file__).resolve().parents[2]
KMS = "tests.verify.kms_factory:session_kms"
PROCESS_TIMEOUT = 60  # a regression fails here instead of hanging the suite (times the load factor)


def quick() -> float:
    """Seconds within which a verify run ends "at once" (no hang, one KMS timeout): 20 s idle, up to
    80 s on a loaded machine (a fresh interpreter's start alone takes seconds there); always short
    of the process timeout and of the hanging KMS's sleep."""
    return 20 * load_factor()
ESC = "\x1b"


# --- helpers -------------------------------------------------------------------------------------


def run_cli_process(*args: str, timeout: float = PROCESS_TIMEOUT) -> tuple[int, str, str, float]:
    """``pyiceberg-crypto verify ARGS`` in a fresh interpreter: (exit status, stdout, stderr, seconds)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pyiceberg_crypto.cli.main", "verify", *args],
                          capture_output=True, text=True, timeout=timeout * load_factor(), cwd=REPO, env=env)
    return done.returncode, done.stdout, done.stderr, time.monotonic() - started


def run_cli_in_process(capsys, *args: str, fifos: tuple[Path, ...] = (), deadline: float = 30) -> tuple[int, str, str]:
    """``main(["verify", *args])`` in a watchdog thread; a run still going after ``deadline``
    seconds (times the load factor) fails the test (after releasing any reader blocked on ``fifos``)."""
    result: dict = {}
    thread = threading.Thread(target=lambda: result.setdefault("code", main(["verify", *args])), daemon=True)
    thread.start()
    deadline *= load_factor()
    thread.join(deadline)
    if thread.is_alive():
        for fifo in fifos:  # a blocked open() for reading returns once a writer appears
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail(f"verify {args} still running after {deadline:.0f} s")
    captured = capsys.readouterr()
    return result["code"], captured.out, captured.err


def write_metadata(path: Path, *, manifest_list: str, snapshot_key_id: str | None = None, keks: int = 0,
                   statistics: list[dict] | None = None) -> Path:
    """A format-version 3 metadata.json with one current snapshot (master key id ``k1``)."""
    keys = [{"key-id": f"kek-{i}", "encrypted-key-metadata": base64.b64encode(os.urandom(40)).decode(),
             "encrypted-by-id": "k1", "properties": {"KEY_TIMESTAMP": "1700000000000"}} for i in range(keks)]
    if snapshot_key_id:
        keys.append({"key-id": snapshot_key_id, "encrypted-key-metadata": base64.b64encode(os.urandom(60)).decode(),
                     "encrypted-by-id": "kek-0"})
    snapshot = {"snapshot-id": 1, "sequence-number": 1, "manifest-list": manifest_list}
    if snapshot_key_id:
        snapshot["key-id"] = snapshot_key_id
    doc = {"format-version": 3, "table-uuid": "00000000-0000-0000-0000-000000000001",
           "location": f"file:{path.parent}", "properties": {"encryption.key-id": "k1"},
           "current-snapshot-id": 1, "snapshots": [snapshot], "encryption-keys": keys,
           "statistics": statistics or []}
    path.write_text(json.dumps(doc))
    return path


@contextlib.contextmanager
def unix_socket(directory: Path):
    """A listening-less Unix socket file (short path: sun_path holds 107 bytes)."""
    short = Path(tempfile.mkdtemp(prefix="sock", dir="/tmp"))
    path = short / "s"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
        yield path
    finally:
        sock.close()
        path.unlink(missing_ok=True)
        short.rmdir()


@contextlib.contextmanager
def special_file(kind: str, directory: Path):
    """A FIFO, /dev/zero, a directory or a socket; yields its path."""
    if kind == "fifo":
        path = directory / "special.fifo"
        os.mkfifo(path)
        yield path
    elif kind == "dev-zero":
        yield Path("/dev/zero")
    elif kind == "directory":
        path = directory / "special.dir"
        path.mkdir()
        yield path
    else:
        with unix_socket(directory) as path:
            yield path


FILE_TYPES = {"fifo": "FIFO", "dev-zero": "character device", "directory": "directory", "socket": "socket"}


# --- the local FileIO: regular files only, never blocking ----------------------------------------


@pytest.mark.parametrize("kind", FILE_TYPES)
def test_local_file_io_refuses_non_regular_files(tmp_path, kind):
    with special_file(kind, tmp_path) as path:
        for call in (LocalFileIO().open, LocalFileIO().size, open_regular_file):
            with pytest.raises(FileAccessError, match=rf"not a regular file \({FILE_TYPES[kind]}\)"):
                call(str(path))
        assert LocalFileIO().exists(str(path)) is False


def test_a_fifo_swapped_in_after_the_stat_is_not_waited_for(tmp_path, monkeypatch):
    """The open itself is non-blocking and checked with fstat (a FIFO without writer would block)."""
    import pyiceberg_crypto.io as fileio

    fifo = tmp_path / "late.fifo"
    os.mkfifo(fifo)
    monkeypatch.setattr(fileio, "regular_file_size", lambda path: 0)  # the stat saw a regular file
    with pytest.raises(FileAccessError, match=r"\(FIFO\)"):
        fileio.open_regular_file(str(fifo))
    with unix_socket(tmp_path) as sock, pytest.raises(FileAccessError, match="socket"):
        fileio.open_regular_file(str(sock))


def test_a_regular_file_opens_in_blocking_mode(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"abc")
    with open_regular_file(str(path)) as handle:
        assert handle.read() == b"abc"
        assert os.get_blocking(handle.fileno())


class _LyingFileIO:
    """Reports a small size, then serves endless bytes (an object store that changed its mind)."""

    def __init__(self, size: int):
        self.reported = size
        self.requested: list[int] = []

    def size(self, uri):
        return self.reported

    def open(self, uri):
        io_self = self

        class Endless(io.RawIOBase):
            def read(self, n=-1):
                assert n is not None and n >= 0, "an unbounded read"
                io_self.requested.append(n)
                return b"x" * n

        return Endless()

    def exists(self, uri):
        return True


def test_read_bounded_checks_the_size_first_and_reads_at_most_one_byte_more(tmp_path):
    lying = _LyingFileIO(10)
    with pytest.raises(FileAccessError, match="more than the limit of 100 bytes"):
        read_bounded(lying, "s3://b/m.json", 100)
    assert lying.requested == [101]
    honest = _LyingFileIO(1000)
    with pytest.raises(FileAccessError, match="1000 bytes, more than the limit of 100 bytes"):
        read_bounded(honest, "s3://b/m.json", 100)
    assert honest.requested == []  # refused on its size, never opened


# --- the metadata.json ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", FILE_TYPES)
def test_metadata_json_that_is_not_a_regular_file_exits_2_at_once(tmp_path, kind):
    with special_file(kind, tmp_path) as path:
        code, out, err, seconds = run_cli_process(str(path), "--kms", KMS)
        assert code == 2 and out == ""
        assert err.strip().splitlines() == [err.strip()], err  # one line
        assert f"not a regular file ({FILE_TYPES[kind]})" in err and "Traceback" not in err
        code, out, err, _ = run_cli_process(str(path), "--kms", KMS, "--json")
    assert code == 2 and seconds < quick()
    document = json.loads(out)
    assert document["ok"] is False and document["files"] == [] and document["table"] is None
    assert document["error"]["type"] == "unreadable"
    assert f"not a regular file ({FILE_TYPES[kind]})" in document["error"]["message"]


def test_a_2_gib_sparse_metadata_json_is_refused_on_its_size(tmp_path):
    path = tmp_path / "00001-big.metadata.json"
    with open(path, "wb") as handle:
        handle.truncate(2 * 1024 ** 3)
    code, out, err, seconds = run_cli_process(str(path), "--kms", KMS, "--json")
    assert code == 2 and seconds < quick()
    message = json.loads(out)["error"]["message"]
    assert "2147483648 bytes, more than the limit of 67108864 bytes" in message
    assert "too large" in err and len(err.strip().splitlines()) == 1


def test_max_metadata_bytes_option_and_keyword(capsys, tmp_path):
    path = write_metadata(tmp_path / "m.metadata.json", manifest_list=str(tmp_path / "snap-1.avro"))
    size = path.stat().st_size
    code, out, err = run_cli_in_process(capsys, str(path), "--kms", KMS, "--json", "--max-metadata-bytes", str(size - 1))
    assert code == 2 and f"{size} bytes, more than the limit of {size - 1} bytes" in json.loads(out)["error"]["message"]
    code, out, _ = run_cli_in_process(capsys, str(path), "--kms", KMS, "--json", "--max-metadata-bytes", str(size))
    assert code == 1 and json.loads(out)["table"]["format_version"] == 3  # read: the file is exactly the limit
    assert main(["verify", str(path), "--kms", KMS, "--max-metadata-bytes", "0"]) == 2
    assert "must be positive" in capsys.readouterr().err
    with pytest.raises(TableInputError, match="too large"):
        verify_metadata(str(path), InMemoryKms(kms_factory.MASTER_KEYS), limits=Limits(max_metadata_bytes=size - 1))


# --- table files that are not regular files: findings, not hangs ----------------------------------


@pytest.mark.parametrize("kind", FILE_TYPES)
def test_manifest_list_that_is_not_a_regular_file_is_unverifiable(capsys, tmp_path, kind):
    """The metadata.json (trusted by the CLI without --metadata-hash) names a FIFO, a device, ...:
    the walk refuses it without opening it and goes on."""
    with special_file(kind, tmp_path) as target:
        path = write_metadata(tmp_path / "m.metadata.json", manifest_list=f"file:{target}")
        fifos = (target,) if kind == "fifo" else ()
        # /dev/zero and the socket (in /tmp) are outside the table: allowed here to reach the type check.
        code, out, _ = run_cli_in_process(capsys, str(path), "--kms", KMS, "--json", "--allow-location", "file:/",
                                          fifos=fifos)
    assert code == 1
    [finding] = [f for f in json.loads(out)["files"] if f["kind"] == MANIFEST_LIST]
    assert finding["status"] == UNVERIFIABLE
    assert finding["detail"].startswith(f"not a regular file ({FILE_TYPES[kind]})")


def test_statistics_files_that_are_not_regular_files_are_unverifiable(capsys, tmp_path):
    fifo = tmp_path / "stats.fifo"
    os.mkfifo(fifo)
    directory = tmp_path / "stats.dir"
    directory.mkdir()
    stats = [{"statistics-path": f"file:{p}", "snapshot-id": 1, "file-size-in-bytes": 100}
             for p in (fifo, "/dev/zero", directory)]
    path = write_metadata(tmp_path / "m.metadata.json", manifest_list=f"file:{tmp_path}/snap-1.avro", statistics=stats)
    code, out, _ = run_cli_in_process(capsys, str(path), "--kms", KMS, "--json", "--allow-location", "/dev",
                                      fifos=(fifo,))
    assert code == 1
    found = {f["path"]: (f["status"], f["detail"]) for f in json.loads(out)["files"] if f["kind"] == STATISTICS}
    assert found[f"file:{fifo}"][0] == UNVERIFIABLE and "(FIFO)" in found[f"file:{fifo}"][1]
    assert found["file:/dev/zero"][0] == UNVERIFIABLE and "(character device)" in found["file:/dev/zero"][1]
    assert found[f"file:{directory}"][0] == UNVERIFIABLE and "(directory)" in found[f"file:{directory}"][1]


# --- the KMS: bounded calls, one-line errors ----------------------------------------------------


def test_a_hanging_kms_is_a_key_error_naming_the_timeout_and_the_process_exits(tmp_path):
    path = write_metadata(tmp_path / "m.metadata.json", manifest_list=f"file:{tmp_path}/snap-1.avro",
                          snapshot_key_id="ml-key", keks=3)
    code, out, err, seconds = run_cli_process(str(path), "--kms", "tests.verify.kms_factory:hanging",
                                              "--kms-timeout", "1", "--json")
    assert code == 1 and seconds < quick(), (code, seconds, err)  # one timeout, not one per KEK; no hang at exit
    document = json.loads(out)
    keks = [c for c in document["table"]["checks"] if c["name"] == "kek"]
    assert len(keks) == 3 and all(c["status"] == KEY_ERROR for c in keks)
    assert "did not return within 1 s" in keks[0]["detail"]
    assert all("an earlier KMS call timed out" in c["detail"] for c in keks[1:])
    [listed] = document["files"]
    assert listed["kind"] == MANIFEST_LIST and listed["status"] == KEY_ERROR
    assert "Traceback" not in err


def test_a_hanging_kms_in_process_is_asked_once(capsys, tmp_path):
    path = write_metadata(tmp_path / "m.metadata.json", manifest_list=f"file:{tmp_path}/snap-1.avro",
                          snapshot_key_id="ml-key", keks=2)
    kms_factory._Hanging.calls = 0
    started = time.monotonic()
    code, out, _ = run_cli_in_process(capsys, str(path), "--kms", "tests.verify.kms_factory:hanging",
                                      "--kms-timeout", "0.3")
    assert code == 1 and time.monotonic() - started < 10 * load_factor()  # the KMS hangs for 600 s
    assert kms_factory._Hanging.calls == 1
    assert "KEY_ERROR" in out and "did not return within 0.3 s" in out


def test_a_hanging_kms_factory_exits_2(tmp_path):
    path = write_metadata(tmp_path / "m.metadata.json", manifest_list=f"file:{tmp_path}/snap-1.avro")
    code, out, err, seconds = run_cli_process(str(path), "--kms", "tests.verify.kms_factory:hanging_factory",
                                              "--kms-timeout", "1", "--json")
    assert code == 2 and seconds < quick()
    assert json.loads(out)["error"]["type"] == "kms" and "did not return within 1 s" in err


def test_a_raising_kms_is_a_one_line_key_error(capsys, tmp_path):
    path = write_metadata(tmp_path / "m.metadata.json", manifest_list=f"file:{tmp_path}/snap-1.avro",
                          snapshot_key_id="ml-key", keks=1)
    code, out, err = run_cli_in_process(capsys, str(path), "--kms", "tests.verify.kms_factory:raising_unwrap", "--json")
    assert code == 1 and "Traceback" not in out + err
    [kek] = [c for c in json.loads(out)["table"]["checks"] if c["name"] == "kek"]
    assert kek["status"] == KEY_ERROR
    assert kek["detail"].endswith(r"ConnectionError: endpoint refused\x0asecond line \x1b[31mred")
    code, out, err = run_cli_in_process(capsys, str(path), "--kms", "tests.verify.kms_factory:raising_unwrap")
    assert code == 1 and ESC not in out and "Traceback" not in out + err


def test_kms_timeout_must_be_positive(capsys, tmp_path):
    for value in ("0", "-1", "nan", "soon"):
        assert main(["verify", "x.metadata.json", "--kms", KMS, "--kms-timeout", value]) == 2
        assert "--kms-timeout" in capsys.readouterr().err


# --- nothing attacker-controlled echoed raw ------------------------------------------------------


def test_paths_with_terminal_escapes_are_escaped_in_the_human_report(capsys, tmp_path):
    hostile = f"file:{tmp_path}/snap-1{ESC}[2J{ESC}]0;owned\x07\r\n.avro"
    path = write_metadata(tmp_path / "m.metadata.json", manifest_list=hostile)
    code, out, err = run_cli_in_process(capsys, str(path), "--kms", KMS)
    assert code == 1 and MISSING in out
    assert ESC not in out + err and "\x07" not in out and "\r" not in out
    assert r"snap-1\x1b[2J\x1b]0;owned\x07\x0d\x0a.avro" in out
    code, out, _ = run_cli_in_process(capsys, str(path), "--kms", KMS, "--json")
    assert json.loads(out)["files"][0]["path"] == hostile  # JSON keeps the exact path, escaped as JSON
    assert ESC not in out


def test_a_metadata_json_path_with_escapes_is_escaped_on_stderr(capsys, tmp_path):
    fifo = tmp_path / f"evil{ESC}[31m\n.metadata.json"
    os.mkfifo(fifo)
    code, _, err = run_cli_in_process(capsys, str(fifo), "--kms", KMS, fifos=(fifo,))
    assert code == 2 and ESC not in err and len(err.strip().splitlines()) == 1
    assert r"evil\x1b[31m\x0a.metadata.json" in err


def test_unexpected_file_content_is_quoted_escaped_and_short(capsys, tmp_path):
    content = f"{ESC}[2J{ESC}[31mYOU HAVE BEEN OWNED".encode() + b"\x00" * 64
    stats_path = tmp_path / "stats.puffin"
    stats_path.write_bytes(content)
    key = StandardKeyMetadata(os.urandom(16), b"aad", len(content)).serialize()
    stats = [{"statistics-path": f"file:{stats_path}", "snapshot-id": 1, "file-size-in-bytes": len(content),
              "key-metadata": base64.b64encode(key).decode()}]
    path = write_metadata(tmp_path / "m.metadata.json", manifest_list=f"file:{tmp_path}/snap-1.avro", statistics=stats)
    code, out, _ = run_cli_in_process(capsys, str(path), "--kms", KMS, "--json")
    [finding] = [f for f in json.loads(out)["files"] if f["kind"] == STATISTICS]
    assert code == 1 and finding["status"] == TAMPERED
    assert r"b'\x1b[2J'" in finding["detail"] and "OWNED" not in finding["detail"]
    code, out, _ = run_cli_in_process(capsys, str(path), "--kms", KMS)
    assert ESC not in out and "OWNED" not in out


def test_text_helpers():
    assert quote_bytes(b"\x1b[2Jabcdefgh") == r"b'\x1b[2Jabcd' (first 8 bytes)"
    assert quote_bytes(b"PAR1") == "b'PAR1'"
    assert escape_text("/wh/db/t/data/a b.parquet") == "/wh/db/t/data/a b.parquet"
    assert escape_text("a\\b\x1b\u202e") == r"a\x5cb\x1b\u202e"
    assert exception_line(ValueError("x" * 1000)).endswith("...") and len(exception_line(ValueError("x" * 1000))) == 300
    assert exception_line(TimeoutError()) == "TimeoutError"


# --- a real table (session Spark) ------------------------------------------------------------------


def test_a_real_table_with_a_fifo_for_its_manifest_list_or_a_data_file(capsys, spark, kms_registration, tmp_path):
    """Iceberg's own table, then (1) a metadata.json whose current manifest list is a FIFO (the CLI
    without --metadata-hash trusts it), (2) a data file replaced by a FIFO: findings, no hang."""
    from tests.verify.conftest import create_table, local, metadata_location

    table = create_table(spark, "hostile")
    spark.sql(f"INSERT INTO {table} VALUES (1, 'a', 0), (2, 'b', 1)")
    location = metadata_location(spark, table)
    code, out, _ = run_cli_in_process(capsys, location, "--kms", KMS, "--json", deadline=120)
    document = json.loads(out)
    assert code == 0, document
    data_path = next(f["path"] for f in document["files"] if f["kind"] == "data")

    doc = json.loads(Path(local(location)).read_text())
    current = next(s for s in doc["snapshots"] if s["snapshot-id"] == doc["current-snapshot-id"])
    fifo = Path(local(location)).parent / "snap-fifo.avro"  # inside the table: confinement lets it through
    os.mkfifo(fifo)
    current["manifest-list"] = f"file:{fifo}"
    edited = tmp_path / "00099-edited.metadata.json"
    edited.write_text(json.dumps(doc))
    try:
        code, out, _ = run_cli_in_process(capsys, str(edited), "--kms", KMS, "--json", fifos=(fifo,), deadline=120)
    finally:
        fifo.unlink()
    document = json.loads(out)
    checks = {c["name"]: c["status"] for c in document["table"]["checks"]}
    assert code == 1 and all(status == "OK" for name, status in checks.items() if name != "metadata-location")
    assert checks["metadata-location"] == "WARN"  # the edited copy sits outside the table it describes
    [listed] = document["files"]
    assert listed["path"] == f"file:{fifo}" and listed["status"] == UNVERIFIABLE
    assert listed["detail"].startswith("not a regular file (FIFO)")

    original = Path(local(data_path))
    moved = original.with_name(original.name + ".moved")
    original.rename(moved)
    try:
        os.mkfifo(original)
        code, out, _ = run_cli_in_process(capsys, location, "--kms", KMS, "--json", fifos=(original,), deadline=120)
    finally:
        original.unlink(missing_ok=True)
        moved.rename(original)
    document = json.loads(out)
    assert code == 1
    bad = [(f["path"], f["status"]) for f in document["files"] if f["status"] != "OK"]
    assert bad == [(data_path, UNVERIFIABLE)]
    assert "not a regular file (FIFO)" in next(f["detail"] for f in document["files"] if f["path"] == data_path)

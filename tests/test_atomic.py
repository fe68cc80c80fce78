"""The one atomic file writer (pyiceberg_crypto._atomic): the chosen mode, the old file intact and
no temporary file left after any failure, a clear error for a missing directory."""

from __future__ import annotations

import os
import stat

import pytest

from pyiceberg_crypto._atomic import PRIVATE, PUBLIC, atomic_writer, write_atomically
from pyiceberg_crypto.errors import FileAccessError, PyicebergCryptoError


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("chosen", [PRIVATE, PUBLIC])
def test_the_file_gets_the_chosen_mode_whatever_the_umask(tmp_path, chosen):
    previous = os.umask(0o077 if chosen == PUBLIC else 0o000)  # the umask would give another mode
    try:
        write_atomically(tmp_path / "f", b"data", mode=chosen)
    finally:
        os.umask(previous)
    assert mode(tmp_path / "f") == chosen
    assert (tmp_path / "f").read_bytes() == b"data"


def test_a_replaced_file_gets_the_new_mode_and_content(tmp_path):
    target = tmp_path / "secret"
    target.write_text("old")
    target.chmod(0o644)
    write_atomically(target, "new", mode=PRIVATE)
    assert (target.read_text(), mode(target)) == ("new", PRIVATE)
    assert os.listdir(tmp_path) == ["secret"]


def test_text_is_written_as_utf8(tmp_path):
    write_atomically(tmp_path / "page.html", "café\n", mode=PUBLIC)
    assert (tmp_path / "page.html").read_bytes() == "café\n".encode()


def test_a_failing_write_leaves_the_old_file_and_no_temporary_file(tmp_path):
    target = tmp_path / "report.json"
    target.write_text("old report")

    class Interrupted(Exception):
        pass

    with pytest.raises(Interrupted), atomic_writer(target, mode=PUBLIC, text=True) as out:
        out.write("half of the new rep")
        out.flush()
        assert sorted(os.listdir(tmp_path)) != ["report.json"]  # the temporary file exists meanwhile
        raise Interrupted
    assert target.read_text() == "old report"
    assert os.listdir(tmp_path) == ["report.json"]


def test_a_failing_first_write_leaves_nothing(tmp_path):
    with pytest.raises(ValueError, match="bad data"), atomic_writer(tmp_path / "new.bin", mode=PRIVATE) as out:
        out.write(b"x")
        raise ValueError("bad data")
    assert os.listdir(tmp_path) == []


def test_a_write_that_raises_midway_leaves_no_temporary_file(tmp_path):
    """``write`` itself failing (here: text into a binary file) is the caller's error, unchanged."""
    target = tmp_path / "ledger.json"
    target.write_bytes(b"{}")
    with pytest.raises(TypeError):
        write_atomically(target, 42, mode=PRIVATE)  # type: ignore[arg-type]
    assert (target.read_bytes(), os.listdir(tmp_path)) == (b"{}", ["ledger.json"])


def test_a_missing_directory_is_a_clear_error_of_the_package(tmp_path):
    target = tmp_path / "no-such-directory" / "audit.html"
    with pytest.raises(FileAccessError) as caught:
        write_atomically(target, "page", mode=PUBLIC)
    error = caught.value
    assert isinstance(error, PyicebergCryptoError) and isinstance(error, OSError)
    assert str(error) == f"cannot write {target}: its directory {target.parent} does not exist"
    assert error.filename == str(target) and error.errno == 2
    assert os.listdir(tmp_path) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_a_read_only_directory_names_the_file_and_the_reason(tmp_path):
    directory = tmp_path / "ro"
    directory.mkdir()
    (directory / "f").write_text("old")
    directory.chmod(0o500)
    try:
        with pytest.raises(FileAccessError, match=r"cannot write .*/ro/f: Permission denied"):
            write_atomically(directory / "f", "new", mode=PUBLIC)
    finally:
        directory.chmod(0o700)
    assert (directory / "f").read_text() == "old" and os.listdir(directory) == ["f"]


def test_a_symlink_at_the_target_is_replaced_not_followed(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("not yours")
    link = tmp_path / "token"
    link.symlink_to(elsewhere)
    write_atomically(link, "token", mode=PRIVATE)
    assert not link.is_symlink() and link.read_text() == "token"
    assert elsewhere.read_text() == "not yours"


def test_the_temporary_file_can_be_checked_before_it_lands(tmp_path):
    """What the jar download does: check the bytes written under the temporary name, then land."""
    target = tmp_path / "a.jar"
    with atomic_writer(target, mode=PUBLIC) as out:
        out.write(b"jar bytes")
        out.flush()
        assert os.path.dirname(out.name) == str(tmp_path) and out.name != str(target)
        with open(out.name, "rb") as check:
            assert check.read() == b"jar bytes"
    assert target.read_bytes() == b"jar bytes" and os.listdir(tmp_path) == ["a.jar"]

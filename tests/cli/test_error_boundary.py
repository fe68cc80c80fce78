"""The command line's one error boundary (``cli.main.run_command``): what a command raises becomes
one line and an exit status; a bug's traceback only with ``--debug``."""

from __future__ import annotations

import argparse
import json

import pytest

from pyiceberg_crypto.cli.main import main, run_command
from pyiceberg_crypto.errors import InvalidArgumentError, TableInputError
from pyiceberg_crypto.formats.errors import TagMismatchError


def _args(raised: BaseException, **extra) -> argparse.Namespace:
    def run(_args):
        raise raised

    return argparse.Namespace(run=run, command="verify", **extra)


def test_a_package_error_is_one_line_and_exit_2(capsys):
    assert run_command(_args(InvalidArgumentError("--limit must be positive"))) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == "pyiceberg-crypto verify: --limit must be positive\n"


def test_an_integrity_failure_exits_1_and_says_so(capsys):
    raised = TagMismatchError("GCM tag mismatch", file="m.avro", location="block 3")
    assert run_command(_args(raised)) == 1
    assert capsys.readouterr().err == "pyiceberg-crypto verify: integrity failure: m.avro: block 3: GCM tag mismatch\n"


def test_a_bug_is_one_line_naming_it_a_bug_and_the_traceback_needs_debug(capsys):
    assert run_command(_args(KeyError("boom"), debug=False)) == 2
    err = capsys.readouterr().err
    assert err.startswith("pyiceberg-crypto verify: internal error (a bug") and "KeyError" in err
    assert "Traceback" not in err and err.count("\n") == 1
    assert run_command(_args(KeyError("boom"), debug=True)) == 2
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "internal error (a bug" in err


def test_a_file_that_cannot_be_used_is_not_a_bug(capsys):
    assert run_command(_args(PermissionError(13, "Permission denied", "/x/report.json"))) == 2
    assert capsys.readouterr().err == "pyiceberg-crypto verify: /x/report.json: Permission denied\n"


def test_json_commands_get_their_error_document_on_stdout(capsys):
    def document(args, kind, message, exc):
        return {"ok": False, "error": {"type": kind, "message": message}}

    args = _args(TableInputError("no such metadata.json"), json=True, error_document=document)
    assert run_command(args) == 2
    out, err = capsys.readouterr()
    assert json.loads(out) == {"ok": False, "error": {"type": "unreadable", "message": "no such metadata.json"}}
    assert err == "pyiceberg-crypto verify: no such metadata.json\n"


def test_control_characters_in_a_message_are_escaped(capsys):
    run_command(_args(InvalidArgumentError("bad name 'a\x1b[2Jb'")))
    assert "\x1b" not in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["inspect", "/nonexistent/file"], ["verify", "/nonexistent/metadata.json",
                                                                      "--kms", "memory"]])
def test_real_commands_fail_through_the_boundary(argv, capsys):
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert err.startswith(f"pyiceberg-crypto {argv[0]}: ") and err.count("\n") == 1 and "Traceback" not in err

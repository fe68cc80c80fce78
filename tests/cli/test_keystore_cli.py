"""``pyiceberg-crypto keystore``: exit statuses, and no key bytes in any output."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys

from pyiceberg_crypto.cli.main import main


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _secrets(path) -> list[str]:
    """Every master key of the keystore as hex and base64 (what must never be printed)."""
    document = json.loads(path.read_text())
    raw = [base64.b64decode(v["key"]) for versions in document["keys"].values() for v in versions]
    return [form for key in raw for form in (key.hex(), base64.b64encode(key).decode())]


def test_create_add_rotate_list_and_exit_statuses(tmp_path, capsys):
    path = str(tmp_path / "ks.json")
    outputs = []

    def ok(*argv):
        code, out, err = _run(capsys, *argv)
        assert code == 0, err
        outputs.append(out + err)
        return out

    ok("keystore", "create", path)
    ok("keystore", "add", path, "orders", "--length", "16")
    ok("keystore", "add", path, "events")
    assert "new version 2" in ok("keystore", "rotate", path, "orders")
    listing = json.loads(ok("keystore", "list", path, "--json"))
    assert listing["keys"]["orders"] == [
        {"version": 1, "length": 16, "created": listing["keys"]["orders"][0]["created"]},
        {"version": 2, "length": 16, "created": listing["keys"]["orders"][1]["created"]},
    ]
    assert [v["length"] for v in listing["keys"]["events"]] == [32]  # default length
    assert "orders: 2 version(s), newest 2 (16 bytes" in ok("keystore", "list", path)

    for argv, status, message in [
        (("keystore", "create", path), 2, "already exists"),
        (("keystore", "add", path, "orders"), 2, "already exists"),
        (("keystore", "rotate", path, "nope"), 2, "key id 'nope' is not in keystore"),
        (("keystore", "add", path, "x", "--length", "20"), 2, "invalid choice"),
        (("keystore", "list", str(tmp_path / "missing.json")), 2, "does not exist"),
        (("keystore",), 2, "required"),
    ]:
        code, out, err = _run(capsys, *argv)
        outputs.append(out + err)
        assert (code, message in err) == (status, True), (argv, err)

    for text in outputs:
        for secret in _secrets(tmp_path / "ks.json"):
            assert secret not in text


def test_insecure_or_malformed_keystore_exits_1_with_the_fix(tmp_path, capsys):
    path = tmp_path / "ks.json"
    assert main(["keystore", "create", str(path)]) == 0
    assert main(["keystore", "add", str(path), "k"]) == 0
    os.chmod(path, 0o644)
    for argv in (["keystore", "list", str(path)], ["keystore", "rotate", str(path), "k"]):
        capsys.readouterr()
        assert main(argv) == 1
        assert f"run `chmod 600 {path}`" in capsys.readouterr().err
    path.write_text("{not json")
    os.chmod(path, 0o600)
    assert main(["keystore", "list", str(path)]) == 1
    assert "is malformed: not JSON" in capsys.readouterr().err


def test_console_script_entry_point(tmp_path):
    """The installed entry point wires the subcommand (one subprocess, no Spark)."""
    path = tmp_path / "ks.json"
    result = subprocess.run(
        [sys.executable, "-m", "pyiceberg_crypto.cli.main", "keystore", "create", str(path)],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert oct(path.stat().st_mode & 0o777) == "0o600"

"""``pyiceberg-crypto inspect`` on AGS1 files: output, and exit status 0 / 1 / 2."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pyiceberg_crypto.cli.main import main
from pyiceberg_crypto.testing import encrypt_bytes
from pyiceberg_crypto.formats.key_metadata import StandardKeyMetadata
from tests.formats import java_fixtures

KEY = bytes(range(32))
AAD = b"aad-prefix-16byt"
PLAIN = os.urandom(10_000)
CONSOLE = Path(sys.executable).parent / "pyiceberg-crypto"


@pytest.fixture
def ags1_file(tmp_path) -> Path:
    path = tmp_path / "m.avro"
    path.write_bytes(encrypt_bytes(PLAIN, KEY, AAD, block_size=4096))
    return path


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["inspect", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_without_key_prints_header_facts(capsys, ags1_file):
    code, out, err = run(capsys, str(ags1_file))
    assert code == 0 and err == ""
    assert "block size:       4096 bytes" in out and "blocks:           3" in out
    assert "plaintext length: 10000 bytes" in out and "authenticated:    no" in out


def test_with_key_authenticates_every_block(capsys, ags1_file):
    code, out, _ = run(capsys, str(ags1_file), "--key", KEY.hex(), "--aad-prefix", AAD.hex(), "--length", "10000")
    assert code == 0 and "yes, all 3 blocks (AES-256-GCM)" in out


def test_json_report(capsys, ags1_file):
    code, out, _ = run(capsys, str(ags1_file), "--key", KEY.hex(), "--aad-prefix", AAD.hex(), "--json")
    report = json.loads(out)
    assert code == 0 and report["ok"] and report["authenticated"]
    assert (report["block_size"], report["block_count"], report["plaintext_length"]) == (4096, 3, 10000)


def test_key_metadata_supplies_key_aad_and_stored_length(capsys, ags1_file):
    km = StandardKeyMetadata(KEY, AAD, ags1_file.stat().st_size).serialize()
    code, out, _ = run(capsys, str(ags1_file), "--key-metadata", base64.b64encode(km).decode())
    assert code == 0 and "yes, all 3 blocks" in out
    longer = StandardKeyMetadata(KEY, AAD, ags1_file.stat().st_size + 100).serialize()
    code, _, err = run(capsys, str(ags1_file), "--key-metadata", base64.b64encode(longer).decode())
    assert code == 1 and "block 2" in err and "shorter than the trusted length" in err


def test_tampered_block_exits_1_naming_block(capsys, ags1_file):
    data = bytearray(ags1_file.read_bytes())
    data[8 + (4096 + 28) + 50] ^= 1
    ags1_file.write_bytes(bytes(data))
    code, out, err = run(capsys, str(ags1_file), "--key", KEY.hex(), "--aad-prefix", AAD.hex())
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and f"{ags1_file}: block 1: GCM tag mismatch" in err
    code, out, _ = run(capsys, str(ags1_file), "--key", KEY.hex(), "--aad-prefix", AAD.hex(), "--json")
    assert code == 1 and json.loads(out)["error"] == {
        "type": "TagMismatchError",
        "location": "block 1",
        "reason": json.loads(out)["error"]["reason"],
    }


def test_wrong_aad_prefix_exits_1(capsys, ags1_file):
    code, _, err = run(capsys, str(ags1_file), "--key", KEY.hex(), "--aad-prefix", "00")
    assert code == 1 and "block 0" in err


def test_structural_failure_without_key_exits_1(capsys, ags1_file):
    ags1_file.write_bytes(ags1_file.read_bytes()[:-1830])  # leaves 6 of the 1836 bytes of the last block
    code, _, err = run(capsys, str(ags1_file))
    assert code == 1 and "block 2" in err and "fewer than nonce + tag" in err


@pytest.mark.parametrize(
    "options, message",
    [
        (["--key", "zz"], "not valid hex"),
        (["--key", "00" * 20], "invalid AES key length 20"),
        (["--aad-prefix", "00"], "--aad-prefix needs --key"),
        (["--key-metadata", "!!!"], "not valid base64"),
        (["--key-metadata", base64.b64encode(b"\x07abc").decode()], "unsupported key metadata version 7"),
        (["--key-metadata", "AQ==", "--key", "00" * 16], "either --key-metadata or --key"),
        (["--column-key", "a=00"], "Parquet"),
        (["--length", "-1"], "--length"),
    ],
)
def test_usage_errors_exit_2(capsys, ags1_file, options, message):
    code, out, err = run(capsys, str(ags1_file), *options)
    assert code == 2 and message in err and "Traceback" not in err


def test_missing_file_exits_2(capsys, tmp_path):
    code, _, err = run(capsys, str(tmp_path / "nope.avro"))
    assert code == 2 and "cannot read" in err


def test_console_script_end_to_end(ags1_file):
    """The installed entry point, as a user runs it."""
    ok = subprocess.run(
        [str(CONSOLE), "inspect", str(ags1_file), "--key", KEY.hex(), "--aad-prefix", AAD.hex()],
        capture_output=True, text=True, check=False,
    )
    assert ok.returncode == 0 and "authenticated:    yes" in ok.stdout
    bad = subprocess.run(
        [str(CONSOLE), "inspect", str(ags1_file), "--key", os.urandom(16).hex()],
        capture_output=True, text=True, check=False,
    )
    assert bad.returncode == 1 and "block 0" in bad.stderr and "Traceback" not in bad.stderr


def test_java_written_file_with_java_key_metadata(tmp_path, capsys):
    """Iceberg wrote the file and the key metadata (with the stored length), committed in
    tests/formats/fixtures/java; the CLI verifies."""
    meta = java_fixtures.key_metadata()["for_stream"]
    vector = java_fixtures.ags1(meta["stream"])
    assert (len(vector.key), len(vector.plaintext), meta["file_length"]) == (16, 2 * 1024 * 1024 + 3, len(vector.data))
    path = tmp_path / "java.avro"
    path.write_bytes(vector.data)
    km = base64.b64encode(bytes.fromhex(meta["java"])).decode()
    code, out, _ = run(capsys, str(path), "--key-metadata", km)
    assert code == 0 and "yes, all 3 blocks (AES-128-GCM)" in out
    path.write_bytes(path.read_bytes()[: 8 + 2 * (1024 * 1024 + 28)])  # drop the last block
    code, _, err = run(capsys, str(path), "--key-metadata", km)
    assert code == 1 and "block 2" in err


def test_damaged_magic_with_a_key_is_an_integrity_failure(capsys, ags1_file):
    """A file given with its key is expected to be encrypted: a wrong magic is a finding (1)."""
    ags1_file.write_bytes(b"XGS1" + ags1_file.read_bytes()[4:])
    code, out, err = run(capsys, str(ags1_file), "--key", KEY.hex(), "--aad-prefix", AAD.hex())
    assert code == 1 and "integrity failure" in err and "starts with b'XGS1'" in err
    code, out, _ = run(capsys, str(ags1_file), "--key", KEY.hex(), "--json")
    document = json.loads(out)
    assert code == 1 and document["ok"] is False and document["error"]["location"] == "header"
    code, _, _ = run(capsys, str(ags1_file))  # no key: just not a file we know
    assert code == 2


@pytest.mark.parametrize(
    "argv, kind",
    [
        (["--key", "zz"], "usage"),
        (["--key", KEY.hex(), "--key-metadata", "AAAA"], "usage"),
        (["--key-metadata", "not base64!"], "usage"),
    ],
)
def test_json_is_printed_on_usage_errors(capsys, ags1_file, argv, kind):
    code, out, _ = run(capsys, str(ags1_file), *argv, "--json")
    document = json.loads(out)
    assert code == 2 and document["ok"] is False and document["error"]["type"] == kind


def test_json_is_printed_when_the_file_is_unreadable(capsys, tmp_path):
    code, out, _ = run(capsys, str(tmp_path / "nope.avro"), "--json")
    document = json.loads(out)
    assert code == 2 and document["error"]["type"] == "unreadable"

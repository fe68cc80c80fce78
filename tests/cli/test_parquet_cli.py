"""``pyiceberg-crypto inspect`` / ``decrypt`` on Parquet files: the CLI contract (exit 0/1/2,
one clear stderr line, no traceback, no key bytes printed)."""

from __future__ import annotations

import base64
import json

import pyarrow.parquet as pq
import pytest

from pyiceberg_crypto.cli.main import main
from pyiceberg_crypto.formats.key_metadata import StandardKeyMetadata
from tests.formats.parquet.conftest import parquet_vector_by_name, parquet_vectors  # noqa: F401 (fixtures)
from tests.formats.parquet.vectors import rows_from_arrow


def key_args(vector) -> list[str]:
    args = ["--key", vector.footer_key.hex()]
    for path, key in vector.column_keys.items():
        args += ["--column-key", f"{path}={key.hex()}"]
    if vector.aad_prefix is not None:
        args += ["--aad-prefix", vector.aad_prefix.hex()]
    return args


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


@pytest.mark.parametrize("mode", ["uniform_gcm", "per_column_gcm", "plaintext_footer_aad_not_stored_ctr"])
def test_inspect_ok(mode, parquet_vector_by_name, capsys):
    vector = parquet_vector_by_name[mode]
    code, out, err = run(capsys, "inspect", vector.path, *key_args(vector))
    assert code == 0, err
    assert "footer:        authenticated" in out and vector.algorithm in out
    assert vector.footer_key.hex() not in out + err
    code, out, _ = run(capsys, "inspect", vector.path, *key_args(vector), "--json")
    report = json.loads(out)
    assert code == 0 and report["ok"] and report["authenticated"]["footer"] == 1


def test_inspect_with_iceberg_key_metadata(parquet_vector_by_name, capsys, tmp_path):
    vector = parquet_vector_by_name["aad_prefix_not_stored_gcm"]  # what Iceberg writes
    size = vector.path.stat().st_size
    metadata = StandardKeyMetadata(vector.footer_key, vector.aad_prefix, size)
    encoded = base64.b64encode(metadata.serialize()).decode()
    assert run(capsys, "inspect", vector.path, "--key-metadata", encoded)[0] == 0
    # the trusted length catches an appended byte
    longer = tmp_path / "longer.parquet"
    longer.write_bytes(vector.path.read_bytes() + b"\0")
    code, _, err = run(capsys, "inspect", longer, "--key-metadata", encoded)
    assert code == 1 and "trusted length" in err
    # decrypt with key metadata, output readable by PyArrow
    out = tmp_path / "plain.parquet"
    assert run(capsys, "decrypt", vector.path, out, "--key-metadata", encoded)[0] == 0
    assert rows_from_arrow(pq.read_table(out)) == vector.rows


def test_integrity_failure_exit_1(parquet_vector_by_name, capsys, tmp_path):
    vector = parquet_vector_by_name["uniform_gcm"]
    data = bytearray(vector.path.read_bytes())
    data[4 + 4 + 12] ^= 1  # first page header module's ciphertext
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(bytes(data))
    code, out, err = run(capsys, "inspect", bad, *key_args(vector), "--json")
    assert code == 1
    failure = json.loads(out)["failures"][0]
    assert failure["type"] == "TagMismatchError" and failure["row_group"] == 0 and failure["module_type"].endswith("page header")
    assert str(bad) in err and "row group 0" in err
    target = tmp_path / "out.parquet"
    code, _, err = run(capsys, "decrypt", bad, target, *key_args(vector))
    assert code == 1 and not target.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.parquet"]  # no temporary file left either


def test_missing_keys_exit_2(parquet_vector_by_name, capsys):
    vector = parquet_vector_by_name["uniform_gcm"]
    code, _, err = run(capsys, "inspect", vector.path)
    assert code == 2 and "footer key is required" in err
    hidden = parquet_vector_by_name["aad_prefix_not_stored_gcm"]
    code, _, err = run(capsys, "inspect", hidden.path, "--key", hidden.footer_key.hex())
    assert code == 2 and "AAD prefix" in err
    per_column = parquet_vector_by_name["per_column_gcm"]
    code, out, err = run(capsys, "inspect", per_column.path, "--key", per_column.footer_key.hex())
    assert code == 2 and "NOT VERIFIABLE: column 'name' (no column key)" in out and "not verifiable" in err


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--key", "zz"], "not valid hex"),
        (["--key", "00" * 15], "16, 24 or 32 bytes"),
        (["--column-key", "nokey"], "PATH=HEX"),
        (["--key-metadata", "!!!"], "base64"),
        (["--key-metadata", "AAAA", "--key", "00" * 16], "not both"),
    ],
)
def test_usage_errors_exit_2(extra, message, parquet_vector_by_name, capsys):
    code, _, err = run(capsys, "inspect", parquet_vector_by_name["uniform_gcm"].path, *extra)
    assert code == 2 and message in err


def test_plain_parquet_is_reported_not_encrypted(tmp_path, capsys):
    import pyarrow as pa

    path = tmp_path / "plain.parquet"
    pq.write_table(pa.table({"a": [1, 2, 3]}), path)
    code, out, _ = run(capsys, "inspect", path)
    assert code == 0 and "not encrypted" in out


def test_decrypt_every_mode(parquet_vectors, capsys, tmp_path):  # noqa: F811
    for vector in parquet_vectors:
        out = tmp_path / f"{vector.name}.parquet"
        code, text, err = run(capsys, "decrypt", vector.path, out, *key_args(vector))
        assert code == 0, err
        assert rows_from_arrow(pq.read_table(out)) == vector.rows, vector.name


def test_decrypt_rejects_non_parquet(tmp_path, capsys):
    src = tmp_path / "x.bin"
    src.write_bytes(b"AGS1" + bytes(40))
    code, _, err = run(capsys, "decrypt", src, tmp_path / "o.parquet", "--key", "00" * 16)
    assert code == 2 and "Parquet files only" in err
    code, _, err = run(capsys, "decrypt", tmp_path / "missing.parquet", tmp_path / "o.parquet")
    assert code == 2 and "cannot read" in err

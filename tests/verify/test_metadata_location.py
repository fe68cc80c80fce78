"""The ``metadata-location`` warning: a metadata.json outside the table location it describes."""

from __future__ import annotations

import json

from pyiceberg_crypto.verify import verify_metadata
from tests.table.test_limits import METADATA


def test_a_metadata_json_outside_its_table_location_is_a_warning(tmp_path):
    """A copied table directory: its metadata.json names the original's location (issue 34)."""
    inside = tmp_path / "t" / "metadata" / "00000-x.metadata.json"
    inside.parent.mkdir(parents=True)
    inside.write_text(json.dumps({**METADATA, "location": f"file:{tmp_path / 't'}"}))
    copy = tmp_path / "copy" / "metadata" / "00000-x.metadata.json"
    copy.parent.mkdir(parents=True)
    copy.write_text(inside.read_text())
    names = {c.name: c for c in verify_metadata(str(copy), None).checks}
    assert names["metadata-location"].status == "WARN" and str(tmp_path / "t") in names["metadata-location"].detail
    assert "metadata-location" not in {c.name for c in verify_metadata(str(inside), None).checks}


# --- no false alarm: the same file named another way is inside (issue 39, item 2) ---

def table(tmp_path, location: str | None = None):
    """A table directory ``wh/db/t`` with its metadata.json; ``location`` as the metadata records it."""
    directory = tmp_path / "wh" / "db" / "t"
    path = directory / "metadata" / "00000-x.metadata.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({**METADATA, "location": location or f"file:{directory}"}))
    return directory, path


def location_check(path) -> list:
    return [c for c in verify_metadata(str(path), None).checks if c.name == "metadata-location"]


def test_a_relative_path_as_the_docs_write_it_is_no_alarm(tmp_path, monkeypatch):
    """``pyiceberg-crypto verify wh/db/t/metadata/...json`` from the directory above, as Getting
    started tells users: it warned 'outside the table location' before."""
    _, path = table(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert location_check(path.relative_to(tmp_path)) == []
    monkeypatch.chdir(tmp_path / "wh" / "db" / "t" / "metadata")
    assert location_check("00000-x.metadata.json") == []
    assert location_check("./00000-x.metadata.json") == []


def test_dot_dot_segments_are_no_alarm(tmp_path, monkeypatch):
    directory, _ = table(tmp_path)
    monkeypatch.chdir(tmp_path / "wh")
    assert location_check(f"{directory}/../t/metadata/00000-x.metadata.json") == []
    assert location_check("db/t/metadata/../metadata/00000-x.metadata.json") == []
    assert location_check("../wh/db/t/metadata/00000-x.metadata.json") == []


def test_file_uris_and_plain_paths_on_either_side_are_no_alarm(tmp_path):
    directory = tmp_path / "wh" / "db" / "t"
    for recorded in (f"file:{directory}", f"file://{directory}", str(directory), f"{directory}/", f"file:{directory}//"):
        case = tmp_path / f"case{abs(hash(recorded))}"
        case.mkdir()
        _, path = table(case, recorded.replace(str(tmp_path), str(case)))
        for given in (str(path), f"file:{path}", f"file://{path}"):
            assert location_check(given) == [], (recorded, given)


def test_a_symlinked_warehouse_is_no_alarm_either_way(tmp_path):
    directory, path = table(tmp_path)
    link = tmp_path / "lake"
    link.symlink_to(tmp_path / "wh")
    assert location_check(link / "db" / "t" / "metadata" / path.name) == []  # given through the link
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "wh").symlink_to(tmp_path / "wh", target_is_directory=True)
    path.write_text(json.dumps({**METADATA, "location": f"file:{linked / 'wh' / 'db' / 't'}"}))
    assert location_check(path) == []  # recorded through the link, given by its real path


def test_a_really_copied_table_still_fires_however_it_is_named(tmp_path, monkeypatch):
    directory, path = table(tmp_path)
    copy = tmp_path / "copy" / "metadata" / path.name
    copy.parent.mkdir(parents=True)
    copy.write_bytes(path.read_bytes())
    monkeypatch.chdir(tmp_path)
    for given in ("copy/metadata/00000-x.metadata.json", f"file:{copy}", f"wh/../copy/metadata/{path.name}"):
        [check] = location_check(given)
        assert check.status == "WARN" and str(directory) in check.detail
    sibling = tmp_path / "wh" / "db" / "t2" / "metadata" / path.name  # a prefix of the name is not inside
    sibling.parent.mkdir(parents=True)
    sibling.write_bytes(path.read_bytes())
    assert [c.status for c in location_check(sibling)] == ["WARN"]


def test_object_store_locations_compare_normalised():
    from pyiceberg_crypto.io.confinement import location_is_under

    assert location_is_under("s3a://Bucket/wh/t/metadata/v1.metadata.json", ["s3://bucket/wh/t/"])
    assert location_is_under("s3://bucket/wh/t//metadata/./v1.metadata.json", ["s3n://bucket/wh/t"])
    assert not location_is_under("s3://bucket/wh/t2/metadata/v1.metadata.json", ["s3://bucket/wh/t"])
    assert not location_is_under("s3://other/wh/t/metadata/v1.metadata.json", ["s3://bucket/wh/t"])
    assert not location_is_under("gs://bucket/wh/t/metadata/v1.metadata.json", ["s3://bucket/wh/t"])


def test_the_verify_cli_on_a_relative_path_prints_no_warning(tmp_path, monkeypatch, capsys):
    from pyiceberg_crypto.cli.main import main

    _, path = table(tmp_path)
    monkeypatch.chdir(tmp_path)
    main(["verify", str(path.relative_to(tmp_path)), "--kms", "tests.testing.helpers:cli_kms"])
    out = capsys.readouterr()
    assert "metadata-location" not in out.out + out.err and "outside the table location" not in out.out + out.err

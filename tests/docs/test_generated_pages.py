"""The pages docs/hooks/generated.py writes at build time: the CLI reference covers every command and
option of the real parsers, provider pages in docs/kms/ reach the nav, repository files are
included with their links made harmless. The build itself is `make docs` (`make test` runs it)."""

from __future__ import annotations

import argparse
import importlib.util

from pyiceberg_crypto.cli.main import build_parser
from pyiceberg_crypto.exit_status import ExitStatus
from pyiceberg_crypto.cli.verify_job import build_parser as build_job_parser
from tests.docs.blocks import DOCS, ROOT

_spec = importlib.util.spec_from_file_location("docs_hooks_generated", DOCS / "hooks" / "generated.py")
generated = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(generated)


def _parsers(parser: argparse.ArgumentParser, prog: str):
    yield prog, parser
    for name, _, sub in generated._subcommands(parser):
        yield from _parsers(sub, f"{prog} {name}")


def test_the_cli_reference_has_every_command_and_option():
    reference = generated.cli_reference()
    commands = list(_parsers(build_parser(), "pyiceberg-crypto"))[1:] + [  # [1:]: the top level has no options
        ("python -m pyiceberg_crypto.cli.verify_job", build_job_parser())]
    assert len(commands) > 15  # inspect, decrypt, verify, keystore create|add|..., keys list|rewrap|prune, kms serve, ...
    for prog, parser in commands:
        assert f"`{prog}`" in reference, prog
        for action in parser._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert f"`{option}" in reference, f"{prog} {option}"


def test_the_exit_status_table_names_every_status():
    table = generated.exit_status_table()
    for status in ExitStatus:
        assert f"| `{int(status)}` | `{status.name}` |" in table


def test_kms_provider_pages_join_the_nav(tmp_path):
    docs = tmp_path / "docs"
    (docs / "kms").mkdir(parents=True)
    for name, title in [("index", "KMS providers"), ("custom", "Your own KMS"), ("aws", "AWS KMS"), ("zeta", "Zeta KMS")]:
        (docs / "kms" / f"{name}.md").write_text(f"# {title}\n")
    config = {"docs_dir": str(docs), "nav": [{"Home": "index.md"}, {"How-to guides": [{"KMS providers": [
        "kms/index.md", {"AWS KMS": "kms/aws.md"}, {"Your own KMS": "kms/custom.md"}]}]}]}
    section = generated.on_config(config)["nav"][1]["How-to guides"][0]["KMS providers"]
    assert section == ["kms/index.md", {"AWS KMS": "kms/aws.md"}, {"Zeta KMS": "kms/zeta.md"},
                       {"Your own KMS": "kms/custom.md"}]


def test_included_repository_files_lose_their_title_and_links():
    included = generated.include_markdown("bench/README.md")
    original = (ROOT / "bench" / "README.md").read_text()
    assert original.startswith("# ") and not included.startswith("# ")
    assert "](RESULTS.md)" in original and "](RESULTS.md)" not in included and "`bench/RESULTS.md`" in included


def test_the_cli_reference_in_the_file_is_current():
    """issue 34: docs/reference/cli.md is readable in the repository, and current."""
    page = generated.CLI_PAGE.read_text()
    assert generated.with_cli_reference(page) == page, (
        "docs/reference/cli.md is not what the parsers generate: run `python docs/hooks/generated.py`")
    assert "## `pyiceberg-crypto keystore`" in page and "`KEY_ID`" in page


def test_every_subcommand_has_a_description_and_every_positional_argument_help():
    for prog, parser in list(_parsers(build_parser(), "pyiceberg-crypto"))[1:]:
        assert parser.description, f"{prog} --help has no one-line description"
        for action in parser._actions:
            if not action.option_strings and not isinstance(action, argparse._SubParsersAction):
                assert action.help, f"{prog}: positional {action.metavar or action.dest} has no help"


def test_the_errors_table_names_every_exception_of_the_package():
    """docs/reference/errors.md: one row per exception class (found independently here), each with
    its module; the page carries the marker the build replaces."""
    import importlib
    import inspect
    import pkgutil

    import pyiceberg_crypto
    from pyiceberg_crypto.errors import PyicebergCryptoError, PyicebergCryptoWarning
    from pyiceberg_crypto.testing.errors import TestKitError

    table = generated.errors_table()
    expected = set()
    for info in pkgutil.walk_packages(pyiceberg_crypto.__path__, "pyiceberg_crypto."):
        for name, value in vars(importlib.import_module(info.name)).items():
            if inspect.isclass(value) and issubclass(value, (PyicebergCryptoError, PyicebergCryptoWarning, TestKitError)) \
                    and value.__module__ == info.name and not name.startswith("_"):
                expected.add(f"| `{name}` | `{info.name}` |")
    assert len(expected) > 25
    assert all(row in table for row in expected), sorted(row for row in expected if row not in table)
    assert "| `TableInputError` | `pyiceberg_crypto.errors` | `ValueError` |" in table
    assert "<!-- generated: errors -->" in (DOCS / "reference" / "errors.md").read_text()



def test_the_engine_table_comes_from_the_engine_facts():
    """docs/how-to/trino.md shows the table ``verify`` and the audit decide with (pyiceberg_crypto.engines)."""
    from pyiceberg_crypto import engines

    assert generated.engines_table().strip() == engines.engine_table_markdown()
    assert "<!-- generated: engines -->" in (DOCS / "how-to" / "trino.md").read_text()

"""MkDocs hook: the pages that are generated from the code at build time, so they cannot drift.

- The CLI reference, read from the real argparse parsers (``pyiceberg_crypto.cli.main.build_parser``
  and the verification job's ``build_parser``): every command and subcommand, its usage,
  description and options with their help and defaults. It is written into
  ``docs/reference/cli.md`` itself, between ``<!-- generated: cli ... -->`` and
  ``<!-- end generated: cli -->``, so the file reads complete in the repository too:
  ``python docs/hooks/generated.py`` rewrites it, ``tests/docs/test_generated_pages.py`` fails when
  it is not current, and the build renders the section from the parsers again.
- ``<!-- generated: report-schema -->`` becomes the verification report's JSON Schema
  (``pyiceberg_crypto/verify/report.schema.json``, shipped in the package), and the schema file
  itself is published next to the page (``reference/report.schema.json``).
- ``<!-- generated: audit-schema -->`` the same for the catalog audit's report
  (``pyiceberg_crypto/audit/audit.schema.json``, published as ``reference/audit.schema.json``).
- ``<!-- generated: engines -->`` becomes the table of which engine reads what in an encrypted table
  (``pyiceberg_crypto.engines.engine_table_markdown``: the facts ``verify`` and the audit use).
- ``<!-- generated: exit-status -->`` becomes the table of ``pyiceberg_crypto.exit_status.ExitStatus``.
- ``<!-- generated: errors -->`` becomes the table of every exception class of the package (one
  root, ``PyicebergCryptoError``; each one's module and standard base).
- KMS provider pages (``docs/kms/*.md``) that the nav in ``mkdocs.yml`` does not list yet are added
  to its "KMS providers" section, titled by their first heading, before "Your own KMS": a
  provider page is in the site as soon as its file is, and the nav never names a missing file.
- ``<!-- include: bench/RESULTS.md -->`` includes a Markdown file of the repository that lives beside
  what it describes (``bench/``, ``docker/``): its title dropped, its headings one level down, and
  its links to other repository files turned into plain paths (they are not pages of the site).

Used from ``mkdocs.yml`` (``hooks:``); ``tests/docs`` calls :func:`cli_reference` too. Nothing here
touches the network.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_PATH = ROOT / "pyiceberg_crypto" / "verify" / "report.schema.json"
SCHEMA_URL = "reference/report.schema.json"
AUDIT_SCHEMA_PATH = ROOT / "pyiceberg_crypto" / "audit" / "audit.schema.json"
AUDIT_SCHEMA_URL = "reference/audit.schema.json"


# --- the CLI reference ------------------------------------------------------------------------
def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """``(name, help, parser)`` of each subcommand, in the order they were added."""
    out = []
    for action in parser._actions:  # argparse has no public API for this
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                out.append((name, helps.get(name, ""), sub))
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _option_rows(parser: argparse.ArgumentParser) -> list[str]:
    formatter = parser._get_formatter()
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if action.option_strings:
            metavar = formatter._format_args(action, action.dest.upper()) if action.nargs != 0 else ""
            name = ", ".join(f"`{opt}{' ' + metavar if metavar else ''}`" for opt in action.option_strings)
        else:
            name = f"`{formatter._metavar_formatter(action, action.dest)(1)[0]}`"
        help_text = formatter._expand_help(action) if action.help else ""
        notes = []
        if action.choices and not isinstance(action.choices, dict):
            notes.append("one of " + ", ".join(f"`{c}`" for c in action.choices))
        if isinstance(action, argparse._AppendAction) and "repeatable" not in help_text:
            notes.append("repeatable")
        default = action.default
        if (default not in (None, False, [], argparse.SUPPRESS) and action.option_strings
                and "%(default)" not in (action.help or "") and "default" not in help_text):
            notes.append(f"default: `{default}`")
        if action.required and action.option_strings:
            notes.append("required")
        detail = "; ".join(part for part in [help_text, *notes] if part)
        rows.append(f"| {_cell(name)} | {_cell(detail)} |")
    return rows


def _command_section(prog: str, parser: argparse.ArgumentParser, help_text: str, level: int) -> list[str]:
    lines = [f"{'#' * level} `{prog}`", ""]
    description = parser.description or help_text
    if description:
        lines += [description.strip(), ""]
    subs = _subcommands(parser)
    usage = parser.format_usage().strip()
    lines += ["```text", usage, "```", ""]
    rows = _option_rows(parser)
    if rows:
        lines += ["| argument | meaning |", "|---|---|", *rows, ""]
    for name, sub_help, sub in subs:
        lines += _command_section(f"{prog} {name}", sub, sub_help, min(level + 1, 6))
    return lines


def cli_reference() -> str:
    """The CLI reference as Markdown, from the parsers the console script and the job use."""
    from pyiceberg_crypto.cli.main import build_parser
    from pyiceberg_crypto.cli.verify_job import build_parser as build_job_parser

    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # argparse wraps usage lines to the terminal: the same width in every build
    try:
        main, job = build_parser(), build_job_parser()
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous
    lines = ["| command | what it does |", "|---|---|"]
    lines += [f"| [`pyiceberg-crypto {name}`](#pyiceberg-crypto-{name}) | {_cell(help_text)} |"
              for name, help_text, _ in _subcommands(main)]
    lines.append("")
    for name, help_text, sub in _subcommands(main):
        lines += _command_section(f"pyiceberg-crypto {name}", sub, help_text, 2)
    lines += ["## The verification job (`spark-submit`, `python -m pyiceberg_crypto.cli.verify_job`)", "",
              "The same verification as `verify_table`, as a Spark application: run its file "
              "(`pyiceberg_crypto/cli/verify_job.py`) with `spark-submit`, or `python -m pyiceberg_crypto.cli.verify_job` "
              "for a local session.", ""]
    lines += _command_section("python -m pyiceberg_crypto.cli.verify_job", job, "", 3)[2:]
    return "\n".join(lines) + "\n"


# --- the report schema and exit statuses -------------------------------------------------------
def report_schema() -> str:
    schema = json.loads(SCHEMA_PATH.read_text())
    return "```json\n" + json.dumps(schema, indent=2) + "\n```\n"


def audit_schema() -> str:
    schema = json.loads(AUDIT_SCHEMA_PATH.read_text())
    return "```json\n" + json.dumps(schema, indent=2) + "\n```\n"


def exit_status_table() -> str:
    from pyiceberg_crypto.exit_status import ExitStatus

    rows = ["| status | name | meaning |", "|---|---|---|"]
    for status in ExitStatus:
        doc = (MEANINGS.get(status.name) or "").strip()
        rows.append(f"| `{int(status)}` | `{status.name}` | {_cell(doc)} |")
    return "\n".join(rows) + "\n"


def engines_table() -> str:
    from pyiceberg_crypto.engines import engine_table_markdown

    return engine_table_markdown() + "\n"


def errors_table() -> str:
    """Every exception class the package defines (all in :mod:`pyiceberg_crypto.errors`), its warnings
    and the test kit's errors: its name, where it lives, the standard exception it also is, and the
    first paragraph of its docstring; the package's errors first, then warnings, then the kit's."""
    import importlib
    import inspect
    import pkgutil

    import pyiceberg_crypto
    from pyiceberg_crypto.errors import PyicebergCryptoError, PyicebergCryptoWarning
    from pyiceberg_crypto.testing.errors import TestKitError

    roots = (PyicebergCryptoError, PyicebergCryptoWarning, TestKitError)
    standard = (ValueError, TypeError, OSError, TimeoutError, RuntimeError, PermissionError, UserWarning, KeyError,
                AssertionError)
    found = {}
    for info in pkgutil.walk_packages(pyiceberg_crypto.__path__, "pyiceberg_crypto."):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (inspect.isclass(value) and issubclass(value, roots) and value.__module__ == info.name
                    and not name.startswith("_")):
                found[(name, info.name)] = value
    rows = ["| exception | module | also a | what it means |", "|---|---|---|---|"]
    order = {root: rank for rank, root in enumerate(roots)}
    for (name, module), cls in sorted(found.items(), key=lambda item: (
            next(order[root] for root in roots if issubclass(item[1], root)), item[0][0].lower(), item[0][1])):
        also = ", ".join(f"`{base.__name__}`" for base in standard if issubclass(cls, base) and base is not Exception)
        doc = (inspect.getdoc(cls) or "").strip().split("\n\n")[0].replace("\n", " ")
        rows.append(f"| `{name}` | `{module}` | {also} | {_cell(doc)} |")
    return "\n".join(rows) + "\n"


MEANINGS = {
    "OK": "success: every file, block or module that had to be checked authenticated, every table check is OK",
    "INTEGRITY": "an integrity failure or a finding that is not OK: the message or report names the file, "
                 "the block or module, and the reason",
    "USAGE": "usage error, unreadable input (metadata.json, ledger, keystore), or keys missing so that "
             "something could not be authenticated; missing keys never count as success",
    "UNVERIFIED": "nothing wrong was found, but what would make it a verification was not checked "
                  "(`kms audit-log verify` without `--key-file`: the signatures; a trail in the older format 1: "
                  "missing digests and a cut tail); never printed as \"verified\"",
}

# --- Markdown files of the repository, included ---------------------------------------------
INCLUDE = re.compile(r"<!-- include: ([\w./-]+) -->")
LINK = re.compile(r"\[([^\]]+)\]\((?!https?:|#|mailto:)([^)]+)\)")


def include_markdown(relative: str) -> str:
    """``relative`` (from the repository root) as part of a page: see the module docstring."""
    path = ROOT / relative
    lines = path.read_text().splitlines()
    if lines and lines[0].startswith("# "):
        lines = lines[1:]
    out, fence = [], False
    for line in lines:
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence and re.match(r"#{1,5} ", line):
            line = "#" + line
        elif not fence:
            base = Path(relative).parent
            line = LINK.sub(lambda m: f"{m.group(1)} (`{(base / m.group(2)).as_posix()}`)"
                            if m.group(1).strip("`") != (base / m.group(2)).as_posix()
                            else f"`{(base / m.group(2)).as_posix()}`", line)
        out.append(line)
    return "\n".join(out).strip("\n") + "\n"


def kms_pages() -> str:
    """A list of the KMS provider pages in docs/kms/ (the ones being written land here by themselves)."""
    docs = ROOT / "docs" / "kms"
    lines = []
    for page in sorted(docs.glob("*.md")):
        if page.stem in ("index", "custom"):
            continue
        title = next((line[2:].strip() for line in page.read_text().splitlines() if line.startswith("# ")), page.stem)
        lines.append(f"- [{title}]({page.name})")
    lines.append("- [Your own KMS](custom.md)")
    return "\n".join(lines) + "\n"


CLI_PAGE = ROOT / "docs" / "reference" / "cli.md"
CLI_BEGIN = "<!-- generated: cli (python docs/hooks/generated.py rewrites this section from the parsers; do not edit) -->"
CLI_END = "<!-- end generated: cli -->"
_CLI_SECTION = re.compile(re.escape(CLI_BEGIN) + r"\n.*?" + re.escape(CLI_END), re.S)


def with_cli_reference(page: str) -> str:
    """``page`` (the text of cli.md) with its generated section made current."""
    if CLI_BEGIN not in page or CLI_END not in page:
        raise ValueError(f"{CLI_PAGE} has lost its markers {CLI_BEGIN!r} ... {CLI_END!r}")
    return _CLI_SECTION.sub(lambda _: f"{CLI_BEGIN}\n\n{cli_reference()}\n{CLI_END}", page)


GENERATORS = {
    "<!-- generated: kms-pages -->": kms_pages,
    "<!-- generated: cli -->": cli_reference,
    "<!-- generated: report-schema -->": report_schema,
    "<!-- generated: audit-schema -->": audit_schema,
    "<!-- generated: exit-status -->": exit_status_table,
    "<!-- generated: errors -->": errors_table,
    "<!-- generated: engines -->": engines_table,
}


def on_page_markdown(markdown: str, page, config, files) -> str:
    if CLI_BEGIN in markdown:
        markdown = with_cli_reference(markdown)
    for marker, generate in GENERATORS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, generate())
    return INCLUDE.sub(lambda m: include_markdown(m.group(1)), markdown)


def _nav_files(nav) -> set[str]:
    found = set()
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        if isinstance(value, list):
            found |= _nav_files(value)
        else:
            found.add(value)
    return found


def _find_section(nav, title: str):
    for item in nav:
        if isinstance(item, dict):
            (name, value), = item.items()
            if name == title and isinstance(value, list):
                return value
            if isinstance(value, list):
                found = _find_section(value, title)
                if found is not None:
                    return found
    return None


def on_config(config):
    """Add the KMS provider pages the nav does not list yet (see the module docstring)."""
    section = _find_section(config["nav"] or [], "KMS providers")
    if section is None:
        return config
    listed = _nav_files(config["nav"])
    docs = Path(config["docs_dir"])
    position = next((i for i, item in enumerate(section)
                     if isinstance(item, dict) and next(iter(item.values())) == "kms/custom.md"), len(section))
    for page in sorted((docs / "kms").glob("*.md")):
        relative = page.relative_to(docs).as_posix()
        if relative not in listed:
            title = next((line[2:].strip() for line in page.read_text().splitlines() if line.startswith("# ")),
                         page.stem)
            section.insert(position, {title: relative})
            position += 1
    return config


def on_files(files, config):
    """Publish the schema file itself beside the report reference page."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, SCHEMA_URL, abs_src_path=str(SCHEMA_PATH)))
    files.append(File.generated(config, AUDIT_SCHEMA_URL, abs_src_path=str(AUDIT_SCHEMA_PATH)))
    return files


if __name__ == "__main__":  # python docs/hooks/generated.py: rewrite the CLI reference in docs/reference/cli.md
    import sys

    sys.path.insert(0, str(ROOT))
    current = CLI_PAGE.read_text()
    updated = with_cli_reference(current)
    if updated != current:
        CLI_PAGE.write_text(updated)
        print(f"rewrote {CLI_PAGE.relative_to(ROOT)}")
    else:
        print(f"{CLI_PAGE.relative_to(ROOT)} is current")

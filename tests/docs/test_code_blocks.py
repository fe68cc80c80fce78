"""Every fenced code block of README.md and docs/ is executed or checked, so the docs cannot drift.

- ``python``: compiles; every ``pyiceberg_crypto`` import resolves, every attribute reached from an
  imported name exists, and every keyword argument of a call to the package names a parameter.
- ``sh``: ``bash -n``; each ``pyiceberg-crypto ...`` command is parsed by the CLI's real argparse
  parser, the verification job's arguments by the job's parser (``spark-submit .../job.py ...``,
  ``python -m pyiceberg_crypto.cli.verify_job ...``), ``python -c`` code is checked as a python block,
  ``pip install`` names existing extras and ``make`` existing targets. A block with none of these
  needs an opt-out.
- ``json`` parses; ``hcl`` has the form of a Vault policy; ``mermaid`` names its diagram type.
- ``yaml`` parses, each document a Kubernetes object (``apiVersion``, ``kind``); ``ini`` is a
  systemd unit (``[Service]`` with ``ExecStart``). In both, every ``pyiceberg-crypto ...`` command
  (a container's ``command`` + ``args``, ``ExecStart``) is parsed by the CLI's parser.
- Any other block (``text``, no language) needs an opt-out: ``<!-- not-checked: REASON -->``.

Blocks executed elsewhere (the front page's ten lines, the getting-started page, the reading
example) are checked here too.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.util
import inspect
import io
import json
import re
import shlex
import subprocess
import tomllib

import pytest

from pyiceberg_crypto.cli.main import build_parser
from pyiceberg_crypto.cli.verify_job import build_parser as build_job_parser
from tests.docs.blocks import ROOT, Block, all_blocks, blocks_of, opt_out_markers, python_block_after

BLOCKS = all_blocks()
CHECKED = [b for b in BLOCKS if b.opt_out is None]
EXTRAS = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
MAKE_TARGETS = set(re.findall(r"^([\w.-]+)\s*:(?!=)", (ROOT / "Makefile").read_text(), re.M))
MERMAID_TYPES = {"flowchart", "graph", "sequenceDiagram", "classDiagram", "stateDiagram-v2"}
#: Plain shell commands a block may consist of (a page setting its paths, creating a directory, stopping what it started).
PLAIN_SHELL = {"mkdir", "kill", "export"}
SHELL_SEPARATORS = {"&&", "||", ";", "|", "&", "(", ")", "$(", "`"}


def _ids(blocks):
    return [b.where for b in blocks]


# --- python ---------------------------------------------------------------------------------
def _import(module: str):
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise AssertionError(f"import of {module} fails: {exc}") from None


def _assigned_names(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return names


def _chain(node: ast.AST) -> list[str] | None:
    """``a.b.c`` -> ["a", "b", "c"]; None for anything but names and attributes."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *reversed(parts)]
    return None


def python_problems(code: str, where: str) -> list[str]:
    """What is wrong with a python block: syntax, imports, attributes, keyword arguments."""
    try:
        tree = ast.parse(code, where)
        compile(tree, where, "exec")
    except SyntaxError as exc:
        return [f"does not compile: {exc}"]
    bound: dict[str, object] = {}
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "pyiceberg_crypto":
            module = _import(node.module)
            for alias in node.names:
                if hasattr(module, alias.name):
                    bound[alias.asname or alias.name] = getattr(module, alias.name)
                else:
                    try:
                        bound[alias.asname or alias.name] = importlib.import_module(f"{node.module}.{alias.name}")
                    except ImportError:
                        problems.append(f"from {node.module} import {alias.name}: no such name")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "pyiceberg_crypto":
                    module = _import(alias.name)
                    bound[alias.asname] = module if alias.asname else _import("pyiceberg_crypto")
    for name in _assigned_names(tree) & set(bound):  # rebound later: no longer the package's object
        del bound[name]
    for node in ast.walk(tree):
        target = node.func if isinstance(node, ast.Call) else node if isinstance(node, ast.Attribute) else None
        chain = _chain(target) if target is not None else None
        if not chain or chain[0] not in bound:
            continue
        obj = bound[chain[0]]
        for depth, attr in enumerate(chain[1:], 1):
            if not hasattr(obj, attr):
                problems.append(f"{'.'.join(chain[:depth + 1])}: no such attribute")
                obj = None
                break
            obj = getattr(obj, attr)
        if obj is None or not isinstance(node, ast.Call) or not callable(obj):
            continue
        try:
            signature = inspect.signature(obj)
        except (TypeError, ValueError):
            continue
        parameters = signature.parameters
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
            continue
        for keyword in node.keywords:
            if keyword.arg is not None and keyword.arg not in parameters:
                problems.append(f"{'.'.join(chain)}(): no parameter {keyword.arg!r}")
    return problems


# --- sh -------------------------------------------------------------------------------------
def _strip_comment(line: str) -> str:
    """``line`` without its ``# comment`` (a ``#`` that starts a word, outside quotes)."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def shell_commands(code: str) -> list[list[str]]:
    """The simple commands of a shell block: continuations joined, comments dropped, split at
    ``&&``, ``|``, ``;``, ``$(``, ``(``; redirections and leading ``VAR=value`` removed."""
    commands = []
    for line in code.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(_strip_comment(line), posix=True, punctuation_chars="();<>|&")
        lexer.whitespace_split = True
        lexer.commenters = ""
        current: list[str] = []
        tokens = iter(list(lexer))
        for token in tokens:
            if token in SHELL_SEPARATORS or token == "$":
                if current:
                    commands.append(current)
                current = []
            elif set(token) <= set("<>&") or re.fullmatch(r"\d?>+&?\d*", token):
                next(tokens, None) if not re.fullmatch(r"\d?>&\d", token) else None
            elif not current and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", token):
                continue
            else:
                current.append(token)
        if current:
            commands.append(current)
    return commands


def _parse(parser, argv: list[str]) -> str | None:
    """None when ``argv`` parses, else argparse's error message."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            parser.parse_args(argv)
        except SystemExit as exc:
            if exc.code:
                return err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else f"exit {exc.code}"
    return None


def command_problems(argv: list[str]) -> tuple[bool, list[str]]:
    """``(recognized, problems)`` for one simple command."""
    while len(argv) > 1 and argv[0] in ("nohup", "exec", "time"):  # a command run by another: check it
        argv = argv[1:]
    # A shell variable a page set before ($METADATA_JSON, "$SNAPSHOT_ID"): any value of the right form.
    argv = ["1" if re.fullmatch(r"\$\{?\w+\}?", token) else token for token in argv]
    program = argv[0].rsplit("/", 1)[-1]
    if program == "pyiceberg-crypto":
        error = _parse(build_parser(), argv[1:])
        return True, [f"{shlex.join(argv)}: {error}"] if error else []
    if program in ("python", "python3") and len(argv) > 2 and argv[1] == "-c":
        return True, [f"python -c: {p}" for p in python_problems(argv[2], "python -c")]
    if program in ("python", "python3") and len(argv) > 2 and argv[1] == "-m":
        if argv[2] == "pyiceberg_crypto.cli.verify_job":
            error = _parse(build_job_parser(), argv[3:])
            return True, [f"{shlex.join(argv)}: {error}"] if error else []
        if argv[2].startswith("pyiceberg_crypto"):
            return True, [] if importlib.util.find_spec(argv[2]) else [f"no module {argv[2]}"]
        if argv[2] == "pip":
            return command_problems(["pip", *argv[3:]])
        return argv[2] in ("build", "venv"), []
    if program == "spark-submit":
        job = [i for i, token in enumerate(argv) if "verify_job" in token or token.endswith("cli/verify_job.py")]
        if job:
            error = _parse(build_job_parser(), argv[job[0] + 1:])
            return True, [f"the job's arguments {shlex.join(argv[job[0] + 1:])}: {error}"] if error else []
        return False, []
    if program == "pip" and len(argv) > 1 and argv[1] == "install":
        problems = []
        recognized = False
        for requirement in argv[2:]:
            match = re.fullmatch(r"pyiceberg-crypto(?:\[([\w,-]+)\])?", requirement)
            if match:
                recognized = True
                problems += [f"pip install {requirement}: no extra {extra!r} in pyproject.toml"
                             for extra in (match.group(1) or "").split(",") if extra and extra not in EXTRAS]
            elif requirement.endswith(".whl") or "pyiceberg-crypto" in requirement:
                recognized = True
        return recognized, problems
    if program == "make":
        return True, [f"make {target}: no such target" for target in argv[1:] if "=" not in target
                      and target not in MAKE_TARGETS]
    if program == "spark-pipelines":  # pyspark 4.1's command: its one subcommand the pages use
        return True, [] if argv[1:2] == ["run"] else [f"{shlex.join(argv)}: the pages run pipelines with 'run'"]
    if program in PLAIN_SHELL:  # nothing to check beyond bash -n; the docs walk runs them
        return True, []
    return False, []


def shell_problems(block: Block) -> list[str]:
    syntax = subprocess.run(["bash", "-n"], input=block.code, capture_output=True, text=True)
    if syntax.returncode != 0:
        return [f"bash -n: {syntax.stderr.strip()}"]
    problems, recognized = [], False
    for argv in shell_commands(block.code):
        known, found = command_problems(argv)
        recognized |= known
        problems += found
    if not recognized:
        problems.append("no command this test can check (pyiceberg-crypto, the verification job, python -c, "
                        "pip install pyiceberg-crypto, make): check it or opt out with a reason")
    return problems


# --- the rest ---------------------------------------------------------------------------------
HCL_LINE = re.compile(r'path "[\w/*+-]+"\s*\{\s*capabilities\s*=\s*\[\s*"(create|read|update|delete|list|sudo)"'
                      r'(\s*,\s*"(create|read|update|delete|list|sudo)")*\s*\]\s*\}')


def _cli_command_problems(argv: list[str]) -> list[str]:
    return command_problems(argv)[1] if argv and argv[0].rsplit("/", 1)[-1] == "pyiceberg-crypto" else []


def yaml_problems(code: str) -> list[str]:
    import yaml

    try:
        documents = [d for d in yaml.safe_load_all(code) if d is not None]
    except yaml.YAMLError as exc:
        return [f"not YAML: {exc}"]
    problems = [f"document {i + 1} is not a Kubernetes object (apiVersion, kind)"
                for i, d in enumerate(documents) if not (isinstance(d, dict) and "apiVersion" in d and "kind" in d)]

    def containers(node):
        if isinstance(node, dict):
            if "image" in node and ("args" in node or "command" in node):
                yield [str(t) for t in (node.get("command") or []) + (node.get("args") or [])]
            for value in node.values():
                yield from containers(value)
        elif isinstance(node, list):
            for value in node:
                yield from containers(value)

    for document in documents:
        for argv in containers(document):
            problems += _cli_command_problems(argv)
    return problems


def systemd_unit_problems(code: str) -> list[str]:
    import configparser

    unit = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    unit.optionxform = str
    try:
        unit.read_string(code)
    except configparser.Error as exc:
        return [f"not a systemd unit: {exc}"]
    if not unit.has_option("Service", "ExecStart"):
        return ["a systemd unit without [Service] ExecStart"]
    problems = []
    for argv in shell_commands(unit.get("Service", "ExecStart").lstrip("-@:+!")):
        problems += _cli_command_problems(argv)
    return problems


def block_problems(block: Block) -> list[str]:
    if block.language == "python":
        return python_problems(block.code, block.where)
    if block.language in ("sh", "bash", "shell"):
        return shell_problems(block)
    if block.language == "json":
        try:
            document = json.loads(block.code)
        except json.JSONDecodeError as exc:
            return [f"not JSON: {exc}"]
        if isinstance(document, dict) and "error" in document and "version" in document:  # an error document
            import jsonschema

            from pyiceberg_crypto.verify.report import report_schema

            return [f"not a valid error document: {e.message}"
                    for e in jsonschema.Draft202012Validator(report_schema()).iter_errors(document)]
        return []
    if block.language == "hcl":
        return [f"not a Vault policy line: {line!r}" for line in block.code.splitlines()
                if line.strip() and not HCL_LINE.fullmatch(line.strip())]
    if block.language == "yaml":
        return yaml_problems(block.code)
    if block.language == "ini":
        return systemd_unit_problems(block.code)
    if block.language == "mermaid":
        first = block.code.split(None, 1)[0] if block.code.strip() else ""
        unbalanced = block.code.count("subgraph") != len(re.findall(r"^\s*end\s*$", block.code, re.M))
        return ([f"unknown Mermaid diagram type {first!r}"] if first not in MERMAID_TYPES else []) + \
            (["subgraph without end"] if unbalanced else [])
    return [f"a {block.language or 'plain'} block has no checker: check it, or opt out with a reason"]


@pytest.mark.parametrize("block", CHECKED, ids=_ids(CHECKED))
def test_every_block_is_checked(block):
    problems = block_problems(block)
    assert not problems, f"{block.where}: " + "; ".join(problems)


def test_the_blocks_were_found():
    assert len(BLOCKS) > 60 and len(CHECKED) > 50
    languages = {b.language for b in CHECKED}
    assert {"python", "sh", "json", "hcl", "mermaid"} <= languages


def test_every_opt_out_has_a_reason_and_a_block():
    markers = opt_out_markers()
    assert markers, "the docs have no opt-out at all: then this test and the marker can go"
    for path, line, reason, follows in markers:
        where = f"{path.relative_to(ROOT)}:{line}"
        assert follows, f"{where}: an opt-out marker must be on the line right before a code fence"
        assert len(reason.split()) >= 4, f"{where}: the opt-out needs a reason (why it cannot be checked), got {reason!r}"


def test_the_checkers_catch_drift():
    """The checkers fail on what they are there to catch (a checker that passes everything is no check)."""
    assert python_problems("from pyiceberg_crypto.verify import verify_tables\n", "x")
    assert python_problems("from pyiceberg_crypto import config\nconfig.spark_settings('c', warehous='w')\n", "x")
    assert python_problems("from pyiceberg_crypto import config\nconfig.spark_setting('c')\n", "x")
    assert python_problems("print(\n", "x")
    assert not python_problems("from pyiceberg_crypto import config\nconfig.spark_settings('c', warehouse='w')\n", "x")
    assert command_problems(["pyiceberg-crypto", "verify", "m.json", "--kms", "k", "--no-such-option"])[1]
    assert command_problems(["pyiceberg-crypto", "keystore", "frobnicate", "keys.json"])[1]
    assert not command_problems(["pyiceberg-crypto", "verify", "m.json", "--kms", "k", "--json"])[1]
    assert command_problems(["pip", "install", "pyiceberg-crypto[nope]"])[1]
    assert command_problems(["make", "no-such-target"])[1]
    assert command_problems(["spark-submit", "--conf", "a=b", "pyiceberg_crypto/cli/verify_job.py", "--tabel", "t"])[1]
    assert shell_commands('pyiceberg-crypto verify "$(ls m/*.json | tail -n 1)" --kms k > r.json  # c\n') == [
        ["pyiceberg-crypto", "verify", "$(ls m/*.json | tail -n 1)", "--kms", "k"]]
    assert ["python", "-c", "print(1)"] in shell_commands("spark-submit $(python -c 'print(1)') job.py\n")


def test_the_front_page_ten_lines_are_the_docs_home_page_ten_lines():
    """README.md's ten lines run in tests/integration/test_readme_and_cluster.py and tests/test_newcomer.py;
    the docs' home page shows the same lines."""
    readme = python_block_after(ROOT / "README.md", "Ten lines of PySpark")
    home = python_block_after(ROOT / "docs" / "index.md", "Ten lines of PySpark")
    assert readme == home
    assert len([line for line in readme.splitlines() if line.strip()]) <= 10


def test_the_readme_links_into_the_docs_resolve():
    links = re.findall(r"\]\(((?!https?:|#)[^)#]+)(?:#[^)]*)?\)", (ROOT / "README.md").read_text())
    assert any(link.startswith("docs/") for link in links)
    missing = [link for link in links if not (ROOT / link).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"


def test_blocks_inside_list_items_are_found(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("- item:\n\n  ```python\n  x = 1\n  ```\n\n<!-- not-checked: a reason of some words -->\n```text\nout\n```\n")
    found = blocks_of(page)
    assert [(b.language, b.code, b.opt_out) for b in found] == [
        ("python", "x = 1\n", None), ("text", "out\n", "a reason of some words")]


#: At most this many tutorial and how-to pages may keep a reason not to be walked (issue 41, item 1:
#: "at most three pages, such as Docker's").
MAX_NOT_WALKED = 3


def walk_coverage_problems(pages: dict[str, str | None], walked: set[str], pending: set[str]) -> list[str]:
    """What is wrong with which pages the docs walk runs: ``pages`` maps each tutorial / how-to page
    (``how-to/x.md``) to its ``<!-- not-walked: REASON -->`` (or None). Every page is walked or says
    why (never both), a reason says enough, and at most :data:`MAX_NOT_WALKED` pages have one. A
    pending page (another change is making it walkable) may be either, or keep its reason meanwhile
    without counting toward the limit."""
    problems = []
    for page, reason in sorted(pages.items()):
        if page in pending:
            continue
        if (page in walked) + bool(reason) != 1:
            problems.append(f"docs/{page}: walked (tests/docs/test_docs_walk.py CHAINS) or marked "
                            "<!-- not-walked: REASON -->: exactly one")
        if reason and len(reason.split()) < 6:
            problems.append(f"docs/{page}: the not-walked reason says too little: {reason!r}")
    with_reason = sorted(page for page, reason in pages.items() if reason and page not in pending)
    if len(with_reason) > MAX_NOT_WALKED:
        problems.append(f"{len(with_reason)} pages are not walked ({', '.join(with_reason)}): at most "
                        f"{MAX_NOT_WALKED} may keep a reason; walk the others")
    return problems


def walkable_pages() -> list[str]:
    """Getting started and every page under docs/tutorials and docs/how-to, relative to docs/."""
    from tests.docs.blocks import DOCS

    return ["getting-started.md", *sorted(str(p.relative_to(DOCS)) for folder in ("tutorials", "how-to")
                                          for p in (DOCS / folder).glob("*.md"))]


def test_every_getting_started_and_how_to_page_is_walked_or_says_why():
    """issue 34 / 41: the docs walk (tests/docs/test_docs_walk.py) runs these pages from the installed
    wheel; a page it does not run says why (<!-- not-walked: REASON -->), and at most three do. Each
    walked page says which extras it needs, how to start over and, when it continues another page,
    which one."""
    from tests.docs.blocks import DOCS, not_walked
    from tests.docs.test_docs_walk import CHAINS, PENDING, pages_of, walked_pages

    pages = {page: not_walked(DOCS / page) for page in walkable_pages()}
    problems = walk_coverage_problems(pages, set(walked_pages()), set(PENDING))
    assert not problems, "\n".join(problems)
    for chain in map(pages_of, CHAINS):
        for position, page in enumerate(chain):
            text = (DOCS / page).read_text()
            assert "**Extras used:**" in text and "**Start over:**" in text, f"docs/{page}"
            if position:
                assert "**Starts from** [Getting started]" in text, f"docs/{page} continues {chain[0]}: say so"
            assert [b for b in blocks_of(DOCS / page) if b.runs], f"docs/{page}: nothing to run"


def test_the_walk_coverage_rule_fails_on_an_unlisted_page_and_on_a_fourth_reason():
    """The rule above catches what it is there to catch (a rule that passes everything is no rule)."""
    reason = "needs a cloud account these machines cannot have"
    assert not walk_coverage_problems({"a.md": None, "b.md": reason}, {"a.md"}, set())
    assert walk_coverage_problems({"a.md": None, "new.md": None}, {"a.md"}, set())       # neither walked nor why
    assert walk_coverage_problems({"a.md": reason}, {"a.md"}, set())                     # both
    assert walk_coverage_problems({"a.md": "too short"}, set(), set())
    three = {f"{n}.md": reason for n in "abc"}
    assert not walk_coverage_problems(three, set(), set())
    assert walk_coverage_problems({**three, "d.md": reason}, set(), set())               # a fourth reason
    assert not walk_coverage_problems({**three, "d.md": reason}, set(), {"d.md"})        # pending: not counted
    assert not walk_coverage_problems({**three, "d.md": None}, {"d.md"}, {"d.md"})       # pending, then walked


def test_every_not_run_marker_has_a_reason_and_a_block():
    from tests.docs.blocks import NOT_RUN, documentation_files

    found = 0
    for path in documentation_files():
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines):
            if NOT_RUN.match(line):
                found += 1
                assert number + 1 < len(lines) and lines[number + 1].lstrip().startswith("```"), \
                    f"{path}:{number + 1}: a not-run marker must be right before a code fence"
                assert len(NOT_RUN.match(line).group(1).split()) >= 4, f"{path}:{number + 1}: give a reason"
    assert found

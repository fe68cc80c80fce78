"""The package's layers, enforced over its import graph (docs/explanation/architecture.md).

    bottom    errors, properties, safe_text,         (no imports from the package but the version;
              exit_status, _atomic, _net,            _atomic and _net: errors only; _prometheus:
              _prometheus, _deprecated               the one Prometheus text renderer; _deprecated:
                                                     the old names of renamed classes)
    base      formats, io, kms, jars,                bytes, storage (FileIO only), keys, JVM artifacts,
              catalog.kinds, engines, spark,         which catalogs encrypt (the catalog package's base),
              each_table, listener                   what each engine reads (pure facts), Py4J's Java
                                                     objects seen from Python (spark.java); each_table:
                                                     running every table with a report (adopt, keys);
                                                     listener: the server plumbing bridge and serve
                                                     share (operator files, TLS, loopback, backlog)
    platform  config, bridge                         Spark settings, the in-process Py4J bridge
    table     table, catalog                         the table model; catalogs (Hive, REST, through
                                                     Spark, the JVM-free commits), which build on it
    features  verify, read, keys, adopt              never import one another, but read -> verify's
                                                     file checks (the documented seam below)
    apps      audit, demo, serve, testing            audit: the lake audit (on verify); demo: the two
                                                     demo jobs; serve: ``kms serve`` and its faces;
                                                     testing: the test kit, which nothing else imports
    cli       cli                                    the command line: nothing imports it

A module may sit lower than its package (:data:`MODULE_RANKS`): ``catalog.kinds`` is pure facts
about catalog properties that ``config`` and ``bridge`` need.

Each rule is checked on the source (ast), so a forbidden import fails here even when nothing at
run time happens to execute it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "pyiceberg_crypto"

RANKS = {
    "__init__": 0, "errors": 0, "properties": 0, "safe_text": 0, "exit_status": 0, "_log": 0, "_atomic": 0, "_net": 0,
    "_prometheus": 0, "_deprecated": 0,
    "formats": 1, "io": 1, "kms": 1, "jars": 1, "catalog.kinds": 1, "engines": 1, "spark": 1, "each_table": 1,
    "listener": 1,
    "config": 2, "bridge": 2,
    "table": 3, "catalog": 3,
    "verify": 4, "read": 4, "keys": 4, "adopt": 4,
    "audit": 5, "demo": 5, "serve": 5, "testing": 5,
    "cli": 6,
}
#: Modules ranked apart from their package (the key is what :func:`top` returns for them).
MODULE_RANKS = {"pyiceberg_crypto.catalog.kinds": "catalog.kinds"}
#: Imports between two packages of the same rank that the architecture allows.
SAME_RANK_ALLOWED = {
    ("_atomic", "errors"): False,  # its FileAccessError has the package's root
    ("_atomic", "_deprecated"): False,  # the old name AtomicWriteError
    ("errors", "_deprecated"): False,  # the old names of classes it defined
    ("_net", "errors"): False,  # parse_listen's InvalidArgumentError
    ("catalog.kinds", "errors"): False,
    ("catalog.kinds", "properties"): False,
    ("config", "properties"): False,
    ("engines", "errors"): False,
    ("each_table", "io"): False,  # an earlier run's report, read as a regular file
    ("engines", "properties"): False,
    ("spark", "errors"): False,
    ("catalog", "table"): False,  # the JVM-free commits write TableMetadata
    ("formats", "io"): False,
    ("kms", "io"): False,
    ("bridge", "config"): False,
    ("config", "bridge"): False,
}
#: read/ may reuse the verifier's file checks: one file against its key metadata, and a manifest
#: (list) read as the verifier authenticates it. Nothing else of verify/.
READ_MAY_USE_FROM_VERIFY = {"pyiceberg_crypto.verify.checks", "pyiceberg_crypto.verify.report",
                            "pyiceberg_crypto.verify.plan"}
#: Packages whose modules import the package at module level only (no import inside a function,
#: which is how an import circle hides).
TOP_LEVEL_IMPORTS_ONLY = ("formats", "io", "table", "catalog", "verify", "read", "keys", "adopt", "audit", "errors",
                          "properties", "safe_text")
#: Exceptions outside the package's root that are signals of one module to itself: the bridge
#: server closes a connection that broke the handshake (bridge.py4j_server catches it).
INTERNAL_SIGNALS = {"HandshakeRefusedError"}
#: Function-level imports that are not circles: optional dependencies loaded when used.
LAZY_ALLOWED: set[tuple[str, str]] = {
    ("pyiceberg_crypto.verify", "pyiceberg_crypto.verify.each_commit"),  # pyspark.sql.streaming, ~0.4 s
    ("pyiceberg_crypto.adopt.encrypt", "pyiceberg_crypto.bridge.key_check"),  # py4j: not before Spark runs (run_cli)
}


def modules() -> dict[str, Path]:
    return {".".join(("pyiceberg_crypto", *p.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__"): p
            for p in PACKAGE.rglob("*.py")}


def top(module: str) -> str:
    if module in MODULE_RANKS:
        return MODULE_RANKS[module]
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports(path: Path) -> list[tuple[str, bool, int]]:
    """(imported pyiceberg_crypto module, at module level?, line) of one file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []

    def visit(node: ast.AST, nested: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = nested or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.ImportFrom) and child.level == 0 and child.module \
                    and child.module.split(".")[0] == "pyiceberg_crypto":
                found.append((child.module, not nested, child.lineno))
                for alias in child.names:  # "from pyiceberg_crypto.verify import spark" names a module
                    candidate = f"{child.module}.{alias.name}"
                    if candidate in MODULES:
                        found.append((candidate, not nested, child.lineno))
            elif isinstance(child, ast.Import):
                found.extend((a.name, not nested, child.lineno) for a in child.names
                             if a.name.split(".")[0] == "pyiceberg_crypto")
            visit(child, inner)

    visit(tree, False)
    return found


MODULES = modules()
GRAPH = {name: imports(path) for name, path in MODULES.items()}


def test_every_package_has_a_rank():
    assert {top(m) for m in MODULES} <= set(RANKS), "a new top-level module needs a place in RANKS (and the docs)"


def test_imports_point_down():
    wrong = []
    for module, found in GRAPH.items():
        mine = top(module)
        for target, _, line in found:
            theirs = top(target)
            if theirs == mine or target == "pyiceberg_crypto":
                continue
            if RANKS[theirs] > RANKS[mine] or (RANKS[theirs] == RANKS[mine]
                                               and (mine, theirs) not in SAME_RANK_ALLOWED):
                if mine == "read" and target in READ_MAY_USE_FROM_VERIFY:
                    continue
                wrong.append(f"{module}:{line} imports {target} ({mine} rank {RANKS[mine]} -> {theirs} rank {RANKS[theirs]})")
    assert not wrong, "imports that point up or sideways:\n" + "\n".join(wrong)


def test_the_audit_is_a_feature_on_top_of_the_verifier():
    """audit/ builds on verify/; verify/ and read/ never import it (``import verify`` stays light)."""
    assert any(top(target) == "verify" for module, found in GRAPH.items() if top(module) == "audit"
               for target, _, _ in found)
    wrong = [f"{module}:{line} imports {target}" for module, found in GRAPH.items()
             if top(module) not in ("audit", "cli") for target, _, line in found if top(target) == "audit"]
    assert not wrong, "\n".join(wrong)


def test_nothing_imports_the_leaves():
    wrong = [f"{module}:{line} imports {target}" for module, found in GRAPH.items() for target, _, line in found
             if top(target) in ("cli", "testing") and top(module) != top(target)]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("feature", ["verify", "read"])
def test_what_checks_shares_nothing_with_a_writer(feature):
    """The verifier and the reader never import the test writers (AGS1 writer, key sealing)."""
    wrong = [f"{module}:{line}" for module, found in GRAPH.items() if top(module) == feature
             for target, _, line in found if target == "pyiceberg_crypto.testing"]
    assert not wrong, "\n".join(wrong)


def test_no_import_hidden_in_a_function():
    wrong = [f"{module}:{line} imports {target} inside a function"
             for module, found in GRAPH.items() if top(module) in TOP_LEVEL_IMPORTS_ONLY
             for target, at_top, line in found if not at_top and (module, target) not in LAZY_ALLOWED]
    assert not wrong, "\n".join(wrong)


def test_the_rules_catch_a_violation(tmp_path):
    """The checker itself: an upward import and a function-level import are both seen."""
    source = tmp_path / "example.py"
    source.write_text("from pyiceberg_crypto.verify.report import OK\n\n"
                      "def f():\n    from pyiceberg_crypto.cli.main import main\n", encoding="utf-8")
    assert imports(source) == [("pyiceberg_crypto.verify.report", True, 1), ("pyiceberg_crypto.cli.main", False, 4)]


def test_every_exception_has_the_package_root():
    import importlib
    import inspect

    from pyiceberg_crypto.errors import PyicebergCryptoError, PyicebergCryptoWarning
    from pyiceberg_crypto.testing.errors import TestKitError

    def rooted(value) -> bool:
        """A package error, or one of what may stand outside the root: a warning (its own base), the
        test kit's errors (a distribution of their own), an internal signal (a ``_`` name, or the
        bridge server's handshake refusal) that never leaves the module that raises it."""
        return (issubclass(value, (PyicebergCryptoError, PyicebergCryptoWarning, TestKitError))
                or value.__name__.startswith("_") or value.__qualname__ in INTERNAL_SIGNALS)

    rootless = []
    for name in MODULES:
        if name.endswith("pytest_plugin") or name.startswith("pyiceberg_crypto.read"):
            continue  # the plugin needs pytest; read/ is covered below (it needs pyarrow, always here in tests)
        module = importlib.import_module(name)
        rootless += [f"{name}.{attr}" for attr, value in vars(module).items()
                     if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == name
                     and not rooted(value)]
    for name in [m for m in MODULES if m.startswith("pyiceberg_crypto.read")]:
        module = importlib.import_module(name)
        rootless += [f"{name}.{attr}" for attr, value in vars(module).items()
                     if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == name
                     and not rooted(value)]
    assert not rootless, "exceptions outside PyicebergCryptoError: " + ", ".join(rootless)


def test_bad_input_is_one_class_under_one_name():
    from pyiceberg_crypto import errors, read, verify
    from pyiceberg_crypto.catalog import spark as catalog
    from pyiceberg_crypto.table import metadata

    assert read.TableInputError is verify.TableInputError is errors.TableInputError
    assert issubclass(errors.TableInputError, ValueError)
    # the pre-release aliases are gone: one name per concept
    for module, old in [(errors, "MetadataError"), (errors, "VerifyInputError"), (errors, "ReadInputError"),
                        (read, "ReadInputError"), (verify, "VerifyInputError"), (metadata, "MetadataError"),
                        (catalog, "metastore_table"), (catalog, "MetastoreTable")]:
        assert not hasattr(module, old), f"{module.__name__}.{old} should be gone"


def find_circles(edges: dict[str, set[str]]) -> list[str]:
    """Every import circle of a module graph, as ``a -> b -> a`` (a package importing its own
    modules is not one)."""
    circles, state = [], {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for target in sorted(edges.get(module, ())):
            if target.startswith(module + ".") or module == "pyiceberg_crypto":
                continue
            if state.get(target) == "open" and target in path:
                circles.append(" -> ".join(path[path.index(target):] + [target]))
            elif target not in state:
                visit(target, path + [target])
        state[module] = "done"

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])
    return circles


def test_no_import_circles():
    """No module reaches itself through imports (module-level or in a function): a circle means two
    modules that are one concept split, or a layer that points back up."""

    def owner(target: str) -> str:  # "from pyiceberg_crypto.x import y" where x is a package: its __init__
        return target if target in MODULES else target.rsplit(".", 1)[0]

    edges = {module: {owner(t) for t, _, _ in found if owner(t) in MODULES and owner(t) != module}
             for module, found in GRAPH.items()}
    circles = find_circles(edges)
    assert not circles, "import circles:\n" + "\n".join(circles)
    assert find_circles({"p.a": {"p.b"}, "p.b": {"p.c"}, "p.c": {"p.a"}}) == ["p.a -> p.b -> p.c -> p.a"]
    assert find_circles({"p": {"p.a"}, "p.a": {"p"}}) == []  # a package and its module


def test_exception_names_end_in_error_or_warning():
    """One naming rule for the package's exceptions (private ones too): ``...Error`` or ``...Warning``."""
    import importlib
    import inspect

    wrong = []
    for name in MODULES:
        if name.endswith("pytest_plugin"):
            continue
        module = importlib.import_module(name)
        wrong += [f"{name}.{attr}" for attr, value in vars(module).items()
                  if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == name
                  and not attr.endswith(("Error", "Warning"))]
    assert not wrong, "exceptions named otherwise: " + ", ".join(wrong)

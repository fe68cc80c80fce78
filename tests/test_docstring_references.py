"""The package's maps cannot drift: every ``:mod:``, ``:func:`` and ``:class:`` reference in a
docstring of the package names something that exists.

A reference is resolved as Sphinx would: a dotted name from the top (``pyiceberg_crypto.x.y``), or
relative to the module it is written in (``.sibling``, ``name`` of that module or its package);
``~`` and ``!`` prefixes and ``title <target>`` forms are understood. A name that lives in Java, or
anywhere but this package and Python's builtins, is written as a literal (````Name````) instead.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import re
from pathlib import Path
from types import ModuleType

import pyiceberg_crypto

PACKAGE = Path(pyiceberg_crypto.__file__).parent
ROLE = re.compile(r":(mod|func|class):`([^`]+)`")


def module_names() -> list[tuple[str, Path]]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names.append((".".join(parts[:-1] if parts[-1] == "__init__" else parts), path))
    return names


def target_of(text: str) -> str:
    """``~a.b`` -> ``a.b``; ``title <a.b>`` -> ``a.b``."""
    found = re.search(r"<([^>]+)>$", text.strip())
    return (found.group(1) if found else text.strip()).lstrip("~!")


def _attribute_path(dotted: str) -> bool:
    """``dotted`` is an importable module, or an attribute path inside one."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        try:
            for name in parts[split:]:
                found = getattr(found, name)
        except AttributeError:
            return False
        return True
    return False


def resolves(target: str, module: ModuleType) -> bool:
    package = module.__name__ if hasattr(module, "__path__") else module.__name__.rpartition(".")[0]
    if target.startswith("."):
        relative = target.lstrip(".")
        base = package
        for _ in range(len(target) - len(relative) - 1):
            base = base.rpartition(".")[0]
        candidates = [f"{base}.{relative}" if relative else base]
    else:
        candidates = [target, f"{module.__name__}.{target}", f"{package}.{target}"]
    if any(_attribute_path(candidate) for candidate in candidates):
        return True
    return "." not in target and hasattr(builtins, target)


def unresolved_references() -> list[str]:
    found = []
    for name, path in module_names():
        module = importlib.import_module(name)
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for role, text in ROLE.findall(ast.get_docstring(node, clean=False) or ""):
                if not resolves(target_of(text), module):
                    where = getattr(node, "name", None)
                    found.append(f"{path.relative_to(PACKAGE.parent)}{f' ({where})' if where else ''}: "
                                 f":{role}:`{text}`")
    return found


def test_every_docstring_reference_names_something_that_exists():
    assert unresolved_references() == []


def test_the_resolver_refuses_what_does_not_exist():
    module = importlib.import_module("pyiceberg_crypto.demo")
    assert resolves(".local", module) and resolves("pyiceberg_crypto.errors.PyicebergCryptoError", module)
    assert resolves("run_demo", module) and resolves("ValueError", module)
    assert not resolves(".services", module)  # the module that once was named here and never existed
    assert not resolves("pyiceberg_crypto.errors.NoSuchError", module)
    assert target_of("~pyiceberg_crypto.jars.download") == "pyiceberg_crypto.jars.download"
    assert target_of("the jars <pyiceberg_crypto.jars>") == "pyiceberg_crypto.jars"

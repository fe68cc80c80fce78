"""Print a PATH under which no JVM can start: what ``make test-fast`` runs the unit lane with.

    PATH=$(python -m tests.path_without_java /tmp/nojava-bin) python -m pytest -m "not jvm"

The directory is refilled with symbolic links to every program on the current PATH (first one
wins, like the shell's lookup) except the JDK's tools (``java``, ``javac``, ``keytool``, ... and
anything that resolves into a JDK). A test of the unit lane that tries to start a JVM then fails
at once ("Java gateway process exited", "No such file or directory: 'java'"), naming itself,
instead of quietly needing Java. Unset ``JAVA_HOME`` too: PySpark prefers it to PATH.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

JDK_TOOLS = frozenset({"java", "javac", "jar", "jshell", "keytool", "jps", "jstack", "jcmd", "mvn", "mvnw"})


def is_jdk_tool(program: Path) -> bool:
    """True for a JDK tool (by name, or because it resolves into a JVM's home)."""
    resolved = program.resolve()
    return program.name in JDK_TOOLS or resolved.name in JDK_TOOLS or "/jvm/" in str(resolved)


def fill_without_java(target: Path, path: str) -> list[str]:
    """Link every program on ``path`` but the JDK's into ``target``; returns the names left out."""
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    seen: set[str] = set()
    left_out: set[str] = set()
    for directory in path.split(os.pathsep):
        if not directory or not os.path.isdir(directory):
            continue
        for entry in sorted(os.scandir(directory), key=lambda e: e.name):
            if entry.name in seen or not os.access(entry.path, os.X_OK) or entry.is_dir():
                continue
            seen.add(entry.name)
            if is_jdk_tool(Path(entry.path)):
                left_out.add(entry.name)
                continue
            os.symlink(os.path.abspath(entry.path), target / entry.name)
    return sorted(left_out)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.path_without_java DIRECTORY", file=sys.stderr)
        return 2
    target = Path(argv[0]).absolute()
    left_out = fill_without_java(target, os.environ.get("PATH", ""))
    # The running interpreter's directory (the venv's bin, not linked: a venv's python finds its
    # pyvenv.cfg beside itself) comes first, as when the venv is activated.
    venv_bin = Path(sys.executable).parent
    java_in_venv = [p.name for p in venv_bin.iterdir() if is_jdk_tool(p)]
    if java_in_venv:
        print(f"{venv_bin} holds JDK tools ({', '.join(java_in_venv)}): cannot leave Java out", file=sys.stderr)
        return 1
    print(f"left off PATH: {', '.join(left_out) or 'nothing'}", file=sys.stderr)
    print(f"{venv_bin}{os.pathsep}{target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

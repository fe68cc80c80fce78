"""The one way the test kit's servers start a JVM: ``java``, heap, JIT and GC options, classpath,
main class and arguments::

    command = java_command("io.pyicebergcrypto.testing.LoopbackRestCatalog", "--port", "0",
                           classpath=[pyspark_jars_dir() / "*", testing_jar()], heap="256m")

The Hive metastore, the REST catalog and the Kafka broker (:mod:`.metastore`, :mod:`.rest`,
:mod:`.kafka`) are small servers that start often in tests: the serial collector, and for
servers of small requests the C1 compiler only (``c1_only``), halve their start time on a busy
2-core machine.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

from pyiceberg_crypto.testing._process import ServiceError


def java_executable() -> str:
    """``$JAVA_HOME/bin/java`` when JAVA_HOME is set, else ``java`` from the PATH."""
    home = os.environ.get("JAVA_HOME")
    candidate = Path(home) / "bin" / "java" if home else None
    if candidate and candidate.is_file():
        return str(candidate)
    found = shutil.which("java")
    if not found:
        raise ServiceError("no java on the PATH and JAVA_HOME is not set: the test servers need Java 17")
    return found


def pyspark_jars_dir() -> Path:
    """The ``jars`` directory of the installed pyspark (Hive metastore, Derby, DataNucleus, thrift)."""
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def java_command(main_class: str, *args: str, classpath: Iterable[str | os.PathLike], heap: str,
                 c1_only: bool = True, system_properties: Mapping[str, object] | None = None,
                 options: Iterable[str] = ()) -> list[str]:
    """The command line of one JVM: ``java -Xmx<heap> [-XX:TieredStopAtLevel=1] -XX:+UseSerialGC
    [options ...] [-Dkey=value ...] -cp <classpath> <main_class> <args>``.

    ``c1_only``: compile with C1 only (servers of small requests start faster). ``options``: other
    JVM options (``--add-opens=...``). ``system_properties``: ``-D`` options, in their order."""
    return [
        java_executable(),
        f"-Xmx{heap}",
        *(["-XX:TieredStopAtLevel=1"] if c1_only else []),
        "-XX:+UseSerialGC",
        *options,
        *(f"-D{key}={value}" for key, value in (system_properties or {}).items()),
        "-cp",
        os.pathsep.join(map(str, classpath)),
        main_class,
        *args,
    ]

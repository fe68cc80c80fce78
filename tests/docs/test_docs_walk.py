"""The docs walk: the getting-started and how-to pages run as written, from the built wheel installed
outside the repository, as a newcomer would run them (issue 34).

One virtual environment for every page (the wheel, then whatever extras each page's own
``pip install`` line adds), created outside the repository with nothing of the checkout visible (no
``PYTHONPATH``, no ``PYICEBERG_CRYPTO_JARS``: the jars come from ``spark.jars.packages``). Each
page's ``sh`` and ``python`` blocks run in order, in the page's directory:

- a chain of pages shares one directory: a page that "starts from" Getting started runs where
  Getting started left its table and keystore (:data:`CHAINS`); chains are independent and walk
  side by side, :data:`WALKERS` at a time (each test case waits for its own chain);
- the servers a page needs are the test session's (the test kit's ``hive_metastore`` and
  ``rest_catalog_server`` fixtures), their addresses in the variables the page documents
  (``$METASTORE_URI``, ``$REST_URI``: :data:`SERVERS`); a page that downloads jars gets
  ``$MAVEN_REPOSITORY``, a ``file://`` mirror of the project's pinned jars (no Maven Central here);
- every block runs as in one terminal: the shell variables a block exports are there for the next
  (``$METADATA_JSON``, ``$KMS_LISTEN``), python blocks see them in ``os.environ``; consecutive python
  blocks are one Python process (a page that continues "in the same Python session");
- the substitutions the pages explain: ``pip install 'pyiceberg-crypto[X]'`` installs the built
  wheel with extras X (``[testing]`` pulls the test kit's wheel, built beside it), ``python -m venv ... && . .venv/bin/activate`` is the shared environment (or,
  for a chain in :data:`OWN_VENV`, the chain's own, made empty by the walk),
  ``$KMS_LISTEN`` and ``$AWS_FACE_LISTEN`` are ports on 127.0.0.1 reserved for the walk (below the
  kernel's ephemeral range: :mod:`pyiceberg_crypto.testing.ports`);
- no page can reach a cloud endpoint by accident: the walk's terminal has none of the caller's
  ``AWS_*`` variables, and the AWS SDKs' endpoint (``AWS_ENDPOINT_URL``) is a loopback port that
  refuses every connection, unless a page sets its own (``AWS_ENDPOINT_URL_KMS``);
- a block marked ``<!-- not-run: REASON -->`` or ``<!-- not-checked: REASON -->`` is not run, and a
  page marked ``<!-- not-walked: REASON -->`` is not walked (tests/docs/test_code_blocks.py checks
  that every tutorial and how-to page is walked or says why, and that at most three say why).

Marked ``newcomer``: ``make test`` runs it in its newcomer pytest process, with the newcomer tests
(they share the one built wheel, the ``dist`` fixture, which ``make test`` builds before its lanes).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Callable

import pytest

from pyiceberg_crypto import jars
from pyiceberg_crypto.testing.ports import SPARK_CONNECT_PORT, closed_port, fixed_port, reserve_port
from pyiceberg_crypto.testing.pytest_plugin import rest_catalog_server  # noqa: F401  (the rest-catalog page's server)
from tests.docs.blocks import DOCS, Block, blocks_of
from tests.jvm_archive import make_archive
from tests.testkit import PROJECT_ENV, QUICK_INSTALL_ENV, SHORT_JVM_OPTIONS, spark_jvm_options

pytestmark = [pytest.mark.newcomer, pytest.mark.slow]

#: Pages that run one after another in one directory, each continuing from the previous. Chains run
#: side by side (:data:`WALKERS` at a time), each in its own directory: pages that only need Getting
#: started's table get a chain of their own after it, rather than waiting for every page before them.
CHAINS = {
    "lake": ["getting-started.md", "how-to/verify.md", "how-to/verify-after-write.md"],
    "read": ["how-to/read.md", "how-to/check-files.md"],
    "keys": ["how-to/rotate-keys.md"],
    "rest": ["how-to/rest-catalog.md"],
    "commits": ["how-to/verify-each-commit.md"],
    "key-compromised": ["how-to/key-compromised.md"],
    "service": ["how-to/kms-service.md"],
    "jars": ["how-to/offline-jars.md"],
    "audit": ["how-to/audit-lake.md"],
    "spark-3.5": ["how-to/spark-3.5.md"],
    "services": ["how-to/services.md"],
    "pipelines": ["how-to/declarative-pipelines.md"],
    "trino": ["how-to/trino.md"],
    "govern": ["how-to/govern-keys.md"],
    "adopt": ["how-to/encrypt-existing-table.md"],
}
#: The page that runs ``spark-pipelines`` (its chain holds Spark Connect's fixed port while it walks).
PIPELINES_PAGE = "how-to/declarative-pipelines.md"

#: Chains that start where another chain's first page (Getting started) left its directory: Getting
#: started runs once, in the chain named here, and each of these chains continues from a copy of the
#: directory it left, taken before the next page runs. Iceberg and the embedded metastore record
#: absolute paths, so a copy is only the same directory at the same path: the chain's commands run
#: in a mount namespace of their own (``unshare --mount``) where the copy is mounted over the
#: original's path. The commands are the page's, unchanged. Where mount namespaces are not available
#: (not root), or the other chain is not selected, the chain runs that first page itself first.
CONTINUES = {"read": "lake", "keys": "lake", "rest": "lake", "commits": "lake", "key-compromised": "lake"}
#: Each page's seconds in the walk on the loaded CI machine (the last ``make test`` before the walk
#: was scheduled, 4 lanes in parallel); the walk starts the longest ready chain first, so that no
#: long chain is left to run alone at the end. Only the order depends on them, never a verdict.
PAGE_SECONDS = {
    "getting-started.md": 214, "how-to/read.md": 106, "how-to/verify.md": 173, "how-to/verify-after-write.md": 181,
    "how-to/check-files.md": 13, "how-to/verify-each-commit.md": 111, "how-to/rotate-keys.md": 585,
    "how-to/rest-catalog.md": 128, "how-to/kms-service.md": 179, "how-to/offline-jars.md": 6,
    "how-to/audit-lake.md": 117, "how-to/spark-3.5.md": 71, "how-to/services.md": 224,
    "how-to/declarative-pipelines.md": 320, "how-to/key-compromised.md": 380, "how-to/trino.md": 13,
    "how-to/govern-keys.md": 15, "how-to/encrypt-existing-table.md": 230,
}
#: Chains whose page makes a virtual environment of its own (``python -m venv``): the walk makes it
#: (empty, outside the repository) and the chain's terminal has it on ``PATH``.
OWN_VENV = {"spark-3.5"}
#: The servers a chain's pages read from the environment, as each page documents it: the test
#: session's own (pyiceberg_crypto.testing.pytest_plugin), started only when a selected chain needs one.
SERVERS = {
    "rest": {"REST_URI": ("rest_catalog_server", "uri")},
    "audit": {"METASTORE_URI": ("hive_metastore", "uri")},
}
#: How many chains walk at once: most of a page's time is a JVM starting, which two do side by side
#: on two cores about as fast as one.
WALKERS = 2
#: How-to pages another change is making walkable (it adds their chain at the end of CHAINS and
#: drops their not-walked marker); until it lands they may keep their reason, which does not count
#: toward the three a page may keep. Remove an entry once its chain is in CHAINS.
PENDING: dict[str, str] = {}
#: What each page's run must print (stdout of its blocks, in order), beyond every block exiting 0.
EXPECTED = {
    "getting-started.md": ["verified: True {'OK': 4}", "OK: every file is encrypted, authentic and in its place",
                           "{'id': 2, 'item': 'pear'}"],
    "how-to/read.md": ["[{'id': 2, 'item': 'pear'}]", "(1 row)"],
    "how-to/verify.md": ["OK: every file is encrypted, authentic and in its place", "verified: True"],
    "how-to/verify-after-write.md": ["current {'OK':", "since {'OK':"],
    "how-to/rotate-keys.md": ["refused, as it should be: lake.shop.returns still needs version 1",
                              "no table of the 2 checked needs key id 'orders-key' version 1",
                              "retired key id 'orders-key' version 1 from keys.json"],
    "how-to/verify-each-commit.md": ["failures 0", "30 events"],
    "how-to/kms-service.md": ["1\tapple", "2\tpear", "OK: every file is encrypted, authentic and in its place"],
    "how-to/rest-catalog.md": ["verified: True", "{'OK': 1}", "[{'id': 1, 'item': 'apple'}, {'id': 2, 'item': 'pear'}]",
                               "(2 rows)"],
    "how-to/audit-lake.md": ["{'OK': 2}", "tables    2 (2 OK)", "OK: every Iceberg table is encrypted and verified"],
    "how-to/spark-3.5.md": ["pyspark 3.5.9: Spark 3.5", "iceberg-spark-runtime-3.5_2.12:1.12.0",
                            "1 jar(s) in"],
    "how-to/services.md": ["REST catalog ready at http://127.0.0.1:", "metastore thrift://127.0.0.1:",
                           "org.apache.iceberg.aws.s3.S3FileIO"],
    "how-to/declarative-pipelines.md": ["warehouse/events/metadata/", "warehouse/events_by_bucket/metadata/",
                                        "OK: every file is encrypted, authentic and in its place"],
    "how-to/check-files.md": ["AGS1 (AES GCM Stream)", "authenticated:    yes, all 1 blocks", '"authenticated": true'],
    "how-to/offline-jars.md": ["3 jar(s) in", "local jars  ($PYICEBERG_CRYPTO_JARS=",
                               "iceberg-spark-runtime-4.1_2.13-1.12.0.jar"],
    "how-to/key-compromised.md": ["COMPROMISED: depends on version 1", "exit 1: a table still depends",
                                  "refused: nosuch is not the table's key", "would re-encrypt branches: audit",
                                  "would move tags to a re-encrypted copy: before_leak",
                                  "would drop tag before_leak: 0 of its row(s) are on no branch",
                                  "branches re-encrypted: audit; tags moved: before_leak", ": OK",
                                  "proof ok: True | files reachable:", "still in storage: 0", "storage findings: 0",
                                  "OK: no table depends on the compromised material"],
    "how-to/trino.md": ["(region eu-west-1; AWS_ENDPOINT_URL_KMS=https://127.0.0.1:", "CA clients trust: ",
                        "the face's blob opens without the service: True", "the bridge's key opens through the face: True"],
    "how-to/govern-keys.md": ["aws:trino: unwrap on analytics-*", "in force", "-rw-------", "trino decrypts analytics-2026: True",
                              "trino encrypts: AccessDeniedException",
                              "a refused key and a missing key get one answer: True", ": verified up to digest ", "it reaches the witness's last digest",
                              ": signatures NOT checked (no --key-file): NOT verified", "exit 3",
                              "ends with the stop digest",
                              "line 5: 1 line(s) removed before it", "exit 1"],
    "how-to/encrypt-existing-table.md": ["lake.shop.orders: encrypted (master key lake-key, format 3)",
                                         "compared: 3 row(s) in 2 partition(s)", "proof: verify_table", ": OK",
                                         "not kept: time travel", "DROP TABLE lake.shop.orders__plaintext_",
                                         "the plaintext original is purged",
                                         "swapped: True | purged: True | rows compared: 1", "proof: verify_table: OK",
                                         "lake: dry run: 2 table(s) would be encrypted; nothing was changed",
                                         "WOULD ENCRYPT lake.web.clicks", "SKIPPED  lake.shop.orders__plaintext_",
                                         "lake: 2 table(s) encrypted, 0 failed", "DONE     lake.web.views",
                                         "report ok: True {'done': 2, 'failed': 0, 'skipped': 1, 'planned': 0}"],
}
ENV_FILE = ".docs-walk.env"
PIP_INSTALL = re.compile(r"""pip install (['"]?)pyiceberg-crypto(\[[\w,-]+\])?\1""")


def walked_pages() -> list[str]:
    return [page for chain in CHAINS.values() for page in chain]


def pages_of(chain: str) -> list[str]:
    """Every page a chain's directory has seen, in order: a chain that continues another
    (:data:`CONTINUES`) starts with that chain's first page."""
    parent = CONTINUES.get(chain)
    return ([CHAINS[parent][0]] if parent else []) + CHAINS[chain]


def chain_seconds(chain: str) -> int:
    """What a chain is expected to take (:data:`PAGE_SECONDS`; a page not listed counts a minute)."""
    return sum(PAGE_SECONDS.get(page, 60) for page in CHAINS[chain])


def steps(page: Path) -> list[Block]:
    """The blocks the walk runs, in order; consecutive python blocks joined into one."""
    out: list[Block] = []
    for block in blocks_of(page):
        if not block.runs:
            continue
        if out and block.language == "python" and out[-1].language == "python":
            previous = out[-1]
            out[-1] = Block(previous.file, previous.line, "python", previous.code + "\n" + block.code, None)
        else:
            out.append(block)
    return out


def substituted(code: str, wheel: Path) -> str:
    """A shell block with the substitutions the pages explain (see the module docstring). pip also
    looks in the wheel's directory (``--find-links``): the ``[testing]`` extra is the test kit's own
    distribution, pyiceberg-crypto-testing, built beside the wheel by ``make dist``."""
    lines = [line for line in code.splitlines() if not line.startswith("python -m venv ")]
    code = "\n".join(lines) + "\n"
    return PIP_INSTALL.sub(lambda m: f"pip install -q --disable-pip-version-check --find-links '{wheel.parent}' "
                                     f"'{wheel}{m.group(2) or ''}'", code)


def terminal(code: str, language: str) -> str:
    """``code`` as one step of a terminal session: the previous steps' exported variables first."""
    restore = f"set -a; if [ -f {ENV_FILE} ]; then . ./{ENV_FILE}; fi; set +a\n"
    if language == "python":
        return restore + 'exec python -c "$DOCS_WALK_CODE"\n'
    return restore + code + f"\nexport -p > {ENV_FILE}\n"


@pytest.fixture(scope="module")
def walk_venv(dist, tmp_path_factory):
    """One environment for every page: the built wheel installed outside the repository."""
    with closed_port() as refusing:
        yield _walk_venv(dist, tmp_path_factory, refusing)


def _walk_venv(dist, tmp_path_factory, refusing: int) -> dict:
    root = tmp_path_factory.mktemp("docs-walk")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    env = {k: v for k, v in os.environ.items() if k not in PROJECT_ENV and not k.startswith("AWS_")}
    env.update(closed_cloud_environment(refusing))
    env.update(QUICK_INSTALL_ENV)  # pip's byte-compiling of all of pyspark left to Python's first imports
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["PYSPARK_PYTHON"] = str(venv / "bin" / "python")
    # Every extra the shared environment's pages install, installed now: a page's own pip install
    # is then a no-op, never rewriting a package (numpy) that another chain's process is importing.
    extras = sorted(shared_extras())
    wheel = f"{dist['wheel']}[{','.join(extras)}]" if extras else str(dist["wheel"])
    result = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                             "--find-links", str(dist["wheel"].parent), wheel], env=env, cwd=root, capture_output=True,
                            text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    # The drivers' JVM options only: the pages' commands and settings are as written. With the
    # environment's own class-data sharing archive (tests.jvm_archive; the project's is for another
    # pyspark path), the pages' Spark drivers start with half the CPU.
    archive = make_archive(venv / "bin" / "python", root / "walk.jsa", env=env, base_options=SHORT_JVM_OPTIONS)
    env["SPARK_SUBMIT_OPTS"] = spark_jvm_options(archive)
    return {"root": root, "env": env, "wheel": dist["wheel"]}


def shared_extras() -> set[str]:
    """The extras the ``pip install`` lines of the pages walked in the shared environment name."""
    pages = {page for chain, chain_pages in CHAINS.items() if chain not in OWN_VENV for page in chain_pages}
    extras: set[str] = set()
    for page in pages:
        for block in blocks_of(DOCS / page):
            for match in PIP_INSTALL.finditer(block.code):
                extras.update(e.strip() for e in (match.group(2) or "[]")[1:-1].split(",") if e.strip())
    return extras


def closed_cloud_environment(port: int) -> dict[str, str]:
    """The AWS SDKs' settings that keep a page off every cloud endpoint: their endpoint is
    ``port`` on loopback (held closed by the walk), and no instance metadata service is asked."""
    return {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_EC2_METADATA_DISABLED": "true"}


#: Chains walk side by side in one virtual environment: one ``pip install`` into it at a time.
PIP_LOCK = threading.Lock()


def in_namespace(command: list[str], directory: Path, seen_at: Path) -> list[str]:
    """``command`` in a mount namespace of its own where ``directory`` is mounted over ``seen_at``,
    and run from there (a copy of a chain's directory at the original's path: :data:`CONTINUES`)."""
    mount = 'mount --bind "$1" "$2" && cd "$2" && shift 2 && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", mount, "sh", str(directory), str(seen_at),
            *command]


def mount_namespaces_work(scratch: Path) -> bool:
    """Whether this process may make mount namespaces (root, ``unshare`` installed)."""
    (scratch / "probe-a").mkdir(exist_ok=True)
    (scratch / "probe-b").mkdir(exist_ok=True)
    try:
        result = subprocess.run(in_namespace(["true"], scratch / "probe-a", scratch / "probe-b"),
                                capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0


def walk(pages: list[str], directory: Path, env: dict[str, str], wheel: Path, *, seen_at: Path | None = None,
         after_first: Callable[[], None] = lambda: None) -> dict[str, dict[str, float]]:
    """Run ``pages`` in ``directory`` (made here unless ``seen_at``: then ``directory`` is a copy,
    run where it is seen at ``seen_at`` in a mount namespace); returns ``{page: {block: seconds}}``
    (``block``: its ``docs/page.md:line``, the runs of consecutive python blocks joined), in order.
    ``after_first`` is called once the first page has run (and before the second starts)."""
    if seen_at is None:
        directory.mkdir()
    durations = {}
    for position, name in enumerate(pages):
        page = DOCS / name
        durations[name] = {}
        output = []
        for block in steps(page):
            started = time.monotonic()
            code = substituted(block.code, wheel) if block.language == "sh" else block.code
            step_env = dict(env, DOCS_WALK_CODE=code) if block.language == "python" else env
            command = ["bash", "-e", "-c", terminal(code, block.language)]
            if seen_at is not None:
                command = in_namespace(command, directory, seen_at)
            with PIP_LOCK if "pip install" in code else contextlib.nullcontext():
                result = subprocess.run(command, cwd=directory, env=step_env, capture_output=True, text=True,
                                        timeout=900)
            assert result.returncode == 0, (
                f"{block.where} ({block.language}) failed with exit {result.returncode} in {directory}:\n{code}\n"
                f"--- stdout\n{result.stdout[-3000:]}\n--- stderr\n{result.stderr[-5000:]}")
            output.append(result.stdout)
            durations[name][block.where] = round(time.monotonic() - started, 1)
        printed = "\n".join(output)
        for expected in EXPECTED.get(name, []):
            assert expected in printed, f"docs/{name}: {expected!r} not in its output:\n{printed[-4000:]}"
        if position == 0:
            after_first()
    return durations


def _running(pid_file: Path) -> bool:
    try:
        os.kill(int(pid_file.read_text().strip()), 0)
    except (ValueError, ProcessLookupError, FileNotFoundError):
        return False
    return True


def _stop_leftovers(directory: Path) -> None:
    """Stop a background process a page started and did not stop (its pid file is the page's)."""
    for pid_file in directory.glob("*.pid"):
        try:
            os.kill(int(pid_file.read_text().strip()), signal.SIGTERM)
        except (ValueError, ProcessLookupError, PermissionError):
            pass


def maven_mirror(directory: Path) -> str:
    """A ``file://`` Maven repository of the project's pinned jars (``$PYICEBERG_CRYPTO_JARS``, as
    ``make`` exports it), for the pages that download jars (offline-jars): the machines that run the
    walk reach no Maven Central. Links, not copies; ``jars download`` checks each against its pin."""
    local = jars.local_jars_dir()
    assert local is not None, "the docs walk needs $PYICEBERG_CRYPTO_JARS (make exports it) for its Maven mirror"
    root = directory.resolve().as_uri()
    for artifact in {a for line in jars.SUPPORTED_SPARK_LINES.values() for a in jars.artifacts(line, aws=True, local=True)}:
        source = local / artifact.file_name
        if source.is_file():
            target = Path(artifact.url(root).removeprefix("file://"))
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(source)
    return root


def chain_environment(chain: str, base: dict[str, str], root: Path, servers: dict[str, str]) -> dict[str, str]:
    """What a chain's terminal has besides the walk's environment: the variables its pages document
    (``servers``: the addresses of the session's servers, by variable)."""
    env = dict(base, KMS_LISTEN=f"127.0.0.1:{reserve_port()}", AWS_FACE_LISTEN=f"127.0.0.1:{reserve_port()}",
               **servers)
    if chain in ("jars", "spark-3.5"):
        env["MAVEN_REPOSITORY"] = maven_mirror(root / f"maven-mirror-{chain}")
    if chain in OWN_VENV:
        venv = root / f"venv-{chain}"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
        env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH'].split(os.pathsep, 1)[1]}"   # in place of the shared one
        env["PYSPARK_PYTHON"] = str(venv / "bin" / "python")
    return env


def copy_for(directory: Path, copy: Path) -> None:
    """A copy of a chain's directory for a chain that continues from it: a new terminal there (the
    exported variables of the first chain's terminal, its own port among them, stay behind)."""
    shutil.copytree(directory, copy, symlinks=True)
    (copy / ENV_FILE).unlink(missing_ok=True)


class Walkers:
    """Runs chains :data:`WALKERS` at a time, the longest ready one first; a chain that continues
    another (:data:`CONTINUES`) is ready once that chain's first page has run and its directory has
    been copied. ``futures[chain]`` is the result of ``run(chain, release)``; ``run`` calls
    ``release(chain)`` after the chain's first page (the chains continuing it become ready).
    ``seconds(chain)``: how long a chain is expected to take (:func:`chain_seconds`)."""

    def __init__(self, chains: list[str], waiting_for: dict[str, str],
                 run: Callable[[str, Callable[[str], None]], object], seconds: Callable[[str], int] = chain_seconds):
        self.futures: dict[str, Future] = {chain: Future() for chain in chains}
        self._waiting_for = dict(waiting_for)          # chain -> the chain it waits for
        self._ready = [chain for chain in chains if chain not in self._waiting_for]
        self._run = run
        self._seconds = seconds
        self._stopping = False
        self._changed = threading.Condition()
        self._threads = [threading.Thread(target=self._walker, name=f"docs-walk-{n}", daemon=True)
                         for n in range(WALKERS)]
        for thread in self._threads:
            thread.start()

    def release(self, parent: str) -> None:
        """The chains waiting for ``parent`` may start."""
        with self._changed:
            for chain, waited in list(self._waiting_for.items()):
                if waited == parent:
                    del self._waiting_for[chain]
                    self._ready.append(chain)
            self._changed.notify_all()

    def _fail_waiting(self, parent: str, error: BaseException) -> None:
        with self._changed:
            failed = [chain for chain, waited in self._waiting_for.items() if waited == parent]
            for chain in failed:
                del self._waiting_for[chain]
            self._changed.notify_all()
        for chain in failed:
            if not self.futures[chain].done():
                self.futures[chain].set_exception(RuntimeError(f"chain {parent!r} failed before its first page was "
                                                               f"done, which chain {chain!r} continues: {error}"))

    def _next(self) -> str | None:
        with self._changed:
            while not self._stopping and not self._ready and self._waiting_for:
                self._changed.wait()
            if self._stopping or not self._ready:
                return None
            chain = max(self._ready, key=self._seconds)
            self._ready.remove(chain)
            return chain

    def _walker(self) -> None:
        while (chain := self._next()) is not None:
            future = self.futures[chain]
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(self._run(chain, self.release))
            except BaseException as error:  # noqa: BLE001  (the test case of the chain reports it)
                future.set_exception(error)
            self._fail_waiting(chain, future.exception() or RuntimeError("it did not release them"))

    def stop(self) -> None:
        """Start no more chains; wait for the running ones."""
        with self._changed:
            self._stopping = True
            self._changed.notify_all()
        for future in self.futures.values():
            future.cancel()
        for thread in self._threads:
            thread.join()


@pytest.fixture(scope="module")
def chain_walks(walk_venv, request):
    """Every selected chain, started at once, :data:`WALKERS` at a time: ``{chain: Future of
    (directory, durations, pid files left running)}``. Each test case waits for its own chain."""
    selected = list(dict.fromkeys(item.callspec.params["chain"] for item in request.session.items
                                  if item.originalname == "test_the_pages_run_as_written" and hasattr(item, "callspec")))
    root = walk_venv["root"]
    servers = {chain: {variable: getattr(request.getfixturevalue(fixture), attribute)
                       for variable, (fixture, attribute) in SERVERS.get(chain, {}).items()}
               for chain in selected}
    copies = mount_namespaces_work(root)
    continuing = {chain: parent for chain, parent in CONTINUES.items()
                  if chain in selected and parent in selected and copies}

    def run(chain: str, release: Callable[[str], None]) -> tuple[Path, dict[str, float], list[str]]:
        """The chain's directory, each page's seconds, and the pid files whose process the pages
        left running (looked at before the walk stops them)."""
        directory = root / chain
        env = chain_environment(chain, walk_venv["env"], root, servers[chain])
        parent = continuing.get(chain)
        pages = CHAINS[chain] if parent or chain not in CONTINUES else pages_of(chain)
        followers = [c for c, p in continuing.items() if p == chain]

        def after_first() -> None:
            for follower in followers:
                copy_for(directory, root / follower)
            release(chain)

        # A page that runs spark-pipelines: its Connect server binds 15002 whatever the settings,
        # so one such run at a time on this machine (tests/serve/test_declarative_pipelines.py too).
        holds = fixed_port(SPARK_CONNECT_PORT) if PIPELINES_PAGE in pages else contextlib.nullcontext()
        try:
            with holds:
                durations = walk(pages, directory, env, walk_venv["wheel"], seen_at=root / parent if parent else None,
                                 after_first=after_first)
            return directory, durations, sorted(p.name for p in directory.glob("*.pid") if _running(p))
        finally:
            _stop_leftovers(directory)

    walkers = Walkers(selected, continuing, run)
    yield walkers.futures
    walkers.stop()


@pytest.mark.parametrize("chain", list(CHAINS))
def test_the_pages_run_as_written(chain_walks, chain, record_property, capsys):
    directory, durations, left_running = chain_walks[chain].result()
    record_property("durations", durations)
    with capsys.disabled():
        print(f"\ndocs walk {chain}: " + ", ".join(f"{page} {sum(blocks.values()):.1f} s ("
                                                  + ", ".join(f"{where.rsplit(':', 1)[1]}: {seconds}"
                                                              for where, seconds in blocks.items()) + ")"
                                                  for page, blocks in durations.items()))
    if chain == "lake":
        table = directory / "warehouse" / "shop.db" / "orders"
        files = [p for p in table.rglob("*") if p.is_file() and not p.name.endswith((".metadata.json", ".crc"))]
        assert {p.parent.name for p in files} == {"data", "metadata"}
        assert all(p.read_bytes()[:4] in (b"PARE", b"AGS1") for p in files), [(p.name, p.read_bytes()[:4]) for p in files]
        assert (directory / "keys.json").stat().st_mode & 0o077 == 0  # the page says: mode 0600
        assert (directory / "verify-state").stat().st_mode & 0o777 == 0o700
    if chain == "read":
        assert (directory / "file-keys").stat().st_mode & 0o777 == 0o700
        assert all(p.stat().st_mode & 0o077 == 0 for p in (directory / "file-keys").glob("key*"))
    if chain == "service":
        assert not (directory / "run" / "kms.token").exists(), "the page's kill -TERM did not stop the service"
    if chain == "audit":
        assert (directory / "reports" / "lake.html").read_text().startswith("<!DOCTYPE html>")
        assert "pyiceberg_crypto_audit_table_ok" in (directory / "textfile" / "lake_audit.prom").read_text()
        assert (directory / "ledgers").stat().st_mode & 0o777 == 0o700
    if chain == "spark-3.5":
        assert [p.name for p in (directory / "iceberg-jars-3.5").glob("*.jar")] == [
            "iceberg-spark-runtime-3.5_2.12-1.12.0.jar"]
    if chain == "services":
        assert "rest.pid" not in left_running, "the page's kill -TERM did not stop the REST catalog"
    if chain == "pipelines":
        assert "kms-serve.pid" not in left_running, "the page's kill -TERM did not stop the service"
    if chain == "jars":
        assert sorted(p.name for p in (directory / "iceberg-jars").glob("*.jar")) == [
            "iceberg-aws-bundle-1.12.0.jar", "iceberg-spark-runtime-3.5_2.12-1.12.0.jar",
            "iceberg-spark-runtime-4.1_2.13-1.12.0.jar"]
        assert not any(p.is_symlink() for p in (directory / "iceberg-jars").iterdir()), "downloaded, not linked"


def test_no_page_reaches_a_cloud_endpoint_by_accident(walk_venv):
    """An AWS client a page makes without an endpoint of its own goes to the walk's closed loopback
    port, never to amazonaws.com: what a page with an empty endpoint variable would do."""
    env = dict(walk_venv["env"], AWS_ACCESS_KEY_ID="AKIADOCSWALK00000001", AWS_SECRET_ACCESS_KEY="not-a-secret-0000",
               AWS_DEFAULT_REGION="us-east-1")
    code = ("import boto3, botocore.exceptions\n"
            "try:\n    boto3.client('kms').list_keys()\n"
            "except botocore.exceptions.EndpointConnectionError as exc:\n    print('REFUSED', exc)\n")
    result = subprocess.run([str(Path(env["PATH"].split(os.pathsep)[0]) / "python"), "-c", code], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    refusing = env["AWS_ENDPOINT_URL"]
    assert refusing.startswith("http://127.0.0.1:")
    assert result.stdout.startswith(f'REFUSED Could not connect to the endpoint URL: "{refusing}/"'), result.stdout


def test_a_page_stops_where_its_service_did_not_start(walk_venv, tmp_path):
    """The govern page's service on a port another process holds: the page stops at its wait, with
    the service log's tail, and no later step (no endpoint exported, no AWS request) runs."""
    page = "how-to/govern-keys.md"
    serve = next(block for block in steps(DOCS / page) if "kms serve" in block.code)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        env = dict(walk_venv["env"], KMS_LISTEN=f"127.0.0.1:{taken.getsockname()[1]}")
        directory = tmp_path / "govern"
        try:
            with pytest.raises(AssertionError) as failed:
                walk([page], directory, env, walk_venv["wheel"])
        finally:
            _stop_leftovers(directory)
    message = str(failed.value)
    assert message.startswith(f"{serve.where} (sh) failed with exit 1"), message[:500]
    assert "Address already in use" in message.split("--- stderr", 1)[1], message[-3000:]  # the log's tail
    exported = (directory / ENV_FILE).read_text() if (directory / ENV_FILE).exists() else ""
    assert "AWS_ENDPOINT_URL_KMS" not in exported, exported

"""A re-encryption killed with SIGKILL mid-phase, then run again (issues 49 and 61: it converges).

``test_reencrypt_branches.py`` stops a run before each phase with ``fail_at`` (an exception: the
process lives on, its ``finally`` blocks run). Here the command is a real process, killed without
warning while a phase works, in every phase (:data:`KILLED_IN`): each run redoes what is done and
is killed in the next one (mid-rewrite: Spark jobs and commits under way, files written that no
commit reaches; mid-tags: a tag's temporary branch made, the tag not yet moved; mid-sweep: files
being deleted). The run that finishes removes what the killed runs left, whatever its age (the
journal the first of them committed before writing), and proves the table: exit 0, every branch
and tag holds the rows it held before, and the storage-wide proof passes, with no
``--orphans-older-than``.

Each run is ``pyiceberg-crypto keys reencrypt`` with ``--warehouse`` (its own Spark application,
embedded metastore), as an incident responder runs it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pyiceberg_crypto.keys.reencrypt import PHASES
from tests.testkit import SHORT_DRIVER_ENV

pytestmark = [pytest.mark.slow, pytest.mark.apps, pytest.mark.jvm]

ROOT = Path(__file__).resolve().parents[2]
TABLE = "lake.db.t"
RUN_TIMEOUT = 600
#: Seconds between the run saying it entered a phase and its SIGKILL (default 0.2): mid-rewrite
#: means Spark jobs and commits under way.
KILL_AFTER = {"rewrite": 1.0}
#: The phases a run is killed in, in order: every one of
#: :data:`~pyiceberg_crypto.keys.reencrypt.PHASES`.
KILLED_IN = PHASES

#: Writes the story (a tag, a branch with rows only there, a delete) and prints every ref's rows.
SETUP = """
from pyiceberg_crypto import config
from pyiceberg_crypto.bridge import register_kms
from pyiceberg_crypto.kms import KeystoreKms
spark = config.session_for_catalog("lake", warehouse="wh")
register_kms(spark, KeystoreKms("keys.json"))
spark.sql("CREATE NAMESPACE lake.db")
spark.sql("CREATE TABLE lake.db.t (id bigint) USING iceberg "
          + config.tblproperties_sql(config.table_properties("k")))
spark.sql("INSERT INTO lake.db.t SELECT id FROM range(1, 21)")
spark.sql("INSERT INTO lake.db.t SELECT id FROM range(21, 31)")
spark.sql("ALTER TABLE lake.db.t CREATE TAG before_leak")
spark.sql("ALTER TABLE lake.db.t CREATE BRANCH audit")
spark.sql("INSERT INTO lake.db.t.branch_audit SELECT id FROM range(100, 146)")
spark.sql("INSERT INTO lake.db.t SELECT id FROM range(31, 41)")
spark.sql("DELETE FROM lake.db.t WHERE id = 5")
""" + """
import json
refs = [r[0] for r in spark.sql("SELECT name FROM lake.db.t.refs").collect()]
rows = {ref: sorted(r[0] for r in spark.sql(f"SELECT id FROM lake.db.t VERSION AS OF '{ref}'").collect())
        for ref in refs}
print("ROWS " + json.dumps(rows, sort_keys=True))
spark.stop()
"""

ROWS = SETUP[SETUP.index("import json"):]
READ = """
from pyiceberg_crypto import config
from pyiceberg_crypto.bridge import register_kms
from pyiceberg_crypto.kms import KeystoreKms
spark = config.session_for_catalog("lake", warehouse="wh")
register_kms(spark, KeystoreKms("keys.json"))
""" + ROWS


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT), PYSPARK_PYTHON=sys.executable, PYICEBERG_CRYPTO_QUIET="1",
                **SHORT_DRIVER_ENV)


def _python(code: str, cwd: Path) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=RUN_TIMEOUT)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _rows(code: str, cwd: Path) -> dict[str, list[int]]:
    line = next(line for line in _python(code, cwd).splitlines() if line.startswith("ROWS "))
    return json.loads(line.removeprefix("ROWS "))


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pyiceberg_crypto.cli.main", *args], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=RUN_TIMEOUT)


REENCRYPT = ["keys", "reencrypt", TABLE, "--kms", "keystore", "--kms-property", "keystore.path=keys.json",
             "--warehouse", "wh", "--report", "run.json"]


def _killed_in(phase: str, cwd: Path, settle: float) -> str:
    """Start the re-encryption; SIGKILL its process group ``settle`` seconds after it says it
    entered ``phase``. The run's stderr up to the kill."""
    log = cwd / f"killed-in-{phase}.log"
    with open(log, "wb") as sink:
        process = subprocess.Popen([sys.executable, "-m", "pyiceberg_crypto.cli.main", *REENCRYPT, "--json"],
                                   cwd=cwd, env=_env(), stdout=subprocess.DEVNULL, stderr=sink,
                                   start_new_session=True)
        deadline = time.monotonic() + RUN_TIMEOUT
        try:
            while time.monotonic() < deadline and process.poll() is None:
                said = [line.strip() for line in log.read_text(errors="replace").splitlines()]
                if phase in said:
                    time.sleep(settle)
                    break
                time.sleep(0.05)
            assert process.poll() is None, f"the run ended before it was killed in {phase}:\n{log.read_text()[-3000:]}"
        finally:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(60)
    assert process.returncode == -signal.SIGKILL
    return log.read_text(errors="replace")


def test_the_killed_phases_are_phases_in_order():
    assert [p for p in PHASES if p in KILLED_IN] == list(KILLED_IN)


def test_reencrypt_killed_in_every_phase_then_run_again_converges_and_loses_no_row(tmp_path):
    for command in (["keystore", "create", "keys.json"], ["keystore", "add", "keys.json", "k"]):
        assert _cli(*command, cwd=tmp_path).returncode == 0
    before = _rows(SETUP, tmp_path)
    assert set(before) == {"main", "audit", "before_leak"} and len(before["audit"]) == 76  # 46 only there
    for command in (["keystore", "rotate", "keys.json", "k"], ["keystore", "compromised", "keys.json", "k", "1"]):
        done = _cli(*command, cwd=tmp_path)
        assert done.returncode == 0, done.stderr

    for phase in KILLED_IN:  # each run redoes what is done (idempotent) and is killed in the next phase
        said = _killed_in(phase, tmp_path, settle=KILL_AFTER.get(phase, 0.2))
        if phase == "rewrite":
            assert "fresh-kek" in said  # the first phase went by before the kill
            assert _rows(READ, tmp_path) == before, "a kill mid-rewrite lost or changed rows"

    done = _cli(*REENCRYPT, "--json", cwd=tmp_path)
    doc = json.loads(done.stdout or "{}")
    assert done.returncode == 0, (done.stderr[-3000:], json.dumps(doc.get("proof"), indent=1)[-3000:])
    assert doc["proof"]["ok"] and doc["proof"]["storage"]["ok"], json.dumps(doc["proof"], indent=1)[-3000:]
    assert doc["proof"]["still_present"] == []
    assert _rows(READ, tmp_path) == before, "the finishing run lost or changed rows"

"""Verify a streaming table commit by commit: a ``StreamingQueryListener`` that checks each new
snapshot against the table's ledger as the stream commits it::

    from pyiceberg_crypto.verify import VerifyEachCommit

    listener = VerifyEachCommit(spark, "lake.db.events", state="/var/lib/verify/events.json")
    spark.streams.addListener(listener)        # the first check runs in the constructor
    query = df.writeStream.toTable("lake.db.events")   # or .foreachBatch(upsert).start()
    ...
    listener.close()                            # the last commit checked; the worker stops
    listener.reports, listener.failures         # oldest first

What happens:

- The constructor verifies the table once, synchronously, against the ledger at ``state`` (the
  same ledger as ``pyiceberg-crypto verify --state``): in full when the ledger is new, else only
  what the table gained since. A wrong table name, a ledger of another table or a Spark Connect
  session fail here, before any stream runs.
- Each stream event (a micro-batch's progress, an idle query, a query that stops) asks a worker
  thread to check again; the listener-bus thread only enqueues, so a slow check never stalls the
  stream. Requests that pile up while a check runs become one check. Each check walks what is new
  since the ledger's last OK run (commits by other writers included): every snapshot is verified
  once, and a restart with the same ledger continues where the last run stopped.
- A check that found new snapshots adds its report to :attr:`reports`; one that is OK records when
  each of its snapshots was verified in :attr:`verified_at` (snapshot id -> ``time.time()``; the lag
  of a commit is that minus the snapshot's ``committed_at``); one that is not OK goes to
  :attr:`failures`, and then ``on_failure`` acts: ``"stop"`` (default) logs the report at ERROR and
  stops the queries that write the table, ``"log"`` only logs it, a callable receives the report.
  A failed check leaves the ledger where it was, so the next check reports the same snapshots.

Which queries write the table: those whose sink names it (``toTable``), and ``foreachBatch``
queries (their sink does not say what they write); pass ``queries=[query, ...]`` to name them.
"""

from __future__ import annotations

import logging
import queue
import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Union

from pyspark.sql.streaming import StreamingQueryListener

from pyiceberg_crypto.errors import TableInputError
from pyiceberg_crypto.kms.base import KeyManagementClient
from pyiceberg_crypto.safe_text import exception_line
from pyiceberg_crypto.spark.session import require_classic_session
from pyiceberg_crypto.table.limits import Limits
from pyiceberg_crypto.verify.ledger import LedgerError
from pyiceberg_crypto.verify.render import format_text
from pyiceberg_crypto.verify.report import TableReport
from pyiceberg_crypto.verify.spark import DEFAULT_DRIVER_MAX_FILES, verify_table

__all__ = ["VerifyEachCommit"]

LOG = logging.getLogger("pyiceberg_crypto.verify.each_commit")

OnFailure = Union[str, Callable[[TableReport], Any]]
_NAME_IT = ("name an existing Iceberg table as catalog.db.table (its catalog configured in this session), and "
            "create the table before the listener and the stream start")
_CHECK, _STOP = "check", "stop"


class VerifyEachCommit(StreamingQueryListener):
    """A listener that verifies every new snapshot of ``table`` (see the module docstring).

    Args:
        spark: a classic SparkSession (Spark Connect runs listeners on the server: not supported).
        table: ``catalog.db.table`` (or ``db.table`` in the current catalog).
        state: the ledger file (created on the first OK check; its directory must exist).
        on_failure: ``"stop"``, ``"log"`` or a callable taking the failing report.
        kms: the KMS with the table's master key (default: the one registered for the catalog).
        queries: the queries to stop on a failure (StreamingQuery objects or query ids); default:
            those whose sink names the table, and ``foreachBatch`` queries.
        parallelism / driver_max_files / limits: as in :func:`~pyiceberg_crypto.verify.verify_table`
            (Spark tasks per check, the file count checked on the driver instead, and the
            :class:`~pyiceberg_crypto.table.Limits`: allowed locations, metadata size, KMS timeout).

    The snapshots are the ledger's choice: there is no ``snapshot_id``, ``all_snapshots`` or
    ``since_snapshot_id`` here. Raises :class:`~pyiceberg_crypto.errors.TableInputError` for a
    Spark Connect session, a bad ``on_failure``, or a table that cannot be verified; and
    :class:`~pyiceberg_crypto.verify.ledger.LedgerError` for a ledger of another table.
    """

    def __init__(self, spark, table: str, *, state: str, on_failure: OnFailure = "stop",
                 kms: KeyManagementClient | None = None, queries: Sequence[Any] | None = None,
                 parallelism: int | None = None, driver_max_files: int = DEFAULT_DRIVER_MAX_FILES,
                 limits: Limits | None = None):
        if "connect" in type(spark).__module__:
            raise TableInputError("VerifyEachCommit needs a classic SparkSession: Spark Connect runs streaming "
                                  "listeners on the server, where this Python object does not exist. Verify from a "
                                  "classic session, or run `pyiceberg-crypto verify --state FILE` on a schedule")
        require_classic_session(spark, "VerifyEachCommit")
        if on_failure not in ("stop", "log") and not callable(on_failure):
            raise TableInputError(f"on_failure must be 'stop', 'log' or a callable, got {on_failure!r}")
        super().__init__()
        self.spark = spark
        self.table = table
        self.state = str(state)
        self.on_failure = on_failure
        self.kms = kms
        self.queries = [getattr(q, "id", q) for q in queries] if queries is not None else None
        self.verify_options = {"parallelism": parallelism, "driver_max_files": driver_max_files, "limits": limits}
        self.reports: list[TableReport] = []
        self.failures: list[TableReport] = []
        self.errors: list[str] = []  # checks that could not run (KMS down, metastore away): retried next event
        self.verified_at: dict[int, float] = {}  # snapshot id -> when a check found it OK (time.time())
        self._lock = threading.Lock()
        self._requests: queue.Queue[str] = queue.Queue()
        self._idle = threading.Condition(self._lock)
        self._pending = 0
        self._closed = False
        self._baseline()  # here: bad input fails before any stream runs
        self._worker = threading.Thread(target=self._run, name=f"verify-each-commit {table}", daemon=True)
        self._worker.start()

    # --- StreamingQueryListener (the listener-bus thread: enqueue only) -------------------------

    def onQueryStarted(self, event) -> None:
        pass

    def onQueryProgress(self, event) -> None:
        self.request_check()

    def onQueryIdle(self, event) -> None:
        self.request_check()

    def onQueryTerminated(self, event) -> None:
        self.request_check()  # the last commit before the query stopped

    # --- control ------------------------------------------------------------------------------

    def request_check(self) -> None:
        """Ask the worker for a check (what the stream events do); nothing once closed."""
        with self._lock:
            if self._closed:
                return
            self._pending += 1
        self._requests.put(_CHECK)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until every requested check has run; False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def close(self, timeout: float | None = 300) -> None:
        """Check once more (the commits since the last event), then stop the worker. Remove the
        listener from ``spark.streams`` first if the session keeps running."""
        if not self._worker.is_alive():
            return
        self.request_check()
        with self._lock:
            self._closed = True  # events of a listener still registered no longer queue up
        self._requests.put(_STOP)
        self._worker.join(timeout)

    @property
    def ok(self) -> bool:
        """No check of this listener found a problem."""
        return not self.failures

    # --- the worker ---------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            request = self._requests.get()
            stop = request == _STOP
            coalesced = 1 if request == _CHECK else 0
            while True:  # everything asked meanwhile is covered by one check
                try:
                    more = self._requests.get_nowait()
                except queue.Empty:
                    break
                stop = stop or more == _STOP
                coalesced += more == _CHECK
            if coalesced:
                try:
                    self._check()
                except Exception as exc:  # never kill the worker: the next event retries
                    self.errors.append(exception_line(exc))
                    LOG.error("pyiceberg-crypto: verifying %s failed to run: %s", self.table, exception_line(exc))
                with self._idle:
                    self._pending -= coalesced
                    self._idle.notify_all()
            if stop:
                return

    def _baseline(self) -> None:
        """The first check, with what to do added to the errors bad input gives."""
        try:
            exists = self.spark.catalog.tableExists(self.table)
        except Exception as exc:  # an unknown catalog, a malformed name
            raise TableInputError(f"VerifyEachCommit cannot find table {self.table!r} ({exception_line(exc)}): "
                                  f"{_NAME_IT}") from None
        if not exists:
            raise TableInputError(f"VerifyEachCommit: table {self.table!r} does not exist: {_NAME_IT}")
        try:
            self._check()
        except LedgerError as exc:
            raise LedgerError(f"{exc}. VerifyEachCommit({self.table!r}) needs state= the ledger of this table, or a "
                              "new file (its first check then verifies the table in full)") from None

    def _check(self) -> None:
        report = verify_table(self.spark, self.table, kms=self.kms, state=self.state, **self.verify_options)
        if not report.snapshot_ids and report.ok:
            return  # nothing new since the ledger's last OK run
        with self._lock:
            self.reports.append(report)
            if not report.ok:
                self.failures.append(report)
        if report.ok:
            finished = time.time()
            with self._lock:
                self.verified_at.update((snapshot_id, finished) for snapshot_id in report.snapshot_ids)
            LOG.info("pyiceberg-crypto: %s snapshot(s) %s verified OK", self.table, report.snapshot_ids)
            return
        self._fail(report)

    def _fail(self, report: TableReport) -> None:
        if callable(self.on_failure):
            self.on_failure(report)
            return
        LOG.error("pyiceberg-crypto: %s failed verification (%d finding(s)):\n%s", self.table,
                  len(report.not_ok()), format_text(report))
        if self.on_failure == "stop":
            for query in self._writers():
                LOG.error("pyiceberg-crypto: stopping streaming query %s (%s)", query.name or query.id, query.id)
                query.stop()

    def _writers(self) -> list:
        """The active queries that write the table (see the class docstring)."""
        found = []
        for query in self.spark.streams.active:
            if self.queries is not None:
                if query.id in self.queries:
                    found.append(query)
                continue
            if _writes(query.lastProgress, self.table):
                found.append(query)
        return found


def _writes(progress, table: str) -> bool:
    """Does a query's last progress say its sink is ``table``, or a ``foreachBatch``?

    The sink's description is split into names: ``lake.db.events`` matches a sink named
    ``lake.db.events``, ``db.events`` or ``events``, never ``events_archive`` or ``db.events2``."""
    if not progress:
        return False
    sink = progress.get("sink") if hasattr(progress, "get") else getattr(progress, "sink", None)
    description = sink.get("description", "") if hasattr(sink, "get") else getattr(sink, "description", "")
    description = str(description or "").lower()
    if "foreachbatch" in description:
        return True
    parts = table.lower().replace("`", "").split(".")
    suffixes = {".".join(parts[i:]) for i in range(len(parts))}  # lake.db.events, db.events, events
    qualified = ".".join(parts[-2:])
    return any(name in suffixes or name.endswith("." + qualified)
               for name in re.findall(r"[\w.]+", description.replace("`", "")))

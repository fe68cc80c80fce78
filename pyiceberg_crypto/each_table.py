"""Run some work on each of many tables, several at a time, resumably, with a report: the one
engine of ``encrypt --all-tables`` (:mod:`pyiceberg_crypto.adopt.lake`) and ``keys reencrypt
--all-tables`` (:mod:`pyiceberg_crypto.keys.reencrypt_all`)::

    from pyiceberg_crypto.each_table import RunReport, run_each

    report = RunReport("run.json", kind="my-job", catalog="lake")
    earlier = report.resume()               # the file an earlier run left (None: none); ReportError if unusable
    if earlier:
        report.carry(earlier)               # its done tables stay done, and are not run again
    report.save()                           # ReportError when the file cannot be written: nothing has run
    run_each(["lake.db.a", "lake.db.b"], lambda table: work_on(table), parallel=2, report=report)
    report.done, report.failed, report.ok   # {table: result}, {table: one-line reason}, no table failed

One table's exception never stops the others: it is that table's entry in ``report.failed``
(its one-line reason, never a traceback). The report is saved atomically after each table, so a
crash loses at most the tables running. A command's report format is a subclass's
:meth:`RunReport.to_dict`, read back by :meth:`RunReport.earlier_of`; a file over
:data:`MAX_REPORT_BYTES`, not JSON, or not this command's report is refused with
:class:`~pyiceberg_crypto.errors.ReportError` before anything runs.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

from pyiceberg_crypto._atomic import PUBLIC, write_atomically
from pyiceberg_crypto.errors import FileAccessError, InvalidArgumentError, ReportError
from pyiceberg_crypto.io import open_regular_file
from pyiceberg_crypto.safe_text import exception_line

__all__ = ["DONE", "FAILED", "MAX_REPORT_BYTES", "STARTED", "Earlier", "RunReport", "TableEvent", "check_work",
           "read_document", "run_each"]

R = TypeVar("R")

#: The largest earlier-run report read back (a report lists tables, with their proofs): larger is refused.
MAX_REPORT_BYTES = 256 * 1024 * 1024
#: :attr:`TableEvent.status` values.
STARTED, DONE, FAILED = "started", "done", "failed"


@dataclass(frozen=True)
class TableEvent(Generic[R]):
    """One table starting or ending (``status``): its 1-based ``index`` among the tables run, ``of``
    them; ``finished``: how many have ended, this one included (0 when it starts); its result, or
    the exception and its one-line ``detail``."""

    table: str
    status: str
    index: int
    of: int
    finished: int = 0
    seconds: float = 0.0
    result: R | None = None
    error: BaseException | None = None
    detail: str = ""


@dataclass(frozen=True)
class Earlier:
    """What an earlier run's report at ``path`` records: the tables it finished (table -> the result
    it recorded, and how long each took) and those that failed (table -> why)."""

    path: str
    document: Any
    done: dict[str, Any] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)


def read_document(path: str, *, max_bytes: int = MAX_REPORT_BYTES) -> Any | None:
    """The JSON document in the file at ``path``, or None when there is no file. ReportError when it
    is not a regular file, cannot be read, is larger than ``max_bytes`` or is not JSON (read as the
    verifier's ledger is: bounded, a FIFO or device refused, never waited on)."""
    try:
        with open_regular_file(path) as handle:
            size = os.fstat(handle.fileno()).st_size
            raw = handle.read(max_bytes + 1) if size <= max_bytes else b""
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ReportError(f"cannot read the earlier run's report {path} ({exc.strerror or exc}); move it away to "
                          "start afresh") from None
    if size > max_bytes or len(raw) > max_bytes:  # (a file that grew while read)
        raise ReportError(f"the earlier run's report {path} is larger than {max_bytes} bytes: not a report of this "
                          "command; move it away to start afresh")
    try:
        return json.loads(raw)
    except ValueError as exc:  # not UTF-8, not JSON
        raise ReportError(f"cannot read the earlier run's report {path} ({exc}); move it away to start afresh") from None


@dataclass
class RunReport(Generic[R]):
    """The report of a run over many tables, kept at ``path`` (None: in memory only): each table's
    result (``done``) or one-line reason (``failed``), its ``seconds``, and the tables ``carried``
    from an earlier run's report. ``kind``: which command's report it is; an earlier report of
    another kind, or of another ``catalog``, is refused (:meth:`usable`).

    A command's format: subclass, override :meth:`to_dict` (what is saved), :meth:`earlier_of`
    (reading it back), and :meth:`record` / :meth:`describe` for what a table's end adds."""

    path: str | None = None
    catalog: str | None = None
    done: dict[str, R] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    carried: list[str] = field(default_factory=list)
    report_error: str | None = None  # the report could not be saved after a table (the run went on)
    kind: str | None = None
    max_bytes: int = MAX_REPORT_BYTES
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False, compare=False)

    #: A subclass's fixed ``kind``.
    KIND: ClassVar[str | None] = None

    def __post_init__(self) -> None:
        self.kind = self.kind or self.KIND

    @property
    def ok(self) -> bool:
        """No table failed and the report could be saved."""
        return not self.failed and self.report_error is None

    def to_dict(self) -> dict[str, Any]:
        """The document saved (the generic format; a command's subclass has its own)."""
        return {"kind": self.kind, "catalog": self.catalog, "ok": self.ok, "done": dict(self.done),
                "failed": dict(self.failed), "seconds": dict(self.seconds), "carried": list(self.carried)}

    # -- reading an earlier run back --

    def resume(self, path: str | None = None, *, required: bool = False) -> Earlier | None:
        """What the earlier run's report at ``path`` (default: :attr:`path`) records, checked to be
        this command's report of this catalog; None when there is no file (ReportError when
        ``required``) or :meth:`usable` says to start afresh. ReportError when it cannot be used."""
        path = path or self.path
        if path is None:
            return None
        document = read_document(path, max_bytes=self.max_bytes)
        if document is None:
            if required:
                raise ReportError(f"no report {path} to resume from")
            return None
        return self.earlier_of(path, document) if self.usable(path, document) else None

    def usable(self, path: str, document: Any) -> bool:
        """Whether an earlier run's ``document`` is resumed from (False: start afresh, the file is
        overwritten); ReportError when it must not be overwritten: not a report of :attr:`kind`, or
        another catalog's."""
        if not isinstance(document, dict) or (self.kind is not None and document.get("kind") != self.kind):
            raise ReportError(f"{path} is not the report of {self.kind or 'this command'}")
        if self.catalog is not None and document.get("catalog") != self.catalog:
            raise ReportError(f"{path} is the report of catalog {document.get('catalog')!r}, not {self.catalog!r}")
        return True

    def earlier_of(self, path: str, document: dict[str, Any]) -> Earlier:
        """The tables an earlier report (of :meth:`to_dict`'s format) records as done and failed."""
        done, failed = document.get("done"), document.get("failed")
        seconds = document.get("seconds")
        return Earlier(path, document, dict(done) if isinstance(done, dict) else {},
                       {str(t): str(w) for t, w in failed.items()} if isinstance(failed, dict) else {},
                       dict(seconds) if isinstance(seconds, dict) else {})

    def carry(self, earlier: Earlier, *, rerun: Iterable[str] = ()) -> list[str]:
        """Count the tables ``earlier`` finished as done here (with their results), but those in
        ``rerun``; :func:`run_each` does not run them again. Returns them, sorted."""
        again = set(rerun)
        carried = sorted(t for t in earlier.done if t not in again)
        with self.lock:
            for table in carried:
                self.done[table] = earlier.done[table]
                if table in earlier.seconds:
                    self.seconds[table] = earlier.seconds[table]
            self.carried.extend(t for t in carried if t not in self.carried)
        return carried

    # -- one table's end --

    def describe(self, error: BaseException) -> str:
        """A failed table's one-line reason (no traceback, no key material)."""
        return exception_line(error)

    def record(self, table: str, *, result: R | None = None, error: BaseException | None = None,
               seconds: float = 0.0) -> str:
        """A table ended (``error`` None: done with ``result``); returns the failure's reason ("" when done)."""
        with self.lock:
            self.seconds[table] = round(seconds, 3)
            if error is None:
                self.done[table] = result  # type: ignore[assignment]
                return ""
            self.failed[table] = self.describe(error)
            return self.failed[table]

    # -- the file --

    def save(self, *, during: bool = False) -> None:
        """Write :meth:`to_dict` to :attr:`path` atomically (a reader sees the old report or the new
        one). ReportError when it cannot be written; ``during`` a run, the reason is kept in
        :attr:`report_error` instead, and the run goes on."""
        if self.path is None:
            return
        with self.lock:
            try:
                write_atomically(self.path, json.dumps(self.to_dict(), indent=2) + "\n", mode=PUBLIC)
            except FileAccessError as exc:
                message = f"cannot write the report {self.path}: {exc.strerror or exc}"
                if not during:
                    raise ReportError(message) from None
                self.report_error = message


def check_work(work: object, parallel: object) -> None:
    """InvalidArgumentError unless ``work`` is callable and ``parallel`` a whole number >= 1 (what
    :func:`run_each` checks first; call it before anything else of a run happens)."""
    if not callable(work):
        raise InvalidArgumentError(f"work must be a function of the table name, got {type(work).__name__}")
    if not isinstance(parallel, int) or isinstance(parallel, bool) or parallel < 1:
        raise InvalidArgumentError(f"parallel must be a whole number of tables at a time (>= 1), got {parallel!r}")


def run_each(tables: Sequence[str], work: Callable[[str], R], *, parallel: int = 1,
             report: RunReport[R] | None = None,
             progress: Callable[[TableEvent[R]], None] | None = None) -> RunReport[R]:
    """``work(table)`` for each of ``tables`` not already done in ``report`` (carried from an
    earlier run), ``parallel`` at a time (threads: a Spark session shared by them runs their jobs
    side by side; activate it in ``work``). A table's exception is its entry in ``report.failed``
    and the others go on; after each table the report is saved (:meth:`RunReport.save` ``during``
    the run) and ``progress`` hears of it (also when a table starts), under the report's lock.
    Returns ``report`` (a new in-memory one when None): ``done`` holds the carried tables, then the
    others in the order given; ``failed`` is in the order given.

    Raises InvalidArgumentError when ``work`` is not callable or ``parallel`` is not a whole
    number >= 1 (nothing has run)::

        outcome = run_each(["lake.db.a", "lake.db.b"], lambda table: table.upper(), parallel=2)
        outcome.done    # {"lake.db.a": "LAKE.DB.A", "lake.db.b": "LAKE.DB.B"}
    """
    check_work(work, parallel)
    report = report if report is not None else RunReport()
    say = progress or (lambda _event: None)
    todo = [t for t in dict.fromkeys(tables) if t not in report.done]
    finished = [0]

    def one(index: int, table: str) -> None:
        with report.lock:
            say(TableEvent(table, STARTED, index, len(todo)))
        began = time.perf_counter()
        try:
            result, error = work(table), None
        except Exception as exc:  # noqa: BLE001 - one table's failure is its entry, the others go on
            result, error = None, exc
        seconds = time.perf_counter() - began
        with report.lock:
            detail = report.record(table, result=result, error=error, seconds=seconds)
            finished[0] += 1
            report.save(during=True)
            say(TableEvent(table, FAILED if error else DONE, index, len(todo), finished[0], round(seconds, 3),
                           result, error, detail))

    if parallel == 1:
        for index, table in enumerate(todo, 1):
            one(index, table)
    else:
        with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="each-table") as pool:
            for future in [pool.submit(one, index, table) for index, table in enumerate(todo, 1)]:
                future.result()
    with report.lock:
        order = [*report.carried, *todo]
        report.done = {**{t: report.done[t] for t in order if t in report.done}, **report.done}
        report.failed = {**{t: report.failed[t] for t in todo if t in report.failed}, **report.failed}
    return report

"""The benchmark harness: timing, rows with their references, and the Markdown table.

Every figure is a :class:`Row` of samples (one per repeat) in one unit; a row names the rows of
the same section it is compared with, and the ratio printed in the tables is
``median(this row) / median(reference row)`` in that unit (so for GB/s above 1 is faster, for
seconds above 1 is slower). A :class:`Goal` on a row and its reference instead pairs their
repetitions (measured taking turns: repetition i of the row with repetition i of the reference)
and reports the median of the pair ratios, with their interquartile range as the spread
(:func:`pair_ratios`, :func:`spread`). References are always measured in the same run::

    rows = [
        Row("AGS1", "java", "Java AesGcmInputStream", "GB/s", [1.9, 2.0, 2.1]),
        Row("AGS1", "ours", "Python verify_ags1", "GB/s", [9.5, 9.8, 10.1], refs=("java",)),
    ]
    print(render_tables(rows))          # one Markdown table per section
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field


@dataclass
class Row:
    """One measured figure: ``samples`` (one per repeat) in ``unit``, compared with ``refs``.

    A row with no samples was not measured in this run (quick mode leaves out its slowest rows):
    it keeps its place in the table, its cells say so and ``note`` says why."""

    section: str
    key: str  # short id, unique within the section, used by other rows' ``refs``
    name: str  # what was measured, as the table shows it
    unit: str
    samples: list[float]
    refs: tuple[str, ...] = ()
    note: str = ""
    short: str = ""  # how ratio cells of other rows name this row (default: ``name``)
    headline: bool = False  # listed under "Key ratios" (what the project README quotes)

    @property
    def measured(self) -> bool:
        return bool(self.samples)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)


def not_measured(section: str, key: str, name: str, unit: str, why: str, **kwargs) -> Row:
    """A row left out of this run (no samples), with the reason in its note."""
    return Row(section, key, name, unit, [], note=f"not measured in this run: {why}", **kwargs)


#: Repetitions a goal row should have (issue 29): full mode measures at least this many; fewer
#: (quick mode) are said next to the goal.
GOAL_MIN_REPEATS = 7
#: A goal's ratio is flagged "unstable" when half its interquartile range exceeds this share of
#: the median (a spread wider than +-10 %).
UNSTABLE_SPREAD = 0.10


def pair_ratios(row: Row, reference: Row) -> list[float]:
    """``row.samples[i] / reference.samples[i]`` for every repetition i: the two rows must have
    been measured taking turns (same number of repetitions, in the same order)."""
    if reference.unit != row.unit:
        raise ValueError(f"cannot compare {row.unit} with {reference.unit}")
    if len(row.samples) != len(reference.samples):
        raise ValueError(f"{row.section}: {row.key!r} has {len(row.samples)} repetitions, its reference "
                         f"{reference.key!r} {len(reference.samples)}: they cannot be paired")
    return [a / b if b else float("inf") for a, b in zip(row.samples, reference.samples)]


@dataclass(frozen=True)
class Spread:
    """The median of some values and their interquartile range (``q1`` to ``q3``)."""

    median: float
    q1: float
    q3: float
    n: int

    @property
    def half_width(self) -> float:
        """Half the interquartile range as a share of the median (0.05 = +-5 %)."""
        if not self.median:
            return 0.0 if self.q1 == self.q3 else float("inf")
        return (self.q3 - self.q1) / 2 / abs(self.median)

    @property
    def unstable(self) -> bool:
        """Half the interquartile range is more than :data:`UNSTABLE_SPREAD` of the median."""
        return self.half_width > UNSTABLE_SPREAD


def spread(values: Sequence[float]) -> Spread:
    """Median and quartiles of ``values`` (quartiles by linear interpolation between the sorted
    values, ``statistics.quantiles(method="inclusive")``, as numpy's default; one value: its own
    quartiles)."""
    if not values:
        raise ValueError("no values")
    if len(values) == 1:
        return Spread(values[0], values[0], values[0], 1)
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return Spread(statistics.median(values), q1, q3, len(values))


@dataclass(frozen=True)
class Goal:
    """A speed goal on the rows of one section: the ratio of row ``key`` to row ``ref`` (or
    ``key``'s median itself when ``ref`` is empty) must be at least (``at_most``: at most)
    ``target``. With a ``ref`` the ratio is the median of the per-repetition pair ratios
    (:func:`pair_ratios`: the two rows are measured taking turns); its spread (interquartile range)
    is printed next to it and a spread wider than +-10 % is flagged **unstable**. ``why`` is
    printed when the run falls short (what limits it, as measured)."""

    what: str
    key: str
    target: float
    ref: str = ""
    at_most: bool = False
    why: str = ""

    def spread(self, rows: Sequence[Row]) -> Spread | None:
        """The measured value (median) and its interquartile range, or None if a row is missing."""
        by_key = {row.key: row for row in rows}
        if self.key not in by_key or (self.ref and self.ref not in by_key):
            return None
        if not by_key[self.key].measured or (self.ref and not by_key[self.ref].measured):
            return None
        values = pair_ratios(by_key[self.key], by_key[self.ref]) if self.ref else by_key[self.key].samples
        return spread(values)

    def measure(self, rows: Sequence[Row]) -> float | None:
        measured = self.spread(rows)
        return None if measured is None else measured.median

    def render(self, rows: Sequence[Row]) -> str:
        measured = self.spread(rows)
        by_key = {row.key: row for row in rows}
        unit = "x" if self.ref else f" {by_key[self.key].unit}" if self.key in by_key else ""
        wanted = f"{'<=' if self.at_most else '>='} {_number(self.target)}{unit}"
        if measured is None:
            return f"- {self.what}: goal {wanted}: not measured in this run"
        value = measured.median
        what = "pair ratios" if self.ref else "repetitions"
        if measured.n < 2:
            stability = f" ({measured.n} {what[:-1]}: no spread, **unstable**)"
        else:
            flag = ", **unstable**" if measured.unstable else ""
            few = f", fewer than {GOAL_MIN_REPEATS}" if measured.n < GOAL_MIN_REPEATS else ""
            stability = (f" (median of {measured.n} {what}{few}; IQR {_number(measured.q1)}-"
                         f"{_number(measured.q3)}{unit}, +-{100 * measured.half_width:.0f} %{flag})")
        met = value <= self.target if self.at_most else value >= self.target
        if met:
            return f"- {self.what}: {_number(value)}{unit}{stability}, goal {wanted}: **met**"
        short = (value / self.target - 1) if self.at_most else (1 - value / self.target)
        why = f" {self.why}" if self.why else ""
        return (f"- {self.what}: {_number(value)}{unit}{stability}, goal {wanted}: "
                f"**short by {100 * short:.0f} %**.{why}")


@dataclass
class Section:
    """A section's heading text: what was measured and how, its rows and its goals."""

    title: str
    description: str = ""
    rows: list[Row] = field(default_factory=list)
    goals: list[Goal] = field(default_factory=list)


def time_runs(fn: Callable[[], object], repeats: int, warmup: int = 1) -> list[float]:
    """Wall seconds of ``repeats`` calls of ``fn`` after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


def time_interleaved(fns: dict[str, Callable[[], object]], repeats: int, warmup: int = 1) -> dict[str, list[float]]:
    """Like :func:`time_runs` for several contenders, taking turns in each repeat, so that a burst
    of background load hits all of them alike instead of one."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - start)
    return samples


def per_second(amount: float, seconds: Iterable[float], scale: float = 1.0) -> list[float]:
    """Throughputs ``amount / s / scale`` (e.g. bytes -> GB/s with ``scale=1e9``)."""
    return [amount / s / scale for s in seconds]


def ratio(row: Row, reference: Row) -> float:
    """Median of ``row`` over median of ``reference`` (same unit)."""
    if reference.unit != row.unit:
        raise ValueError(f"cannot compare {row.unit} with {reference.unit}")
    return row.median / reference.median if reference.median else float("inf")


def _ratio_text(row: Row, reference: Row) -> str:
    name = reference.short or reference.name
    if not (row.measured and reference.measured):
        return f"n/a {name}"
    return f"**{ratio(row, reference):.2f}x** {name}"


def _number(value: float) -> str:
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 0.1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def render_table(rows: Sequence[Row]) -> str:
    """A Markdown table of rows of one section: min / median / max, n, and ratios."""
    by_key = {row.key: row for row in rows}
    lines = [
        "| measurement | unit | min | median | max | n | ratio to reference (medians) |",
        "|---|---|--:|--:|--:|--:|---|",
    ]
    for row in rows:
        ratios = []
        for ref_key in row.refs:
            reference = by_key.get(ref_key)
            if reference is None:
                raise KeyError(f"{row.section}: row {row.key!r} refers to unknown row {ref_key!r}")
            ratios.append(_ratio_text(row, reference))
        ratio_cell = "; ".join(ratios) if ratios else "(reference)"
        if row.note:
            ratio_cell += f" ({row.note})"
        if row.measured:
            figures = f"{_number(min(row.samples))} | {_number(row.median)} | {_number(max(row.samples))}"
        else:
            figures = "- | - | -"
        lines.append(f"| {row.name} | {row.unit} | {figures} | {len(row.samples)} | {ratio_cell} |")
    return "\n".join(lines)


def render_sections(sections: Sequence[Section]) -> str:
    """Every section as ``### title``, its description, and its table."""
    parts = []
    for section in sections:
        parts.append(f"### {section.title}\n")
        if section.description:
            parts.append(section.description.strip() + "\n")
        parts.append(render_table(section.rows) + "\n" if section.rows else "(no rows: skipped)\n")
    return "\n".join(parts)


def key_ratios(sections: Sequence[Section]) -> str:
    """A bullet list of the headline rows: value and ratio to each reference (medians)."""
    lines = []
    for section in sections:
        by_key = {row.key: row for row in section.rows}
        for row in section.rows:
            if not row.headline:
                continue
            ratios = ", ".join(_ratio_text(row, by_key[r]) for r in row.refs)
            note = f"; {row.note}" if row.note else ""
            value = f"{_number(row.median)} {row.unit}" if row.measured else "not measured"
            lines.append(f"- {row.name}: {value}" + (f" = {ratios}" if ratios else "") + note)
    return "\n".join(lines)


GOALS_NOTE = (
    "A goal on a ratio is the median of the per-repetition pair ratios (repetition i of the row over "
    "repetition i of its reference; they were measured taking turns), not the ratio of the medians in the "
    "tables below; IQR = interquartile range of those pair ratios (of the samples, for a goal on a row's "
    f"own median); **unstable** = half the IQR is more than {100 * UNSTABLE_SPREAD:.0f} % of the median: "
    "rerun before quoting it."
)


def goal_lines(sections: Sequence[Section]) -> str:
    """Each goal of each section: met, or short by how much and why."""
    return "\n".join(goal.render(section.rows) for section in sections for goal in section.goals)


def machine_description() -> list[str]:
    """Lines describing the machine and the software versions, for the results header."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    memory = ""
    try:
        with open("/proc/meminfo") as info:
            kib = int(next(line.split()[1] for line in info if line.startswith("MemTotal")))
            memory = f", {kib / 1024 / 1024:.1f} GiB RAM"
    except (OSError, StopIteration, ValueError):
        pass
    lines = [
        f"- CPU: {cpu}, {os.cpu_count()} vCPUs{memory}; {platform.system()} {platform.release()}",
        f"- Python {sys.version.split()[0]}; {_versions()}",
        f"- Java: {_java_version()}",
    ]
    return lines


def _versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for package in ("cryptography", "pyarrow", "pyspark", "py4j"):
        try:
            out.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            pass
    from pyiceberg_crypto import config

    from pyiceberg_crypto import jars

    out.append(f"Iceberg {config.ICEBERG_VERSION} ({jars.runtime_artifact(jars.spark_line()).artifact})")
    return ", ".join(out)


def _java_version() -> str:
    try:
        result = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "not found"
    first = (result.stderr or result.stdout).strip().splitlines()
    return first[0] if first else "unknown"


def render_results(sections: Sequence[Section], *, mode: str, elapsed_seconds: float,
                   command: str, notes: Sequence[str] = ()) -> str:
    """The whole RESULTS.md text: header (date, machine, command), notes, every section."""
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    header = [
        "# Benchmark results",
        "",
        f"Generated by `{command}` ({mode}) on {now}, in {elapsed_seconds / 60:.1f} minutes.",
        "",
        *machine_description(),
        "",
        "Every row: min / median / max over `n` repeats; the last column is the ratio of this row's",
        "median to the median of the named reference row, measured in the same run on the same",
        "machine (for GB/s, calls/s, files/s and runs/s above 1x is faster; for seconds, ms, %",
        "and bytes above 1x is more).",
        "",
    ]
    for note in notes:
        header.append(f"> {note}")
    if notes:
        header.append("")
    goals = goal_lines(sections)
    if goals:
        header += ["## Goals", "", GOALS_NOTE, "", goals, ""]
    headlines = key_ratios(sections)
    if headlines:
        header += ["## Key ratios", "", headlines, "", "## All rows", ""]
    return "\n".join(header) + "\n" + render_sections(sections)

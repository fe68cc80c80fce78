"""Section 6, incremental verification: ``--since`` the previous snapshot vs the whole current snapshot.

Two encrypted tables are built by C commits of F small data files each (full: 100 x 100 = 10,000
files; each commit one INSERT whose 2 Spark tasks roll to a new ~4 KB file every 1,000 rows, see
:func:`bench.workloads.insert_rolled_files`), then one more commit of 10 files: one with Iceberg's
defaults (manifests merged, see :data:`VARIANTS`), one with a manifest per commit. Then, taking turns
in each repeat (one untimed warm-up round first):

* ``verify_metadata(metadata_json, kms)``: the whole current snapshot, local walk (reference);
* ``verify_metadata(metadata_json, kms, since_snapshot_id=previous)``: only what the last commit
  added (its manifest list, its new manifest(s), its 10 data files);
* the same two through ``verify_table(spark, table[, since_snapshot_id=previous])`` in the shared
  ``local[2]`` session (Spark tasks in Python workers; reference: its full run).

Every ``since`` report is checked: mode ``since``, all OK, and its files are exactly the new data
files (from the ``data_files`` metadata table, before vs after the commit), the manifests the new
snapshot added (``manifests`` metadata table) and its manifest list (``snapshots``).

runs/s = 1 / wall seconds of one verification, so the ratio of the ``since`` row to the full row
is how many times faster it is (goal, issue: >= 50x).
"""

from __future__ import annotations

import statistics
import time

from bench.context import Context
from bench.harness import Goal, Row, Section, time_interleaved
from bench.workloads import (
    FILES_COLUMNS,
    ROLLED_PROPERTIES,
    create_table,
    current_metadata_json,
    data_file_count,
    insert_rolled_files,
)

TITLE = "6. Incremental verification: --since the previous snapshot vs the whole current snapshot"


def _current_snapshot_id(ctx: Context, table: str) -> int:
    from pyiceberg_crypto.table.metadata import TableMetadata

    location = current_metadata_json(ctx, table)
    with open(location.removeprefix("file:"), "rb") as handle:
        return TableMetadata.parse(handle.read(), location).current_snapshot_id


def _data_files(ctx: Context, table: str) -> set[str]:
    return {row[0] for row in ctx.spark.sql(f"SELECT file_path FROM {table}.data_files").collect()}


#: The two tables: Iceberg's defaults (a fast append merges the table's manifests into one once
#: there are ``commit.manifest.min-count-to-merge`` = 100 of them, so the 100th commit leaves one
#: manifest of 10,000 files), and manifest merging off (one manifest per commit: 101 in the end,
#: of which ``since`` skips 100 by sequence number). name -> (label, extra table properties)
VARIANTS = {
    "merged": ("Iceberg defaults (manifests merged)", {}),
    "per_commit": ("one manifest per commit (`commit.manifest-merge.enabled=false`)",
                   {"commit.manifest-merge.enabled": "false"}),
}


def _build(ctx: Context, variant: str) -> tuple[str, int, int, set[str]]:
    """The table, the previous and the new snapshot id, and the paths ``since`` must report."""
    sizes = ctx.sizes
    table = create_table(ctx, f"incremental_{variant}", FILES_COLUMNS,
                         properties={**ROLLED_PROPERTIES, **VARIANTS[variant][1]})
    start = time.perf_counter()
    for commit in range(sizes.incremental_commits):
        insert_rolled_files(ctx, table, sizes.incremental_files_per_commit)
        if (commit + 1) % 10 == 0:
            ctx.log(f"incremental ({variant}): {commit + 1} of {sizes.incremental_commits} commits "
                    f"({time.perf_counter() - start:.0f} s)")
    expected_before = sizes.incremental_commits * sizes.incremental_files_per_commit
    before = _data_files(ctx, table)
    if len(before) != expected_before:
        raise RuntimeError(f"{table}: expected {expected_before} data files, Iceberg wrote {len(before)}")
    previous = _current_snapshot_id(ctx, table)
    insert_rolled_files(ctx, table, sizes.incremental_new_files)
    new = _current_snapshot_id(ctx, table)
    added = _data_files(ctx, table) - before
    if len(added) != sizes.incremental_new_files or data_file_count(ctx, table) != expected_before + len(added):
        raise RuntimeError(f"{table}: the last commit added {len(added)} data files, expected "
                           f"{sizes.incremental_new_files}")
    manifests = {row[0] for row in ctx.spark.sql(
        f"SELECT path FROM {table}.manifests WHERE added_snapshot_id = {new}").collect()}
    manifest_list = ctx.spark.sql(f"SELECT manifest_list FROM {table}.snapshots WHERE snapshot_id = {new}").first()[0]
    return table, previous, new, {*added, *manifests, manifest_list}


def _check_since(report, expected: set[str], new_files: int, what: str) -> None:
    """The since report lists exactly the new data files, the new manifest(s) and the manifest list, all OK."""
    kinds: dict[str, int] = {}
    for finding in report.files:
        kinds[finding.kind] = kinds.get(finding.kind, 0) + 1
    problems = []
    if report.mode != "since":
        problems.append(f"mode {report.mode!r}")
    if not report.ok:
        problems.append(f"not OK: {[(f.path, f.status) for f in report.not_ok()][:3]}")
    if kinds.get("data", 0) != new_files or kinds.get("manifest", 0) < 1 or kinds.get("manifest-list", 0) != 1:
        problems.append(f"files by kind {kinds}, expected {new_files} data, >= 1 manifest, 1 manifest list")
    paths = {f.path for f in report.files}
    if paths != expected:
        problems.append(f"{len(paths - expected)} unexpected file(s) {sorted(paths - expected)[:3]}, "
                        f"{len(expected - paths)} missing {sorted(expected - paths)[:3]}")
    if problems:
        raise RuntimeError(f"{what}: " + "; ".join(problems))


def _check_full(report, files: int, what: str) -> None:
    data = sum(1 for f in report.files if f.kind == "data")
    if not report.ok or report.mode != "current" or data != files:
        raise RuntimeError(f"{what}: mode {report.mode!r}, ok={report.ok}, {data} data files (expected {files})")


def _measure(ctx: Context, variant: str) -> tuple[dict[str, list[float]], dict[str, str], int]:
    """Seconds per contender, a note per contender, and the number of data files of the table."""
    from pyiceberg_crypto.kms import InMemoryKms
    from pyiceberg_crypto.verify import verify_metadata, verify_table

    sizes = ctx.sizes
    ctx.log(f"incremental ({variant}): building a table of {sizes.incremental_commits} commits x "
            f"{sizes.incremental_files_per_commit} files + 1 commit of {sizes.incremental_new_files}")
    table, previous, new, expected = _build(ctx, variant)
    metadata_json = current_metadata_json(ctx, table)
    spark = ctx.spark
    kms = InMemoryKms(ctx.master_keys)
    total_files = sizes.incremental_commits * sizes.incremental_files_per_commit + sizes.incremental_new_files
    reports: dict[str, object] = {}
    plans: dict[str, list[float]] = {}

    def checked(name: str, call, check):
        def run_once():
            report = call()
            check(report, name)
            reports[name] = report
            plans.setdefault(name, []).append(report.timings["plan"])
        return run_once

    def since_check(report, name):
        _check_since(report, expected, sizes.incremental_new_files, f"{variant}, {name}")

    def full_check(report, name):
        _check_full(report, total_files, f"{variant}, {name}")

    contenders = {
        "full_local": checked("full_local", lambda: verify_metadata(metadata_json, kms), full_check),
        "since_local": checked("since_local", lambda: verify_metadata(metadata_json, kms, since_snapshot_id=previous),
                               since_check),
        "full_spark": checked("full_spark", lambda: verify_table(spark, table), full_check),
        "since_spark": checked("since_spark", lambda: verify_table(spark, table, since_snapshot_id=previous),
                               since_check),
    }
    ctx.log(f"incremental ({variant}): timing since vs full (local walk, Spark job); "
            f"previous snapshot {previous}, new {new}")
    seconds = time_interleaved(contenders, sizes.goal_repeats)

    def note(name: str) -> str:
        report = reports[name]
        kinds: dict[str, int] = {}
        for finding in report.files:
            kinds[finding.kind] = kinds.get(finding.kind, 0) + 1
        counts = ", ".join(f"{n:,} {kind}" for kind, n in kinds.items())
        scope = report.scope
        skipped = (f"; skipped {scope.get('manifests_skipped', 0)} manifests, {scope.get('entries_skipped', 0)} entries"
                   if report.mode == "since" else "")
        timed = plans[name][-len(seconds[name]):]  # without the warm-up
        share = statistics.median(100 * p / s for p, s in zip(timed, seconds[name]))
        return f"{statistics.median(seconds[name]):.3g} s; {counts}{skipped}; driver {share:.0f} %"

    return seconds, {name: note(name) for name in contenders}, total_files


def run(ctx: Context) -> Section:
    sizes = ctx.sizes
    measured = {variant: _measure(ctx, variant) for variant in VARIANTS}
    total_files = next(iter(measured.values()))[2]
    section = Section(
        TITLE,
        f"Two encrypted tables, each built by {sizes.incremental_commits} commits of "
        f"{sizes.incremental_files_per_commit} data files (~4 KB, 1,000 rows each), then one commit of "
        f"{sizes.incremental_new_files} files ({total_files:,} data files in all): one with Iceberg's defaults "
        "(the fast append merges the manifests once there are 100 of them: 2 manifests in the end), one with "
        "`commit.manifest-merge.enabled=false` (one manifest per commit). Contenders take turns in each of "
        f"{sizes.goal_repeats} repeats after one untimed round. Reference: the full verification of the "
        "current snapshot; `since`: `since_snapshot_id` = the snapshot before the last commit. Local walk: "
        "`verify_metadata(metadata_json, kms[, since_snapshot_id=...])` in this process; Spark job: "
        "`verify_table(spark, table[, since_snapshot_id=...])` in the shared `local[2]` session. runs/s = 1 / "
        "wall seconds, so a ratio is how many times faster (goal: since >= 50x faster than full). Every `since` "
        "report was checked to list exactly the new data files, the manifest(s) the last commit added and its "
        "manifest list, all OK. Notes: median seconds; files in the (last) report by kind; manifests / entries "
        "the plan skipped; driver share = median of `timings[\"plan\"]` / wall time.",
    )
    for variant, (seconds, notes, _) in measured.items():
        label = VARIANTS[variant][0]
        for where, how in (("local", "local walk `verify_metadata`"), ("spark", "Spark job `verify_table` (local[2])")):
            full_key, since_key = f"full_{where}_{variant}", f"since_{where}_{variant}"
            section.rows.append(Row("incremental", full_key, f"{label}: full verification, current snapshot: {how}",
                                    "runs/s", [1 / s for s in seconds[f"full_{where}"]], note=notes[f"full_{where}"],
                                    short="full verification"))
            section.rows.append(Row("incremental", since_key, f"{label}: since the previous snapshot: {how}",
                                    "runs/s", [1 / s for s in seconds[f"since_{where}"]], refs=(full_key,),
                                    note=notes[f"since_{where}"], headline=True))
            if where == "spark":  # what the Spark job adds to the same since check (issue 24 item 4)
                above = [spark - local for spark, local in zip(seconds["since_spark"], seconds["since_local"])]
                section.rows.append(Row("incremental", f"above_{variant}", f"{label}: since the previous snapshot: "
                                        "`verify_table` seconds above the local walk (same repeat)", "s", above))
                section.goals.append(Goal(f"{label}: since, `verify_table` above the local walk", f"above_{variant}",
                                          0.2, at_most=True))
            section.goals.append(Goal(f"{label}: since vs full, {how}", since_key, 50.0, ref=full_key,
                                      why="A `verify_table` call has a fixed cost (the metastore lookup and "
                                          "the catalog's settings, through the JVM; a 10-file increment is "
                                          "checked on the driver, no Spark job) against a full run of only a "
                                          "few seconds at 10,000 files."))
    return section

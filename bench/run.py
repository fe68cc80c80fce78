"""Run the benchmarks and write the results table.

    make bench          # full sizes (~60 min on 2 cores, ~50 of them sections 5 and 6, ~6 section 7), writes bench/RESULTS.md
    make bench-quick    # tiny sizes (< 3 min), same table shape (QUICK_NOTE: what it leaves out), writes bench/.data/RESULTS-quick.md
    .venv/bin/python -m bench.run [--quick] [--only ags1,parquet,kms,tables,verify,incremental,read,cluster,selective,audit,streaming,keys,reencrypt,trino,audit-cost,face-boto3,adopt] [--output FILE]

Bench data (AGS1 and Parquet files, the Iceberg warehouse and metastore) goes to ``bench/.data/``
(gitignored), recreated on each run.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
import traceback
from pathlib import Path

from bench.context import FULL, QUICK, Context, prepare_data_dir
from bench.harness import Section, render_results, render_sections

BENCH_DIR = Path(__file__).resolve().parent
#: section name -> module (each has ``run(ctx) -> Section`` and ``TITLE``), in run order.
SECTIONS = {
    "ags1": "bench.ags1_read",
    "parquet": "bench.parquet_read",
    "kms": "bench.kms_bridge",
    "tables": "bench.tables",
    "verify": "bench.verify_tables",
    "incremental": "bench.verify_incremental",
    "read": "bench.read_table",
    "cluster": "bench.cluster_kms",
    "selective": "bench.read_selective",
    "audit": "bench.audit_lake",
    "streaming": "bench.streaming",
    "keys": "bench.keys_where_used",
    "reencrypt": "bench.reencrypt",
    "trino": "bench.trino_face",
    "audit-cost": "bench.audit_cost",
    "face-boto3": "bench.face_boto3",
    "adopt": "bench.adopt",
}
#: Sections that stop the shared Spark session and shut the embedded Derby metastore down (it
#: cannot be restarted in this JVM): they run after every other selected section; the results
#: still list the sections in the order of ``SECTIONS``.
RUN_LAST = ("verify",)
SHARED_MACHINE_NOTE = (
    "Measured on a 2-vCPU development VM (a cloud VM: neighbours share the host): absolute figures "
    "are noisy (expect +-30 % between runs); ratios measured in the same run are the figures to quote."
)

#: What quick mode leaves out or shortens (the tables keep every row; a row left out says why).
QUICK_NOTE = (
    "Quick sizes (`make bench-quick`, < 3 minutes on 2 vCPUs): tiny tables and files, and the rows of the goals "
    f"measured {QUICK.goal_repeats} times instead of the {FULL.goal_repeats} of `make bench`, so their "
    "spreads are indicative only. Left out, with the reason in their rows: every Spark application besides the "
    "shared session (most of a quick run's time): section 8, section 7's fresh Spark process, section 5's Spark "
    "jobs, section 12's Spark command, section 14's Trino (its start alone takes 20-40 s); "
    "the Java reference of section 1 gets 2 JIT warm-up reads instead of 16. Do not quote quick figures."
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="pyiceberg-crypto benchmarks")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, same table shape (a few minutes)")
    parser.add_argument("--only", help=f"comma-separated sections of: {', '.join(SECTIONS)}")
    parser.add_argument("--output", type=Path, help="results file (default: bench/RESULTS.md, quick: bench/.data/RESULTS-quick.md)")
    parser.add_argument("--data-dir", type=Path, default=BENCH_DIR / ".data")
    parser.add_argument("--note", action="append", default=[], help="a note to print above the tables")
    args = parser.parse_args(argv)

    names = args.only.split(",") if args.only else list(SECTIONS)
    unknown = [n for n in names if n not in SECTIONS]
    if unknown:
        parser.error(f"unknown section(s) {unknown}; choose from {list(SECTIONS)}")
    names = sorted(dict.fromkeys(names), key=list(SECTIONS).index)
    run_order = sorted(names, key=lambda name: name in RUN_LAST)
    data_dir = prepare_data_dir(args.data_dir, fresh=True)
    output = args.output or (data_dir / "RESULTS-quick.md" if args.quick else BENCH_DIR / "RESULTS.md")
    ctx = Context(QUICK if args.quick else FULL, data_dir / "run", args.quick)
    ctx.data_dir.mkdir(parents=True, exist_ok=True)

    mode = "quick sizes" if args.quick else "full sizes"
    command = "make bench-quick" if args.quick else "make bench"
    notes = [*args.note, *([QUICK_NOTE] if args.quick else []), SHARED_MACHINE_NOTE]
    output.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    done: dict[str, Section] = {}
    seconds: dict[str, float] = {}

    def in_order() -> list[Section]:
        return [done[name] for name in names if name in done]

    try:
        for index, name in enumerate(run_order):
            module = importlib.import_module(SECTIONS[name])
            section_start = time.perf_counter()
            try:
                done[name] = module.run(ctx)
            except Exception as exc:  # one broken section must not lose the others' numbers
                traceback.print_exc()
                done[name] = Section(module.TITLE, f"FAILED: {type(exc).__name__}: {exc}")
            seconds[name] = time.perf_counter() - section_start
            ctx.log(f"{name}: {seconds[name]:.0f} s")
            if index + 1 < len(run_order):  # a run stopped half-way still leaves what it measured
                partial = [*notes, f"PARTIAL: {index + 1} of {len(run_order)} sections so far."]
                output.write_text(render_results(in_order(), mode=mode, elapsed_seconds=time.perf_counter() - started,
                                                 command=command, notes=partial))
    finally:
        ctx.stop_spark()
    elapsed = time.perf_counter() - started
    sections = in_order()

    text = render_results(sections, mode=mode, elapsed_seconds=elapsed, command=command, notes=notes)
    output.write_text(text)
    print(render_sections(sections))
    print("[bench] seconds per section: " + ", ".join(f"{name} {seconds[name]:.0f}" for name in run_order
                                                     if name in seconds), file=sys.stderr)
    print(f"[bench] {len(sections)} sections in {elapsed:.0f} s; written to {output}", file=sys.stderr)
    return 1 if any(s.description.startswith("FAILED") for s in sections) else 0


if __name__ == "__main__":
    sys.exit(main())

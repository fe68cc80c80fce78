"""Section 1, AGS1: verifying one large AES GCM Stream file, ours vs Iceberg Java, vs the ceiling.

One AGS1 file (1 MiB blocks, AES-128, written by our ``Ags1Writer``) is read from the page cache,
in the same run, by:

* Iceberg Java's ``AesGcmInputStream`` (``AesGcmInputFile``) in a plain JVM, after JIT warm-up
  (``io.pyicebergcrypto.testkit.Ags1Bench``): the reference;
* the raw ceiling: ``readinto`` + ``AESGCM.decrypt_into`` per block, no checks at all;
* ``verify_ags1`` (our verifier's fast path) and ``Ags1Reader.readinto`` (the seekable reader).

"with N threads": N threads each read the whole file at once; GB/s = N x file / wall time.
Run alone: ``.venv/bin/python -m bench.run --only ags1 [--quick]``.
"""

from __future__ import annotations

import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from bench.context import Context
from bench.harness import Row, Section, per_second, time_runs
from tests.testkit import java_classpath
from pyiceberg_crypto.formats import ags1
from pyiceberg_crypto.testing import Ags1Writer

MIB = 1024 * 1024
TITLE = "1. AGS1: verify one AES GCM Stream file"


def write_file(path: Path, size_mib: int, key: bytes, aad: bytes) -> int:
    """A ``size_mib`` MiB AGS1 file of random plaintext; returns the plaintext length."""
    with Ags1Writer(str(path), key, aad) as writer:
        for _ in range(size_mib):
            writer.write(os.urandom(MIB))
    return writer.plaintext_length


def raw_read_decrypt(path: Path, key: bytes, aad: bytes) -> None:
    """The ceiling: read each cipher block and decrypt it, with no framing or length checks."""
    aesgcm = AESGCM(key)
    cipher_block = MIB + ags1.BLOCK_OVERHEAD
    buffer = bytearray(cipher_block)
    view = memoryview(buffer)
    out = memoryview(bytearray(MIB))
    index = 0
    with open(path, "rb", buffering=0) as f:
        f.seek(ags1.HEADER_LENGTH)
        while True:
            got = f.readinto(view)
            if not got:
                return
            aesgcm.decrypt_into(view[:12], view[12:got], ags1.block_aad(aad, index), out[: got - ags1.BLOCK_OVERHEAD])
            index += 1


def reader_pass(path: Path, key: bytes, aad: bytes) -> None:
    buffer = bytearray(MIB)
    with ags1.Ags1Reader(str(path), key, aad) as reader:
        while reader.readinto(buffer):
            pass


def in_threads(fn, threads: int):
    """``fn`` run by ``threads`` threads at once (each does the whole job)."""
    if threads == 1:
        return fn

    def run() -> None:
        with ThreadPoolExecutor(threads) as pool:
            for future in [pool.submit(fn) for _ in range(threads)]:
                future.result()

    return run


def java_seconds(path: Path, key: bytes, aad: bytes, runs: int, warmup: int, threads: int) -> list[float]:
    """Wall seconds of each timed round of Iceberg's AesGcmInputStream (``threads`` concurrent reads)."""
    classpath = java_classpath()
    command = [
        "java", "-cp", classpath, "io.pyicebergcrypto.testkit.Ags1Bench",
        str(path), key.hex(), aad.hex(), str(warmup), str(runs), str(threads),
    ]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return [int(line) / 1e9 for line in out.split()]


def run(ctx: Context) -> Section:
    sizes = ctx.sizes
    key, aad = os.urandom(16), os.urandom(16)
    path = ctx.data_dir / "ags1" / "bench.ags1"
    path.parent.mkdir(parents=True, exist_ok=True)
    ctx.log(f"AGS1: writing {sizes.ags1_mib} MiB")
    size = write_file(path, sizes.ags1_mib, key, aad)
    # JIT warm-up: 16 rounds (4 GiB at full size). With 4 rounds (1 GiB) Java read ~1.9 GB/s,
    # with 16 ~2.8 GB/s on the same file: the AES-GCM intrinsics need many calls to compile.
    # Quick mode: 2 rounds (the JIT's compiles took 25-45 s of a busy VM's 2 cores).
    warmup_rounds = sizes.ags1_java_warmup
    section = Section(
        TITLE,
        f"{sizes.ags1_mib} MiB file, AES-128-GCM, 1 MiB blocks, warm page cache; GB/s of plaintext. "
        f"Reference: Iceberg Java's `AesGcmInputStream` (plain JVM, after {warmup_rounds} untimed reads of the file "
        "for JIT warm-up); ceiling: "
        "`readinto` + `AESGCM.decrypt_into` per block with no checks. With N threads, N threads "
        "each read the whole file at once (GB/s = N x size / wall time).",
    )
    label = "AGS1"
    for threads in sorted({1, sizes.threads}):
        suffix = "" if threads == 1 else f", {threads} threads"
        tag = "" if threads == 1 else f"_{threads}"
        amount = size * threads
        ctx.log(f"AGS1: Java{suffix}")
        java = java_seconds(path, key, aad, sizes.repeats, warmup_rounds, threads)
        ctx.log(f"AGS1: Python{suffix}")
        raw = time_runs(in_threads(lambda: raw_read_decrypt(path, key, aad), threads), sizes.repeats)
        ours = time_runs(in_threads(lambda: ags1.verify_ags1(str(path), key, aad), threads), sizes.repeats)
        section.rows += [
            Row(label, "java" + tag, f"Java `AesGcmInputStream`{suffix}", "GB/s", per_second(amount, java, 1e9),
                short="Java"),
            Row(label, "raw" + tag, f"raw read + AES-GCM (ceiling){suffix}", "GB/s", per_second(amount, raw, 1e9),
                short="ceiling"),
            Row(label, "ours" + tag, f"Python `verify_ags1`{suffix}", "GB/s", per_second(amount, ours, 1e9),
                refs=("java" + tag, "raw" + tag), headline=True),
        ]
        if threads == 1:
            reader = time_runs(lambda: reader_pass(path, key, aad), sizes.repeats)
            section.rows.append(
                Row(label, "reader", "Python `Ags1Reader.readinto` (seekable reader)", "GB/s",
                    per_second(amount, reader, 1e9), refs=("java", "raw")))
    path.unlink()
    return section

"""Benchmark: verifying a large AGS1 file in Python vs Iceberg Java's AesGcmInputStream.

    .venv/bin/python bench/ags1_read.py [--size-mib 256] [--runs 5] [--key-bits 128]

Writes one AGS1 file (1 MiB blocks, our Ags1Writer), then, in the same run and on the same
(warm, page-cached) file, times:
  * the AES-GCM primitive alone (cryptography's decrypt_into on a 1 MiB block, repeated) - the ceiling
  * ``verify_ags1`` (our fast path: one AESGCM object, preallocated buffers, decrypt_into)
  * ``Ags1Reader.readinto`` (the general seekable reader, 1 MiB reads)
  * Iceberg's ``AesGcmInputStream`` via ``AesGcmInputFile`` in a plain JVM (no Spark),
    ``io.pyicebergcrypto.testkit.Ags1Bench`` (after JIT warm-up)
and prints GB/s (plaintext bytes / second, median of the runs) and the Python/Java ratio.
Needs ``make jars`` (for the bench class) and ``java`` on PATH.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import cryptography
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from pyiceberg_crypto import jars
from pyiceberg_crypto.formats import ags1

MIB = 1024 * 1024


def write_file(path: Path, size_mib: int, key: bytes, aad: bytes) -> int:
    with ags1.Ags1Writer(str(path), key, aad) as writer:
        for _ in range(size_mib):
            writer.write(os.urandom(MIB))
    return writer.plaintext_length


def median_seconds(fn, runs: int) -> float:
    fn()  # warm-up (page cache, allocations)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def primitive(key: bytes, blocks: int) -> None:
    aesgcm, nonce = AESGCM(key), os.urandom(12)
    sealed = aesgcm.encrypt(nonce, os.urandom(MIB), b"aad")
    out = bytearray(MIB)
    for _ in range(blocks):
        aesgcm.decrypt_into(nonce, sealed, b"aad", out)


def reader_pass(path: Path, key: bytes, aad: bytes) -> None:
    buffer = bytearray(MIB)
    with ags1.Ags1Reader(str(path), key, aad) as reader:
        while reader.readinto(buffer):
            pass


def java_seconds(path: Path, key: bytes, aad: bytes, runs: int, warmup: int) -> float:
    classpath = os.pathsep.join(str(p) for p in sorted(jars.jar_dir().glob("*.jar")))
    command = [
        "java", "-cp", classpath, "io.pyicebergcrypto.testkit.Ags1Bench",
        str(path), key.hex(), aad.hex(), str(warmup), str(runs),
    ]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return statistics.median(int(line) for line in out.split()) / 1e9


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--key-bits", type=int, choices=[128, 192, 256], default=128)
    parser.add_argument("--dir", help="where to write the file (default: a temporary directory)")
    args = parser.parse_args(argv)

    key, aad = os.urandom(args.key_bits // 8), os.urandom(16)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = Path(tmp) / "bench.ags1"
        size = write_file(path, args.size_mib, key, aad)
        gb = size / 1e9
        runs = args.runs
        results = {
            "AES-GCM primitive (decrypt_into, 1 MiB)": median_seconds(lambda: primitive(key, args.size_mib), runs),
            "Python verify_ags1 (fast path)": median_seconds(lambda: ags1.verify_ags1(str(path), key, aad), runs),
            "Python Ags1Reader.readinto": median_seconds(lambda: reader_pass(path, key, aad), runs),
            "Java AesGcmInputStream (Iceberg 1.11.0)": java_seconds(
                path, key, aad, runs, warmup=max(2, 1024 // args.size_mib)
            ),
        }
    print(f"AGS1 read, {args.size_mib} MiB, AES-{args.key_bits}-GCM, 1 MiB blocks, median of {runs} runs")
    versions = f"python {sys.version.split()[0]}, cryptography {cryptography.__version__}"
    print(f"{versions}, {os.cpu_count()} CPUs")
    for name, seconds in results.items():
        print(f"  {name:42s} {gb / seconds:6.2f} GB/s")
    java = results["Java AesGcmInputStream (Iceberg 1.11.0)"]
    fast = results["Python verify_ags1 (fast path)"]
    primitive_s = results["AES-GCM primitive (decrypt_into, 1 MiB)"]
    print(f"  ratio Python fast path / Java:  {java / fast:.2f}x")
    print(f"  fast path / primitive ceiling:  {primitive_s / fast:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

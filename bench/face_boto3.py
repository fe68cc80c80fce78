"""Section 16, the AWS KMS face from boto3 (issue 50, item 3): several client processes, one credential.

One ``kms serve --aws-kms-api`` process (HTTPS with the face's own CA, SigV4; a keystore KMS, no
policy, no trail). 1, 2 and 4 Python processes, each with its own boto3 client signed with the
same access key, Decrypt the same blob in a loop (what the replay cache used to refuse: botocore
signs no nonce), started together; calls/s = all calls / the slowest process's seconds. Every call
must succeed (any error fails the run). The face has no cap of its own on calls/s: what limits
it is the CPU of the two vCPUs, shared by the face and its clients.

    .venv/bin/python -m bench.run --only face-boto3 [--quick] --output /tmp/face-boto3.md
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from bench.context import MASTER_KEY_ID, Context
from bench.harness import Goal, Row, Section
from bench.trino_face import ACCESS_KEY_ID, REGION, face_service

TITLE = "16. The AWS KMS face from boto3: several processes, one credential"
PROCESSES = (1, 2, 4)

#: One client process: waits for the start file, then Decrypts ``calls`` times; prints JSON.
CLIENT = r"""
import json, os, sys, time
import boto3
from botocore.config import Config
endpoint, ca, secret, blob_hex, calls, start = sys.argv[1:7]
client = boto3.client("kms", region_name=os.environ["BENCH_REGION"], endpoint_url=endpoint,
                      aws_access_key_id=os.environ["BENCH_ACCESS_KEY_ID"], aws_secret_access_key=secret, verify=ca,
                      config=Config(retries={"max_attempts": 1, "mode": "standard"}))
blob = bytes.fromhex(blob_hex)
for _ in range(20):  # warm-up: connection, TLS session, botocore's caches
    client.decrypt(CiphertextBlob=blob)
print("ready", flush=True)
while not os.path.exists(start):
    time.sleep(0.001)
failures, began = 0, time.perf_counter()
for _ in range(int(calls)):
    try:
        client.decrypt(CiphertextBlob=blob)
    except Exception:  # counted: the run fails on any
        failures += 1
print(json.dumps({"seconds": time.perf_counter() - began, "failures": failures}), flush=True)
"""


def _round(endpoint: str, ca: str, secret: str, blob: bytes, processes: int, calls: int, start_dir) -> float:
    start = start_dir / f"start-{time.monotonic_ns()}"
    env = dict(os.environ, BENCH_REGION=REGION, BENCH_ACCESS_KEY_ID=ACCESS_KEY_ID)
    clients = [subprocess.Popen([sys.executable, "-c", CLIENT, endpoint, ca, secret, blob.hex(), str(calls), str(start)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
               for _ in range(processes)]
    try:
        for client in clients:
            line = client.stdout.readline().strip()
            if line != "ready":
                raise RuntimeError(f"a boto3 client did not start: {line} {client.stderr.read()[-500:]}")
        start.touch()
        results = []
        for client in clients:
            out, err = client.communicate(timeout=600)
            if client.returncode:
                raise RuntimeError(f"a boto3 client failed: {err[-500:]}")
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for client in clients:
            if client.poll() is None:
                client.kill()
        start.unlink(missing_ok=True)
    failed = sum(r["failures"] for r in results)
    if failed:
        raise RuntimeError(f"{failed} of {processes * calls} boto3 Decrypt calls failed")
    return processes * calls / max(r["seconds"] for r in results)


def run(ctx: Context) -> Section:
    import boto3

    sizes = ctx.sizes
    calls = sizes.face_calls // 2  # per process and round
    samples: dict[int, list[float]] = {p: [] for p in PROCESSES}
    with face_service(ctx) as (_, endpoint, truststore, secret, _keystore):
        ca = str(truststore.parent / "aws-kms-api-ca.pem")
        kms = boto3.client("kms", region_name=REGION, endpoint_url=endpoint, aws_access_key_id=ACCESS_KEY_ID,
                           aws_secret_access_key=secret, verify=ca)
        blob = kms.encrypt(KeyId=MASTER_KEY_ID, Plaintext=os.urandom(32))["CiphertextBlob"]
        for round_ in range(sizes.goal_repeats):
            ctx.log(f"face-boto3: round {round_ + 1} of {sizes.goal_repeats}")
            order = PROCESSES if round_ % 2 == 0 else tuple(reversed(PROCESSES))
            for processes in order:
                samples[processes].append(_round(endpoint, ca, secret, blob, processes, calls, ctx.data_dir))
    rows = [Row("boto3", f"p{p}", f"Decrypt calls/s, {p} boto3 process{'es' if p > 1 else ''}, one credential, "
                "one blob", "calls/s", samples[p], refs=() if p == 1 else ("p1",),
                short="1 process" if p == 1 else "", headline=p == PROCESSES[-1]) for p in PROCESSES]
    return Section(
        TITLE,
        "One `kms serve --aws-kms-api` process (HTTPS with the face's own CA, SigV4, keystore KMS, no policy, no "
        f"trail); 1, 2 and 4 Python processes, each with its own boto3 client signed with the same access key, "
        f"Decrypt one blob {calls:,} times each after 20 warm-up calls, started together (calls/s = all calls / the "
        f"slowest process's seconds); the three configurations take turns in each of {sizes.goal_repeats} rounds. "
        "Every call succeeded (a failure fails the run): the same signed request repeated by one client or several "
        "is served, as AWS KMS serves it. The clients and the face share the 2 vCPUs.",
        rows,
        GOALS,
    )


#: Issue 50, item 3: AWS clients work as against AWS; no cap of the face's own.
GOALS = [
    Goal("AWS face, boto3 Decrypt calls/s, 4 processes vs 1 (one credential)", "p4", 1.0, ref="p1",
         why="With no cap of its own the face serves several clients at least as fast as one; on 2 vCPUs the four "
             "boto3 processes (botocore's signing and parsing: most of the CPU per call) compete with the face."),
]

"""Section 15, the audit trail's cost (issue 50): ``kms serve`` with ``--audit-log`` vs without.

Three ``kms serve`` processes on one keystore KMS: without policy or trail (``plain``), with a
policy only (``policy``: one grant), and with the same policy and the audit trail (``audited``:
``--audit-log``, ``--audit-key-file``). A plain JVM (Java 17, no Spark) unwraps from 8 threads
(``io.pyicebergcrypto.testkit.KmsBridgeBench.client``, the bridge's ``PythonKmsClient`` over the
Py4J face), the three taking turns in every round after an untimed round (JIT warm-up), so that a
burst of load from other jobs on the machine hits them alike. Goal: the audited service at least
0.9x the policy-only one (the audit's cost, the trail on vs off), median of the per-round ratios.
After the run the trail is checked (``verify_trail`` with its key): every call has its line.

    .venv/bin/python -m bench.run --only audit-cost [--quick] --output /tmp/audit-cost.md
"""

from __future__ import annotations

import json
from pathlib import Path

from bench.context import MASTER_KEY_ID, Context
from bench.harness import Goal, Row, Section
from bench.kms_bridge import kms_service

TITLE = "15. The audit trail's cost: `kms serve` with the audit trail on vs off, 8 JVM threads"
THREADS = 8
KINDS = ("plain", "policy", "audited")
NAMES = {
    "plain": "`kms serve` without policy or audit trail",
    "policy": "`kms serve` with a policy, audit trail off",
    "audited": "`kms serve` with a policy, audit trail on",
}


def _service_args(ctx: Context) -> dict[str, tuple[str, ...]]:
    args: dict[str, tuple[str, ...]] = {"plain": ()}
    for kind in ("policy", "audited"):
        directory = ctx.data_dir / f"kms-serve-cost-{kind}"
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        policy = directory / "policy.json"
        policy.write_text(json.dumps({"version": 1, "principals": {
            "py4j:default": {"grants": [{"keys": [MASTER_KEY_ID], "operations": ["*"]}]}}}))
        policy.chmod(0o600)
        args[kind] = ("--policy", str(policy))
        if kind == "audited":
            for old in directory.glob("audit.jsonl*"):
                old.unlink()
            args[kind] += ("--audit-log", str(directory / "audit.jsonl"), "--audit-key-file",
                           str(directory / "audit.key"))
    return args


def _trail_check(ctx: Context, expected_calls: int) -> str:
    from pyiceberg_crypto.serve.audit_trail import load_or_create_audit_key, verify_trail

    directory = ctx.data_dir / "kms-serve-cost-audited"
    report = verify_trail(directory / "audit.jsonl", key=load_or_create_audit_key(directory / "audit.key"))
    if not report.ok:
        raise RuntimeError(f"the audited service's trail is not intact: {report.problem}")
    operations = 0
    for path in sorted(Path(directory).glob("audit.jsonl*")):
        with open(path, "rb") as lines:
            operations += sum(1 for line in lines if b'"operation":"unwrap"' in line and b'"result":"ok"' in line)
    if operations < expected_calls:
        raise RuntimeError(f"the audited service's trail has {operations} unwrap lines for {expected_calls} calls")
    return f"trail checked after the run: {report.summary()}; {operations:,} unwrap lines for {expected_calls:,} calls"


def run(ctx: Context) -> Section:
    from py4j.java_gateway import GatewayParameters, JavaGateway, launch_gateway

    from bench.trino_face import _client_classpath

    sizes = ctx.sizes
    calls = sizes.kms_calls_per_thread * 2  # per configuration and round, split over the threads
    warmup = max(100, calls // THREADS // 10)
    args = _service_args(ctx)
    samples: dict[str, list[float]] = {kind: [] for kind in KINDS}
    total_calls = 0
    with kms_service(ctx, "cost-plain", 0.0, args["plain"]) as plain, \
            kms_service(ctx, "cost-policy", 0.0, args["policy"]) as policy, \
            kms_service(ctx, "cost-audited", 0.0, args["audited"]) as audited:
        properties = {"plain": plain, "policy": policy, "audited": audited}
        port = launch_gateway(classpath=_client_classpath(), die_on_exit=True, javaopts=["-Xmx512m"])
        gateway = JavaGateway(gateway_parameters=GatewayParameters(port=port, auto_convert=True))
        try:
            bench = gateway.jvm.io.pyicebergcrypto.testkit.KmsBridgeBench
            for round_ in range(-1, sizes.goal_repeats):  # -1: untimed (JIT warm-up, connections)
                ctx.log(f"audit-cost: round {round_ + 2} of {sizes.goal_repeats + 1}")
                order = KINDS if round_ % 2 else tuple(reversed(KINDS))  # alternate who goes first
                for kind in order:
                    result = list(bench.client(dict(properties[kind]), MASTER_KEY_ID, THREADS, calls // THREADS,
                                               warmup))
                    if result[3]:
                        raise RuntimeError(f"{result[3]:.0f} KMS calls failed ({kind})")
                    if kind == "audited":
                        total_calls += (calls // THREADS + warmup) * THREADS
                    if round_ >= 0:
                        samples[kind].append(result[2])
        finally:
            gateway.shutdown()
    checked = _trail_check(ctx, total_calls)
    rows = [
        Row("cost", "plain", f"unwrapKey throughput, {NAMES['plain']}, 8 JVM threads", "calls/s", samples["plain"],
            short="without policy or trail"),
        Row("cost", "policy", f"unwrapKey throughput, {NAMES['policy']}, 8 JVM threads", "calls/s",
            samples["policy"], refs=("plain",), short="audit trail off"),
        Row("cost", "audited", f"unwrapKey throughput, {NAMES['audited']}, 8 JVM threads", "calls/s",
            samples["audited"], refs=("policy", "plain"), headline=True),
    ]
    return Section(
        TITLE,
        "Three `kms serve` processes on one keystore KMS (loopback, the Py4J face): without policy or trail; with a "
        "policy of one grant; with the same policy and `--audit-log` (the trail: one chained JSON line per call, "
        "written by group commit before the call's answer is released, signed digests every 1,000 lines). A plain "
        f"JVM (Java 17, no Spark) unwraps a key {calls:,} times per configuration and round from {THREADS} threads "
        f"(`KmsBridgeBench.client`, after {warmup} warm-up calls per thread); the three take turns in each of "
        f"{sizes.goal_repeats} rounds, after an untimed round, the first to go alternating. calls/s medians; the "
        f"goal's ratio is the median of the per-round ratios. {checked}.",
        rows,
        GOALS,
    )


#: Issue 50, item 2.
GOALS = [
    Goal("`kms serve` audit trail on vs off (same policy), calls/s, 8 JVM threads", "audited", 0.9, ref="policy",
         why="Issue 50: the audit costs at most 10 % of calls/s. Each call's line is chained (SHA-256) under a "
             "lock held only to build it; the lines of the calls in flight are written by one write(2) per batch "
             "(group commit), each call waiting for its batch before its answer is released."),
]

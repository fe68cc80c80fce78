"""The test kit's exceptions share a root of their own, :class:`TestKitError`: the kit is its own
distribution (``pyiceberg-crypto-testing``), and what fails in a test harness (a service that
does not start, a wait that times out) is not an error of the product (:mod:`pyiceberg_crypto.errors`).

    ServiceError            a test service (metastore, REST catalog, S3, Kafka, YARN...) cannot start or answer
      ClusterUnavailableError  the network-namespace cluster cannot be built here (no root, no ip/iptables)
      OpenBaoError             the OpenBao server cannot start or be configured
    WaitTimeoutError        a condition :func:`~pyiceberg_crypto.testing._wait.eventually` waited for never held
    TrinoHarnessError       the Trino harness cannot build, start or answer
"""

from __future__ import annotations

__all__ = ["TestKitError"]


class TestKitError(Exception):
    """The root of the test kit's exceptions (each keeps its standard base: ``RuntimeError``,
    ``AssertionError``)."""

    __test__ = False  # not a test class, whatever pytest makes of its name

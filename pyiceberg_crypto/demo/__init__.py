"""The two demos, one home:

- :mod:`.local`     the main job (``make demo``, ``pyiceberg-crypto demo``): local Spark, embedded
  metastore, local warehouse, in-memory Python KMS;
- :mod:`.external`  the same steps against real services, a metastore at ``thrift://...`` and an
  S3-compatible store (``python -m pyiceberg_crypto.demo.external``; ``docker/`` runs it).

``from pyiceberg_crypto.demo import run_demo`` is the local demo.
"""

from pyiceberg_crypto.demo.local import DemoReport, build_session, print_report, run_demo

__all__ = ["DemoReport", "build_session", "print_report", "run_demo"]

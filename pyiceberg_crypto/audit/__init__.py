"""The lake audit: every table of a catalog verified in one run, with its keys, in one report
(JSON, a self-contained HTML page, a Prometheus textfile)::

    from pyiceberg_crypto.audit import audit_catalog

    report = audit_catalog(spark, "lake", state_dir="/var/lib/pyiceberg-crypto/ledgers")
    report.ok, report.not_ok(), report.to_dict()
    report.write_html("lake-audit.html")
    report.write_prometheus("/var/lib/node_exporter/textfile/lake_audit.prom")

A feature on top of the verifier (:mod:`pyiceberg_crypto.verify`), which never imports it:

- :mod:`.lake`     ``audit_catalog`` / ``audit_tables``: list, plan, check every table's files in
  one batch, the ``CatalogReport``
- :mod:`.html`     the report as one offline HTML page
- :mod:`.metrics`  the report as a Prometheus textfile

The Spark-free form is ``pyiceberg-crypto audit`` (:mod:`pyiceberg_crypto.cli.audit_cmd`).
"""

from pyiceberg_crypto.audit.lake import CatalogReport, TableAudit, audit_catalog, audit_schema, audit_tables

__all__ = ["CatalogReport", "TableAudit", "audit_catalog", "audit_schema", "audit_tables"]

"""The ``pyiceberg-crypto`` command (:mod:`.main` builds the parser; one module per command):

- ``inspect`` (:mod:`.inspect_cmd`)   what an AGS1 or encrypted Parquet file is, every block/module checked
- ``decrypt`` (:mod:`.decrypt_cmd`)   an encrypted Parquet file to plaintext Parquet
- ``verify`` (:mod:`.verify_cmd`)     a whole table from its metadata.json, no JVM
- ``head`` (:mod:`.head_cmd`)         the first rows of a table, no JVM (the ``[read]`` extra)
- ``keys`` (:mod:`.keys_cmd`)         ``list`` / ``where-used`` / ``rewrap`` / ``prune`` a table's KEKs;
  ``reencrypt`` (:mod:`.reencrypt_cmd`) a table's data under fresh keys after a compromise
- ``keystore`` (:mod:`.keystore_cmd`) ``create`` / ``add`` / ``rotate`` / ``retire`` / ``list`` a keystore file
- ``kms`` (:mod:`.kms_cmd`)           ``serve``: the KMS service (:mod:`pyiceberg_crypto.serve`), its
  Py4J face for JVM-only clients and its AWS KMS face for Trino and boto3
- ``audit`` (:mod:`.audit_cmd`)       every table of a catalog, one report (JSON, HTML, Prometheus)
- ``jars`` (:mod:`.jars_cmd`)         ``show`` / ``download`` the JVM artifacts
- ``demo`` (:mod:`.demo_cmd`)         the end-to-end demo on local Spark

:mod:`.verify_job` is the verification job for ``spark-submit``; :mod:`.arguments` holds the options
the commands and the job share. Exit statuses: :class:`pyiceberg_crypto.exit_status.ExitStatus`.
Nothing in the package imports this package.
"""

"""moto's AWS KMS (case (a): Trino with AWS KMS directly) and OpenBao (case (c): OpenBao behind the
face) and the REST catalog server for the Trino tests."""

from pyiceberg_crypto.testing.pytest_plugin import openbao_server, rest_catalog_server  # noqa: F401
from tests.kms.conftest import aws_properties, kms_admin, moto_kms_endpoint  # noqa: F401

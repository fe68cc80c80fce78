"""moto's AWS KMS (case (a): Trino with AWS KMS directly) for the Trino tests."""

from tests.kms.conftest import aws_properties, kms_admin, moto_kms_endpoint  # noqa: F401

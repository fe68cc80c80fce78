"""Every setting the package reads is documented: KMS properties (``keystore.*``, ``vault.*``,
``kms.*``, ...), the bridge's catalog properties (``pyiceberg-crypto.*``) and the
``PYICEBERG_CRYPTO_*`` environment variables. Read from the source, so a new setting without
documentation fails here."""

from __future__ import annotations

import ast
import re

from tests.docs.blocks import DOCS, ROOT

PACKAGE = ROOT / "pyiceberg_crypto"
SETTINGS_PAGE = (DOCS / "reference" / "settings.md").read_text()
ALL_DOCS = "\n".join(p.read_text() for p in DOCS.rglob("*.md"))
KMS_PROPERTY = re.compile(r"(keystore|vault|kms|client|gcp|azure|kmip)\.[a-z0-9-]+")


def _strings(paths) -> set[str]:
    found = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.add(node.value)
    return found


def test_every_kms_property_is_documented():
    properties = {s for s in _strings((PACKAGE / "kms").glob("*.py")) if KMS_PROPERTY.fullmatch(s)}
    assert {"keystore.path", "vault.address", "kms.endpoint"} <= properties
    missing = sorted(p for p in properties if f"`{p}`" not in ALL_DOCS)
    assert not missing, f"KMS properties read by pyiceberg_crypto/kms but documented nowhere in docs/: {missing}"


def test_every_catalog_property_and_environment_variable_is_on_the_settings_page():
    source = "\n".join(p.read_text() for p in PACKAGE.rglob("*.py"))
    catalog = set(re.findall(r"pyiceberg-crypto\.kms-[a-z-]+(?:\.[a-z0-9-]+)*", source))
    environment = set(re.findall(r"PYICEBERG_CRYPTO_[A-Z0-9_]*[A-Z0-9]", source)) | {"PYICEBERG_CRYPTO_BRIDGE_JAR"}
    assert "pyiceberg-crypto.kms-service" in catalog and "PYICEBERG_CRYPTO_JARS" in environment
    missing = sorted(name for name in catalog | environment if name not in SETTINGS_PAGE)
    assert not missing, f"missing from docs/reference/settings.md: {missing}"

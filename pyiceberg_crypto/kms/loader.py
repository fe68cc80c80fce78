"""Find a Python KMS by name: the one registry of KMS factories used by the CLI and the jobs.

A KMS spec is either a shipped short name or ``module:factory`` (an importable callable that
returns a :class:`~pyiceberg_crypto.kms.KeyManagementClient`)::

    load_kms("mycompany.kms:make_client")       # calls mycompany.kms.make_client()
    load_kms("keystore", {"keystore.path": "/etc/lake/keys.json"})

The factory is called with the properties as keyword ``properties`` when it accepts them, and the
returned KMS gets ``initialize(properties)``. Short names map to factories in :data:`SHIPPED`.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping

from pyiceberg_crypto._deprecated import renamed_classes
from pyiceberg_crypto.kms.base import KeyManagementClient
from pyiceberg_crypto.errors import InvalidArgumentError

__all__ = [ "load_kms"]

#: Old names, kept for one release (CHANGELOG.md).
__getattr__ = renamed_classes(__name__, {"KmsLoadError": InvalidArgumentError})

#: Short name -> "module:factory" of the KMSs shipped with the package.
SHIPPED: dict[str, str] = {
    "keystore": "pyiceberg_crypto.kms.keystore:keystore_kms",
    "aws": "pyiceberg_crypto.kms.aws:aws_kms",
    "vault": "pyiceberg_crypto.kms.vault:vault_kms",
    "kmip": "pyiceberg_crypto.kms.kmip:kmip_kms",
    "gcp": "pyiceberg_crypto.kms.gcp:gcp_kms",
    "azure": "pyiceberg_crypto.kms.azure:azure_kms",
}


def load_kms(spec: str, properties: Mapping[str, str] | None = None) -> KeyManagementClient:
    """Build the KMS named by ``spec`` (a short name or ``module:factory``) and initialize it."""
    props = dict(properties or {})
    target = SHIPPED.get(spec, spec)
    module_name, sep, factory_name = target.partition(":")
    if not sep or not module_name or not factory_name:
        names = ", ".join(sorted(SHIPPED)) or "none"
        raise InvalidArgumentError(f"--kms must be MODULE:FACTORY or a shipped name ({names}), got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidArgumentError(_import_hint(module_name, exc)) from None
    factory = getattr(module, factory_name, None)
    if not callable(factory):
        raise InvalidArgumentError(f"{module_name!r} has no callable {factory_name!r}")
    try:
        accepts_properties = "properties" in inspect.signature(factory).parameters
    except (TypeError, ValueError):
        accepts_properties = False
    kms = factory(properties=props) if accepts_properties else factory()
    if not (hasattr(kms, "wrap_key") and hasattr(kms, "unwrap_key")):
        raise InvalidArgumentError(f"{spec!r} returned {type(kms).__name__}, not a KeyManagementClient")
    if props and hasattr(kms, "initialize"):
        kms.initialize(props)
    return kms


def _import_hint(module_name: str, exc: ImportError) -> str:
    """Why ``module_name`` cannot be imported, and what to do: a console script (``pyiceberg-crypto``)
    does not put the current directory on ``sys.path``, so a module beside the user is not found
    unless ``PYTHONPATH`` names its directory."""
    import os

    message = f"cannot import KMS module {module_name!r}: {exc}"
    missing = getattr(exc, "name", None)
    if missing and not (module_name == missing or module_name.startswith(missing + ".")):
        return message + " (the module itself was found; it imports something that is not installed)"
    top = module_name.split(".")[0]
    here = os.getcwd()
    beside = os.path.exists(os.path.join(here, top + ".py")) or os.path.isdir(os.path.join(here, top))
    hint = (f"; {top!r} is in the current directory ({here}), which is not on the import path of a "
            f"console script: run with PYTHONPATH=. (or PYTHONPATH={here})" if beside else
            "; the module must be importable by this Python: install it, or put its directory on "
            "PYTHONPATH (e.g. PYTHONPATH=. for a module in the current directory, which a console "
            "script does not search)")
    return message + hint

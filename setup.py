"""Build hook: compile the Java bridge jar with Maven into the wheel (metadata is in pyproject.toml).

Every wheel (``python -m build``, ``pip install .``, ``pip install git+URL``, or a wheel built from
the sdist, which carries ``jars/``) gets ``pyiceberg_crypto/_jars/pyiceberg-crypto-bridge.jar``.
Editable installs put it into the source tree instead. The test kit (``pyiceberg_crypto.testing`` and
its jar) is not in this wheel: it is the ``pyiceberg-crypto-testing`` distribution (``testkit/``). ``PYICEBERG_CRYPTO_SKIP_JAR_BUILD=1`` skips
the step (the Makefile does, it runs ``jars/build_bridge.py --testkit`` itself).
"""

import os
import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "jars"))

import build_bridge  # noqa: E402  (jars/build_bridge.py, standard library only)


class build_py_with_bridge_jar(build_py):
    """``build_py`` plus the bridge jar, built by Maven (a clear error if Java or Maven is missing)."""

    def run(self):
        super().run()
        if os.environ.get("PYICEBERG_CRYPTO_SKIP_JAR_BUILD") == "1":
            return
        if getattr(self, "editable_mode", False):
            into = HERE / "pyiceberg_crypto" / "_jars"
        else:
            into = Path(self.build_lib) / "pyiceberg_crypto" / "_jars"
        try:
            jar = build_bridge.install(into)
        except build_bridge.BuildError as exc:
            raise SystemExit(f"error: {exc}") from None
        if not getattr(self, "editable_mode", False):
            # The test kit's jar ships in pyiceberg-crypto-testing (testkit/), never in this wheel.
            shutil.rmtree(build_bridge.testing_into(into), ignore_errors=True)
            testing = build_bridge.testing_into(into).parent
            if testing.is_dir() and not any(testing.iterdir()):
                testing.rmdir()
        self.announce(f"built {jar}", level=2)


setup(cmdclass={"build_py": build_py_with_bridge_jar})

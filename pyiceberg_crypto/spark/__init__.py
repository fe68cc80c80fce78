"""The Spark and Java platform helpers every feature that drives Spark through Py4J shares, so that
none of them writes its own:

- :mod:`.java`     a Java exception's class and first line; Java collections as lists and dicts
- :mod:`.session`  a session's settings as dicts, read one way (bounded) wherever they are needed

They know Py4J's objects and nothing of tables, catalogs or keys (the layer of ``formats`` and
``kms``: tests/test_layers.py).
"""

__all__: list[str] = []

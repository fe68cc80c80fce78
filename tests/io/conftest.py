"""The loopback Hive metastore fixture comes from tests/conftest.py (the plugin's, as a user's suite would get it)."""

"""The ``pyiceberg-crypto`` command: ``inspect``, ``decrypt``, ``demo`` (see :mod:`.main`)."""

"""Attacker-controlled text made safe to show: file content, paths and exception messages.

Everything a verifier reports about a hostile table can come from the attacker (file bytes, paths
and key ids in the metadata.json, a KMS's error message). Findings quote such text only through
these functions, so a report never carries raw bytes, terminal escapes or endless lines::

    quote_bytes(b"\\x1b[2Jevil...")      # "b'\\x1b[2Jevi' (first 8 bytes)"
    escape_text("data/\\x1b[31mred.parquet")   # 'data/\\\\x1b[31mred.parquet'
    exception_line(RuntimeError("a\\nb"))      # 'RuntimeError: a\\\\x0ab'
"""

from __future__ import annotations

import unicodedata

__all__ = ["MAX_MESSAGE_CHARS", "QUOTED_BYTES", "escape_text", "exception_line", "quote_bytes", "shorten"]

#: How many bytes of file content a finding quotes at most.
QUOTED_BYTES = 8
#: How long an exception message may be in a finding or an error line.
MAX_MESSAGE_CHARS = 300


def quote_bytes(data: bytes, limit: int = QUOTED_BYTES) -> str:
    """``repr`` of at most the first ``limit`` bytes (escaped), saying when more were cut off."""
    shown = repr(bytes(data[:limit]))
    return shown if len(data) <= limit else f"{shown} (first {limit} bytes)"


def _is_unsafe(char: str) -> bool:
    """Control characters (C0, DEL, C1), line and paragraph separators, bidi and other format
    characters: anything that can move the cursor, recolour or reorder a terminal line."""
    return unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn")


def _escape_char(char: str) -> str:
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def escape_text(text: object) -> str:
    """``text`` with every unsafe character written as a ``\\xNN`` / ``\\uNNNN`` escape.

    Ordinary text (paths included) comes back unchanged; once anything is escaped, backslashes
    are escaped too (``\\x5c``), so the result reads back unambiguously."""
    text = str(text)
    if not any(_is_unsafe(c) for c in text):
        return text
    return "".join(_escape_char(c) if _is_unsafe(c) or c == "\\" else c for c in text)


def shorten(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text`` cut to ``limit`` characters, marked with an ellipsis when cut."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def exception_line(exc: BaseException) -> str:
    """``Type: message`` on one line, escaped and length-limited (never a traceback)."""
    message = str(exc)
    return shorten(escape_text(f"{type(exc).__name__}: {message}" if message else type(exc).__name__))

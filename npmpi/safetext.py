"""The one sanitiser for text that comes from files: control characters shown escaped, never sent.

A run file is data written by anyone: its attributes (status_message, hostnames, meter
descriptions, fault messages) may hold terminal escape sequences that clear the screen, set the
window title or hide text. Everything npmpi-analyze prints passes through `printable`.
"""

from __future__ import annotations

import re

# C0 and C1 controls and DEL (newlines are kept only by printable_lines), and the Unicode
# bidirectional overrides that reorder what a terminal shows
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape(m: re.Match) -> str:
    c = m.group(0)
    return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"


def printable(text: object) -> str:
    """`text` as one line with every control character escaped (ESC as \\x1b, newline as \\x0a)."""
    return _CONTROL.sub(_escape, str(text))


def printable_lines(text: object) -> str:
    """`text` with its line breaks kept and every other control character escaped."""
    return "\n".join(printable(line) for line in str(text).split("\n"))

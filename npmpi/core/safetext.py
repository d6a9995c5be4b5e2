"""The one sanitiser for text that comes from files: control characters shown escaped, never sent.

A run file is data written by anyone: its attributes (status_message, hostnames, meter
descriptions, fault messages) may hold terminal escape sequences that clear the screen, set the
window title or hide text. Everything npmpi-analyze prints passes through `printable`.
"""

from __future__ import annotations

import re

# C0 and C1 controls and DEL (newlines are kept only by printable_lines), the Unicode
# bidirectional overrides that reorder what a terminal shows, and lone surrogates (what h5py makes
# of bytes that are not UTF-8: no encoder writes them)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape(m: re.Match) -> str:
    c = m.group(0)
    return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"


def printable(text: object) -> str:
    """`text` as one line with every control character escaped (ESC as \\x1b, newline as \\x0a)."""
    return _CONTROL.sub(_escape, str(text))


def printable_lines(text: object) -> str:
    """`text` with its line breaks kept and every other control character escaped."""
    return "\n".join(printable(line) for line in str(text).split("\n"))


def valid_text(text: str) -> str:
    """`text` with the bytes that were not UTF-8 (h5py gives them as lone surrogates) as U+FFFD, so
    that any output can encode it."""
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    except UnicodeEncodeError:  # a surrogate h5py did not make
        return text.encode("utf-8", "replace").decode("utf-8")


def csv_cell(value: object) -> object:
    """A CSV cell: text with every control character escaped (a CR would split the row, an ESC
    reach the terminal of whoever prints the file); numbers as they are."""
    return printable(value) if isinstance(value, str) else value


MAX_SHOWN_CHARS = 2000  # a command line of a few hundred characters is whole; a forged attribute is cut


def shown(text: object, limit: int = MAX_SHOWN_CHARS) -> str:
    """`text` as printable (one line), cut to `limit` characters with the count of those left out:
    a forged attribute of megabytes neither floods a terminal nor slows the figures down."""
    line = printable(text)
    if len(line) <= limit:
        return line
    return f"{line[:limit]}… ({len(line) - limit} more characters)"


def shown_attrs(attrs: dict, parsed: tuple[str, ...] = ()) -> dict:
    """`attrs` (a file's attributes, as npmpi.runfile.opening.attr_value gives them) with every text
    value, in lists too, as `shown` makes it; the attributes named in `parsed` (JSON) as they are."""

    def one(value):
        if isinstance(value, str):
            return shown(value)
        if isinstance(value, list):
            return [one(v) for v in value]
        return value

    return {k: v if k in parsed else one(v) for k, v in attrs.items()}

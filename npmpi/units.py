"""Unit parsing and formatting, kept in one place (sizes are powers of two)."""

from __future__ import annotations

import re

_SIZE_SUFFIX = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
# ASCII digits only: int() and \d would also take other scripts' digits (١٠٢٤, full-width ８)
_SIZE_RE = re.compile(r"^([0-9]{1,15})([KMGT]?)(I?B)?$", re.IGNORECASE | re.ASCII)
# The one grammar of a number typed by a user (options, meter specs, environment variables): ASCII
# digits, an optional minus sign and decimal point; no space, '+', '_', exponent, nan or inf, and
# at most 15 digits each side of the point (float() takes all of these, and '²' passes isdigit())
_NUMBER_RE = re.compile(r"-?[0-9]{1,15}(\.[0-9]{1,15})?", re.ASCII)
_WHOLE_RE = re.compile(r"-?[0-9]{1,15}", re.ASCII)
NUMBER_GRAMMAR = "a number: ASCII digits (at most 15), optional '-' and '.', no exponent"
WHOLE_GRAMMAR = "a whole number: ASCII digits (at most 15), optional '-'"


def parse_number(text: str) -> float:
    """A decimal number typed by a user ('0.05', '-1', '443'); ValueError for anything else."""
    if not isinstance(text, str) or not _NUMBER_RE.fullmatch(text):
        raise ValueError(f"{text!r} is not {NUMBER_GRAMMAR}")
    return float(text)


def parse_whole(text: str) -> int:
    """A whole number typed by a user ('3', '-1'); ValueError for anything else."""
    if not isinstance(text, str) or not _WHOLE_RE.fullmatch(text):
        raise ValueError(f"{text!r} is not {WHOLE_GRAMMAR}")
    return int(text)


def parse_size_bytes(text: str) -> int:
    """Parse '64K', '8M', '1G', '4096' or '2MiB' into bytes (suffixes are powers of two)."""
    m = _SIZE_RE.match(text)
    if not m:
        raise ValueError(
            f"invalid size {text!r}: expected a whole number of bytes, optionally with a suffix "
            "K, M, G or T (powers of two), e.g. 64K or 8M"
        )
    number, suffix = int(m.group(1)), m.group(2).upper()
    return number * _SIZE_SUFFIX[suffix]


def format_size_bytes(n: int) -> str:
    """Short human form of a byte count: 1, 1023, 1K, 1.5M (powers of two)."""
    for suffix, factor in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= factor:
            value = n / factor
            return f"{value:.0f}{suffix}" if value == int(value) else f"{value:.3g}{suffix}"
    return str(n)


def format_size_iec(n: int) -> str:
    """A size as sentences say it: 1 B, 1000 B, 64 KiB, 4 MiB, 1.5 MiB (a multiple of 1/16 of the
    unit is written in it, any other size in bytes)."""
    for suffix, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= factor and n % (factor // 16) == 0:
            value = n / factor
            return f"{value:.0f} {suffix}" if value == int(value) else f"{value:g} {suffix}"
    return f"{n} B"


def mbps_netpipe(size_bytes: float, one_way_s: float) -> float:
    """NetPIPE 3.7's 'Mbps': bits per second divided by 2**20."""
    return size_bytes * 8.0 / (one_way_s * 1024.0 * 1024.0)


def gbit_per_s(size_bytes: float, one_way_s: float) -> float:
    """Decimal gigabits per second (10**9 bit/s) for one message each way."""
    return size_bytes * 8.0 / one_way_s / 1e9

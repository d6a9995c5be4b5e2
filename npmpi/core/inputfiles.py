"""Reading the files a user names (calibration, replay traces) defensively: data, never a hang.

A named file must be a regular file (a FIFO would block the open or the read forever, /dev/zero
never ends), at most a size cap, and JSON in it at most a few levels deep (a file of 200,000 `[`
would exhaust Python's recursion). Each problem is the caller's exception class with one line
that names the file and says what is wrong.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from collections.abc import Callable

import numpy as np

MAX_INPUT_BYTES = 1 << 20  # calibration files: a few kB each
MAX_JSON_DEPTH = 32
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)


def read_regular_file(
    path: str, what: str, error: Callable[[str], Exception], limit: int = MAX_INPUT_BYTES
) -> bytes:
    """The bytes of `path` if it is a regular file of at most `limit` bytes; else `error` (an exception
    class, or a function making one) of a message starting with `what`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise error(f"{what}: no such file") from None
    except OSError as exc:
        raise error(f"{what}: cannot be opened ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise error(f"{what}: is a directory, not a file")
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{what}: is not a regular file (a pipe, socket or device); give a file")
        if st.st_size > limit:
            raise error(f"{what}: is {st.st_size} bytes, more than the {limit} bytes such a file can be")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(65536, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise error(f"{what}: holds more than the {limit} bytes such a file can be")
        return b"".join(chunks)
    except OSError as exc:
        raise error(f"{what}: cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)


def json_depth(data: bytes) -> int:
    """How deeply arrays and objects nest in JSON text (strings skipped); linear time, no recursion."""
    bare = _STRING.sub(b"", data)
    a = np.frombuffer(bare, dtype=np.uint8)
    steps = np.isin(a, (ord("["), ord("{"))).astype(np.int64) - np.isin(a, (ord("]"), ord("}")))
    return int(np.cumsum(steps).max()) if steps.size else 0


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def parse_json(data: bytes, what: str, error: type[Exception], max_depth: int = MAX_JSON_DEPTH):
    """JSON text to Python values; `error` for text that is not UTF-8 JSON or nests too deeply."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{what}: is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    depth = json_depth(data)
    if depth > max_depth:
        raise error(
            f"{what}: JSON nested {depth} levels deep (at most {max_depth} are accepted); not such a file"
        )
    try:
        return json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise error(f"{what}: is not valid JSON ({str(exc)[:120]})") from None


def is_number(value) -> bool:
    """A finite int or float (not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)

"""The CRC-32 of an object's attributes (`attrs_crc32`), so that a changed attribute is named.

HDF5 checksums neither attributes nor object headers: a flipped bit in a mode factor, a meter's
delay or a status would change the figures unnoticed. The writers store, in each group's and
dataset's attribute ATTRS_CHECKSUM, the CRC-32 of all its other attributes (names and values as
h5py reads them back): the root's at every flush, every object's when the file is finished. The
readers compare each one present; an object without it (files before, attributes added by hand
to an object that never had one) is not checked. A `complete` file whose attributes differ is
refused. In a file its writer did not finish normally (status `running`: killed; `interrupted` by
a signal's handler just before mpirun killed it; `failed` after a full disk, whose seal may not
have found room) an attribute may have been written after the last seal: a difference is a notice
there, naming the objects, and the file is read (as a torn chunk is, npmpi/runfile/opening.py).
"""

from __future__ import annotations

import zlib

import numpy as np

ATTRS_CHECKSUM = "attrs_crc32"


def _value_bytes(value) -> bytes:
    """An attribute's value as bytes that are the same whenever h5py reads the same stored value."""
    if isinstance(value, bytes):
        return b"b" + value
    if isinstance(value, str):
        return b"s" + value.encode("utf-8", "surrogateescape")
    a = np.asarray(value)
    if a.dtype.kind in "OSU":
        return b"\x1e".join([f"a{a.shape}".encode(), *(_value_bytes(v) for v in a.ravel().tolist())])
    return f"{a.dtype.str}{a.shape}".encode() + a.tobytes()


def attrs_crc32(attrs) -> int:
    """CRC-32 of every attribute but ATTRS_CHECKSUM, in name order (h5py AttributeManager or dict)."""
    crc = 0
    for name in sorted(k for k in attrs if k != ATTRS_CHECKSUM):
        crc = zlib.crc32(
            name.encode("utf-8", "surrogateescape") + b"\0" + _value_bytes(attrs[name]) + b"\0", crc
        )
    return crc


def seal(obj) -> None:
    """Store the CRC-32 of `obj`'s attributes in its ATTRS_CHECKSUM."""
    obj.attrs[ATTRS_CHECKSUM] = np.int64(attrs_crc32(obj.attrs))


def seal_all(f) -> None:
    """Seal the root and every group and dataset of the open file `f`."""
    seal(f)
    f.visititems(lambda _name, obj: seal(obj))


def unseal_all(f) -> None:
    """Remove every ATTRS_CHECKSUM of the open file `f`: what a file written before them holds (and
    the way to edit a finished file's attributes by hand)."""
    for obj in [f, *_objects(f)]:
        if ATTRS_CHECKSUM in obj.attrs:
            del obj.attrs[ATTRS_CHECKSUM]


def _objects(f) -> list:
    found = []
    f.visititems(lambda _name, obj: found.append(obj))
    return found


def unsealed(f) -> list[str]:
    """The paths of the objects whose attributes no longer match their stored CRC-32 (root: '/')."""
    bad = []

    def check(name: str, obj) -> None:
        stored = obj.attrs.get(ATTRS_CHECKSUM)
        if stored is not None and int(np.asarray(stored).ravel()[0]) != attrs_crc32(obj.attrs):
            bad.append(f"/{name}")

    check("", f)
    f.visititems(check)
    return bad


def check_seals(f, p, notices: list[str]) -> None:
    """RunFileError naming the objects whose attributes changed after they were written; in a file
    not finished `complete`, a notice instead (see the module docstring)."""
    from npmpi.core.errors import RunFileError
    from npmpi.runfile.opening import attr_value

    bad = unsealed(f)
    if not bad:
        return
    where = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
    if str(attr_value(f.attrs.get("status", ""))) in ("running", "interrupted", "failed"):
        notices.append(
            f"the attributes of {where} differ from their checksum (CRC-32): written after the last "
            "one as the writer was stopped, or changed since; read as they are"
        )
        return
    raise RunFileError(
        f"{p}: the attributes of {where} fail their checksum (CRC-32): one changed after it was "
        "written (a flipped bit or an edit); the file is damaged"
    )

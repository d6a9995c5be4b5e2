"""Credentials for network meters (Redfish BMCs, SNMP agents): never on the command line, never stored.

A secret typed into `--meter` would be visible to every user in `ps`, in the shell's history, in
Slurm's job records and in the run file's stored spec. So a spec carrying one inline
(`password=`, `community=`, ...) is a usage error, and a meter's credentials come from:

- a file named by the spec's `credentials=PATH`: `field=value` lines (`#` comments and blank
  lines allowed), a regular file owned by the user running npmpi, with mode 0600 or stricter;
- otherwise environment variables, one per field (the meter names the defaults, e.g.
  `NPMPI_REDFISH_PASSWORD`), each overridable per spec with `FIELD_env=VARNAME` (several BMCs with
  several passwords: `password_env=BMC1_PASS`).

No message built here contains a value read from the file or the environment: only field names,
variable names and paths.
"""

from __future__ import annotations

import os
import stat

from npmpi.core.inputfiles import read_regular_file
from npmpi.meters.base import INLINE_SECRET_KEYS, MeterError, MeterSpec, inline_secret_error, spec_error

__all__ = [
    "INLINE_SECRET_KEYS",
    "check_private_file",
    "credential_parameters",
    "credentials_source",
    "read_credentials",
    "reject_inline_secrets",
]

CREDENTIALS_KEY = "credentials"
ENV_SUFFIX = "_env"  # password_env=VARNAME names the variable holding the password
MAX_CREDENTIALS_BYTES = 64 * 1024


def credential_parameters(fields: tuple[str, ...]) -> tuple[str, ...]:
    """The spec keys a meter reading `fields` accepts: credentials=PATH and FIELD_env=VARNAME each."""
    return (CREDENTIALS_KEY, *(f"{name}{ENV_SUFFIX}" for name in fields))


def reject_inline_secrets(spec: MeterSpec) -> None:
    """MeterError (exit 2) if the spec carries a secret inline; the message never shows its value."""
    inline = [key for key in spec.params if key.lower() in INLINE_SECRET_KEYS]
    if not inline:
        return
    raise inline_secret_error(spec.kind, inline[0])


def read_credentials(spec: MeterSpec, wanted: dict[str, str], meter: str) -> dict[str, str]:
    """Each field of `wanted` (field -> default environment variable) from credentials=PATH or the
    environment; MeterError naming the file or variable (never a value) when one cannot be had."""
    reject_inline_secrets(spec)
    path = spec.params.get(CREDENTIALS_KEY)
    if path:
        values = _read_file(path, meter)
        missing = [name for name in wanted if not values.get(name)]
        if missing:
            raise MeterError.about(
                meter,
                f"credentials file {path} has no {missing[0]}= line "
                f"(it needs {', '.join(f'{name}=' for name in wanted)})",
            )
        return {name: values[name] for name in wanted}
    found: dict[str, str] = {}
    for name, default in wanted.items():
        variable = spec.params.get(f"{name}{ENV_SUFFIX}") or default
        value = os.environ.get(variable, "")
        if not value:
            raise MeterError.about(
                meter,
                f"no {name}: environment variable {variable} is not set or empty; "
                f"export it (e.g. `set -a; . ~/.npmpi/bmc.env; set +a` from a 0600 file), name another "
                f"with {name}{ENV_SUFFIX}=VARNAME, or give credentials=PATH (a file of `{name}=...` "
                "lines, mode 0600)",
            )
        found[name] = value
    return found


def credentials_source(spec: MeterSpec, wanted: dict[str, str]) -> str:
    """Where read_credentials takes the fields from (a file path or variable names), for messages and
    the run file: never a value."""
    path = spec.params.get(CREDENTIALS_KEY)
    if path:
        return f"credentials file {path}"
    names = [spec.params.get(f"{name}{ENV_SUFFIX}") or default for name, default in wanted.items()]
    return f"environment variable{'s' if len(names) > 1 else ''} {', '.join(names)}"


def check_private_file(path: str, meter: str) -> os.stat_result:
    """MeterError unless `path` (not followed if a symlink) is a regular file of ours, mode 0600 or
    stricter."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise MeterError.about(meter, f"credentials file {path}: no such file") from None
    except OSError as exc:
        raise MeterError.about(meter, f"credentials file {path}: {exc.strerror or exc}") from None
    if stat.S_ISLNK(st.st_mode):
        raise MeterError.about(
            meter,
            f"credentials file {path} is a symbolic link: name the file itself "
            "(a link may lead to a file another user controls)",
        )
    if not stat.S_ISREG(st.st_mode):
        raise MeterError.about(meter, f"credentials file {path} is not a regular file")
    uid = os.geteuid()
    if st.st_uid != uid:
        raise MeterError.about(
            meter,
            f"credentials file {path} is owned by uid {st.st_uid}, not by you "
            f"(uid {uid}): use a file of your own, mode 0600 (`chmod 600 {path}`)",
        )
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        raise MeterError.about(
            meter,
            f"credentials file {path} has mode {mode:04o}: others may read it; "
            f"`chmod 600 {path}` (it is refused unless only you can read it)",
        )
    return st


def _read_file(path: str, meter: str) -> dict[str, str]:
    """The `field=value` lines of a private credentials file."""
    before = check_private_file(path, meter)
    data = read_regular_file(path, f"credentials file {path}", spec_error(meter), MAX_CREDENTIALS_BYTES)
    # checked again after the read: the path must still be that same private file (not swapped meanwhile)
    after = check_private_file(path, meter)
    if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino):
        raise MeterError.about(meter, f"credentials file {path} was replaced while being read")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise MeterError.about(meter, f"credentials file {path} is not UTF-8 text") from None
    values: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, eq, value = line.partition("=")
        if not eq or not key.strip():
            # the line may hold a secret: say where, not what
            raise MeterError.about(
                meter, f"credentials file {path} line {number} is not `field=value` (comments start with #)"
            )
        values[key.strip()] = value.strip()
    return values

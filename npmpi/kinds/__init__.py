"""The registry of benchmark kinds and commands: what `python -m npmpi [NAME] …` runs, chosen by name.

A name leads to "module:attribute", imported only when that name is run (as the meters' registry,
npmpi/meters/__init__.py): a benchmark kind's value (npmpi/kinds/kind.py), run through the one
command sequence of every kind (npmpi/kinds/command.py), or a command's `main(argv)` (calibrate,
meters). Kinds from elsewhere join by name: the `npmpi.kinds` entry-point group of an installed
package, or NPMPI_KINDS="NAME=module:attribute,…" in the environment (on every rank: mpirun -x).
docs/architecture.md, "Adding a benchmark kind".
"""

from __future__ import annotations

import importlib
import os
import re

RUN = ""  # the default kind: no command word
BUILTIN_KINDS = {
    RUN: "npmpi.run.kind:KIND",
    "map": "npmpi.map.kind:KIND",
    "calibrate": "npmpi.calibrate.command:KIND",
    "coll": "npmpi.coll.kind:KIND",
}
COMMANDS = {"meters": "npmpi.commands.meters:main"}  # no MPI
KINDS_ENV = "NPMPI_KINDS"
ENTRY_POINT_GROUP = "npmpi.kinds"
_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")
_TARGET = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")


class KindRegistryError(ValueError):
    """A kind named in NPMPI_KINDS or an entry point is malformed or cannot be loaded."""


def _from_environment() -> dict[str, str]:
    """NPMPI_KINDS's kinds: NAME=module:attribute, comma-separated."""
    out = {}
    for item in filter(None, (part.strip() for part in os.environ.get(KINDS_ENV, "").split(","))):
        name, _, target = item.partition("=")
        if not _NAME.fullmatch(name) or not _TARGET.fullmatch(target):
            raise KindRegistryError(f"{KINDS_ENV}: {item!r} is not NAME=module:attribute")
        out[name] = target
    return out


def _from_entry_points() -> dict[str, str]:
    from importlib.metadata import entry_points

    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP) if _NAME.fullmatch(ep.name)}


def registry() -> dict[str, str]:
    """Every name -> its "module:attribute": the built-in kinds and commands, then installed and
    NPMPI_KINDS kinds (which never replace a built-in name)."""
    extra = {**_from_entry_points(), **_from_environment()}
    builtin = {**BUILTIN_KINDS, **COMMANDS}
    return {**{k: v for k, v in extra.items() if k not in builtin}, **builtin}


def load(target: str, name: str | None = None):
    """The object a "module:attribute" names; KindRegistryError (one line, naming the kind `name`)
    whatever its import raises: a module from outside npmpi may raise anything, a SyntaxError, a
    KeyboardInterrupt or SystemExit too."""
    module, _, attr = target.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except BaseException as exc:
        whose = f"kind {name!r}: " if name is not None else ""
        why = str(exc) if isinstance(exc, (ImportError, AttributeError)) else f"{type(exc).__name__}: {exc}"
        raise KindRegistryError(f"{whose}cannot load {target}: {why}") from None


def load_kind(name: str, target: str):
    """The kind registered as `name`: a built-in one as it is, one from outside npmpi checked to be a
    kind and guarded while it runs (npmpi/kinds/outside.py)."""
    if BUILTIN_KINDS.get(name) == target:
        return load(target)
    from npmpi.kinds.outside import OutsideKind, not_a_kind

    kind = load(target, name)
    problem = not_a_kind(name, target, kind)
    if problem:
        raise KindRegistryError(problem)
    return OutsideKind(name, kind)


def dispatch(argv: list[str]) -> int:
    """Run what argv's first word names (the run when it names nothing registered); the exit status."""
    from npmpi.kinds.command import kind_command

    word = argv[0] if argv else RUN
    if word in COMMANDS:
        return load(COMMANDS[word])(argv[1:])
    # installed kinds are looked up only for a word that is no built-in one (an option: the run)
    table = BUILTIN_KINDS if word in BUILTIN_KINDS or not _NAME.fullmatch(word) else registry()
    name = word if word in table else RUN
    return kind_command(load_kind(name, table[name])).run(argv[1:] if name else argv)

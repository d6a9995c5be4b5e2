"""`--resume FILE`: a map that continues an interrupted one from its last complete round.

Rank 0 checks, before anything is measured, that FILE is a map of format 2.0 that did not finish and
that it is the map this command would make: the same members (host names, in rank order), sizes,
trials, mode, window, directions, kernel, schedule and sample, so its rows are this map's rows. Any
difference is one line naming it (exit status 2 on every rank). The new file (`--output`, never
FILE itself) then starts with FILE's completed rounds copied (every per-pair dataset's rows, the
rounds' windows, the ranks' condition text), `/map` `resumed_from` and `resumed_rounds` saying so,
and measures the rounds after them. FILE's power samples stay in FILE: the pairs of the rounds
copied have no power in the new file (docs/clusters.md, "A map of a large machine").
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from npmpi.core.errors import RunFileError
from npmpi.runfile.maprows import PAIR, is_rows_layout, row_index
from npmpi.runfile.opening import attr_value

# /map attributes that must be the same in the map resumed and the map resuming it
SAME_ATTRS = ("schedule", "per_rank", "kernel", "mode", "window", "directions", "trials", "pairs_plan")
BLOCK_ROWS = 1 << 16  # rows copied at once


@dataclass(frozen=True)
class Resume:
    """The map resumed: its path and the rounds it completed (size 0's rounds first)."""

    path: str
    rounds: int


def _text(value) -> str:
    return str(attr_value(value))


def resume_problem(path: str, output: str, want: dict, names: list[str], sizes, rounds) -> str | Resume:
    """The map at `path` checked against this one (`want`: /map's attributes this map will have;
    `names`: its members; `sizes`; `rounds`: its schedule): a Resume, or the problem (one line)."""
    from npmpi.runfile.opening import open_npmpi_file

    where = f"--resume {path}"
    try:
        with open_npmpi_file(Path(path)) as f:
            if os.path.exists(output) and os.path.samefile(path, output):
                return f"{where}: the map resuming it needs another --output (FILE keeps what it holds)"
            return _check(f, path, where, want, names, sizes, rounds)
    except RunFileError as exc:  # its message names the file
        return f"--resume: {exc}"
    except (OSError, KeyError, ValueError, TypeError) as exc:
        return f"{where}: cannot be read as a map ({exc})"


def _check(f, path: str, where: str, want: dict, names, sizes, rounds) -> str | Resume:
    g = f.get("map")
    if g is None:
        return f"{where}: not a map file (no /map): give the file an interrupted `npmpi map` wrote"
    attrs = {k: g.attrs[k] for k in g.attrs}
    if not is_rows_layout(attrs):
        return f"{where}: a map of format 1.x (dense matrices) cannot be resumed; measure it again"
    status = _text(attrs.get("status", ""))
    if status == "complete":
        return f"{where}: the map is complete: nothing to resume"
    for key in SAME_ATTRS:
        have, now = attrs.get(key), want.get(key)
        if now is not None and _text(have) != _text(now):
            return f"{where}: another map: its {key} is {_text(have)!r}, this one's {_text(now)!r}"
    if want.get("pairs_seed") is not None and int(attrs.get("pairs_seed", -1)) != int(want["pairs_seed"]):
        return (
            f"{where}: another sample: its seed is {attrs.get('pairs_seed')}, this one's {want['pairs_seed']}"
        )
    if g["hosts"].shape != (len(names),) or g["size_bytes"].shape != (len(sizes),):  # before reading them
        return (
            f"{where}: another map: {g['hosts'].shape[0] if g['hosts'].ndim == 1 else '?'} members and "
            f"{g['size_bytes'].shape[0] if g['size_bytes'].ndim == 1 else '?'} sizes, this one's "
            f"{len(names)} and {len(sizes)}"
        )
    hosts = [_text(h) for h in g["hosts"][()]]
    if hosts != list(names):
        diff = next(
            (k for k, (a, b) in enumerate(zip(hosts, names, strict=False)) if a != b),
            min(len(hosts), len(names)),
        )
        return (
            f"{where}: another map: its members are {len(hosts)} ({', '.join(hosts[:3])}…), this one's "
            f"{len(names)}; member {diff} differs: start it with the same nodes and ranks"
        )
    old_sizes = [int(s) for s in g["size_bytes"][()]]
    if old_sizes != [int(s) for s in sizes]:
        return f"{where}: another map: its sizes are {old_sizes}, this one's {[int(s) for s in sizes]}"
    pair, _ = row_index(rounds, _text(want.get("directions", "")) == "both")
    if g[PAIR].shape != pair.shape or not np.array_equal(g[PAIR][()], pair):
        return f"{where}: another map: its rounds pair the members otherwise (another schedule or sample)"
    done = int(attrs.get("rounds_completed", 0))
    if not 0 < done < len(sizes) * len(rounds):
        return f"{where}: it completed {done} rounds of {len(sizes) * len(rounds)}: nothing to resume from"
    return Resume(str(path), done)


def copy_rounds(writer, resume: Resume) -> None:
    """The resumed map's completed rounds into the new file's /map (rank 0, before its first round),
    its ranks' condition text into the writer's, and the writer's summaries."""
    import h5py

    with h5py.File(resume.path, "r", locking=False) as f:
        old = f["map"]
        first = old["round_first_row"][()]
        n_rounds = len(first) - 1
        writer.adopt_rows(old, resume.rounds, n_rounds, first, BLOCK_ROWS)
        if "conditions_json" in old:
            try:
                ranks = json.loads(_text(old["conditions_json"][()])).get("ranks", {})
            except (ValueError, AttributeError):
                ranks = {}
            writer.adopt_conditions(ranks if isinstance(ranks, dict) else {})
    writer.set_group_attrs("map", resumed_from=os.path.abspath(resume.path), resumed_rounds=resume.rounds)

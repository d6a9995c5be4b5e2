"""A map file's per-pair cells in tests, whichever its layout: read as dense matrices
(npmpi.runfile.maprows.dense_map), and the row of a pair to change one in place; npmpi-analyze run
in process from a folder."""

from __future__ import annotations

import numpy as np

from npmpi.runfile.maprows import LAYOUT_ATTR, PAIR, ROWS_LAYOUT, dense_map

__all__ = ["analyze_in", "dense_map", "map_spec", "row", "to_rows"]


def row(g, i: int, j: int) -> int:
    """The row of pair (i, j) in a rows map (either order for a pair measured both ways at once)."""
    pair = g[PAIR][()]
    hit = np.nonzero((pair[:, 0] == i) & (pair[:, 1] == j))[0]
    if not len(hit) and str(g.attrs.get("directions", "")) != "both":
        hit = np.nonzero((pair[:, 0] == j) & (pair[:, 1] == i))[0]
    assert len(hit) == 1, f"pair ({i}, {j}) has no row"
    return int(hit[0])


def to_rows(src, dst) -> None:
    """A copy of the dense map `src` (format 1.x) in the rows layout (2.0), as the writer of 2.0
    would have stored the same measurements; the attribute seals made anew."""
    import shutil

    import h5py

    from npmpi.runfile.attrseal import seal_all
    from npmpi.runfile.maprows import ROUND_FIRST_ROW, row_index
    from npmpi.runfile.mapwriter import rounds_of_matrix

    shutil.copy(src, dst)
    with h5py.File(dst, "r+") as f:
        g = f["map"]
        cells = dense_map(g)
        directed = str(g.attrs.get("directions", "")) == "both"
        pair, first = row_index(rounds_of_matrix(cells["round"], int(g.attrs["n_rounds"])), directed)
        for name in cells:
            del g[name]
        g.create_dataset(PAIR, data=pair, fletcher32=True)
        g.create_dataset(ROUND_FIRST_ROW, data=first, fletcher32=True)
        for name, dense in cells.items():
            if name not in ("round", "latency_s", "bandwidth_bit_s"):
                g.create_dataset(name, data=dense[:, pair[:, 0], pair[:, 1]], fletcher32=True)
        g.attrs[LAYOUT_ATTR] = ROWS_LAYOUT
        f.attrs["format_version"] = "2.0"
        seal_all(f)


def map_spec(hosts: list[str], sizes: list[int], rounds, schedule: str = "rounds", **attrs) -> dict:
    """MapWriter's `map_spec` of a test map: `rounds` the schedule's pairs per round (or an [N, N]
    round matrix), the run's kernel python, ping-pong, every rank a member; `attrs` more of /map's."""
    spec = {
        "attrs": {
            "schedule": schedule,
            "per_rank": True,
            "kernel": "python",
            "mode": "pingpong",
            "window": 1,
            **attrs,
        },
        "hosts": list(hosts),
        "ranks": list(range(len(hosts))),
        "sizes": list(sizes),
        "n_rounds": len(rounds),
    }
    if isinstance(rounds, np.ndarray):
        spec["rounds_matrix"], spec["n_rounds"] = rounds, int(rounds.max()) + 1
    else:
        spec["rounds"] = rounds
    return spec


def analyze_in(where, capsys, argv: list[str]) -> tuple[int, str, str]:
    """npmpi-analyze ARGV run in process from the folder `where` (its outputs' relative names land
    there): (exit status, standard output, standard error)."""
    import os

    from npmpi_analysis.cli import main

    here = os.getcwd()
    os.chdir(where)
    try:
        capsys.readouterr()
        code = main(argv)
    finally:
        os.chdir(here)
    got = capsys.readouterr()
    return code, got.out, got.err

"""The analysis's outputs of a fixed set of real files stay what they were: the console summary,
CSV, JSON, np.out and the model's CSV of a run with power, a stream run, a TCP run, a coll file of
four series and a map (tests/data/outputs/*.h5, recorded by real mpirun jobs on this project's test
machine), byte for byte against the outputs saved beside them. A change to the analysis that moves
one byte of these fails here; one that means to (a new column, a corrected figure) records them
again with `python tests/test_outputs_unchanged.py --record` and says why in its commit.

The files were made with (an --oversubscribe'd Open MPI wheel, tests/data/outputs/):
  mpirun -np 3 python -m npmpi --meter estimate --quick -u 64K -o run_power.h5
  mpirun -np 3 python -m npmpi --meter estimate --quick -u 64K --mode stream -o stream.h5
  mpirun -np 3 python -m npmpi --meter estimate --quick -u 64K --protocol tcp -o tcp.h5
  mpirun -np 4 python -m npmpi coll --meter estimate --quick --op allreduce,bcast --ranks 2,3
         --sizes 1,64,4K -o coll.h5
  mpirun -np 4 python -m npmpi map --per-rank --quick --sizes 1,64K -o map.h5
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data" / "outputs"
FILES = ("run_power", "stream", "tcp", "coll", "map")
# what each file gives (a map has no np.out nor model)
OUTPUTS = {
    "csv": "--csv",
    "json": "--json",
    "np.out": "--np-out",
    "model.csv": "--model-csv",
}
MAP_OUTPUTS = ("csv", "json")


def outputs_of(name: str, workdir: Path) -> dict[str, bytes]:
    """{output name: bytes} of npmpi-analyze on tests/data/outputs/NAME.h5, run in `workdir` on a
    copy (so the file's path in the outputs is the same wherever the tests run)."""
    from npmpi_analysis.cli import main

    shutil.copy(DATA / f"{name}.h5", workdir / f"{name}.h5")
    kinds = MAP_OUTPUTS if name == "map" else tuple(OUTPUTS)
    argv = [f"{name}.h5"]
    for kind in kinds:
        argv += [OUTPUTS[kind], f"{name}.{kind}"]
    out = io.StringIO()
    here = os.getcwd()
    os.chdir(workdir)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            code = main(argv)
    finally:
        os.chdir(here)
    assert code == 0, out.getvalue()
    got = {"summary.txt": out.getvalue().encode()}
    for kind in kinds:
        got[kind] = (workdir / f"{name}.{kind}").read_bytes()
    return got


@pytest.mark.parametrize("name", FILES)
def test_the_analysis_of_a_saved_file_is_what_it_was(name, tmp_path):
    """Each output of the saved file equals the one saved beside it, byte for byte."""
    got = outputs_of(name, tmp_path)
    for kind, data in got.items():
        saved = (DATA / f"{name}.{kind}").read_bytes()
        assert data == saved, f"{name}.{kind} changed (diff it against tests/data/outputs/{name}.{kind})"


def record() -> None:
    """Write every file's outputs into tests/data/outputs/ (the deliberate change of an output)."""
    import tempfile

    for name in FILES:
        with tempfile.TemporaryDirectory() as tmp:
            for kind, data in outputs_of(name, Path(tmp)).items():
                (DATA / f"{name}.{kind}").write_bytes(data)


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit("usage: python tests/test_outputs_unchanged.py --record")
    record()

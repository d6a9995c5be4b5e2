"""A stop signal to mpirun while rank 0 of a collective run is inside the C kernel's timed loop.

The C kernel runs a whole step in one call and never returns to Python before its end, so the main
thread's signal handlers wait, and mpirun kills the ranks 0.25 s after its SIGTERM: the file was left
`running`. The signal thread (npmpi.core.signals.watch_signals_in_a_thread) now marks the file and
abandons the trial for group kinds too (npmpi/kinds/recording.py sets `stop.abandon`), as it did for
runs and maps. Trials of 1 s keep rank 0 inside the C loop most of the time.
"""

from __future__ import annotations

import signal

import h5py
import pytest
from support.reliability import Job


@pytest.mark.mpi
@pytest.mark.timeout(150)
@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT"])
def test_a_stop_signal_in_the_c_collective_loop_leaves_the_file_interrupted(tmp_path, signame):
    name = f"coll-c-{signame}.h5"
    sizes = "8,64,512,4K,32K,256K,1M"
    args = ["coll", "--sizes", sizes, "--trials", "3", "--target-time", "1", "--kernel", "c", "-o", name]
    job = Job(args, 2, tmp_path, name)
    try:
        assert job.wait_for_rows(2, 90), job.stderr[-2000:]
        job.proc.send_signal(getattr(signal, signame))
        job.wait(30)
    finally:
        job.close()
    assert job.proc.returncode != 0
    with h5py.File(tmp_path / name) as f:
        status, message = f.attrs["status"], str(f.attrs.get("status_message", ""))
        assert status == "interrupted", (status, message, job.stderr[-2000:])
        assert "SIGTERM" in message or signame in message, message
